"""A view of a store, for an open's checks, that reads each metadata document and listing once.

Opening a composite or a mount reads its own store's top several times:
``open_store`` reads the root document, lists the top level and reads each
child's document to learn what the store is, then the composite's (or the
mount's) verification reads the root again, fetches its own documents (the
same children among them) and lists the top level again for its tables.
On object storage each is a round trip (6 of the 26 requests of a remote
composite's open). Through this view each ``zarr.json`` and each listing is
fetched once for the whole open; everything else passes through.

It serves the open's checks: the store the open returns reads and writes
through the store itself. (A composite keeps the read-only view of its
verified documents, through which it opens its immutable mapping arrays;
that view may hold these documents too.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from ..format.key_checked import KeyCheckedWrapperStore

__all__ = ["RememberedReads"]

#: The documents remembered: Zarr v3 metadata (small, and read again by every check).
_DOCUMENT = "zarr.json"


class RememberedReads(KeyCheckedWrapperStore):
    """``store`` with its whole ``zarr.json`` reads and its listings remembered.

    The checks only read through it. It keeps the store's mode: a read-only
    copy of a writable local store would refuse a root that does not exist
    yet, where the store itself answers "no such key", which the checks name.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._documents: dict[str, bytes | None] = {}
        self._listings: dict[str, list[str]] = {}

    def _with_store(self, store: Store) -> RememberedReads:
        return type(self)(store)

    @property
    def wrapped(self) -> Store:
        """The store underneath."""
        return self._store

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if byte_range is not None or not key.endswith(_DOCUMENT):
            return await self._store.get(key, prototype, byte_range)
        if key not in self._documents:
            buffer = await self._store.get(key, prototype)
            self._documents[key] = None if buffer is None else buffer.to_bytes()
        data = self._documents[key]
        return None if data is None else prototype.buffer.from_bytes(data)

    async def exists(self, key: str) -> bool:
        self._check_key(key, "exists")
        if key in self._documents:  # a document read already says whether it is there
            return self._documents[key] is not None
        return await self._store.exists(key)

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        self._check_prefix(prefix, "list_dir")
        if prefix not in self._listings:
            self._listings[prefix] = [name async for name in self._store.list_dir(prefix)]
        for name in self._listings[prefix]:
            yield name

    def __repr__(self) -> str:
        return f"RememberedReads({self._store!r})"

    def __str__(self) -> str:
        return str(self._store)
