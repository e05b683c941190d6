"""What an import from an AnnData leaves behind, element by element.

A CyteArc store holds one count matrix and its cell and feature tables, so
``write_counts`` takes ``X`` (or the chosen layer, or ``raw/X``), ``obs`` and
``var`` (``raw/var`` for the raw counts) and the membership declaration in
``uns["cytearc"]``; everything else of the AnnData stays where it is. This
module names what stays, so the writer can say so (``WriteInfo.not_imported``,
``cytearc-vfs write``'s note line): the members of ``obsm``, ``varm``,
``obsp``, ``varp`` and ``uns``, the layers not chosen, ``X`` when a layer
was, ``raw``, and any element the AnnData spec does not name.

Only names are looked at, never values or documents: a Zarr container's
groups are listed (concurrently, one listing each on object storage), an
HDF5 file's read by key, an AnnData's mappings by key.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zarr
from zarr.core.sync import sync
from zarr.storage import LocalStore, ObjectStore

from cytearc_vfs.format.gathering import gather_all
from cytearc_vfs.format.object_keys import listing_prefix
from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS
from cytearc_vfs.read.anndata_elements import RAW_COUNTS, layer_element
from cytearc_vfs.read.prefetch import PrefetchedStore
from cytearc_vfs.remote.failures import refused

from .nodes import child, is_group

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
        elif name != "raw" or members("raw"):  # raw (for none, anndata writes a null
            found.append(name)  # array: no members), and anything the spec does not name
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


def not_imported_from_container(root: Any, layer: str | None) -> tuple[str, ...] | None:
    """:func:`not_imported` of a container's root group (Zarr or HDF5): names only;
    ``None`` where the Zarr container's elements cannot be listed.

    A Zarr container is listed, never opened member by member: the root, then
    at once each of its groups the report looks into (``layers``, the
    mappings, ``raw``) and each directory at the root the spec does not name,
    then ``uns/cytearc`` and (importing ``raw/X``) ``raw/varm`` where there are
    such: one listing each on object storage, no document read. Only Zarr nodes
    are elements: a file beside them (``.DS_Store``, ``notes.txt``) is told
    from a node by the listing that names it, and a directory the spec does not
    name counts only where its own listing shows a node's metadata document.

    A store that cannot list (``supports_listing`` false), or refuses to
    (``PermissionError``: credentials without the right to list), or whose listing of the
    root shows nothing (not even the root's own metadata document, which was just
    read: an HTTP file system against a server without index pages), gives
    ``None``: what else it holds is not known. An empty tuple said "nothing was
    left out" there while ``obsm``, ``uns`` and ``raw`` were.
    """
    if not isinstance(root, zarr.Group):
        return not_imported(_hdf5_members(root), layer)
    store, base = root.store_path.store, root.store_path.path
    if not store.supports_listing:
        return None  # names cannot be told without listings (docs/anndata.md)
    try:
        return _listed_not_imported(store, base, layer)
    except Exception as exc:
        # credentials that may read but not list (S3 without s3:ListBucket): the
        # import reads what it needs by path; only this report needs listings. The
        # listing here goes to obstore itself, which raises a refused S3 listing as
        # a GenericError naming the 403, not as a PermissionError
        if refused(exc):
            return None
        raise


def _listed_not_imported(store: Any, base: str, layer: str | None) -> tuple[str, ...] | None:
    top = sync(_listings(store, base, [""]))[""]
    if not top.names:
        return None  # a listing that misses the root's own document shows nothing
    names = top.members()
    looked_into = [name for name in names if name in (*_MAPPINGS, "layers", "raw")]
    # a directory the spec does not name is an element only if it is a Zarr node
    unnamed = [name for name in names if name not in (*_ORDER, "obs") and name not in top.files]
    listings = sync(_listings(store, base, [*looked_into, *unnamed]))
    names = [name for name in names if name not in unnamed or listings[name].is_node()]
    found: dict[str, list[str] | None] = {"": names}
    found.update({path: _group_members(path, listings[path]) for path in looked_into})
    # raw is left out whole unless its counts are imported
    inner = [_DECLARATION[0]] if "cytearc" in (found.get("uns") or []) else []
    if layer == RAW_COUNTS and "varm" in (found.get("raw") or []):
        inner.append("raw/varm")
    found.update(
        (path, _group_members(path, listing))
        for path, listing in sync(_listings(store, base, inner)).items()
    )
    return not_imported(found.get, layer)


@dataclass(frozen=True, slots=True)
class _Listing:
    """The names one listing shows directly below a prefix."""

    names: tuple[str, ...]
    """Every name, sorted: keys and sub-prefixes (directories)."""
    files: frozenset[str]
    """Those of :attr:`names` that are keys (files), not prefixes; empty where the
    store's listing does not tell them apart."""

    def members(self) -> list[str]:
        """The names that may be Zarr nodes: neither a metadata document nor a file."""
        return [n for n in self.names if n not in METADATA_DOCUMENTS and n not in self.files]

    def is_node(self) -> bool:
        """Whether the listed prefix is a Zarr node (its metadata document is there)."""
        return any(name in _NODE_DOCUMENTS for name in self.names)


