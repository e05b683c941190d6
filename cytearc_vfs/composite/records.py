"""The persisted records of a composite: root ``composite`` attribute and its parts.

Shape (strict, unversioned, spec "Composite sources and virtual counts")::

    composite = {
      "assay": "RNA",
      "sources": [{"name", "location", "workspace", "datasetFingerprint", "countsFingerprint"}, ...],
      "arrays": {"RNA/counts": <zarr.json document>, "RNA/countsT": <zarr.json document>},
      "maps": {"rowSources": {...}, "sourceRows": {...}, "featureColumns": {...}},
      "complete": false | true,
    }

Each ``maps`` entry is ``{"path": "_composite/<name>", "shape": [...], "dtype": str,
"fingerprint": "sha256:..."}``; the fingerprint is of the mapping's values,
and reopening verifies it. Missing or unknown fields anywhere fail closed
with :class:`RecordShapeError`.

The fingerprints of the output cell and feature ids are kept beside the
record, as the ``cytearc:ids`` attribute of the ``_composite`` group
(``{"cells": "sha256:...", "features": "sha256:..."}``, strict), which the
composite protects as it protects its mappings. Composites written by
releases before this one carry them as a sixth record field ``ids`` instead:
the one compatibility decision of the reader, which accepts that field (its
value as strict) so those composites still open, and never writes it. A
composite written before either has neither, and its ids arrays' own
``fingerprint`` attributes are checked instead. (The sealed source
documents of :mod:`cytearc_vfs.composite.source_seals` are not part of the
record either: the spec fixes its fields, and the seals are a cache the
open can do without.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RecordShapeError
from ..format.paths import check_name
from ..format.records import check_fields, parse_fingerprint

__all__ = [
    "COMPOSITE_ATTR",
    "IDS_ATTR",
    "MAP_NAMES",
    "AxisIds",
    "CompositeRecord",
    "MapRecord",
    "SourceBinding",
]

COMPOSITE_ATTR = "composite"
MAPS_GROUP = "_composite"
MAP_NAMES = ("rowSources", "sourceRows", "featureColumns")
#: Attribute of the ``_composite`` group holding the ids fingerprints (:class:`AxisIds`).
IDS_ATTR = "cytearc:ids"


@dataclass(frozen=True, slots=True)
class SourceBinding:
    """One source of a composite, as persisted (never with credentials)."""

    name: str
    """Source name, unique in the composite; the key of ``source_storage_options``."""
    location: str
    """Absolute path or URI of the source store."""
    workspace: str | None
    """Workspace of the source the assay is read from, or ``None``."""
    dataset_fingerprint: str
    """Dataset fingerprint of the source assay when the composite was created."""
    counts_fingerprint: str
    """Counts fingerprint of the source assay when the composite was created."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {
            "name": self.name,
            "location": self.location,
            "workspace": self.workspace,
            "datasetFingerprint": self.dataset_fingerprint,
            "countsFingerprint": self.counts_fingerprint,
        }

    @classmethod
    def from_json(cls, value: object, *, where: str) -> SourceBinding:
        """Parse strictly."""
        record = "composite source binding"
        fields = check_fields(
            value,
            {
                "name": str,
                "location": str,
                "workspace": (str, type(None)),
                "datasetFingerprint": str,
                "countsFingerprint": str,
            },
            record=record,
            where=where,
        )
        try:
            check_name(fields["name"], what="source name")
        except ValueError as exc:
            raise RecordShapeError(f"{record} at {where!r}: {exc}") from exc
        return cls(
            name=fields["name"],
            location=fields["location"],
            workspace=fields["workspace"],
            dataset_fingerprint=parse_fingerprint(
                fields["datasetFingerprint"], record=record, where=where
            ),
            counts_fingerprint=parse_fingerprint(
                fields["countsFingerprint"], record=record, where=where
            ),
        )


