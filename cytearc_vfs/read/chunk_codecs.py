"""How a stored chunk's bytes are decoded, for :mod:`.direct_chunks`.

One decoder per codec that :class:`~.direct_chunks.DirectChunks` reads
(Zarr v2 compressors ``blosc``, ``zstd``, ``gzip``, ``zlib`` or none; Zarr v3
``bytes`` then at most one of ``zstd``, ``gzip``, ``blosc``). Each decodes on
a decoding thread into that thread's reused buffer, stopping after the
wanted bytes where the codec streams (zstd, gzip, zlib).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numcodecs
import numpy as np
import numpy.typing as npt
import zstandard
from numcodecs import blosc
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

from ..errors import VfsError
from .decode_threads import thread_decompressor, thread_scratch

__all__ = ["ChunkDecodeError", "Decode", "v2_decode", "v3_decode"]


class ChunkDecodeError(VfsError, ValueError):
    """A stored chunk that its array's codec cannot decode (a damaged source)."""


# How a chunk's bytes are decoded: ``decode(data, nbytes)`` returns a byte
# array holding at least the decoded chunk's first ``nbytes`` bytes (the
# decoding thread's buffer, or ``data`` itself: valid until the thread's next
# decode).
Decode = Callable[[Any, int], npt.NDArray[np.uint8]]


def _zstd(data: Any, nbytes: int) -> npt.NDArray[np.uint8]:
    target = thread_scratch(nbytes, name="direct")
    view = memoryview(target)
    with thread_decompressor().stream_reader(data, read_across_frames=True) as reader:
        filled = 0
        while filled < nbytes:
            n = reader.readinto(view[filled:])
            if n == 0:
                raise zstandard.ZstdError(f"the chunk ends after {filled} bytes")
            filled += n
    return target


def _deflate(wbits: int) -> Decode:
    def decode(data: Any, nbytes: int) -> npt.NDArray[np.uint8]:
        inflated = zlib.decompressobj(wbits).decompress(data, nbytes)
        if len(inflated) < nbytes:
            raise zlib.error(f"the chunk ends after {len(inflated)} bytes")
        return np.frombuffer(inflated, dtype=np.uint8)

    return decode


def _blosc(data: Any, nbytes: int) -> npt.NDArray[np.uint8]:
    # blosc decodes whole chunks (its blocks are most of a chunk anyway)
    whole = int.from_bytes(bytes(data[4:8]), "little")  # the header's decoded size
    target = thread_scratch(whole, name="direct")
    blosc.decompress(data, target)
    return target


def _raw(data: Any, nbytes: int) -> npt.NDArray[np.uint8]:
    raw = np.frombuffer(data, dtype=np.uint8)
    if len(raw) < nbytes:
        raise ValueError(f"the chunk holds {len(raw)} bytes, not {nbytes}")
    return raw


def v2_decode(compressor: Any) -> Decode | None:
    """The decoder of a Zarr v2 ``compressor`` (``None``: not one decoded here)."""
    if compressor is None:
        return _raw
    if isinstance(compressor, numcodecs.Blosc):
        return _blosc
    if isinstance(compressor, numcodecs.Zstd):
        return _zstd
    if isinstance(compressor, numcodecs.GZip):
        return _deflate(16 + zlib.MAX_WBITS)
    if isinstance(compressor, numcodecs.Zlib):
        return _deflate(zlib.MAX_WBITS)
    return None


def v3_decode(codecs: tuple[Any, ...]) -> tuple[Decode, str | None] | None:
    """The decoder and byte order of ``bytes`` + at most one compressor."""
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    endian = codecs[0].endian
    if len(codecs) == 1:
        return _raw, endian
    compressor = codecs[1]
    if isinstance(compressor, ZstdCodec):
        return _zstd, endian
    if isinstance(compressor, GzipCodec):
        return _deflate(16 + zlib.MAX_WBITS), endian
    if isinstance(compressor, BloscCodec):
        return _blosc, endian
    return None
