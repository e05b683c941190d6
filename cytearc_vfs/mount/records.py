"""The persisted record of a mounted target: the root ``matrixSource`` attribute.

Shape (strict, unversioned, spec "Mounted targets")::

    matrixSource = {
      "location": "/abs/path/or/uri",
      "workspace": null | "ws",
      "assays": {"RNA": {"datasetFingerprint": ..., "countsFingerprint": ...,
                          "requiresTranspose": true}},
    }

Any other shape, including a field a later release adds, is rejected
(:class:`RecordShapeError`) rather than ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RecordShapeError
from ..format.paths import check_name
from ..format.records import check_fields, parse_fingerprint

__all__ = ["MATRIX_SOURCE_ATTR", "MountRecord", "MountedAssay"]

MATRIX_SOURCE_ATTR = "matrixSource"


@dataclass(frozen=True, slots=True)
class MountedAssay:
    """The identity of one mounted assay of the source."""

    dataset_fingerprint: str
    """Dataset fingerprint of the source assay at mount time."""
    counts_fingerprint: str
    """Counts fingerprint of the source assay at mount time."""
    requires_transpose: bool
    """Whether the assay opens as RNA, so the source's countsT is required."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {
            "datasetFingerprint": self.dataset_fingerprint,
            "countsFingerprint": self.counts_fingerprint,
            "requiresTranspose": self.requires_transpose,
        }

    @classmethod
    def from_json(cls, value: object, *, where: str) -> MountedAssay:
        """Parse strictly."""
        record = "matrixSource assay"
        fields = check_fields(
            value,
            {"datasetFingerprint": str, "countsFingerprint": str, "requiresTranspose": bool},
            record=record,
            where=where,
        )
        return cls(
            dataset_fingerprint=parse_fingerprint(
                fields["datasetFingerprint"], record=record, where=where
            ),
            counts_fingerprint=parse_fingerprint(
                fields["countsFingerprint"], record=record, where=where
            ),
            requires_transpose=fields["requiresTranspose"],
        )


@dataclass(frozen=True, slots=True)
class MountRecord:
    """The root ``matrixSource`` attribute of a mounted target."""

    location: str
    """Absolute path or URI of the source."""
    workspace: str | None
    """Workspace of the source that is mounted, or ``None``."""
    assays: Mapping[str, MountedAssay]
    """Mounted assays by name."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {
            "location": self.location,
            "workspace": self.workspace,
            "assays": {name: self.assays[name].to_json() for name in sorted(self.assays)},
        }

    @classmethod
    def from_json(cls, value: object, *, where: str) -> MountRecord:
        """Parse strictly."""
        record = "matrixSource"
        fields = check_fields(
            value,
            {"location": str, "workspace": (str, type(None)), "assays": dict},
            record=record,
            where=where,
        )
        location = fields["location"]
        if not (location.startswith("/") or "://" in location):
            raise RecordShapeError(
                f"{record} at {where!r}: location {location!r} is neither an absolute path nor a URI"
            )
        workspace = fields["workspace"]
        if workspace is not None:
            try:
                check_name(workspace, what="workspace")
            except ValueError as exc:  # a record written by hand, or damaged
                raise RecordShapeError(f"{record} at {where!r}: {exc}") from exc
        assays = {}
        for name, entry in fields["assays"].items():
            try:
                check_name(name, what="assay")
            except ValueError as exc:
                raise RecordShapeError(f"{record} at {where!r}: {exc}") from exc
            assays[name] = MountedAssay.from_json(entry, where=f"{where} assays.{name}")
        if not assays:
            raise RecordShapeError(f"{record} at {where!r} mounts no assay")
        return cls(location=location, workspace=workspace, assays=assays)
