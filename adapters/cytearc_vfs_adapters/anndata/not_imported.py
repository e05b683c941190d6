"""What an import from an AnnData leaves behind, element by element.

A CyteArc store holds one count matrix and its cell and feature tables, so
``write_counts`` takes ``X`` (or the chosen layer, or ``raw/X``), ``obs`` and
``var`` (``raw/var`` for the raw counts) and the membership declaration in
``uns["cytearc"]``; everything else of the AnnData stays where it is. This
module names what stays, so the writer can say so (``WriteInfo.not_imported``,
``cytearc-vfs write``'s note line): the members of ``obsm``, ``varm``,
``obsp``, ``varp`` and ``uns``, the layers not chosen, ``X`` when a layer
was, ``raw``, and any element the AnnData spec does not name.

Only names are looked at, never values: a container's groups are listed
(one listing each on object storage), an AnnData's mappings read by key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cytearc_vfs.read.anndata_elements import RAW_COUNTS, layer_element

from .errors import MalformedElementError
from .nodes import child, is_group, listed_names

__all__ = ["not_imported", "not_imported_from_anndata", "not_imported_from_container"]

#: The mappings of an AnnData whose members an import never reads, in anndata's order.
_MAPPINGS = ("obsm", "varm", "obsp", "varp", "uns")
#: The order of the report: anndata's order of its elements, then anything else.
_ORDER = ("X", "var", "layers", *_MAPPINGS, "raw")
#: What the membership declaration lives in; it is imported (docs/anndata-out.md).
_DECLARATION = ("uns/cytearc", "assayMembership")

#: ``members(path)``: the member names of the group at ``path`` (``""``: the root), or
#: ``None`` where there is no group there.
Members = Callable[[str], "list[str] | None"]


def not_imported(members: Members, layer: str | None) -> tuple[str, ...]:
    """The paths of the elements an import of ``layer`` leaves out, in anndata's order.

    >>> tree = {
    ...     "": ["X", "layers", "obs", "obsm", "raw", "uns", "var", "varm"],
    ...     "layers": ["counts", "spliced"], "obsm": ["X_pca", "X_umap"], "varm": [],
    ...     "uns": ["cytearc", "neighbors"], "uns/cytearc": ["assayMembership"],
    ...     "raw": ["X", "var", "varm"], "raw/varm": [],
    ... }
    >>> not_imported(tree.get, None)
    ('layers/counts', 'layers/spliced', 'obsm/X_pca', 'obsm/X_umap', 'uns/neighbors', 'raw')
    >>> not_imported(tree.get, "raw/X")
    ('X', 'var', 'layers/counts', 'layers/spliced', 'obsm/X_pca', 'obsm/X_umap', 'uns/neighbors')
    """
    matrix = layer_element(layer)
    found: list[str] = []
    for name in members("") or []:
        if name in ("obs", "var"):
            # the raw counts' features are raw/var: var names X's, which is not imported
            found.extend(["var"] if name == "var" and matrix == RAW_COUNTS else [])
        elif name == "X":
            found.extend([] if matrix == "X" else ["X"])
        elif name == "layers":
            found.extend(f"layers/{m}" for m in members("layers") or [] if f"layers/{m}" != matrix)
        elif name == "raw" and matrix == RAW_COUNTS:
            found.extend(_raw_left(members))
        elif name in _MAPPINGS:
            for member in members(name) or []:
                path = f"{name}/{member}"
                found.extend(_beside_declaration(members) if path == _DECLARATION[0] else [path])
        elif name != "raw" or members("raw"):  # raw (anndata writes an empty group for
            found.append(name)  # none), and anything the spec does not name
    return tuple(sorted(found, key=_rank))


def _raw_left(members: Members) -> list[str]:
    """What of ``raw`` an import of ``raw/X`` leaves: all but ``X`` and ``var``
    (``raw/varm``'s members; anndata writes it even when empty)."""
    left: list[str] = []
    for name in members("raw") or []:
        if name in ("X", "var"):
            continue
        inner = members(f"raw/{name}") if name == "varm" else None
        left.extend([f"raw/{name}"] if inner is None else [f"raw/varm/{m}" for m in inner])
    return left


def _beside_declaration(members: Members) -> list[str]:
    """What of ``uns/cytearc`` is left: all but the membership declaration."""
    group, declaration = _DECLARATION
    found = members(group)
    if found is None:  # not a group: it declares nothing, and is left out whole
        return [group]
    return [f"{group}/{name}" for name in found if name != declaration]


def _rank(path: str) -> tuple[int, str]:
    top = path.split("/")[0]
    return (_ORDER.index(top) if top in _ORDER else len(_ORDER), path)


def not_imported_from_container(root: Any, layer: str | None) -> tuple[str, ...]:
    """:func:`not_imported` of a container's root group (Zarr or HDF5): names only.

    A Zarr group is listed, not opened member by member (one listing per group
    on object storage); a group whose metadata cannot be read is reported whole
    (its damage is not the import's concern: the import does not read it).
    """
    return not_imported(_container_members(root), layer)


def _container_members(root: Any) -> Members:
    def members(path: str) -> list[str] | None:
        try:
            node = root if not path else child(root, path)
        except MalformedElementError:
            return None
        if node is None or not is_group(node):
            return None
        if hasattr(node, "store_path"):  # zarr: the names, without reading each document
            return listed_names(node)
        return sorted(str(name) for name in node)

    return members


def not_imported_from_anndata(adata: Any, layer: str | None) -> tuple[str, ...]:
    """:func:`not_imported` of an ``anndata.AnnData`` in memory."""
    tree: dict[str, list[str]] = {
        "": [
            *(["X"] if adata.X is not None else []),
            "obs",
            "var",
            "layers",
            *_MAPPINGS,
            *(["raw"] if adata.raw is not None else []),
        ],
        "layers": [name for name in adata.layers if isinstance(name, str)],
    }
    for name in _MAPPINGS:
        tree[name] = [str(key) for key in getattr(adata, name)]
    cytearc = adata.uns.get("cytearc")
    if isinstance(cytearc, Mapping):
        tree["uns/cytearc"] = [str(key) for key in cytearc]
    if adata.raw is not None:
        tree["raw"] = ["X", "var", "varm"]
        tree["raw/varm"] = [str(key) for key in adata.raw.varm]
    return not_imported(tree.get, layer)
