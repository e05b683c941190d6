"""Counters of what a read costs: chunks decoded, bytes fetched, requests issued.

:class:`CountingStore` wraps a source store and counts every fetch that
reaches it, through ``get``, ``get_ranges`` and their sync forms (zarr reads
inner chunks of shards through ``get_ranges``, so a wrapper that counted only
``get`` would miss them). Tests assert on these counts, never on time.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any, NamedTuple

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from ..format.key_checked import KeyCheckedWrapperStore

__all__ = ["CountingStore", "ReadCounters", "ReaderStats"]


class ReaderStats(NamedTuple):
    """A snapshot of a reader's counters."""

    chunks_decoded: int
    """Source inner chunks decoded."""
    bytes_read: int
    """Bytes fetched from source stores."""
    requests: int
    """Fetches issued to source stores (a coalesced range read counts once)."""
    reads: int
    """Reader calls (``read`` or one batch of a stream)."""


class ReadCounters:
    """Thread-safe counters shared by a reader and its counting stores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks = 0
        self._bytes = 0
        self._requests = 0
        self._reads = 0

    def __getstate__(self) -> dict[str, int]:
        # a lock does not pickle: a copy (a dask worker's) counts on its own
        with self._lock:
            return {
                "chunks": self._chunks,
                "bytes": self._bytes,
                "requests": self._requests,
                "reads": self._reads,
            }

    def __setstate__(self, state: dict[str, int]) -> None:
        self._lock = threading.Lock()
        self._chunks = state["chunks"]
        self._bytes = state["bytes"]
        self._requests = state["requests"]
        self._reads = state["reads"]

    def add(self, *, chunks: int = 0, nbytes: int = 0, requests: int = 0, reads: int = 0) -> None:
        """Add to the counters (called after the I/O, never around it)."""
        with self._lock:
            self._chunks += chunks
            self._bytes += nbytes
            self._requests += requests
            self._reads += reads

    def snapshot(self) -> ReaderStats:
        """The current values."""
        with self._lock:
            return ReaderStats(self._chunks, self._bytes, self._requests, self._reads)

    def reset(self) -> None:
        """Set every counter to zero."""
        with self._lock:
            self._chunks = self._bytes = self._requests = self._reads = 0


class CountingStore(KeyCheckedWrapperStore):
    """A read-only view of a store that counts fetches and bytes into ``counters``."""

    def __init__(self, store: Store, counters: ReadCounters) -> None:
        super().__init__(store.with_read_only(True) if not store.read_only else store)
        self.counters = counters

    @property
    def wrapped(self) -> Store:
        """The store being counted."""
        return self._store

    def _with_store(self, store: Store) -> CountingStore:
        return type(self)(store, self.counters)

    def __eq__(self, value: object) -> bool:
        return isinstance(value, CountingStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash((type(self), id(self._store)))

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        buffer = await self._store.get(self._check_key(key, "get"), prototype, byte_range)
        self.counters.add(nbytes=len(buffer) if buffer is not None else 0, requests=1)
        return buffer

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        # Each yielded batch is one underlying fetch (the coalescer's unit).
        self._check_key(key, "get_ranges")
        async for batch in self._store.get_ranges(key, byte_ranges, prototype=prototype, **options):
            self.counters.add(
                nbytes=sum(len(buffer) for _, buffer in batch if buffer is not None), requests=1
            )
            yield batch

    async def getsize(self, key: str) -> int:
        size = await super().getsize(key)
        self.counters.add(requests=1)  # a size request reads no value bytes
        return size

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        buffer = super().get_sync(key, prototype=prototype, byte_range=byte_range)
        self.counters.add(nbytes=len(buffer) if buffer is not None else 0, requests=1)
        return buffer

    def get_ranges_sync(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> Sequence[tuple[int, Buffer | None]]:
        # The base implementation plans coalesced groups over our get_sync,
        # which counts each merged fetch once.
        self._check_key(key, "get_ranges_sync")
        return Store.get_ranges_sync(self, key, byte_ranges, prototype=prototype, **options)
