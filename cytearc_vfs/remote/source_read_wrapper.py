"""The read path over a source store that every read of it must go through.

:class:`SourceReadWrapper` is the base of the wrappers a composite's or a
mount's source is read through (the pins, :mod:`.pinned_store`; the bounded
cache, :mod:`.cached_store`): it routes zarr's synchronous paths and
multi-range reads through ``get``, so no read goes around them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Self

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from ..format.gathering import gather_all
from ..format.key_checked import KeyCheckedWrapperStore

__all__ = ["Batches", "Ranges", "SourceReadWrapper", "check_byte_range", "obstore_range"]

Ranges = Sequence[ByteRequest | None]
#: What ``get_ranges`` yields: batches of (input index, bytes), one per fetch.
Batches = AsyncIterator[Sequence[tuple[int, Buffer | None]]]


def check_byte_range(byte_range: object) -> None:
    """Refuse what is not a zarr byte request, in zarr's own words (its store contract checks them)."""
    if byte_range is not None and not isinstance(
        byte_range, (RangeByteRequest, OffsetByteRequest, SuffixByteRequest)
    ):
        raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def obstore_range(byte_range: ByteRequest | None) -> Any:
    """``byte_range`` as obstore's ``get`` takes its ``range`` option (``None``: whole)."""
    if byte_range is None:
        return None
    if isinstance(byte_range, RangeByteRequest):
        return (byte_range.start, byte_range.end)
    if isinstance(byte_range, OffsetByteRequest):
        return {"offset": byte_range.offset}
    if isinstance(byte_range, SuffixByteRequest):
        return {"suffix": byte_range.suffix}
    raise TypeError(f"unsupported byte range {byte_range!r}")


class SourceReadWrapper(KeyCheckedWrapperStore):
    """A read path over a source store that every read must go through.

    zarr's synchronous paths and the backend's own multi-range reads would go
    around the wrapper, so both are routed through :meth:`get`; subclasses
    change how ranges are fetched in :meth:`_get_ranges`. Every key is
    checked first (:class:`~cytearc_vfs.format.key_checked.KeyCheckedWrapperStore`);
    subclasses that override :meth:`get` check it themselves.
    """

    @property
    def wrapped(self) -> Store:
        """The store underneath."""
        return self._store

    @property
    def _supports_sync_io(self) -> bool:
        return False

    async def getsize(self, key: str) -> int:
        # the size of what this read path serves (its pins, its cache): read through it
        return await Store.getsize(self, key)

    def with_read_only(self, read_only: bool = False) -> Self:
        """The same view; a writable form is refused (writes would go around the read path)."""
        if not read_only:
            raise NotImplementedError(
                f"with_read_only is not implemented for the {type(self)} store type. A "
                "source's read path is read-only (writes would go around its pins and "
                "cache); open the source itself to write to it"
            )
        return self

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        # every key is checked before any is fetched
        requests = [(self._check_key(key, "get_partial_values"), rng) for key, rng in key_ranges]
        return list(await gather_all(*(self.get(key, prototype, rng) for key, rng in requests)))

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        self._check_key(key, "get_ranges")
        # zarr passes max_concurrency, max_gap_bytes and max_coalesced_bytes
        limits = {name: value for name, value in options.items() if value is not None}
        async for batch in self._get_ranges(key, byte_ranges, prototype, limits):
            yield batch

    async def _get_ranges(
        self, key: str, byte_ranges: Ranges, prototype: BufferPrototype, limits: dict[str, int]
    ) -> Batches:
        """Zarr's coalescer over :meth:`get` (what subclasses' reads must see)."""
        async for batch in Store.get_ranges(self, key, byte_ranges, prototype=prototype, **limits):
            yield batch
