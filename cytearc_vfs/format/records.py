"""Typed, strict records for everything this layer persists in attributes.

Every persisted JSON record is parsed into a frozen dataclass here, and
serialised from one here: no other module reads or writes these attribute
shapes by hand. Parsing is strict: a missing field, an unknown field or a
field of the wrong type raises :class:`RecordShapeError` naming the record,
the field and the path, because the spec gives these records one unversioned
shape and forbids silent migration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RecordShapeError, warn_at_caller
from .option_names import option_name

__all__ = [
    "ASSAY_TYPE_PRESETS",
    "COUNT_LAYOUT_ATTR",
    "COUNT_STORAGE_DTYPES",
    "FINGERPRINT_PATTERN",
    "PENDING_ASSAY_ATTR",
    "PENDING_STORE_ATTR",
    "RNA_LIKE_TYPES",
    "ArrayGeometry",
    "CountLayout",
    "check_fields",
    "dump_assay_types",
    "parse_assay_types",
    "parse_fingerprint",
    "requires_transpose",
    "resolve_assay_type",
]

COUNT_LAYOUT_ATTR = "cytearc:countMatrixLayout"
PENDING_ASSAY_ATTR = "cytearc:pending_assay"
#: Root attribute of a store being written: the writer's name. The writer puts
#: it in the root's first document and its last root write removes it, so a
#: store whose writer died, at any instant, is refused instead of read.
PENDING_STORE_ATTR = "cytearc:pending_store"

#: Assay presets of the spec ("Assay types").
ASSAY_TYPE_PRESETS: tuple[str, ...] = (
    "RNA",
    "ATAC",
    "ADT",
    "HTO",
    "CRISPR",
    "ANTIGEN",
    "CUSTOM",
    "GeneActivity",
    "GeneScores",
    "URNA",
    "Assay",
)
#: Presets whose assay class is RNAassay, and which therefore store countsT.
RNA_LIKE_TYPES: frozenset[str] = frozenset({"RNA", "GeneActivity", "URNA"})

FINGERPRINT_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")

#: The count storage dtypes of the spec ("Count dtype"): unsigned integers for
#: non-negative integer counts, signed integers or float32/float64 otherwise.
#: float16 (and bool, complex, text...) is not a count storage dtype.
COUNT_STORAGE_DTYPES: frozenset[str] = frozenset(
    {"uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64"}
)


def check_fields(
    value: object, required: Mapping[str, type | tuple[type, ...]], *, record: str, where: str
) -> Mapping[str, Any]:
    """Check that ``value`` is a mapping with exactly the ``required`` fields and types.

    ``bool`` is not accepted where ``int`` is asked for, although Python
    treats it as one: a JSON ``true`` in a byte count is a wrong record.
    """
    if not isinstance(value, Mapping):
        raise RecordShapeError(
            f"{record} at {where!r} must be a JSON object, found {type(value).__name__}; "
            "the store was not written by this layer or was edited; re-import it"
        )
    missing = [name for name in required if name not in value]
    unknown = [name for name in value if name not in required]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing field(s) {missing}")
        if unknown:
            parts.append(f"unknown field(s) {unknown}")
        raise RecordShapeError(
            f"{record} at {where!r} has {' and '.join(parts)}; the shape is strict and "
            f"unversioned (expected exactly {sorted(required)}); re-create the record with "
            "this release instead of editing it"
        )
    for name, kind in required.items():
        field = value[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(field, bool) and bool not in kinds) or not isinstance(field, kinds):
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise RecordShapeError(
                f"{record} at {where!r}: field {name!r} must be {names}, "
                f"found {type(field).__name__} {field!r}"
            )
    return value


def parse_fingerprint(value: object, *, record: str, where: str) -> str:
    """Return ``value`` if it is a fingerprint string (``sha256:`` and 64 hex digits)."""
    if not isinstance(value, str) or not FINGERPRINT_PATTERN.match(value):
        raise RecordShapeError(
            f"{record} at {where!r}: {value!r} is not a fingerprint "
            "('sha256:' followed by 64 lowercase hex digits)"
        )
    return value


def _int_pair(value: object, *, field: str, record: str, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise RecordShapeError(
            f"{record} at {where!r}: field {field!r} must be a list of two "
            f"non-negative integers, found {value!r}"
        )
    return (value[0], value[1])


@dataclass(frozen=True, slots=True)
class ArrayGeometry:
    """Chunk and shard shape of one sharded count array."""

    chunks: tuple[int, int]
    """Inner chunk shape (rows, columns)."""
    shards: tuple[int, int]
    """Shard shape (rows, columns); a whole multiple of ``chunks``."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {"chunks": list(self.chunks), "shards": list(self.shards)}

    @classmethod
    def from_json(cls, value: object, *, where: str) -> ArrayGeometry:
        """Parse strictly; raises :class:`RecordShapeError`."""
        record = "cytearc:countMatrixLayout geometry"
        fields = check_fields(value, {"chunks": list, "shards": list}, record=record, where=where)
        chunks = _int_pair(fields["chunks"], field="chunks", record=record, where=where)
        shards = _int_pair(fields["shards"], field="shards", record=record, where=where)
        if min(chunks) < 1 or shards[0] % chunks[0] or shards[1] % chunks[1]:
            raise RecordShapeError(
                f"{record} at {where!r}: shards {list(shards)} must be a positive whole "
                f"multiple of chunks {list(chunks)}"
            )
        return cls(chunks, shards)


