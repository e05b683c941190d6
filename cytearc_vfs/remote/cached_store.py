"""A remote source store read through its open store's :class:`SourceCache`.

What is cached is what the spec names: the shard-index suffixes of sharded
reads (a ``SuffixByteRequest`` of a chunk key) and the encoded shards that a
read covers densely (a chunk key fetched whole: the gather reader fetches a
whole shard only when most of it is needed), and the byte ranges of a
shard a sparse read fetched (its coalesced requests, each kept under its
exact range), so a read repeated after it costs no request. Range reads of
a shard that is cached whole are served from it; every metadata document
goes to the source. Local and in-memory stores are never wrapped: their
reads cost less than a cache's.

Below the cache, a :class:`~cytearc_vfs.remote.pinned_store.PinnedSourceStore` pins
each object's version at its first read, and the version is part of the
cache key, so an entry is only ever served for the version this open store
pinned.
"""

from __future__ import annotations

import asyncio
from typing import Any

from zarr.abc.store import (
    ByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, MemoryStore

from ..format.chunk_keys import is_chunk_key
from .pinned_store import PinnedSourceStore
from .source_cache import SourceCache
from .source_read_wrapper import Batches, Ranges, SourceReadWrapper, check_byte_range

__all__ = ["CachedSourceStore", "cached_source", "forget_failed", "source_cache_of"]


def cached_source(
    store: Store, cache: SourceCache | None, name: str, *, where: str | None = None
) -> Store:
    """``store`` read through ``cache`` when it is remote (else ``store`` itself).

    ``name`` keeps the keys of the open store's sources apart; ``name`` and
    ``where`` (the source's location) name the source in errors. A remote
    store is pinned (:class:`PinnedSourceStore`) whether or not there is a cache.
    """
    if isinstance(store, LocalStore | MemoryStore | CachedSourceStore | PinnedSourceStore):
        return store
    pinned = PinnedSourceStore(store, name=name, where=where or str(store))
    return pinned if cache is None else CachedSourceStore(pinned, cache, name)


def source_cache_of(store: Store) -> SourceCache | None:
    """The cache ``store`` reads through, if it is a :class:`CachedSourceStore`."""
    return store.cache if isinstance(store, CachedSourceStore) else None


def forget_failed(store: Store, key: str) -> bool:
    """Before a read of ``key`` whose bytes failed their check is repeated: drop what the
    source cache ``store`` reads through (through ``wrapped``) holds of ``key``, so the
    repeat fetches from the source. Returns whether ``store`` reads a remote source
    (pinned or cached): only then can a second fetch bring other bytes.

    The object's pin stays: a check that fails says the bytes were damaged on
    the way or at the source, not that the object has another version (a
    replaced object fails its ``If-Match`` before any bytes arrive).
    """
    remote = False
    while True:
        if isinstance(store, CachedSourceStore):
            store.discard(key)
            return True
        remote = remote or isinstance(store, PinnedSourceStore)
        inner = getattr(store, "wrapped", None)
        if not isinstance(inner, Store) or inner is store:
            return remote
        store = inner


class CachedSourceStore(SourceReadWrapper):
    """A read-only remote store whose shards and shard indexes go through a cache."""

    def __init__(self, store: Store, cache: SourceCache, name: str) -> None:
        super().__init__(store)
        self._cache = cache
        self._name = name

    @property
    def cache(self) -> SourceCache:
        """The cache it reads through."""
        return self._cache

    def _with_store(self, store: Store) -> CachedSourceStore:
        return type(self)(store, self._cache, self._name)

    def discard(self, key: str) -> int:
        """Drop every cached part of ``key`` (whole, index suffixes, ranges, any version);
        returns how many entries went. See :func:`forget_failed`."""
        return self._cache.discard(f"{self._name}\0{key}\0")

    def __reduce__(self) -> tuple[Any, ...]:
        # A cache is a directory of this process: a copy elsewhere (a dask
        # worker) reads the source, and its own store makes its own cache.
        return (_plain, (self._store,))

    def _key(self, key: str, suffix: int | None = None, part: str | None = None) -> str:
        # the pinned version is part of the key: a replaced object never finds
        # the entry of the version read before
        token = self._store.token(key) if isinstance(self._store, PinnedSourceStore) else None
        whole = f"{self._name}\0{key}\0{token}"
        if part is not None:
            return f"{whole}\0{part}"
        return whole if suffix is None else f"{whole}\0suffix={suffix}"

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if not is_chunk_key(key):
            return await self._store.get(key, prototype, byte_range)
        check_byte_range(byte_range)
        if byte_range is None:
            return await self._through(key, None, prototype, None)
        if isinstance(byte_range, SuffixByteRequest):
            served = self._from_whole(key, -byte_range.suffix, None, prototype)
            if served is not None:
                return served
            return await self._through(key, byte_range.suffix, prototype, byte_range)
        if isinstance(byte_range, RangeByteRequest):
            served = self._from_whole(key, byte_range.start, byte_range.end, prototype)
            if served is not None:
                return served
            return await self._through(key, None, prototype, byte_range, _part(byte_range))
        served = self._from_whole(key, byte_range.offset, None, prototype)
        if served is not None:
            return served
        return await self._store.get(key, prototype, byte_range)

    async def _through(
        self,
        key: str,
        suffix: int | None,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None,
        part: str | None = None,
    ) -> Buffer | None:
        claimed = self._key(key, suffix, part)
        running = self._cache.begin_fetch(claimed)
        if running is not None:
            # the same bytes are being fetched for another reader: wait for them (shielded:
            # a waiter cancelled must not cancel the fetch the others wait for)
            fetched = await asyncio.shield(asyncio.wrap_future(running))
            if fetched is not None:
                self._cache.shared_hit()
                return None if fetched[0] is None else prototype.buffer.from_bytes(fetched[0])
            return (await self._fetch(key, suffix, prototype, byte_range, part))[0]  # it failed
        outcome: tuple[bytes | None] | None = None
        try:
            data = self._cache.get(claimed)
            if data is not None:
                outcome = (data,)
                return prototype.buffer.from_bytes(data)
            buffer, raw = await self._fetch(key, suffix, prototype, byte_range, part)
            outcome = (raw,)
            return buffer
        finally:
            self._cache.end_fetch(claimed, outcome)

    async def _fetch(
        self,
        key: str,
        suffix: int | None,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None,
        part: str | None,
    ) -> tuple[Buffer | None, bytes | None]:
        """The source's bytes of ``key`` (and their copy, which the cache keeps)."""
        buffer = await self._store.get(key, prototype, byte_range)
        if buffer is None:
            return None, None
        raw = buffer.to_bytes()
        # keyed after the fetch: a first read has just pinned the version
        self._cache.put(self._key(key, suffix, part), raw)
        return buffer, raw

    def _from_whole(
        self, key: str, start: int, stop: int | None, prototype: BufferPrototype
    ) -> Buffer | None:
        """Bytes of a shard cached whole (``start`` < 0: from the end), else ``None``."""
        whole = self._key(key)
        size = self._cache.size(whole)
        if size is None:
            return None
        first = max(0, size + start) if start < 0 else start
        data = self._cache.get_range(whole, first, size if stop is None else stop)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def _get_ranges(
        self, key: str, byte_ranges: Ranges, prototype: BufferPrototype, limits: dict[str, int]
    ) -> Batches:
        if not is_chunk_key(key):
            async for batch in self._store.get_ranges(
                key, byte_ranges, prototype=prototype, **limits
            ):
                yield batch
            return
        if self._cache.size(self._key(key)) is not None:
            # the shard is cached whole: every range from it, one batch
            served = [(i, await self.get(key, prototype, rng)) for i, rng in enumerate(byte_ranges)]
            if all(buffer is not None for _, buffer in served):
                yield served
                return
        # Inner chunks of a shard read by range (an AnnData source's sharded arrays, read
        # as zarr's sharding codec reads them): each range is kept under its exact bounds,
        # as get() keeps a sparse read's ranges, so a read repeated costs no request
        held: list[tuple[int, Buffer | None]] = []
        wanted: list[tuple[int, ByteRequest | None]] = []
        for i, rng in enumerate(byte_ranges):
            data = self._cache.get(self._key(key, None, _part(rng))) if _part(rng) else None
            if data is None:
                wanted.append((i, rng))
            else:
                held.append((i, prototype.buffer.from_bytes(data)))
        if held:
            yield held
        if not wanted:
            return
        requests = [rng for _, rng in wanted]
        async for batch in self._store.get_ranges(key, requests, prototype=prototype, **limits):
            placed: list[tuple[int, Buffer | None]] = []
            for number, buffer in batch:
                position, rng = wanted[number]
                part = _part(rng)
                if buffer is not None and part:
                    # keyed after the fetch: a first read has just pinned the version
                    self._cache.put(self._key(key, None, part), buffer.to_bytes())
                placed.append((position, buffer))
            yield placed


def _part(byte_range: ByteRequest | None) -> str:
    """The cache entry's name of a bounded range of a chunk key (``""``: not kept, as a
    suffix or an offset read through get_ranges is not)."""
    if isinstance(byte_range, RangeByteRequest):
        return f"range={byte_range.start}-{byte_range.end}"
    return ""


def _plain(store: Store) -> Store:
    return store
