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

from ..format.option_names import callers_form
from ..format.store_io import get_json
from .documents import describe

__all__ = ["require_unfingerprinted", "require_unrecorded"]

#: Attributes that make a group, or an array, part of a CyteArc store's records.
_RECORD_NAMES = ("assayTypes", "is_assay")
#: Records of a store's or workspace's root group: they declare the store (its assays,
#: its source), not the arrays a user keeps beside its layout.
_ROOT_RECORDS = frozenset({"assayTypes"})
#: Groups of a CyteArc store's layout, recorded or not (``cellData`` carries no
#: attribute): a table's columns share its length, an artifact is immutable.
_LAYOUT_GROUPS = frozenset(
    {"cellData", "featureData", "matrices", "artifacts", "pipeline", "agent_results"}
)
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
        f"from changed counts ({callers_form('cv.write_counts', 'cytearc-vfs write')}), or "
        "copy the array out "
        "of the store first"
    )


def _layout_group(path: str, ancestors: Mapping[str, object]) -> str | None:
    """The group of a CyteArc store's layout that ``path`` lies in, when a group above it
    records the store (``ancestors``: their documents), else ``None``.

    >>> _layout_group("cellData/x", {"cellData": {}, "": {"attributes": {"assayTypes": {}}}})
    'cellData'
    >>> _layout_group("mine/x", {"mine": {}, "": {"attributes": {"assayTypes": {}}}}) is None
    True
    """
    if not any(_recorded(document) for document in ancestors.values()):
        return None
    parts = path.split("/")[:-1]
    for depth, part in enumerate(parts):
        if part in _LAYOUT_GROUPS:
            return "/".join(parts[: depth + 1])
    return None


def require_unrecorded(
    store: Store, path: str, document: Mapping[str, Any], what: str
) -> dict[str, object]:
    """Refuse an array that a CyteArc store's records describe.

    Those are the arrays that carry a record themselves, lie below a group
    that carries one (an assay group's ``is_assay``, a ``cytearc:`` record;
    a root's ``assayTypes`` declares the store, so a user's own array beside
    its layout may change), or lie in a group of the store's layout
    (``cellData``, ``featureData``, ``artifacts``...). ``document`` is the
    array's own ``zarr.json``; each group above it is read (one ``get`` per
    level, the root included). Returns those groups' documents by path
    (``""`` for the root), for the caller's further use.

    Raises
    ------
    ValueError
        The array is described by a CyteArc store's records.
    """
    found = _recorded(document)
    holder = path
    ancestors: dict[str, object] = {}
    if found is None:
        ancestors = _ancestors(store, path)
        holder, found = next(
            (
                (group, name)
                for group, doc in ancestors.items()
                if (name := _recorded(doc)) and name not in _ROOT_RECORDS
            ),
            (path, None),
        )
    detail = f"attribute {found!r} of {holder or '/'!r}"
    if found is None:
        layout = _layout_group(path, ancestors)
        if layout is None:
            return ancestors
        detail = f"the layout group {layout!r}"
    raise ValueError(
        f"{what} of {describe(store, path)} refused: it belongs to a CyteArc store "
        f"({detail}), whose records and checks describe the shapes and chunks of the arrays "
        "in it; changing the array alone could break the store (verify and open would refuse "
        "it). Change it with the store's writers (counts and tables: cv.write_counts, or "
        "cytearc-vfs write; an artifact's arrays: publish a new artifact), or copy the array "
        "out of the store first. Arrays of your own beside the layout (outside its groups) "
        "may be resized and promoted"
    )
