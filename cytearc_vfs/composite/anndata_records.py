"""``_composite/anndataSources``: what a composite knows of its AnnData sources.

The composite record binds every source by name, location, workspace and two
fingerprints (fields the spec fixes). An AnnData source needs more to be
opened and checked cheaply: which element it reads (``X`` or a layer) and how
it is encoded, the dtype its values are read as, the metadata documents the
element was opened from, and the size and version of every object its
fingerprints cover (:mod:`cytearc_vfs.read.anndata_sources`). They are kept,
outside the record, in one array of the composite's own ``_composite`` group:
UTF-8 JSON ``{source name: entry}``, one chunk. Its attribute
``cytearc:anndataSources`` holds the fingerprint of the values and of the
record's source bindings, as ``_composite/sourceSeals`` does, so an entry
edited after creation, or copied from another composite, is refused.

A source the array does not name is bound as a CyteArc store; so deleting the
array makes every AnnData source fail to open (closed, never read as
something else).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from ..errors import IdentityMismatchError, RecordShapeError
from ..format.fingerprints import combine
from ..format.nodes import array_at
from ..format.records import check_fields
from .maps import array_fingerprint
from .records import MAPS_GROUP, CompositeRecord

__all__ = ["ANNDATA_SOURCES_PATH", "read_anndata_sources", "write_anndata_sources"]

#: Where the AnnData sources' entries are stored.
ANNDATA_SOURCES_PATH = f"{MAPS_GROUP}/anndataSources"
#: The array's attribute: fingerprints of its values and of the bindings.
ANNDATA_ATTR = "cytearc:anndataSources"
#: The fields of one source's entry.
ENTRY_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    "element": str,
    "encoding": str,
    "zarrFormat": int,
    "shape": list,
    "obsIndex": list,
    "varIndex": list,
    "prefixes": list,
    "documents": dict,
    "objects": dict,
    "fingerprints": dict,
    "dtype": str,
}


def _bindings(record: CompositeRecord) -> str:
    return combine(ANNDATA_ATTR, {"sources": [source.to_json() for source in record.sources]})


def write_anndata_sources(
    maps_group: zarr.Group, record: CompositeRecord, entries: Mapping[str, Mapping[str, Any]]
) -> None:
    """Write the ``entries`` of the AnnData sources of ``record`` (nothing without any)."""
    if not entries:
        return
    text = json.dumps(dict(entries), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    values = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    name = ANNDATA_SOURCES_PATH.rsplit("/", 1)[1]
    array = maps_group.create_array(
        name, shape=values.shape, dtype=values.dtype, chunks=(max(1, len(values)),)
    )
    array[:] = values
    # the attributes come last: an array without them (a creation killed
    # between the two writes) is refused, never read
    array.attrs.update(
        {ANNDATA_ATTR: {"fingerprint": array_fingerprint(values), "sources": _bindings(record)}}
    )


def read_anndata_sources(
    root: zarr.Group, record: CompositeRecord, *, where: str
) -> dict[str, dict[str, Any]]:
    """The verified entries of a composite's AnnData sources (none without the array)."""
    if ANNDATA_SOURCES_PATH not in root:
        return {}
    remedy = "recreate the composite"
    array = array_at(root, ANNDATA_SOURCES_PATH)
    values = np.asarray(array[:])
    attrs = check_fields(
        array.attrs.asdict(), {ANNDATA_ATTR: dict}, record=ANNDATA_SOURCES_PATH, where=where
    )
    recorded = check_fields(
        attrs[ANNDATA_ATTR],
        {"fingerprint": str, "sources": str},
        record=f"{ANNDATA_SOURCES_PATH} {ANNDATA_ATTR}",
        where=where,
    )
    if values.dtype != np.uint8 or values.ndim != 1:
        raise RecordShapeError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH!r} holds {values.dtype} values, not "
            f"bytes; {remedy}"
        )
    if array_fingerprint(values) != recorded["fingerprint"]:
        raise IdentityMismatchError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH} was changed after creation "
            f"(its fingerprint does not match its attributes); {remedy}"
        )
    if recorded["sources"] != _bindings(record):
        raise IdentityMismatchError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH} was written for other sources than "
            f"the record binds (copied from another composite?); {remedy}"
        )
    try:
        payload = json.loads(values.tobytes().decode("utf-8"))
    except ValueError as exc:
        raise RecordShapeError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH}: {exc}; {remedy}"
        ) from exc
    names = {source.name for source in record.sources}
    if not isinstance(payload, dict) or not set(payload) <= names:
        raise RecordShapeError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH} names unknown sources; {remedy}"
        )
    return {
        name: dict(check_fields(entry, ENTRY_FIELDS, record=ANNDATA_SOURCES_PATH, where=where))
        for name, entry in payload.items()
    }
