"""A source that goes between a tree's two questions about a key is a failure.

``mount-fs`` (``StoreTree.entry``) and ``serve``'s listings ask ``exists``,
then ``getsize``; a ``FileNotFoundError`` from the second meant "deleted
meanwhile", so the name was left out. A mount raises ``SourceGoneError`` (a
``FileNotFoundError``) for a chunk of a source that went: taken for "deleted
meanwhile", it was ``ENOENT`` and a listing without it, where every other
read of a gone source fails (``EIO``, ``502``), and a client reads a missing
chunk as zeros. Found by the review of the mount's gone-source check; the
window is reproduced here by a store whose ``getsize`` fails that way.
"""

from __future__ import annotations

import asyncio

import pytest
from cytearc_vfs_adapters.fuse.tree import StoreTree
from cytearc_vfs_adapters.serve.directories import DirectoryAnswers
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore, WrapperStore

from cytearc_vfs.errors import SourceGoneError

KEY = "art/data/c/0"


class GoneAtSize(WrapperStore[Store]):
    """``exists`` says yes; ``getsize`` finds the source gone (or the key deleted)."""

    def __init__(self, store: Store, error: FileNotFoundError) -> None:
        super().__init__(store)
        self.error = error

    async def getsize(self, key: str) -> int:
        if key == KEY:
            raise self.error
        return await super().getsize(key)


def _store(error: FileNotFoundError) -> GoneAtSize:
    memory = MemoryStore()
    sync(memory.set(KEY, default_buffer_prototype().buffer.from_bytes(b"1234")))
    return GoneAtSize(memory, error)


def test_the_tree_fails_for_a_source_gone_and_leaves_out_a_key_deleted() -> None:
    gone = _store(SourceGoneError("the source of the mount is gone"))
    with pytest.raises(SourceGoneError):
        sync(StoreTree(gone).entry(KEY))
    deleted = _store(FileNotFoundError(KEY))
    assert sync(StoreTree(deleted).entry(KEY)) is None


def test_a_listing_fails_for_a_source_gone_and_lists_a_key_deleted_as_what_is_left() -> None:
    async def entries(store: Store) -> list[object]:
        answers = DirectoryAnswers(store, asyncio.Semaphore(4), "now")
        return await answers._children("art/data/c", ["0"])

    with pytest.raises(SourceGoneError):
        sync(entries(_store(SourceGoneError("the source of the mount is gone"))))
    (entry,) = sync(entries(_store(FileNotFoundError(KEY))))
    assert getattr(entry, "size", "?") is None  # listed as a directory or nothing
