"""A remote source store read through its open store's :class:`SourceCache`.

What is cached is what the spec names: the shard-index suffixes of sharded
reads (a ``SuffixByteRequest`` of a chunk key) and the encoded shards that a
read covers densely (a chunk key fetched whole: the gather reader fetches a
whole shard only when most of it is needed). Range reads of a shard that is
cached whole are served from it; other range reads and every metadata
document go to the source. Local and in-memory stores are never wrapped:
their reads cost less than a cache's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from zarr.abc.store import ByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, MemoryStore

from .key_checked import KeyCheckedWrapperStore
from .source_cache import SourceCache

__all__ = ["CachedSourceStore", "cached_source", "source_cache_of"]


def cached_source(store: Store, cache: SourceCache | None, name: str) -> Store:
    """``store`` read through ``cache`` when it is remote (else ``store`` itself).

    ``name`` keeps the keys of the open store's sources apart.
    """
    if cache is None or isinstance(store, LocalStore | MemoryStore | CachedSourceStore):
        return store
    return CachedSourceStore(store, cache, name)


def source_cache_of(store: Store) -> SourceCache | None:
    """The cache ``store`` reads through, if it is a :class:`CachedSourceStore`."""
    return store.cache if isinstance(store, CachedSourceStore) else None


def _is_chunk(key: str) -> bool:
    # chunk keys of zarr v3's default encoding: <array>/c/<i>/<j>
    return key.startswith("c/") or "/c/" in key


class CachedSourceStore(KeyCheckedWrapperStore):
    """A read-only remote store whose shards and shard indexes go through a cache."""

    def __init__(self, store: Store, cache: SourceCache, name: str) -> None:
        super().__init__(store)
        self._cache = cache
        self._name = name

    @property
    def cache(self) -> SourceCache:
        """The cache it reads through."""
        return self._cache

    @property
    def wrapped(self) -> Store:
        """The source store underneath."""
        return self._store

    def _with_store(self, store: Store) -> CachedSourceStore:
        return type(self)(store, self._cache, self._name)

    def __reduce__(self) -> tuple[Any, ...]:
        # A cache is a directory of this process: a copy elsewhere (a dask
        # worker) reads the source, and its own store makes its own cache.
        return (_plain, (self._store,))

    @property
    def _supports_sync_io(self) -> bool:
        # zarr's synchronous paths would go around the cache
        return False

    def _key(self, key: str, suffix: int | None = None) -> str:
        whole = f"{self._name}\0{key}"
        return whole if suffix is None else f"{whole}\0suffix={suffix}"

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if not _is_chunk(key):
            return await self._store.get(key, prototype, byte_range)
        if byte_range is None:
            return await self._through(self._key(key), key, prototype, None)
        if isinstance(byte_range, SuffixByteRequest):
            served = self._from_whole(key, -byte_range.suffix, None, prototype)
            if served is not None:
                return served
            return await self._through(
                self._key(key, byte_range.suffix), key, prototype, byte_range
            )
        if isinstance(byte_range, RangeByteRequest):
            served = self._from_whole(key, byte_range.start, byte_range.end, prototype)
        else:
            served = self._from_whole(key, byte_range.offset, None, prototype)
        if served is not None:
            return served
        return await self._store.get(key, prototype, byte_range)

    async def _through(
        self, cache_key: str, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        data = self._cache.get(cache_key)
        if data is not None:
            return prototype.buffer.from_bytes(data)
        buffer = await self._store.get(key, prototype, byte_range)
        if buffer is not None:
            self._cache.put(cache_key, buffer.to_bytes())
        return buffer

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

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        # every key is checked before any is fetched
        requests = [(self._check_key(key, "get_partial_values"), rng) for key, rng in key_ranges]
        return list(await asyncio.gather(*(self.get(key, prototype, rng) for key, rng in requests)))

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        self._check_key(key, "get_ranges")
        if _is_chunk(key) and self._cache.size(self._key(key)) is not None:
            # the shard is cached whole: every range from it, one batch
            served = [(i, await self.get(key, prototype, rng)) for i, rng in enumerate(byte_ranges)]
            if all(buffer is not None for _, buffer in served):
                yield served
                return
        async for batch in super().get_ranges(key, byte_ranges, prototype=prototype, **options):
            yield batch


def _plain(store: Store) -> Store:
    return store
