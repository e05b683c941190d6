"""The part of a value that a zarr byte request asks for."""

from __future__ import annotations

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

__all__ = ["byte_slice"]


def byte_slice(size: int, byte_range: ByteRequest | None) -> slice:
    """The part of a ``size``-byte value that ``byte_range`` asks for.

    >>> byte_slice(10, None), byte_slice(10, RangeByteRequest(2, 5))
    (slice(0, 10, None), slice(2, 5, None))
    >>> byte_slice(10, OffsetByteRequest(7)), byte_slice(10, SuffixByteRequest(4))
    (slice(7, 10, None), slice(6, 10, None))
    >>> byte_slice(3, SuffixByteRequest(8))
    slice(0, 3, None)
    """
    if byte_range is None:
        return slice(0, size)
    if isinstance(byte_range, RangeByteRequest):
        return slice(min(byte_range.start, size), min(byte_range.end, size))
    if isinstance(byte_range, OffsetByteRequest):
        return slice(min(byte_range.offset, size), size)
    if isinstance(byte_range, SuffixByteRequest):
        return slice(max(0, size - byte_range.suffix), size)
    raise TypeError(f"unknown byte range {byte_range!r}")
