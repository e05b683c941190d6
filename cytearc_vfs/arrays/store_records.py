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

__all__ = ["require_unfingerprinted", "require_unrecorded"]

#: Attributes that make a group, or an array, part of a CyteArc store's records.
_RECORD_NAMES = ("assayTypes", "is_assay")
_RECORD_PREFIX = "cytearc:"
#: Attributes holding a fingerprint of an array's values: on the array
#: (counts, countsT, the id columns) or on its group (the count summaries).
_FINGERPRINT_NAMES = ("content_fingerprint", "fingerprint", "source_fingerprint")


def _attribute_names(document: object) -> list[str]:
    if not isinstance(document, Mapping):
        return []
    attributes: Any = document.get("attributes")
    return [str(name) for name in attributes] if isinstance(attributes, Mapping) else []


def _recorded(document: object) -> str | None:
    """The first record attribute of a node's ``zarr.json``, or ``None``."""
    for name in _attribute_names(document):
        if name in _RECORD_NAMES or name.startswith(_RECORD_PREFIX):
            return name
    return None


def _fingerprint(document: object) -> str | None:
    """The first attribute of a node's ``zarr.json`` that fingerprints values, or ``None``.

    >>> _fingerprint({"attributes": {"fingerprint": "ab12", "dtype": "str"}})
    'fingerprint'
    >>> _fingerprint({"attributes": {"units": "counts"}}) is None
    True
    """
    for name in _attribute_names(document):
        if name in _FINGERPRINT_NAMES or name.startswith(_RECORD_PREFIX):
            return name
    return None


def _ancestors(store: Store, path: str) -> dict[str, object]:
    """The ``zarr.json`` of each group above ``path``, nearest first (``""``: the root)."""
    parts = path.split("/") if path else []
    found: dict[str, object] = {}
    for depth in range(len(parts) - 1, -1, -1):
        holder = "/".join(parts[:depth])
        key = f"{holder}/zarr.json" if holder else "zarr.json"
        found[holder] = get_json(store, key, where=describe(store, holder))
    return found


def require_unfingerprinted(
    store: Store, path: str, document: Mapping[str, Any], what: str
) -> None:
    """Refuse an array whose values a CyteArc store's fingerprints cover.

    Those are the arrays that carry a fingerprint or a ``cytearc:`` record
    (``counts``, ``countsT``, the cell and feature ids), or whose group
    does (the count summaries), in a store whose records (``assayTypes``,
    ``is_assay``) sit above them. Changing their values alone makes the
    store fail its identity check at the next open, with no way back but a
    copy. Every other array of a CyteArc store (a table's own columns, a
    user's arrays) may be written. Reads each group above the array (one
    ``get`` per level, the root included).

    Raises
    ------
    ValueError
        The array's values are covered by the store's fingerprints.
    """
    ancestors = _ancestors(store, path)
    parent = next(iter(ancestors.values()), None)
    covered = _fingerprint(document) or _fingerprint(parent)
    if covered is None or not any(_recorded(group) for group in ancestors.values()):
        return
    raise ValueError(
        f"{what} of {describe(store, path)} refused: a CyteArc store's fingerprints cover "
        f"its values (attribute {covered!r}), so writing them would make the store fail its "
        "identity check at every open, with no way back but a copy. Write the store again "
        "from changed counts (cv.write_counts, or cytearc-vfs write), or copy the array out "
        "of the store first"
    )


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
    found = _recorded(document)
    holder = path
    ancestors: dict[str, object] = {}
    if found is None:
        ancestors = _ancestors(store, path)
        holder, found = next(
            ((group, name) for group, doc in ancestors.items() if (name := _recorded(doc))),
            (path, None),
        )
    if found is not None:
        raise ValueError(
            f"{what} of {describe(store, path)} refused: it belongs to a CyteArc store "
            f"(attribute {found!r} of {holder or '/'!r}), whose records and checks describe "
            "the shapes and chunks of the arrays in it; changing the array alone could break "
            "the store (verify and open would refuse it). Change it by writing the store "
            "again from changed counts (cv.write_counts, or cytearc-vfs write), or copy the "
            "array out of the store first"
        )
    return ancestors