@dataclass(frozen=True, slots=True)
class MapRecord:
    """A mapping array of the manifest."""

    path: str
    """Key prefix of the array in the composite's own store."""
    shape: tuple[int, ...]
    """Shape of the array."""
    dtype: str
    """numpy dtype name."""
    fingerprint: str
    """Fingerprint of the values (verified at open)."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, value: object, *, where: str) -> MapRecord:
        """Parse strictly."""
        record = "composite map"
        fields = check_fields(
            value,
            {"path": str, "shape": list, "dtype": str, "fingerprint": str},
            record=record,
            where=where,
        )
        shape = fields["shape"]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise RecordShapeError(f"{record} at {where!r}: shape {shape!r} is not a list of sizes")
        return cls(
            path=fields["path"],
            shape=tuple(shape),
            dtype=fields["dtype"],
            fingerprint=parse_fingerprint(fields["fingerprint"], record=record, where=where),
        )


@dataclass(frozen=True, slots=True)
class AxisIds:
    """Fingerprints of a composite's ordered output ids, recorded at creation."""

    cells: str
    """Fingerprint of ``cellData/ids``."""
    features: str
    """Fingerprint of ``{assay}/featureData/ids``."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {"cells": self.cells, "features": self.features}

    @classmethod
    def from_json(cls, value: object, *, where: str) -> AxisIds:
        """Parse strictly."""
        record = "composite ids"
        fields = check_fields(value, {"cells": str, "features": str}, record=record, where=where)
        return cls(
            cells=parse_fingerprint(fields["cells"], record=record, where=where),
            features=parse_fingerprint(fields["features"], record=record, where=where),
        )


@dataclass(frozen=True, slots=True)
class CompositeRecord:
    """The root ``composite`` attribute."""

    assay: str
    """The composite's assay name."""
    sources: tuple[SourceBinding, ...]
    """Sources in output-cell order."""
    arrays: Mapping[str, Mapping[str, Any]]
    """Virtual ``zarr.json`` documents by array path (counts, and countsT when required)."""
    maps: Mapping[str, MapRecord]
    """Mapping arrays by name (``rowSources``, ``sourceRows``, ``featureColumns``)."""
    complete: bool
    """Whether creation finished; an incomplete composite never opens."""
    ids: AxisIds | None = None
    """The ``ids`` field of a record written before the ids fingerprints moved to
    the ``_composite`` group's ``cytearc:ids`` attribute (read, never written);
    ``None`` otherwise."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape (the spec's five fields)."""
        return {
            "assay": self.assay,
            "sources": [source.to_json() for source in self.sources],
            "arrays": {path: dict(document) for path, document in self.arrays.items()},
            "maps": {name: self.maps[name].to_json() for name in MAP_NAMES if name in self.maps},
            "complete": self.complete,
        }

    def source(self, name: str) -> SourceBinding:
        """The binding named ``name``."""
        for binding in self.sources:
            if binding.name == name:
                return binding
        raise KeyError(name)

    @classmethod
    def from_json(cls, value: object, *, where: str) -> CompositeRecord:
        """Parse strictly."""
        record = "composite record"
        required: dict[str, type] = {
            "assay": str,
            "sources": list,
            "arrays": dict,
            "maps": dict,
            "complete": bool,
        }
        if isinstance(value, Mapping) and "ids" in value:
            # written by releases before the ids moved to _composite (see the module docstring)
            required["ids"] = dict
        fields = check_fields(value, required, record=record, where=where)
        sources = tuple(
            SourceBinding.from_json(item, where=f"{where} sources[{index}]")
            for index, item in enumerate(fields["sources"])
        )
        names = [source.name for source in sources]
        if len(set(names)) != len(names) or not sources:
            raise RecordShapeError(
                f"{record} at {where!r}: source names must be unique and non-empty, found {names}"
            )
        maps_value = check_fields(
            fields["maps"], {name: dict for name in MAP_NAMES}, record="composite maps", where=where
        )
        maps = {
            name: MapRecord.from_json(maps_value[name], where=f"{where} maps.{name}")
            for name in MAP_NAMES
        }
        arrays = fields["arrays"]
        for path, document in arrays.items():
            if not isinstance(document, dict) or document.get("node_type") != "array":
                raise RecordShapeError(
                    f"{record} at {where!r}: arrays[{path!r}] is not a Zarr array document"
                )
        return cls(
            assay=check_name(fields["assay"], what="assay"),
            sources=sources,
            arrays=arrays,
            maps=maps,
            complete=fields["complete"],
            ids=AxisIds.from_json(fields["ids"], where=f"{where} ids") if "ids" in fields else None,
        )