#: The documents that make a prefix a Zarr node (v3; v2 group; v2 array).
_NODE_DOCUMENTS = ("zarr.json", ".zgroup", ".zarray")


def _group_members(path: str, listing: _Listing) -> list[str] | None:
    """The members of the group at ``path`` by its listing; ``None`` where the listing
    shows an array (or nothing) instead of a group."""
    members = listing.members()
    if ".zarray" in listing.names or not listing.names:
        return None  # a Zarr v2 array, or no node at all
    if path == "raw" and "X" not in members:
        return None  # anndata writes raw=None as a null array: no raw counts
    # a Zarr v3 array lists its chunks under "c" (the default chunk key encoding)
    return None if "zarr.json" in listing.names and members == ["c"] else members


async def _listings(store: Any, base: str, paths: list[str]) -> dict[str, _Listing]:
    """The listing of each of ``paths`` (below ``base``), concurrently."""

    async def listed(path: str) -> _Listing:
        return await _listing(store, "/".join(part for part in (base, path) if part))

    found = await gather_all(*(listed(path) for path in paths))
    return dict(zip(paths, found, strict=True))


async def _listing(store: Any, prefix: str) -> _Listing:
    """What one listing of ``prefix`` shows, files told from directories where the
    store's own listing tells them (an object store's, by keys and common prefixes:
    the request ``list_dir`` makes; a local directory's, by its entries). A wrapper
    over the same keys (an import's prefetched tables) is listed through the store it
    wraps, which tells them. Any other wrapper is listed as it is: its listing may
    differ from its store's (one that lists nothing, or whose listings are refused)."""
    while isinstance(store, PrefetchedStore):
        store = store.wrapped
    if isinstance(store, ObjectStore):
        import obstore

        answer = await obstore.list_with_delimiter_async(
            store.store, prefix=listing_prefix(store, prefix)
        )
        files = {meta["path"].rsplit("/", 1)[-1] for meta in answer["objects"]}
        below = {path.rstrip("/").rsplit("/", 1)[-1] for path in answer["common_prefixes"]}
        return _Listing(tuple(sorted(files | below)), frozenset(files))
    if isinstance(store, LocalStore):
        return await asyncio.to_thread(_local_listing, store.root / prefix)
    names = tuple(sorted([name async for name in store.list_dir(prefix)]))
    return _Listing(names, frozenset())


def _local_listing(directory: Path) -> _Listing:
    try:
        with os.scandir(directory) as entries:
            kinds = {entry.name: entry.is_dir() for entry in entries}
    except (FileNotFoundError, NotADirectoryError):
        return _Listing((), frozenset())
    return _Listing(tuple(sorted(kinds)), frozenset(n for n, is_dir in kinds.items() if not is_dir))


def _hdf5_members(root: Any) -> Members:
    def members(path: str) -> list[str] | None:
        node = root if not path else child(root, path)
        if node is None or not is_group(node):
            return None
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
