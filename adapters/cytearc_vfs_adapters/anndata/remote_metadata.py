"""The metadata of a remote AnnData Zarr container, fetched a level of the tree at a time.

The element layer walks a container through zarr's synchronous API: each
group's listing, then each member's documents, one request after another
(and zarr probes a Zarr v2 node for ``.zarray``, ``.zgroup`` and ``.zattrs``
each time it opens it). On object storage each is a round trip: listing
Wu 2020's 60 elements (``cytearc-vfs anndata ls``) took 137 of them, 7.5 s
at 25 ms a request, whether stored as Zarr v2 (548 requests) or v3 (192).

:func:`metadata_prefetched` reads the same documents breadth first: the
root's, then for each level the listings of its groups and the documents of
their members, every request of a level at once (at most
:data:`~cytearc_vfs.read.prefetch.MAX_IN_FLIGHT` in flight). The tree's
depth bounds the round trips (about eight for an AnnData), not its size.
Only groups are listed, never an array's chunks, and no value is read; a
group whose encoding names its members (a sparse matrix, a categorical, a
nullable array) is not listed either, its members' documents are fetched
by name. :func:`~.nodes.open_container` walks so when asked
(``cytearc-vfs anndata ls``, which reads every element's metadata); an
import reads only some, and keeps its own listings. The
view it returns serves those documents and listings from memory; anything
else (the chunks, a key never fetched) goes to the store as before.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

from cytearc_vfs.format.store_io import innermost_store
from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS, key_problem
from cytearc_vfs.read.prefetch import MAX_IN_FLIGHT, PrefetchedStore

__all__ = ["metadata_prefetched", "tables_prefetched"]

#: The documents a Zarr v2 node may have: zarr asks for all three to open one.
_V2_NODE = (".zarray", ".zgroup", ".zattrs")
#: Levels below the root walked at most: a deeper tree (not an AnnData's) is read
#: below that level as before, document by document.
_MAX_DEPTH = 12
#: Groups whose members the spec names: fetched by name, without a listing (the
#: element layer opens them by name too). Every other group is listed.
_NAMED_MEMBERS = {
    "csr_matrix": ("indptr", "indices", "data"),
    "csc_matrix": ("indptr", "indices", "data"),
    "categorical": ("codes", "categories"),
    "nullable-integer": ("values", "mask"),
    "nullable-boolean": ("values", "mask"),
    "nullable-string-array": ("values", "mask"),
}


def tables_prefetched(store: Store, features: str) -> Store:
    """``store`` with every object of the tables an import reads (``obs``, ``features``:
    ``var`` or ``raw/var``, and ``uns/cytearc``) fetched at once
    (:func:`cytearc_vfs.composite.anndata_columns.tables_prefetched`, what a
    composite's creation reads them through); a local or in-memory store, and one whose
    listings are refused (``PermissionError``), as it is."""
    from cytearc_vfs.composite.anndata_columns import tables_prefetched as fetched

    inner = innermost_store(store)
    if isinstance(inner, LocalStore | MemoryStore) or not store.supports_listing:
        return store
    try:
        return sync(fetched(store, features))
    except PermissionError:
        # credentials that may read but not list (S3 without s3:ListBucket): the
        # tables are read by path, column by column, as before the prefetch
        return store


def metadata_prefetched(store: Store) -> Store:
    """``store`` with the metadata documents and group listings of the Zarr container at
    its root fetched level by level (see the module docstring); a local or in-memory
    store, one that cannot list, or one without a Zarr group at its root, as it is.

    The backend's errors (a missing bucket, an unreachable endpoint) are raised
    as they come, for the caller to name.
    """
    inner = innermost_store(store)
    if isinstance(inner, LocalStore | MemoryStore) or not store.supports_listing:
        return store
    return sync(_walked(store))


async def _walked(store: Store) -> Store:
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    prototype = default_buffer_prototype()
    documents: dict[str, bytes | None] = {}
    directories: dict[str, list[str]] = {}

    async def fetch(key: str) -> None:
        async with gate:
            buffer = await store.get(key, prototype)
        documents[key] = None if buffer is None else buffer.to_bytes()

    async def listed(prefix: str) -> None:
        async with gate:
            directories[prefix] = [name async for name in store.list_dir(prefix)]

    await asyncio.gather(*(fetch(name) for name in ("zarr.json", *_V2_NODE, ".zmetadata")))
    if documents["zarr.json"] is not None:
        node_documents: tuple[str, ...] = ("zarr.json",)
    elif documents[".zgroup"] is not None:
        node_documents = _V2_NODE
    else:
        return store  # no group at the root: the caller says what is there
    groups = [""] if _is_group(documents, "") else []
    for _ in range(_MAX_DEPTH):
        if not groups:
            break
        named = {group: _named_members(documents, group) for group in groups}
        await asyncio.gather(*(listed(group) for group in groups if named[group] is None))
        members = [
            f"{group}/{name}" if group else name
            for group in groups
            for name in (named[group] or directories[group])
            if name not in METADATA_DOCUMENTS
        ]
        # a member whose name no store of the package takes (a column named
        # 'CD4%2fCD8') is left to the element layer, which reports it as before
        members = [member for member in members if key_problem(f"{member}/zarr.json") is None]
        await asyncio.gather(
            *(fetch(f"{member}/{name}") for member in members for name in node_documents)
        )
        if node_documents == _V2_NODE:
            for member in members:
                documents[f"{member}/zarr.json"] = None  # a v2 container's node has none
        groups = [member for member in members if _is_group(documents, member)]
    return _WalkedMetadata(store, documents, directories=directories)


class _WalkedMetadata(PrefetchedStore):
    """The walk's documents and group listings; a key below a listed group whose
    member the listing did not show is absent, without a request (the element layer
    probes groups for members by name: ``codes``, ``values``, ``_index``)."""

    def _known_absent(self, key: str) -> bool:
        if super()._known_absent(key):
            return True
        segments = key.split("/")
        for depth in range(len(segments) - 1):
            listed = self._directories.get("/".join(segments[:depth]))
            if listed is not None and segments[depth] not in listed:
                return True
        return False


def _is_group(documents: dict[str, bytes | None], node: str) -> bool:
    """Whether the documents fetched for ``node`` make it a group (v3 ``node_type``, or a
    v2 ``.zgroup``)."""
    prefix = f"{node}/" if node else ""
    if documents.get(f"{prefix}.zgroup") is not None:
        return True
    parsed = _parsed(documents.get(f"{prefix}zarr.json"))
    return parsed.get("node_type") == "group"


def _named_members(documents: dict[str, bytes | None], group: str) -> tuple[str, ...] | None:
    """The members of ``group`` that its declared encoding names (``None``: list it)."""
    prefix = f"{group}/" if group else ""
    attributes: Any
    if documents.get(f"{prefix}.zgroup") is not None:
        attributes = _parsed(documents.get(f"{prefix}.zattrs"))
    else:
        attributes = _parsed(documents.get(f"{prefix}zarr.json")).get("attributes")
    if not isinstance(attributes, dict):
        return None
    return _NAMED_MEMBERS.get(str(attributes.get("encoding-type")))


def _parsed(document: bytes | None) -> dict[str, Any]:
    """A JSON object document's value (``{}``: absent, or not one; a damaged document is
    read again by the element layer, which says so)."""
    if document is None:
        return {}
    try:
        parsed: Any = json.loads(document)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
