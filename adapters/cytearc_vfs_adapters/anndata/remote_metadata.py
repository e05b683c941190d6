"""The metadata of a remote AnnData Zarr container, fetched a level of the tree at a time.

The element layer walks a container through zarr's synchronous API: each
group's listing, then each member's documents, one request after another
(and zarr probes a Zarr v2 node for ``.zarray``, ``.zgroup`` and ``.zattrs``
each time it opens it). On object storage each is a round trip: listing
Wu 2020's 60 elements (``cytearc-vfs anndata ls``) took 137 of them, 7.5 s
at 25 ms a request, whether stored as Zarr v2 (548 requests) or v3 (192).

:func:`metadata_prefetched` reads the same documents breadth first
(:func:`~cytearc_vfs.read.anndata_tree.walk_tree`): the root's, then for
each level the listings of its groups and the documents of their members,
every request of a level at once (at most
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

from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

from cytearc_vfs.format.store_io import innermost_store
from cytearc_vfs.read.anndata_tree import ROOT_DOCUMENTS, fetched, node_documents, walk_tree
from cytearc_vfs.read.prefetch import MAX_IN_FLIGHT, PrefetchedStore

__all__ = ["metadata_prefetched", "tables_prefetched"]


def tables_prefetched(store: Store, features: str) -> Store:
    """``store`` with every object of the tables an import reads (``obs``, ``features``:
    ``var`` or ``raw/var``, and ``uns/cytearc``) fetched at once
    (:func:`cytearc_vfs.composite.anndata_columns.tables_prefetched`, what a
    composite's creation reads them through: by path, a level of the tables at a time,
    where the listings are refused); a local or in-memory store as it is."""
    from cytearc_vfs.composite.anndata_columns import tables_prefetched as prefetched

    inner = innermost_store(store)
    if isinstance(inner, LocalStore | MemoryStore) or not store.supports_listing:
        return store
    return sync(prefetched(store, features))


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
    documents = await fetched(store, ROOT_DOCUMENTS, gate)
    if node_documents(documents) is None:
        return store  # no group at the root: the caller says what is there
    directories = await walk_tree(store, documents, {"": None}, listed=True, limit=gate)
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
