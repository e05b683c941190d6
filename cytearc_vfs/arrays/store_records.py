"""Refusing the arrays of a CyteArc store, which its records describe.

A CyteArc store's count matrices (``counts``, ``countsT``), their
summaries and the cell and feature tables are described by records in the
attributes of the groups above them (``assayTypes`` at the store or
workspace root, ``is_assay`` on an assay group, ``cytearc:...`` records
such as the count layout on a matrix group, and on the arrays themselves).
A resize or promote of one of them changes the array but not the records:
the store then fails its checks (``cytearc-vfs verify`` exits 3, and
opening it raises ``RecordShapeError``). Such arrays are refused before
anything is written; the store's writers change them with their records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zarr.abc.store import Store

from ..format.store_io import get_json
from .documents import describe

__all__ = ["require_unrecorded"]

#: Attributes that make a group, or an array, part of a CyteArc store's records.
_RECORD_NAMES = ("assayTypes", "is_assay")
_RECORD_PREFIX = "cytearc:"


def _recorded(document: object) -> str | None:
    """The first record attribute of a node's ``zarr.json``, or ``None``."""
    if not isinstance(document, Mapping):
        return None
    attributes: Any = document.get("attributes")
    if not isinstance(attributes, Mapping):
        return None
    for name in attributes:
        if name in _RECORD_NAMES or str(name).startswith(_RECORD_PREFIX):
            return str(name)
    return None


def require_unrecorded(
    store: Store, path: str, document: Mapping[str, Any], what: str
) -> dict[str, object]:
    """Refuse an array that a CyteArc store's records describe.

    ``document`` is the array's own ``zarr.json``; each group above it is
    read (one ``get`` per level, the root included). Returns those groups'
    documents by path (``""`` for the root), for the caller's further use.

    Raises
    ------
    ValueError
        The array, or a group above it, carries a CyteArc record attribute.
    """
    parts = path.split("/") if path else []
    found = _recorded(document)
    holder = path
    ancestors: dict[str, object] = {}
    for depth in range(len(parts) - 1, -1, -1):
        if found is not None:
            break
        holder = "/".join(parts[:depth])
        key = f"{holder}/zarr.json" if holder else "zarr.json"
        ancestors[holder] = get_json(store, key, where=describe(store, holder))
        found = _recorded(ancestors[holder])
    if found is not None:
        raise ValueError(
            f"{what} of {describe(store, path)} refused: it belongs to a CyteArc store "
            f"(attribute {found!r} of {holder or '/'!r}), whose records describe its shape "
            "and chunks; changing the array alone would break the store (verify and open "
            "would refuse it). Change it by writing the store again from changed counts "
            "(cv.write_counts, or cytearc-vfs write), or copy the array out of the store "
            "first"
        )
    return ancestors
