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

A caller that reads the store in one go after opening it (an export) can
also have the chunks of named arrays that the open reads handed on
(:meth:`RememberedReads.holding`): a composite's and a mount's open reads
their whole ``ids`` arrays to check their fingerprints, and the export's
tables read the same chunks next. Each chunk kept is given to the next read
of it and then dropped, so these bytes are held only between the two reads,
and the tables get exactly the ids the open verified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from ..format.key_checked import KeyCheckedWrapperStore

__all__ = ["RememberedReads"]

#: The documents remembered: Zarr v3 metadata (small, and read again by every check).
_DOCUMENT = "zarr.json"
#: What :meth:`RememberedReads._handed_on` finds for a chunk it does not hold.
_NOT_HELD = b"\0not held"


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
        # (see holding) the arrays whose chunk reads are kept, while the open runs
        self._holding: tuple[str, ...] = ()
        self._held: dict[tuple[str, ByteRequest | None], bytes | None] = {}

    def _with_store(self, store: Store) -> RememberedReads:
        return type(self)(store)

    @property
    def wrapped(self) -> Store:
        """The store underneath."""
        return self._store

    @contextmanager
    def holding(self, arrays: Iterable[str]) -> Iterator[None]:
        """Keep what is read of the chunks of ``arrays`` (paths of arrays) inside
        the block; after it, each kept read is handed to the next read of the same
        key and byte range, once, and dropped. Nothing read after the block is kept.

        For a caller that reads those chunks again right after the open (an
        export's tables read the ids the open's checks read): they are then
        fetched once, and the chunks are held between the two reads only.
        """
        self._holding = tuple(array.rstrip("/") + "/" for array in arrays)
        try:
            yield
        finally:
            self._holding = ()

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if not key.endswith(_DOCUMENT) and (self._held or self._holding):
            return await self._handed_on(key, prototype, byte_range)
        if byte_range is not None or not key.endswith(_DOCUMENT):
            return await self._store.get(key, prototype, byte_range)
        if key not in self._documents:
            buffer = await self._store.get(key, prototype)
            self._documents[key] = None if buffer is None else buffer.to_bytes()
        data = self._documents[key]
        return None if data is None else prototype.buffer.from_bytes(data)

    async def _handed_on(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        """A chunk read: kept while :meth:`holding` says so, or the kept read handed on."""
        read = (key, byte_range)
        # taken in one step: a concurrent read of the same chunk fetches it instead
        data = self._held.pop(read, _NOT_HELD)
        if data is not _NOT_HELD:
            return None if data is None else prototype.buffer.from_bytes(data)
        buffer = await self._store.get(key, prototype, byte_range)
        if key.startswith(self._holding):  # (never for an empty tuple)
            self._held[read] = None if buffer is None else buffer.to_bytes()
        return buffer

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
