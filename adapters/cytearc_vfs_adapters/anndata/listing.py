"""Every element of a container, with its encoding, version and shape: ``anndata ls``.

The walk reads metadata only (attributes, array shapes), never values. It
descends into the anndata group, ``raw`` and mappings, lists a dataframe's
index and columns (a legacy categorical column is marked, the reserved
``__categories`` subgroup is shown as part of it, not as a mapping), and
stops at elements whose members are their own business (sparse matrices,
categoricals, nullable arrays). Awkward arrays are reported with their
length, never read. An element this reader cannot read (an unknown encoding
or version) is listed with the reason instead of ending the listing, and so
is a damaged one (``damaged``): a metadata document zarr cannot parse, a
sparse matrix lacking a member array, or whose ``shape`` attribute is not two
non-negative integers or disagrees with the length of its ``indptr`` (from
that array's metadata), or of a Zarr container whose one listing of the
element's chunks proves a chunk its entries need lost (a partial copy:
:func:`cytearc_vfs.read.sparse_chunk_presence.listed_absence`). No chunk is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .dataframes import LEGACY_CATEGORIES
from .encodings import Encoding, classify, shape_of
from .errors import MalformedElementError, UnsupportedElementError
from .matrices import SparseMatrixElement
from .nodes import attribute, child, children, is_group, listed_names

__all__ = ["ElementInfo", "list_elements"]


@dataclass(frozen=True, slots=True)
class ElementInfo:
    """One element of a container, as ``anndata ls`` shows it."""

    path: str
    """Path inside the container (``""`` for the root)."""
    encoding_type: str
    """Encoding type (``"unknown"`` for one this reader does not know)."""
    encoding_version: str
    """Encoding version (declared, or the legacy one inferred)."""
    shape: tuple[int, ...] | None
    """Shape from metadata; ``None`` for mappings."""
    legacy: bool
    """Whether the element uses an anndata 0.7.x (or older) layout."""
    declared: bool
    """Whether the node carries encoding attributes (``False``: inferred)."""
    note: str = ""
    """Anything else worth saying (awkward arrays, unreadable or damaged elements)."""
    damaged: bool = False
    """Whether the element is damaged (its note says how): the container fails closed."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for ``--json``)."""
        return {
            "path": "/" + self.path,
            "encodingType": self.encoding_type,
            "encodingVersion": self.encoding_version,
            "shape": list(self.shape) if self.shape is not None else None,
            "legacy": self.legacy,
            "declared": self.declared,
            "note": self.note,
            "damaged": self.damaged,
        }


def _info(node: Any, path: str, encoding: Encoding, note: str = "") -> ElementInfo:
    return ElementInfo(
        path,
        encoding.type,
        encoding.version,
        shape_of(node, encoding),
        encoding.legacy,
        encoding.declared,
        note,
    )


def list_elements(root: Any) -> list[ElementInfo]:
    """Every element under ``root`` (the root itself first), depth first in name order."""
    found: list[ElementInfo] = []
    _walk(root, "", found)
    return found


def _damaged(path: str, exc: MalformedElementError, node: Any = None) -> ElementInfo:
    """The entry of an element whose metadata says it is damaged."""
    declared = None if node is None else attribute(node, "encoding-type")
    return ElementInfo(
        path,
        str(declared if declared is not None else "unknown"),
        str(attribute(node, "encoding-version", "")) if node is not None else "",
        None,
        False,
        declared is not None,
        f"damaged: {exc}",
        True,
    )


def _members(node: Any, path: str, found: list[ElementInfo]) -> Iterator[tuple[str, Any]]:
    """``node``'s members, in name order; one whose metadata document cannot be read
    is listed as damaged, in its place, and not given."""
    try:
        names = children(node)
    except MalformedElementError:
        names = listed_names(node)  # a member is damaged: each is looked up alone
    for name in names:
        member_path = f"{path}/{name}" if path else name
        try:
            member = child(node, name)
        except MalformedElementError as exc:
            found.append(_damaged(member_path, exc))
            continue
        if member is not None:  # listed by the store, but no node (a stray file)
            yield name, member


def _walk(node: Any, path: str, found: list[ElementInfo]) -> None:
    try:
        encoding = classify(node, path)
    except UnsupportedElementError as exc:
        found.append(
            ElementInfo(
                path,
                str(attribute(node, "encoding-type", "unknown")),
                str(attribute(node, "encoding-version", "")),
                None if is_group(node) else tuple(node.shape or ()),
                False,
                True,
                f"not read: {exc}",
            )
        )
        return
    except MalformedElementError as exc:  # a member it looked at is damaged
        found.append(_damaged(path, exc, node))
        return
    if encoding.type in ("csr_matrix", "csc_matrix"):
        try:
            # its members' documents only: the arrays are there, and the shape
            # attribute is two non-negative integers that indptr's length agrees with;
            # then one listing of its chunks, none read: what the listing proves lost
            SparseMatrixElement(node, path, encoding).check_listed_chunks()
        except MalformedElementError as exc:
            found.append(_damaged(path, exc, node))
            return
    note = ""
    if encoding.type == "awkward-array":
        note = "awkward array: reported, not read"
    elif encoding.type == "categorical" and not is_group(node):
        note = f"legacy column: codes here, labels at {attribute(node, 'categories')!r}"
    found.append(_info(node, path, encoding, note))
    if encoding.type in ("anndata", "raw", "dict") or encoding.type == "dataframe":
        for name, member in _members(node, path, found):
            if encoding.type == "dataframe" and name == LEGACY_CATEGORIES:
                continue  # the labels of legacy categorical columns, shown with them
            _walk(member, f"{path}/{name}" if path else name, found)
