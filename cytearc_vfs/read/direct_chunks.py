"""Reading ranges of a 1-D zarr array by decoding its chunks directly.

An AnnData sparse element keeps its entries in two long 1-D arrays
(``indices`` and ``data``) whose chunks hold a hundred thousand entries or
more. A read of some rows needs a few short ranges of them; zarr decodes
every touched chunk and copies it into a result (and, for a slice, copies
every decoded value). :class:`DirectChunks` does less for the same bytes:
it fetches each touched chunk once through the store (the same requests
zarr makes: one per chunk file, or per shard, an index and the touched
inner chunks), decodes it with the array's own codec on the decoding
threads (:mod:`.decode_threads`: the codecs release the GIL) into a reused
buffer, stopping after the last wanted entry where the codec streams
(zstd, gzip, zlib), and copies only the wanted entries into the result.

It applies to 1-D numeric arrays stored as Zarr v2 (compressor ``blosc``,
``zstd``, ``gzip``, ``zlib`` or none; no filters) or Zarr v3 (``bytes``
then at most one of ``zstd``, ``gzip``, ``blosc``; or ``sharding_indexed``
whose inner chunks are so encoded and whose index is ``bytes`` with an
optional ``crc32c``). :func:`direct_chunks_for` returns ``None`` for any
other array, which callers then read through zarr's own pipeline.

Shard indexes are read once per reader and kept (a few bytes per inner
chunk); an index whose checksum fails is an error naming the shard.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
import numpy.typing as npt
import zstandard
from numcodecs import blosc
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype

from .decode_threads import hand_over, thread_decompressor, thread_scratch
from .prefetch import MAX_IN_FLIGHT

__all__ = ["ChunkPieces", "DirectChunks", "chunk_pieces", "direct_chunks_for"]

Indices = npt.NDArray[np.int64]
MISSING = 2**64 - 1

# How a chunk's bytes are decoded: ``(data, target)`` fills ``target`` (a
# byte view of the decoded chunk's first bytes) from ``data``.
Decode = Callable[[Any, memoryview], None]


def _zstd(data: Any, target: memoryview) -> None:
    with thread_decompressor().stream_reader(data, read_across_frames=True) as reader:
        filled = 0
        while filled < len(target):
            n = reader.readinto(target[filled:])
            if n == 0:
                raise zstandard.ZstdError(f"the chunk ends after {filled} bytes")
            filled += n


def _deflate(wbits: int) -> Decode:
    def decode(data: Any, target: memoryview) -> None:
        inflated = zlib.decompressobj(wbits).decompress(data, len(target))
        if len(inflated) < len(target):
            raise zlib.error(f"the chunk ends after {len(inflated)} bytes")
        target[:] = inflated

    return decode


def _blosc(data: Any, target: memoryview) -> None:
    # blosc decodes whole chunks; its blocks are most of a chunk anyway
    nbytes = int(np.frombuffer(bytes(data[4:8]), dtype="<u4")[0])
    whole = thread_scratch(nbytes, name="blosc")
    blosc.decompress(data, whole)
    target[:] = memoryview(whole)[: len(target)]


def _raw(data: Any, target: memoryview) -> None:
    target[:] = memoryview(data).cast("B")[: len(target)]


def _v2_decode(compressor: Any) -> Decode | None:
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


def _v3_decode(codecs: tuple[Any, ...]) -> tuple[Decode, str | None] | None:
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


@dataclass(frozen=True, slots=True)
class _Sharding:
    """Where a shard's inner chunks are."""

    per_shard: int
    """Inner chunks per shard."""
    at_end: bool
    """The index follows the chunks (else it precedes them)."""
    checksum: bool
    """The index ends with a crc32c of its entries."""

    @property
    def index_bytes(self) -> int:
        return 16 * self.per_shard + 4 * self.checksum


