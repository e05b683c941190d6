"""Store bases that check every key and prefix (:mod:`.store_keys`) before any I/O.

:class:`KeyCheckedStore` is the base of the stores that implement the
contract themselves (composite, mount): it gives them the checks and the
multi-key reads that must check every key first. Their own methods call
``self._check_key`` / ``self._check_prefix`` on entry.

:class:`KeyCheckedWrapperStore` is zarr's ``WrapperStore`` made safe. zarr's
wrapper forwards every method to the wrapped store, so a wrapper that
overrides only ``get`` would still pass ``exists("../x")`` or
``list_dir("/")`` straight through. This base checks the key or prefix of
every method that takes one, then forwards; the package's wrappers subclass
it, and a method they override checks its key itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from .store_keys import check_key, check_prefix

__all__ = ["KeyCheckedStore", "KeyCheckedWrapperStore"]


class KeyCheckedStore(Store):
    """A ``Store`` base whose subclasses check every key on entry (see the module)."""

    def _check_key(self, key: str, op: str) -> str:
        return check_key(key, op=op, where=str(self))

    def _check_prefix(self, prefix: str, op: str) -> str:
        return check_prefix(prefix, op=op, where=str(self))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        # every key is checked before any is fetched
        requests = [(self._check_key(key, "get_partial_values"), rng) for key, rng in key_ranges]
        return [await self.get(key, prototype, byte_range) for key, byte_range in requests]

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        # Checked here too: the coalescer would report a refusal from get()
        # inside an exception group, as if it were a failed read.
        self._check_key(key, "get_ranges")
        async for batch in super().get_ranges(key, byte_ranges, prototype=prototype, **options):
            yield batch


class KeyCheckedWrapperStore(KeyCheckedStore, WrapperStore[Store]):
    """A ``WrapperStore`` whose every key and prefix passes :func:`check_key` /
    :func:`check_prefix` before it reaches the wrapped store.

    ``get_ranges`` and ``get_partial_values`` come from
    :class:`KeyCheckedStore`: they check, then read through ``super()``
    (the wrapped store's ranged reads) and ``self.get``.
    """

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await super().get(self._check_key(key, "get"), prototype, byte_range)

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        checked = [(self._check_key(key, "get"), proto, rng) for key, proto, rng in requests]
        async for item in super()._get_many(checked):
            yield item

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        return super().get_sync(
            self._check_key(key, "get_sync"), prototype=prototype, byte_range=byte_range
        )

    async def exists(self, key: str) -> bool:
        return await super().exists(self._check_key(key, "exists"))

    async def getsize(self, key: str) -> int:
        # zarr's WrapperStore leaves getsize to Store's default, which reads the
        # whole value: an open's shard-size check then read every shard
        return await self._store.getsize(self._check_key(key, "getsize"))

    async def set(self, key: str, value: Buffer) -> None:
        await super().set(self._check_key(key, "set"), value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await super().set_if_not_exists(self._check_key(key, "set_if_not_exists"), value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await super()._set_many([(self._check_key(key, "set"), value) for key, value in values])

    def set_sync(self, key: str, value: Buffer) -> None:
        super().set_sync(self._check_key(key, "set_sync"), value)

    async def delete(self, key: str) -> None:
        await super().delete(self._check_key(key, "delete"))

    def delete_sync(self, key: str) -> None:
        super().delete_sync(self._check_key(key, "delete_sync"))

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return super().list_prefix(self._check_prefix(prefix, "list_prefix"))

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        return super().list_dir(self._check_prefix(prefix, "list_dir"))

    async def is_empty(self, prefix: str) -> bool:
        return await super().is_empty(self._check_prefix(prefix, "is_empty"))

    async def delete_dir(self, prefix: str) -> None:
        await super().delete_dir(self._check_prefix(prefix, "delete_dir"))

    async def clear(self) -> None:
        # clear() is delete_dir(""): the whole wrapped store, refused like it
        self._check_prefix("", "clear")