@dataclass(frozen=True, slots=True)
class CountLayout:
    """The ``cytearc:countMatrixLayout`` record.

    The same record sits on the matrix group, on ``counts`` and on ``countsT``;
    readers check the three agree and match the live arrays.
    """

    unit_bytes: int
    """Policy: target uncompressed bytes of one shard (``unitBytes``)."""
    chunk_bytes: int
    """Policy: target uncompressed bytes of one inner chunk (``chunkBytes``)."""
    shape: tuple[int, int]
    """(cells, features) of ``counts``."""
    dtype: str
    """Storage dtype of ``counts`` and ``countsT`` (numpy name, e.g. ``uint16``)."""
    counts: ArrayGeometry
    """Geometry of the cell-major ``counts``."""
    counts_t: ArrayGeometry | None
    """Geometry of the feature-major ``countsT``; ``None`` for assays without one."""

    def to_json(self) -> dict[str, Any]:
        """Serialise to the persisted JSON shape."""
        return {
            "unitBytes": self.unit_bytes,
            "chunkBytes": self.chunk_bytes,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "counts": self.counts.to_json(),
            "countsT": None if self.counts_t is None else self.counts_t.to_json(),
        }

    @classmethod
    def from_json(cls, value: object, *, where: str) -> CountLayout:
        """Parse strictly; raises :class:`RecordShapeError`."""
        record = COUNT_LAYOUT_ATTR
        fields = check_fields(
            value,
            {
                "unitBytes": int,
                "chunkBytes": int,
                "shape": list,
                "dtype": str,
                "counts": dict,
                "countsT": (dict, type(None)),
            },
            record=record,
            where=where,
        )
        if fields["unitBytes"] < 1 or fields["chunkBytes"] < 1:
            raise RecordShapeError(
                f"{record} at {where!r}: unitBytes and chunkBytes must be positive, found "
                f"{fields['unitBytes']} and {fields['chunkBytes']}"
            )
        if fields["dtype"] not in COUNT_STORAGE_DTYPES:
            # a reader would otherwise decode counts in a dtype no writer stores
            raise RecordShapeError(
                f"{record} at {where!r}: dtype {fields['dtype']!r} is not a count storage "
                f"dtype (one of {sorted(COUNT_STORAGE_DTYPES)}; float16 never is)"
            )
        counts_t = fields["countsT"]
        return cls(
            unit_bytes=fields["unitBytes"],
            chunk_bytes=fields["chunkBytes"],
            shape=_int_pair(fields["shape"], field="shape", record=record, where=where),
            dtype=fields["dtype"],
            counts=ArrayGeometry.from_json(fields["counts"], where=f"{where} (counts)"),
            counts_t=None
            if counts_t is None
            else ArrayGeometry.from_json(counts_t, where=f"{where} (countsT)"),
        )


def resolve_assay_type(assay: str, explicit: str | None) -> str:
    """Return the preset an assay is written as.

    An explicit type must be a preset (``ValueError`` otherwise); without one
    the assay's name is used when it names a preset, else the generic
    ``Assay`` with a warning, as the spec's "Assay types" says.
    """
    if explicit is not None:
        if explicit not in ASSAY_TYPE_PRESETS:
            # presets are case-sensitive names ("RNA"): "rna" is the likeliest slip
            meant = [p for p in ASSAY_TYPE_PRESETS if p.lower() == str(explicit).lower()]
            hint = f"did you mean {meant[0]!r}? Presets: " if meant else "choose one of "
            raise ValueError(
                f"{option_name('assay_type')} {explicit!r} for assay {assay!r} is not a "
                f"preset; {hint}{list(ASSAY_TYPE_PRESETS)}"
            )
        return explicit
    if assay in ASSAY_TYPE_PRESETS:
        return assay
    warn_at_caller(
        f"assay {assay!r} has no assay_type and its name is not a preset; it is written as "
        "the generic 'Assay' (no modality-specific normalization). Give "
        f"{option_name('assay_type')} to choose",
    )
    return "Assay"


def requires_transpose(assay_type: str) -> bool:
    """Whether an assay of this preset stores ``countsT`` (RNA-like presets do)."""
    return assay_type in RNA_LIKE_TYPES


def parse_assay_types(value: object, *, where: str) -> dict[str, str]:
    """Parse an ``assayTypes`` attribute: a mapping of assay name to preset."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"assayTypes at {where!r} is present but not a mapping ({type(value).__name__}); "
            "open the store writable with an assay type for every assay to replace it"
        )
    parsed: dict[str, str] = {}
    for assay, preset in value.items():
        if not isinstance(preset, str) or preset not in ASSAY_TYPE_PRESETS:
            raise ValueError(
                f"assayTypes at {where!r}: assay {assay!r} has type {preset!r}, which is not "
                f"a preset {list(ASSAY_TYPE_PRESETS)}; open the store writable with "
                "assay_types naming a preset to replace it"
            )
        parsed[str(assay)] = preset
    return parsed


def dump_assay_types(types: Mapping[str, str]) -> dict[str, str]:
    """Serialise an ``assayTypes`` mapping (validated) in assay-name order."""
    for assay, preset in types.items():
        if preset not in ASSAY_TYPE_PRESETS:
            raise ValueError(f"assay {assay!r}: {preset!r} is not an assay type preset")
    return {assay: types[assay] for assay in sorted(types)}
