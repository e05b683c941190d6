"""The index of a ``sharding_indexed`` shard, as the direct chunk reads use it.

A shard holds its inner chunks and an index of ``(offset, nbytes)`` per
inner chunk (``2**64 - 1`` twice for a chunk not stored), at the shard's end
or start, optionally followed by a crc32c of its entries (Zarr v3 spec,
sharding codec). :class:`ShardIndexLayout` knows where an array's index is
and how long, and parses it, refusing a wrong length or checksum by naming
the shard (:class:`~cytearc_vfs.read.chunk_codecs.ChunkDecodeError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt
from zarr.abc.store import ByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

from ..errors import SourceUnavailableError
from .chunk_codecs import ChunkDecodeError

__all__ = ["MISSING", "ShardIndexLayout", "inner_chunk", "ranges_ignored"]

#: An index entry's offset (and length) for an inner chunk that is not stored.
MISSING = 2**64 - 1


@dataclass(frozen=True, slots=True)
class ShardIndexLayout:
    """Where a shard's inner chunks are listed."""

    per_shard: tuple[int, ...]
    """Inner chunks per shard along each dimension."""
    at_end: bool
    """The index follows the chunks (else it precedes them)."""
    checksum: bool
    """The index ends with a crc32c of its entries."""

    @classmethod
    def of(cls, codec: ShardingCodec, shard_shape: tuple[int, ...]) -> ShardIndexLayout | None:
        """The index layout of ``codec`` over shards of ``shard_shape``, or ``None`` when
        its index codecs are not ``bytes`` (little-endian) with an optional ``crc32c``."""
        index = tuple(codec.index_codecs)
        known = bool(
            index
            and isinstance(index[0], BytesCodec)
            and index[0].endian in (None, "little")
            and (len(index) == 1 or (len(index) == 2 and isinstance(index[1], Crc32cCodec)))
        )
        if not known:
            return None
        inner = tuple(int(c) for c in codec.chunk_shape)
        per_shard = tuple(s // c for s, c in zip(shard_shape, inner, strict=True))
        return cls(per_shard, codec.index_location == "end", len(index) == 2)

    @property
    def inner(self) -> int:
        """Inner chunks per shard."""
        return int(np.prod(self.per_shard))

    @property
    def index_bytes(self) -> int:
        """Bytes of the index: (offset, nbytes) per inner chunk, and the checksum."""
        return 16 * self.inner + 4 * self.checksum

    def request(self) -> ByteRequest:
        """The byte range of a shard that holds its index."""
        size = self.index_bytes
        return SuffixByteRequest(size) if self.at_end else RangeByteRequest(0, size)

    def index_in(self, whole: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The index bytes of a whole shard's bytes."""
        size = self.index_bytes
        return whole[-size:] if self.at_end else whole[:size]

    def parse(self, raw: npt.NDArray[Any], key: str) -> npt.NDArray[np.uint64]:
        """The ``(offset, nbytes)`` rows of the index bytes ``raw`` of shard ``key``."""
        data = bytes(raw)
        if len(data) > self.index_bytes:
            raise ranges_ignored(key, self.index_bytes, len(data))
        if len(data) != self.index_bytes:
            raise ChunkDecodeError(
                f"shard {key}: its index is {len(data)} bytes, not {self.index_bytes}; "
                "the shard is damaged (restore the source)"
            )
        entries = data[: 16 * self.inner]
        if self.checksum and google_crc32c.value(entries) != int.from_bytes(data[-4:], "little"):
            raise ChunkDecodeError(
                f"shard {key}: its index fails its crc32c checksum; the shard is damaged "
                "(restore the source)"
            )
        return np.frombuffer(entries, dtype="<u8").reshape(self.inner, 2)


def ranges_ignored(key: str, asked: int, got: int) -> SourceUnavailableError:
    """The refusal of a store that answered the read of ``asked`` bytes of ``key`` (a
    shard's index) with more (``got``): it ignores byte ranges, as a static HTTP server
    such as ``python -m http.server`` does. The shard is not damaged, so it is not
    said to be; and its whole bytes are not guessed at, because every later ranged
    read of the store would fetch whole shards too."""
    return SourceUnavailableError(
        f"shard {key}: the store answered a read of its {asked}-byte index with {got} bytes: "
        "it ignores byte ranges (HTTP Range requests), which reading a sharded array needs; "
        "serve the store with a server that honours them (cytearc-vfs serve, nginx, "
        "WsgiDAV; not python -m http.server)"
    )


def inner_chunk(whole: npt.NDArray[Any], entry: npt.NDArray[np.uint64]) -> Any:
    """The bytes of the inner chunk that index ``entry`` places in ``whole`` (``None``:
    not stored)."""
    offset, nbytes = int(entry[0]), int(entry[1])
    return None if offset == MISSING else whole[offset : offset + nbytes]
