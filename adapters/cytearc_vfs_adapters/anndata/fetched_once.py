"""A matrix element's chunk objects fetched once for a whole write.

``write_counts`` reads an AnnData matrix several times: the stored-chunk
check reads ``indptr``, the value scan reads every band before the
destination exists (the storage dtype depends on it), the write pass reads
every band again, and each further feature group of ``countsT`` reads them
once more; two bands that share a chunk each fetch it, and a band reading part
of a shard fetches its index first. On object storage each of those is a GET
of the same object (on a one-chunk v3 ``X``: ``indptr`` 4 times, ``data`` and
``indices`` 3 times).

:class:`KeptObjects` wraps the container's store for the element's arrays:
the first read of a chunk object (whatever byte range it asks) fetches the
whole object once and keeps it in a temporary directory; every later read,
of any range, is served from there. An object found absent is remembered as
absent. Memory holds one object per request in flight, as a whole-shard read
does; the directory holds at most the element's stored (compressed) bytes and
is removed with the element (or when the write releases it); it is a source
cache directory with an owner record (:mod:`cytearc_vfs.remote.cache_owners`),
so a process killed before its cleanup leaves it to the next sweep. A shard too
large to fetch whole (:data:`KEPT_SHARD_BYTES`) is read by range as zarr reads
it, but its index is fetched once. Documents (``zarr.json``, ``.zarray``...) are
not kept: they were read when the container opened.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import ByteRequest, Store, SuffixByteRequest
from zarr.core.array import AsyncArray
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore, StorePath

from cytearc_vfs.format.key_checked import KeyCheckedWrapperStore
from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS
from cytearc_vfs.remote.cache_owners import CACHE_PREFIX, sweep_orphans, write_owner

__all__ = ["KEPT_SHARD_BYTES", "KeptObjects", "kept_array", "kept_whole", "keeps_fetched"]

#: The largest shard (decoded bytes) fetched whole to be kept: zarr itself fetches up
#: to 16 MiB in one request when it merges the ranges of a shard's inner chunks. The
#: inner chunks of a larger shard are read by range, as without keeping (a band that
#: shares such a shard with the next one reads its index and chunks again).
KEPT_SHARD_BYTES = 16 << 20


class KeptObjects(KeyCheckedWrapperStore):
    """``store`` with every object under ``prefixes`` (chunk keys, not documents)
    fetched whole once and kept in a temporary directory until this store is
    collected (or :meth:`discard`). Every key is checked before any I/O, as in every
    store of the package; a temporary directory that runs out of room stops the keeping
    (reads then go to the wrapped store, as without it), never the write."""

    def __init__(self, store: Store, prefixes: Iterable[str], indexed: Iterable[str] = ()) -> None:
        super().__init__(store)
        self._prefixes = tuple(f"{prefix.strip('/')}/" for prefix in prefixes)
        self._indexed = tuple(f"{prefix.strip('/')}/" for prefix in indexed)
        #: the shard indexes (zarr's suffix reads) of shards too large to keep whole,
        #: by key and length: 16 bytes an inner chunk, kept in memory
        self._indexes: dict[tuple[str, int], bytes | None] = {}
        self._directory: str | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._kept: LocalStore | None = None
        #: keys fetched (True: kept on disk; False: absent from the store)
        self._fetched: dict[str, bool] = {}
        #: fetches in flight, so that two reads of one key at once make one request
        self._pending: dict[str, asyncio.Future[bool]] = {}
        self.fetches = 0
        """Objects fetched from the wrapped store to be kept."""
        self.start()

    @property
    def _supports_sync_io(self) -> bool:
        # the synchronous surface would reach the wrapped store around the kept copies
        return False

    def _with_store(self, store: Store) -> KeptObjects:
        raise NotImplementedError("a store of kept objects is not reopened")

    def start(self) -> None:
        """Keep the objects fetched from now on (again, after :meth:`discard`)."""
        if self._directory is None:
            # a source cache directory as the remote shard cache's: owned, so that
            # the next one swept removes it when this process was killed meanwhile
            sweep_orphans()
            self._directory = tempfile.mkdtemp(prefix=CACHE_PREFIX)
            write_owner(self._directory)
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._directory, True)
            self._kept = LocalStore(self._directory)

    def discard(self) -> None:
        """Remove the kept objects now (else when this store is collected); reads pass
        through to the wrapped store until :meth:`start`."""
        if self._finalizer is not None:
            self._finalizer()
        self._directory = self._finalizer = self._kept = None
        self._fetched.clear()
        self._indexes.clear()

    def keeps(self, key: str) -> bool:
        """Whether ``key`` is one of the objects kept (a chunk under a prefix)."""
        return (
            self._directory is not None
            and key.startswith(self._prefixes)
            and key.rsplit("/", 1)[-1] not in METADATA_DOCUMENTS
        )

    async def _fetch(self, key: str) -> bool:
        kept = self._kept
        found = await self._store.get(key, default_buffer_prototype())
        self.fetches += 1
        if found is not None and kept is not None:
            try:
                await kept.set(key, found)
            except OSError:
                # the temporary directory is full (or gone): keeping is a saving, not
                # the write's business; the objects are read from the store from now on
                self.discard()
        return found is not None

    async def _read(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        kept = self._kept
        found = None if kept is None else await kept.get(key, prototype, byte_range)
        # discarded (or started anew) while it was fetched: read it from the store
        return await self._store.get(key, prototype, byte_range) if found is None else found

    async def _present(self, key: str) -> bool:
        """Whether ``key`` is stored, fetching it whole the first time it is asked."""
        known = self._fetched.get(key)
        if known is not None:
            return known
        pending = self._pending.get(key)
        if pending is None:
            kept = self._kept
            pending = asyncio.ensure_future(self._fetch(key))
            self._pending[key] = pending
            try:
                stored = await pending
            finally:
                # a failed fetch is asked again by the next read
                del self._pending[key]
            if self._kept is kept:
                self._fetched[key] = stored
            return stored
        return await asyncio.shield(pending)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if not self.keeps(key):
            if isinstance(byte_range, SuffixByteRequest) and self._indexes_of(key):
                return await self._shard_index(key, prototype, byte_range)
            return await self._store.get(key, prototype, byte_range)
        if not await self._present(key):
            return None
        return await self._read(key, prototype, byte_range)

    def _indexes_of(self, key: str) -> bool:
        return self._directory is not None and key.startswith(self._indexed)

    async def _shard_index(
        self, key: str, prototype: BufferPrototype, byte_range: SuffixByteRequest
    ) -> Buffer | None:
        """The index of a shard too large to keep, fetched once (each band and pass that
        reads part of the shard asks for it)."""
        name = (key, byte_range.suffix)
        if name not in self._indexes:
            found = await self._store.get(key, prototype, byte_range)
            self._indexes[name] = None if found is None else found.to_bytes()
            return found
        index = self._indexes[name]
        return None if index is None else prototype.buffer.from_bytes(index)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
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
        # the sharding codec reads inner chunks here, not through get
        if not self.keeps(key):
            async for group in super().get_ranges(key, byte_ranges, prototype=prototype, **options):
                yield group
            return
        if not await self._present(key):
            yield [(index, None) for index in range(len(byte_ranges))]
            return
        for index, rng in enumerate(byte_ranges):
            yield [(index, await self._read(key, prototype, rng))]

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def keeps_fetched(array: Any) -> bool:
    """Whether reads of ``array`` are worth keeping: a zarr array on a store other than
    a local directory or memory (an HDF5 dataset, a local file, are read in place)."""
    if not isinstance(array, zarr.Array):
        return False
    return not isinstance(array.store_path.store, (LocalStore, MemoryStore, KeptObjects))


def kept_whole(array: Any) -> bool:
    """Whether ``array``'s objects are fetched whole to be kept: every chunk of an
    unsharded array (zarr reads it whole anyway), a shard of at most
    :data:`KEPT_SHARD_BYTES` decoded."""
    shards = array.shards
    if shards is None:
        return True
    return bool(int(np.prod(shards)) * np.dtype(array.dtype).itemsize <= KEPT_SHARD_BYTES)


def kept_array(array: Any, kept: KeptObjects) -> Any:
    """``array`` (a zarr array, or a container's, which names its location) reading its
    chunks through ``kept``."""
    current = array.async_array
    rebound = AsyncArray(
        metadata=current.metadata,
        store_path=StorePath(kept, array.store_path.path),
        config=current.config,
    )
    where = getattr(array, "where", None)
    return zarr.Array(rebound) if where is None else type(array)(rebound, where)
