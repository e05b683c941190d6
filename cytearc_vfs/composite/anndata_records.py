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

from collections.abc import Mapping
from typing import Any

import zarr

from ..errors import RecordShapeError
from ..format.records import check_fields
from .bound_documents import read_bound_document, write_bound_document
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
#: The fields of an entry written by this release: also the local source's
#: watched directories (``{}`` for others; entries written before lack it, and
#: their sources are checked file by file at each open).
CURRENT_ENTRY_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    **ENTRY_FIELDS,
    "directories": dict,
}


def write_anndata_sources(
    maps_group: zarr.Group, record: CompositeRecord, entries: Mapping[str, Mapping[str, Any]]
) -> None:
    """Write the ``entries`` of the AnnData sources of ``record`` (nothing without any)."""
    if entries:
        name = ANNDATA_SOURCES_PATH.rsplit("/", 1)[1]
        write_bound_document(maps_group, name, ANNDATA_ATTR, record, dict(entries))


def read_anndata_sources(
    root: zarr.Group, record: CompositeRecord, *, where: str
) -> dict[str, dict[str, Any]]:
    """The verified entries of a composite's AnnData sources (none without the array)."""
    remedy = "recreate the composite"
    payload = read_bound_document(
        root, ANNDATA_SOURCES_PATH, ANNDATA_ATTR, record, where=where, remedy=remedy
    )
    if payload is None:
        return {}
    names = {source.name for source in record.sources}
    if not isinstance(payload, dict) or not set(payload) <= names:
        raise RecordShapeError(
            f"composite at {where}: {ANNDATA_SOURCES_PATH} names unknown sources; {remedy}"
        )
    return {
        name: dict(
            check_fields(
                entry,
                CURRENT_ENTRY_FIELDS
                if isinstance(entry, Mapping) and "directories" in entry
                else ENTRY_FIELDS,
                record=ANNDATA_SOURCES_PATH,
                where=where,
            )
        )
        for name, entry in payload.items()
    }