def direct_chunks_for(array: AsyncArray[Any]) -> DirectChunks | None:
    """A :class:`DirectChunks` of ``array``, or ``None`` when its layout or codecs are
    not among those it decodes (then zarr's pipeline reads it)."""
    if array.ndim != 1 or np.dtype(array.dtype).kind not in "biuf":
        return None
    metadata = array.metadata
    sharding: _Sharding | None = None
    if metadata.zarr_format == 2:
        if metadata.filters:
            return None
        decode = _v2_decode(metadata.compressor)
        wire = np.dtype(metadata.dtype.to_native_dtype())
        chunk = int(metadata.chunks[0])
    else:
        codecs = tuple(metadata.codecs)
        chunk = int(metadata.chunk_grid.chunk_shape[0])
        if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
            codec = codecs[0]
            index = tuple(codec.index_codecs)
            if not (
                index
                and isinstance(index[0], BytesCodec)
                and index[0].endian in (None, "little")
                and (len(index) == 1 or (len(index) == 2 and isinstance(index[1], Crc32cCodec)))
            ):
                return None
            inner = int(codec.chunk_shape[0])
            sharding = _Sharding(chunk // inner, codec.index_location == "end", len(index) == 2)
            chunk, codecs = inner, tuple(codec.codecs)
        found = _v3_decode(codecs)
        if found is None:
            return None
        decode, endian = found
        native = np.dtype(array.dtype)
        wire = native.newbyteorder("<" if endian in (None, "little") else ">")
    if decode is None:
        return None
    fill = metadata.fill_value
    return DirectChunks(array, decode, wire, chunk, sharding, 0 if fill is None else fill)


@dataclass(frozen=True, slots=True)
class ChunkPieces:
    """The pieces of some ranges of a 1-D array, grouped by the chunk holding them."""

    chunks: Indices
    """Touched chunks, ascending."""
    bounds: Indices
    """Where each chunk's pieces start in the piece arrays (and where the last ends)."""
    starts: Indices
    """Each piece's first position within its chunk."""
    ends: Indices
    """Each piece's end within its chunk."""
    targets: Indices
    """Where each piece goes in the concatenated result."""


def chunk_pieces(starts: Indices, ends: Indices, size: int) -> ChunkPieces:
    """Ranges ``[starts[i], ends[i])`` (ascending, disjoint, non-empty) cut at chunk edges.

    >>> p = chunk_pieces(np.array([2, 9]), np.array([5, 13]), 4)
    >>> p.chunks.tolist(), p.bounds.tolist(), p.starts.tolist(), p.ends.tolist()
    ([0, 1, 2, 3], [0, 1, 2, 3, 4], [2, 0, 1, 0], [4, 1, 4, 1])
    >>> p.targets.tolist()
    [0, 2, 3, 6]
    """
    first, last = starts // size, (ends - 1) // size
    counts = last - first + 1
    offsets = np.cumsum(counts) - counts
    n = int(counts.sum())
    owner = np.repeat(np.arange(len(starts)), counts)
    chunk = first[owner] + (np.arange(n, dtype=np.int64) - offsets[owner])
    lo = np.maximum(starts[owner], chunk * size)
    hi = np.minimum(ends[owner], (chunk + 1) * size)
    lengths = ends - starts
    targets = (np.cumsum(lengths) - lengths)[owner] + (lo - starts[owner])
    edges = np.flatnonzero(np.diff(chunk)) + 1
    bounds = np.concatenate(([0], edges, [n])).astype(np.int64)
    return ChunkPieces(chunk[bounds[:-1]], bounds, lo - chunk * size, hi - chunk * size, targets)


class DirectChunks:
    """Ranges of one 1-D array, each touched chunk fetched and decoded once per read."""

    def __init__(
        self,
        array: AsyncArray[Any],
        decode: Decode,
        wire: np.dtype,
        chunk: int,
        sharding: _Sharding | None,
        fill: Any,
    ) -> None:
        self._store = array.store_path.store
        self._path = array.store_path.path
        self._metadata = array.metadata
        self._decode = decode
        self.wire = wire
        self.dtype = np.dtype(array.dtype)
        self.size = chunk
        self.length = int(array.shape[0])
        self._sharding = sharding
        self._fill = fill
        # shard -> its index ((offset, nbytes) per inner chunk), kept: the
        # source's identity was checked at open and is pinned for its reads
        self._indexes: dict[int, npt.NDArray[np.uint64]] = {}
        # the last chunk of a batch, kept for the next batch of the same read
        self._kept: tuple[int, npt.NDArray[Any] | None] | None = None

    def _key(self, chunk: int) -> str:
        key = self._metadata.encode_chunk_key((chunk,))
        return f"{self._path}/{key}" if self._path else key

    async def read_ranges(
        self, starts: Indices, ends: Indices, *, keep_last: bool = False
    ) -> tuple[npt.NDArray[Any], int]:
        """The values at ``[starts[i], ends[i])`` (ascending, disjoint), concatenated,
        and the chunks decoded: each touched chunk once.

        With ``keep_last`` the last touched chunk is decoded whole and kept,
        and a next call whose first chunk it is reads it from memory: a read
        in consecutive batches decodes the chunk two batches share once.
        """
        nonempty = ends > starts
        starts, ends = starts[nonempty], ends[nonempty]
        out = np.empty(int((ends - starts).sum()), dtype=self.dtype)
        if not len(out):
            return out, 0
        pieces = chunk_pieces(starts, ends, self.size)

        def place(position: int, decoded: npt.NDArray[Any] | None) -> None:
            lo, hi = int(pieces.bounds[position]), int(pieces.bounds[position + 1])
            for a, b, t in zip(
                pieces.starts[lo:hi].tolist(),
                pieces.ends[lo:hi].tolist(),
                pieces.targets[lo:hi].tolist(),
                strict=True,
            ):
                out[t : t + b - a] = self._fill if decoded is None else decoded[a:b]
            if keep_last and position == len(pieces.chunks) - 1:
                # a copy: ``decoded`` is the decoding thread's buffer
                kept = None if decoded is None else decoded.copy()
                self._kept = (int(pieces.chunks[position]), kept)

        chunks, stops = pieces.chunks, pieces.ends[pieces.bounds[1:] - 1]
        kept = self._kept
        self._kept = None
        decoded = len(chunks)
        if kept is not None and kept[0] == int(chunks[0]):
            place(0, kept[1])
            chunks, stops, decoded = chunks[1:], stops[1:], decoded - 1
            offset = 1
        else:
            offset = 0
        if keep_last and len(chunks):
            stops = stops.copy()
            stops[-1] = min(self.size, self.length - int(chunks[-1]) * self.size)
        await self._each_chunk(chunks, stops, lambda p, values: place(p + offset, values))
        return out, decoded

    async def read_chunks(
        self, chunks: Indices, use: Callable[[int, npt.NDArray[Any] | None], None]
    ) -> None:
        """Decode each of ``chunks`` (ascending) whole and hand ``use(position,
        values)`` a view of it (``None``: a missing chunk, all fill), on a
        decoding thread; the view is valid only during the call."""
        stops = np.minimum(self.size, self.length - chunks * self.size)
        await self._each_chunk(chunks, stops, use)

    async def _each_chunk(
        self,
        chunks: Indices,
        stops: Indices,
        use: Callable[[int, npt.NDArray[Any] | None], None],
    ) -> None:
        """Fetch each chunk, decode its first ``stops[i]`` values, and call ``use``."""
        if not len(chunks):
            return

        def decode(position: int, data: Any) -> None:
            if data is None:
                use(position, None)
                return
            nbytes = int(stops[position]) * self.wire.itemsize
            scratch = thread_scratch(nbytes, name="direct")
            self._decode(data, memoryview(scratch))
            use(position, scratch.view(self.wire))

        async def one(position: int, data: Any) -> None:
            await hand_over(decode, position, data)

        # made per call: a read may run on any event loop
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)

        if self._sharding is None:

            async def fetch(position: int) -> None:
                async with gate:
                    buffer = await self._store.get(
                        self._key(int(chunks[position])), default_buffer_prototype()
                    )
                await one(position, None if buffer is None else buffer.as_numpy_array())

            await asyncio.gather(*(fetch(p) for p in range(len(chunks))))
            return
        per_shard = self._sharding.per_shard
        shards = chunks // per_shard
        edges = np.concatenate(([0], np.flatnonzero(np.diff(shards)) + 1, [len(chunks)]))
        await asyncio.gather(
            *(
                self._shard(int(shards[a]), np.arange(int(a), int(b)), chunks, one, gate)
                for a, b in itertools.pairwise(edges)
            )
        )

    async def _shard(
        self,
        shard: int,
        positions: Indices,
        chunks: Indices,
        one: Callable[[int, Any], Any],
        gate: asyncio.Semaphore,
    ) -> None:
        """The touched inner chunks of one shard: the whole shard in one request when
        every inner chunk is touched (as zarr does), else its index and their ranges."""
        sharding = self._sharding
        assert sharding is not None
        key = self._key(shard)
        n_inner = min(sharding.per_shard, -(-self.length // self.size) - shard * sharding.per_shard)
        inner = chunks[positions] - shard * sharding.per_shard
        prototype = default_buffer_prototype()
        if len(positions) == n_inner and shard not in self._indexes:
            async with gate:
                buffer = await self._store.get(key, prototype)
            if buffer is None:
                await asyncio.gather(*(one(int(p), None) for p in positions))
                return
            whole = buffer.as_numpy_array()
            size = sharding.index_bytes
            raw = whole[-size:] if sharding.at_end else whole[:size]
            index = self._indexes[shard] = self._parse_index(raw, key)
            await asyncio.gather(
                *(
                    one(int(p), self._inner(whole, index[int(i)]))
                    for p, i in zip(positions, inner, strict=True)
                )
            )
            return
        kept = self._indexes.get(shard)
        if kept is not None:
            index = kept
        else:
            size = sharding.index_bytes
            request = SuffixByteRequest(size) if sharding.at_end else RangeByteRequest(0, size)
            async with gate:
                buffer = await self._store.get(key, prototype, request)
            if buffer is None:
                await asyncio.gather(*(one(int(p), None) for p in positions))
                return
            index = self._indexes[shard] = self._parse_index(buffer.as_numpy_array(), key)
        stored = [
            (int(p), int(index[int(i), 0]), int(index[int(i), 1]))
            for p, i in zip(positions, inner, strict=True)
        ]
        absent = [one(p, None) for p, offset, _ in stored if offset == MISSING]
        present = [(p, offset, n) for p, offset, n in stored if offset != MISSING]
        requests = [RangeByteRequest(offset, offset + n) for _, offset, n in present]
        tasks: list[Any] = list(absent)
        async with gate:
            async for batch in self._store.get_ranges(key, requests, prototype=prototype):
                for number, part in batch:
                    p = present[number][0]
                    tasks.append(one(p, None if part is None else part.as_numpy_array()))
        await asyncio.gather(*tasks)

    @staticmethod
    def _inner(whole: npt.NDArray[Any], entry: npt.NDArray[np.uint64]) -> Any:
        offset, nbytes = int(entry[0]), int(entry[1])
        return None if offset == MISSING else whole[offset : offset + nbytes]

    def _parse_index(self, raw: npt.NDArray[Any], key: str) -> npt.NDArray[np.uint64]:
        sharding = self._sharding
        assert sharding is not None
        data = bytes(raw)
        if len(data) != sharding.index_bytes:
            raise ValueError(
                f"shard {key}: its index is {len(data)} bytes, not {sharding.index_bytes}"
            )
        entries = data[: 16 * sharding.per_shard]
        if sharding.checksum:
            expected = int.from_bytes(data[-4:], "little")
            if google_crc32c.value(entries) != expected:
                raise ValueError(
                    f"shard {key}: its index fails its crc32c checksum; the shard is damaged "
                    "(restore the source)"
                )
        return np.frombuffer(entries, dtype="<u8").reshape(sharding.per_shard, 2)
