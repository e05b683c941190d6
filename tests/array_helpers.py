"""Shared by the array-operation tests: a counting store, snapshots, reference reads."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore, WrapperStore

from cytearc_vfs.arrays.documents import JOURNAL_NAME, PROGRESS_NAME, STAGING_NAME

RESERVED = (JOURNAL_NAME, PROGRESS_NAME, STAGING_NAME)


class WriteInterruptedError(OSError):
    """Raised by :class:`CountingStore` in place of its ``fail_at``-th write."""


class CountingStore(WrapperStore[Store]):
    """A real store that counts gets, sets (with bytes) and deletes, and can fail one write.

    ``fail_at = n`` raises :class:`WriteInterruptedError` instead of the n-th set or
    delete, so everything before it happened and nothing after: the state
    a crash right after write n - 1 leaves.
    """

    def __init__(self, store: Store, fail_at: int | None = None) -> None:
        super().__init__(store)
        self.counts: Counter[str] = Counter()
        self.set_keys: list[str] = []
        self.deleted_keys: list[str] = []
        self.get_keys: list[str] = []
        self.bytes_set = 0
        self.fail_at = fail_at

    def _with_store(self, store: Store) -> CountingStore:
        return CountingStore(store, self.fail_at)

    def _write(self) -> None:
        writes = self.counts["set"] + self.counts["delete"]
        if self.fail_at is not None and writes + 1 >= self.fail_at:
            raise WriteInterruptedError(f"interrupted before write {writes + 1}")

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.counts["get"] += 1
        self.get_keys.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def set(self, key: str, value: Buffer) -> None:
        self._write()
        self.counts["set"] += 1
        self.set_keys.append(key)
        self.bytes_set += len(value)
        await self._store.set(key, value)

    async def delete(self, key: str) -> None:
        self._write()
        self.counts["delete"] += 1
        self.deleted_keys.append(key)
        await self._store.delete(key)

    def reset(self) -> None:
        """Forget the counts so far."""
        self.counts.clear()
        self.set_keys.clear()
        self.deleted_keys.clear()
        self.get_keys.clear()
        self.bytes_set = 0


def keys_of(store: Store, prefix: str = "") -> list[str]:
    """Every key under ``prefix``, sorted."""

    async def collect() -> list[str]:
        return sorted([key async for key in store.list_prefix(prefix)])

    return sync(collect())


def payloads(store: Store, prefix: str = "") -> dict[str, bytes]:
    """Every key under ``prefix`` (relative) with its bytes."""
    out: dict[str, bytes] = {}
    for key in keys_of(store, prefix):
        found = sync(store.get(key, prototype=default_buffer_prototype()))
        assert found is not None
        out[key[len(prefix) :]] = found.to_bytes()
    return out


def digest(data: bytes) -> str:
    """sha256 of a payload."""
    return hashlib.sha256(data).hexdigest()


def memory_copy(store: MemoryStore) -> MemoryStore:
    """An independent MemoryStore with the same keys and bytes."""
    return MemoryStore(store_dict=dict(store._store_dict))


def leftovers(store: Store, prefix: str = "") -> list[str]:
    """Keys only an unfinished operation leaves (journal, progress, staging)."""
    return [k for k in keys_of(store, prefix) if any(r in k for r in RESERVED)]


def expected_read(values: np.ndarray, fill: Any) -> np.ma.MaskedArray[Any, Any]:
    """What ``cytearc_vfs.arrays.read`` must return for stored ``values``."""
    mask = np.isnan(values) if isinstance(fill, float) and np.isnan(fill) else values == fill
    return np.ma.MaskedArray(values, mask=mask)


def same_masked(got: Any, expected: np.ma.MaskedArray[Any, Any]) -> bool:
    """Equal masks, and equal values wherever not masked."""
    got_mask = np.ma.getmaskarray(got)
    if got.shape != expected.shape or not np.array_equal(got_mask, np.ma.getmaskarray(expected)):
        return False
    keep = ~got_mask
    return bool(np.array_equal(np.asarray(got)[keep], np.asarray(expected)[keep]))


def open_plain(store: Store, path: str) -> zarr.Array[Any]:
    """The array as plain zarr-python opens it (read-only)."""
    return zarr.open_array(store, path=path, mode="r")
