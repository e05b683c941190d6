"""The artifact record: canonical JSON, provenance validation and strict parsing.

An artifact group's attribute record holds exactly ``artifact_id``, ``kind``,
``provenance``, ``execution_options``, ``created_at_ns``, ``cytearc_version``
and ``complete``. Provenance is an artifact's identity for reuse, so it is
validated and reduced to canonical JSON values (:func:`check_provenance`) before
it is written, and compared as canonical JSON text (:func:`canonical_json`).
A record read back is parsed strictly, in one place, into
:class:`ArtifactRecord` (:meth:`ArtifactRecord.from_group_document`). Writing
and listing artifact groups is :mod:`cytearc_vfs.artifacts.catalog`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import IncompleteStoreError, RecordShapeError
from ..format.records import check_fields

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ArtifactRecord",
    "canonical_json",
    "check_execution_options",
    "check_provenance",
]

#: An artifact id: 256 random bits as 64 lowercase hexadecimal digits.
ARTIFACT_ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")

_RECORD = "artifact record"
_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "artifact_id": str,
    "kind": str,
    "provenance": dict,
    "execution_options": dict,
    "created_at_ns": int,
    "cytearc_version": str,
    "complete": bool,
}
_PROVENANCE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "operation": str,
    "parameters": dict,
    "inputs": dict,
}


# ---------------------------------------------------------------- JSON values


def _json_value(value: object, where: str) -> Any:
    """``value`` as a canonical JSON value (objects with sorted keys, lists, scalars)."""
    # bool before int: bool is an int subclass, and stays a JSON boolean.
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(
                f"{where} is {number!r}; JSON has no NaN or infinity, so provenance and "
                "execution options must hold finite numbers (use null for a missing value)"
            )
        return number
    if isinstance(value, Mapping):
        bad = [key for key in value if not isinstance(key, str)]
        if bad:
            raise TypeError(
                f"{where} has the non-string key(s) {bad!r}; JSON object keys are strings"
            )
        return {key: _json_value(value[key], f"{where}[{key!r}]") for key in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_json_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, np.ndarray):
        # A common slip; its repr could be megabytes, so name its shape instead.
        raise TypeError(
            f"{where} is a numpy array of shape {value.shape}, which is not a JSON value; pass "
            "value.tolist() for a few numbers, or record a reference (an artifact path) for "
            "data"
        )
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise TypeError(
        f"{where} is a {type(value).__name__} ({shown}), which is not a JSON value; use "
        "None, bool, int, finite float, str, list, tuple or a mapping with string keys"
    )


def canonical_json(value: object) -> str:
    """The canonical JSON text of ``value``: sorted keys, no whitespace, no NaN.

    Two provenance mappings are the same exactly when their canonical texts
    are equal, so ``1`` and ``1.0`` differ while key order never matters.

    Examples
    --------
    >>> canonical_json({"b": [1, 2.0], "a": None})
    '{"a":null,"b":[1,2.0]}'
    """
    return json.dumps(
        _json_value(value, "value"),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def check_provenance(provenance: object) -> dict[str, Any]:
    """Validate a provenance mapping and return it as canonical JSON values.

    Parameters
    ----------
    provenance
        A mapping with exactly ``operation`` (a non-empty string),
        ``parameters`` (a mapping), ``inputs`` (a mapping from an input's
        role to a JSON value, such as an artifact reference) and, only when
        the operation's revision is 2 or more, ``revision`` (an integer).

    Returns
    -------
    dict
        The provenance with sorted keys, tuples as lists and numpy scalars
        as Python numbers: the value that is persisted and compared.

    Raises
    ------
    ValueError
        A missing or unknown field, an empty operation, a ``revision`` that
        is 1, below 1 or not an integer, or a NaN or infinite number.
    TypeError
        ``provenance``, ``parameters`` or ``inputs`` is not a mapping, or a
        value is not JSON (a set, bytes, an object, a non-string key).

    Examples
    --------
    >>> check_provenance({"operation": "normalize", "parameters": {"scale": 1e4},
    ...                   "inputs": {}, "revision": 2})
    {'inputs': {}, 'operation': 'normalize', 'parameters': {'scale': 10000.0}, 'revision': 2}
    """
    if not isinstance(provenance, Mapping):
        raise TypeError(
            f"provenance must be a mapping with operation, parameters and inputs, not "
            f"{type(provenance).__name__}"
        )
    allowed = (*_PROVENANCE_FIELDS, "revision")
    missing = [name for name in _PROVENANCE_FIELDS if name not in provenance]
    unknown = [name for name in provenance if name not in allowed]
    if missing or unknown:
        parts = [f"missing field(s) {missing}"] if missing else []
        parts += [f"unknown field(s) {unknown}"] if unknown else []
        raise ValueError(
            f"provenance has {' and '.join(parts)}; it holds exactly operation, parameters "
            "and inputs, and revision only when the operation revision is 2 or more"
        )
    operation = provenance["operation"]
    if not isinstance(operation, str) or not operation:
        raise ValueError(f"provenance operation must be a non-empty string, not {operation!r}")
    for name in ("parameters", "inputs"):
        if not isinstance(provenance[name], Mapping):
            raise TypeError(
                f"provenance {name} must be a mapping, not {type(provenance[name]).__name__}"
            )
    if "revision" in provenance:
        revision = provenance["revision"]
        if isinstance(revision, (bool, np.bool_)) or not isinstance(revision, (int, np.integer)):
            raise ValueError(
                f"provenance revision must be an integer of 2 or more, not {revision!r}; an "
                "artifact whose revision is not an integer is never reused"
            )
        if revision == 1:
            raise ValueError(
                "provenance revision 1 is recorded by omitting revision, so that artifacts "
                "written before operation revisions existed keep their identity; remove it"
            )
        if revision < 2:
            raise ValueError(f"provenance revision must be 2 or more, not {revision}")
    value: dict[str, Any] = _json_value(provenance, "provenance")
    return value


def check_execution_options(execution_options: object) -> dict[str, Any]:
    """Validate execution options and return them as canonical JSON values.

    Parameters
    ----------
    execution_options
        How a producer runs (workers, budgets): a mapping of JSON values, or
        ``None`` for none. Recorded for diagnostics, never part of an
        artifact's identity.

    Returns
    -------
    dict
        The options with sorted keys, tuples as lists and numpy scalars as
        Python numbers; empty for ``None``.

    Raises
    ------
    TypeError
        ``execution_options`` is not a mapping or None, or holds a value that
        is not JSON.
    ValueError
        A NaN or infinite number.

    Examples
    --------
    >>> check_execution_options({"workers": 4, "budget": (1, 2)})
    {'budget': [1, 2], 'workers': 4}
    """
    if execution_options is not None and not isinstance(execution_options, Mapping):
        raise TypeError(
            f"execution_options must be a mapping or None, not {type(execution_options).__name__}"
        )
    options: dict[str, Any] = _json_value(execution_options or {}, "execution_options")
    return options


def _check_json_values(value: object, name: str, where: str) -> None:
    """Refuse a record value JSON cannot hold (NaN, infinity: Python's ``json`` reads them)."""
    try:
        _json_value(value, name)
    except (TypeError, ValueError) as exc:
        raise RecordShapeError(
            f"{_RECORD} at {where!r}: {exc}; the record was not written by publish_artifact or "
            "was edited; recompute the artifact"
        ) from exc


def _is_current(provenance: Mapping[str, Any]) -> bool:
    # No revision means revision 1; a recorded 1 or a non-integer is not current.
    if "revision" not in provenance:
        return True
    revision = provenance["revision"]
    return isinstance(revision, int) and not isinstance(revision, bool) and revision >= 2


# ---------------------------------------------------------------- the record


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """The attribute record of one complete artifact group, as read back.

    Mappings hold the parsed JSON; treat them as read-only.
    """

    artifact_id: str
    """Random 256-bit id, 64 lowercase hex digits; the last segment of ``path``."""
    kind: str
    """Artifact kind; the segment before the id in ``path``."""
    path: str
    """``{root}/{kind}/{artifact_id}``, relative to the store or group it was read from."""
    provenance: Mapping[str, Any]
    """``operation``, ``parameters``, ``inputs`` and, from revision 2, ``revision``."""
    execution_options: Mapping[str, Any]
    """How the producer ran (workers, budgets); never part of the artifact's identity."""
    created_at_ns: int
    """Creation time, nanoseconds since the epoch; for diagnostics only."""
    cytearc_version: str
    """Version of the package that created the artifact; for diagnostics only."""

    @property
    def is_current(self) -> bool:
        """Whether reuse may consider it: no ``revision``, or an integer of 2 or more."""
        return _is_current(self.provenance)

    @classmethod
    def from_attributes(cls, attributes: object, *, path: str, where: str) -> ArtifactRecord:
        """Parse the attributes of the group at ``path`` strictly.

        Raises
        ------
        RecordShapeError
            A missing, unknown or mistyped field, or an id or kind that does
            not match ``path``.
        IncompleteStoreError
            A well-formed record with ``complete`` false.
        """
        fields = check_fields(attributes, _RECORD_FIELDS, record=_RECORD, where=where)
        segments = path.split("/")
        if len(segments) < 3:
            raise ValueError(f"artifact path {path!r} must be '{{root}}/{{kind}}/{{artifact_id}}'")
        artifact_id, kind = fields["artifact_id"], fields["kind"]
        if not ARTIFACT_ID_PATTERN.match(artifact_id) or artifact_id != segments[-1]:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: artifact_id {artifact_id!r} must be 64 lowercase hex "
                f"digits equal to the group name {segments[-1]!r}; the group was not written "
                "by publish_artifact or was moved; delete it"
            )
        if kind != segments[-2]:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: kind {kind!r} does not match its directory "
                f"{segments[-2]!r}; the group was moved; delete it"
            )
        if not 0 <= fields["created_at_ns"] < 2**63:
            # time.time_ns() fits 64 signed bits until 2262; a time beyond them has no date
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: created_at_ns {fields['created_at_ns']} is not a time "
                "(nanoseconds since the epoch, from 0 to 2**63 - 1); the record was edited; "
                "recompute the artifact"
            )
        provenance = fields["provenance"]
        # Revision is parsed leniently: a recorded 1 or a non-integer is a readable
        # artifact that is merely not current (never reused).
        check_fields(
            {name: value for name, value in provenance.items() if name != "revision"},
            _PROVENANCE_FIELDS,
            record=f"{_RECORD} provenance",
            where=where,
        )
        if not provenance["operation"]:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: provenance operation is empty; it must name the "
                "operation that made the artifact; recompute it"
            )
        for name, value in (
            ("provenance", provenance),
            ("execution_options", fields["execution_options"]),
        ):
            _check_json_values(value, name, where)
        if not fields["complete"]:
            raise IncompleteStoreError(
                f"artifact at {where!r} is not complete (complete=False): its producer is "
                "still writing it, failed, or crashed; it is never read or reused; recompute it"
            )
        return cls(
            artifact_id=artifact_id,
            kind=kind,
            path=path,
            provenance=provenance,
            execution_options=fields["execution_options"],
            created_at_ns=fields["created_at_ns"],
            cytearc_version=fields["cytearc_version"],
        )

    @classmethod
    def from_group_document(cls, document: object, *, path: str, where: str) -> ArtifactRecord:
        """Parse the ``zarr.json`` document of the group at ``path`` strictly.

        Raises
        ------
        RecordShapeError
            ``document`` is not a Zarr v3 group document, or its attributes
            are not a well-formed record (see :meth:`from_attributes`).
        IncompleteStoreError
            A well-formed record with ``complete`` false.
        """
        if (
            not isinstance(document, dict)
            or document.get("node_type") != "group"
            or document.get("zarr_format") != 3
        ):
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: zarr.json is not a Zarr v3 group document; artifact "
                "groups are Zarr v3 groups written by publish_artifact"
            )
        return cls.from_attributes(document.get("attributes", {}), path=path, where=where)
