"""Reading a zarr array's chunks directly: ranges of a 1-D array, blocks of a 2-D one.

An AnnData sparse element keeps its entries in two long 1-D arrays
(``indices`` and ``data``) whose chunks hold a hundred thousand entries or
more. A read of some rows needs a few short ranges of them; zarr decodes
every touched chunk and copies it into a result (and, for a slice, copies
every decoded value). :class:`DirectChunks` does less for the same bytes:
it fetches each touched chunk once through the store (the same requests
zarr makes: one per chunk file, or per shard the whole shard or its index
and the touched inner chunks), decodes it with the array's own codec on the
decoding threads (:mod:`.decode_threads`: the codecs release the GIL) into
a reused buffer, stopping after the last wanted entry where the codec
streams (zstd, gzip, zlib), and copies only the wanted entries into the
result. A dense AnnData ``X`` (2-D) is read the same way, chunk by chunk,
up to the last wanted row of each, straight into the caller's output. On a
plain local store, unsharded chunk files are read with ``pread`` on the
decoding thread into its reused buffer.

It applies to 1-D and 2-D numeric arrays stored as Zarr v2 (compressor
``blosc``, ``zstd``, ``gzip``, ``zlib`` or none; no filters; C order) or
Zarr v3 (``bytes`` then at most one of ``zstd``, ``gzip``, ``blosc``; or
``sharding_indexed`` whose inner chunks are so encoded and whose index is
``bytes`` with an optional ``crc32c``). :func:`direct_chunks_for` returns
``None`` for any other array, which callers then read through zarr's own
pipeline.

Shard indexes are read once per reader and kept (16 bytes per inner
chunk); an index whose checksum fails is an error naming the shard.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.store import RangeByteRequest
from zarr.codecs import ShardingCodec
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype

from ..format.gathering import gather_all
from ..remote.cached_store import forget_failed
from .chunk_codecs import ChunkDecodeError, Decode, v2_decode, v3_decode
from .chunk_pieces import chunk_pieces
from .decode_threads import hand_over
from .local_chunk_files import RecordedFiles, read_file
from .local_shards import local_files
from .placement import as_slice
from .prefetch import MAX_IN_FLIGHT
from .shard_indexes import MISSING, ShardIndexLayout, inner_chunk

# ChunkDecodeError: its documented place (docs/errors.md) is this module
__all__ = ["ChunkDecodeError", "DirectChunks", "direct_chunks_for"]

Indices = npt.NDArray[np.int64]


def direct_chunks_for(
    array: AsyncArray[Any], recorded: RecordedFiles | None = None
) -> DirectChunks | None:
    """A :class:`DirectChunks` of ``array`` (1-D or 2-D, numeric), or ``None`` when its
    layout or codecs are not among those it decodes (then zarr's pipeline reads it).
    On a plain local store, the chunk files it reads are checked against
    ``recorded`` (:mod:`.local_chunk_files`)."""
    if array.ndim not in (1, 2) or np.dtype(array.dtype).kind not in "biuf":
        return None
    metadata = array.metadata
    sharding: ShardIndexLayout | None = None
    decode: Decode | None
    if metadata.zarr_format == 2:
        if metadata.filters or (array.ndim > 1 and metadata.order != "C"):
            return None
        decode = v2_decode(metadata.compressor)
        wire = np.dtype(metadata.dtype.to_native_dtype())
        chunks = tuple(int(c) for c in metadata.chunks)
    else:
        codecs = tuple(metadata.codecs)
        chunks = tuple(int(c) for c in metadata.chunk_grid.chunk_shape)
        if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
            codec = codecs[0]
            sharding = ShardIndexLayout.of(codec, chunks)
            if sharding is None:
                return None
            chunks, codecs = tuple(int(c) for c in codec.chunk_shape), tuple(codec.codecs)
        found = v3_decode(codecs)
        if found is None:
            return None
        decode, endian = found
        wire = np.dtype(array.dtype).newbyteorder("<" if endian in (None, "little") else ">")
    if decode is None:
        return None
    fill = metadata.fill_value
    fill = 0 if fill is None else fill
    return DirectChunks(array, decode, wire, chunks, sharding, fill, recorded=recorded)


class DirectChunks:
    """Reads of one 1-D or 2-D array, each touched chunk fetched and decoded once per read.

    Chunks are named by their position in the chunk grid, in C order (for a
    1-D array, the chunk index).
    """

    def __init__(
        self,
        array: AsyncArray[Any],
        decode: Decode,
        wire: np.dtype,
        chunks: tuple[int, ...],
        sharding: ShardIndexLayout | None,
        fill: Any,
        *,
        recorded: RecordedFiles | None = None,
    ) -> None:
        self._store = array.store_path.store
        self._path = array.store_path.path
        self._metadata = array.metadata
        self._decode = decode
        self.wire = wire
        """The stored dtype (byte order included)."""
        self.dtype = np.dtype(array.dtype)
        self.shape = tuple(int(n) for n in array.shape)
        self.chunks = chunks
        """Shape of a (inner) chunk."""
        self.grid = tuple(-(-n // c) for n, c in zip(self.shape, chunks, strict=True))
        """Chunks along each dimension."""
        self._sharding = sharding
        self._fill = fill
        # a plain local store's chunk files are read with pread on the decoding
        # thread, into its reused buffer (unsharded arrays: one file a chunk)
        local = local_files(self._store)
        self._local = None if sharding is not None else local
        # a local shard's inner chunks are read the same way, by their index
        # entries: no thread hop through the store per chunk
        self._local_shards = local if sharding is not None else None
        # the chunk files of a local source are checked against the record as
        # they are read: its open compared only a sample of them
        self._recorded = (local[0], recorded) if local is not None and recorded else None
        # shard -> its index ((offset, nbytes) per inner chunk), kept: the
        # source's identity was checked at open and is pinned for its reads
        self._indexes: dict[int, npt.NDArray[np.uint64]] = {}
        # the last chunk of a batch, kept for the next batch of the same read
        self._kept: tuple[int, npt.NDArray[Any] | None] | None = None

    @property
    def size(self) -> int:
        """Entries of a chunk of a 1-D array."""
        return self.chunks[0]

    @property
    def length(self) -> int:
        """Entries of a 1-D array."""
        return self.shape[0]

    def _key(self, coords: tuple[int, ...]) -> str:
        key = self._metadata.encode_chunk_key(coords)
        return f"{self._path}/{key}" if self._path else key

    async def inner_chunks_present(self, shard: int) -> npt.NDArray[np.bool_] | None:
        """Which inner chunks of 1-D ``shard`` its index marks stored (``None``: the
        shard is absent, or the array is not sharded). The index is kept for the
        reads that follow."""
        sharding = self._sharding
        if sharding is None:
            return None
        index = await self._index(shard, self._key((shard,)))
        if index is None:
            return None
        present: npt.NDArray[np.bool_] = index[:, 0] != MISSING
        return present

    async def _index(self, shard: int, key: str) -> npt.NDArray[np.uint64] | None:
        """The index of ``shard`` (kept, or read and kept); ``None``: the shard is absent."""
        sharding = self._sharding
        assert sharding is not None
        index = self._indexes.get(shard)
        if index is None:
            buffer = await self._store.get(key, default_buffer_prototype(), sharding.request())
            if buffer is None:
                return None
            index = self._indexes[shard] = sharding.parse(buffer.as_numpy_array(), key)
        return index

    # ------------------------------------------------------------ 1-D reads

    async def read_ranges(
        self, starts: Indices, ends: Indices, *, keep_last: bool = False
    ) -> tuple[npt.NDArray[Any], int]:
        """The values at ``[starts[i], ends[i])`` (ascending, disjoint) of a 1-D array,
        concatenated, and the chunks decoded: each touched chunk once.

        With ``keep_last`` the last touched chunk is decoded whole and kept,
        and a next call whose first chunk it is reads it from memory: a read
        in consecutive batches decodes the chunk two batches share once.
        """
        nonempty = ends > starts
        starts, ends = starts[nonempty], ends[nonempty]
        out = np.empty(int((ends - starts).sum()), dtype=self.dtype)
        if not len(out):
            return out, 0
        # ranges that follow each other (a band of rows) are one range: the
        # result concatenates them anyway, and a chunk then holds one piece
        apart = np.flatnonzero(starts[1:] != ends[:-1])
        if len(apart) < len(starts) - 1:
            starts = starts[np.concatenate(([0], apart + 1))]
            ends = ends[np.append(apart, len(ends) - 1)]
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
        offset = 0
        if kept is not None and kept[0] == int(chunks[0]):
            place(0, kept[1])
            chunks, stops, decoded, offset = chunks[1:], stops[1:], decoded - 1, 1
        if keep_last and len(chunks):
            stops = stops.copy()
            stops[-1] = min(self.size, self.length - int(chunks[-1]) * self.size)
        await self._each_chunk(chunks, stops, lambda p, values: place(p + offset, values))
        return out, decoded

    async def read_chunks(
        self, chunks: Indices, use: Callable[[int, npt.NDArray[Any] | None], None]
    ) -> None:
        """Decode each of the 1-D array's ``chunks`` whole and hand ``use(position,
        values)`` a view of it (``None``: a missing chunk, all fill), on a
        decoding thread; the view is valid only during the call."""
        stops = np.minimum(self.size, self.length - chunks * self.size)
        await self._each_chunk(chunks, stops, use)

    # ------------------------------------------------------------ 2-D reads

    async def read_block(
        self,
        rows: Indices,
        cols: Indices,
        out: npt.NDArray[Any],
        out_rows: Indices,
        out_cols: Indices,
    ) -> int:
        """Place ``rows`` x ``cols`` (sorted unique) of a 2-D array at ``out_rows`` x
        ``out_cols`` of ``out``; returns the chunks decoded (each touched one once,
        up to its last wanted row)."""
        if not len(rows) or not len(cols):
            return 0
        (chunk_rows, chunk_cols), n_col_chunks = self.chunks, self.grid[1]
        row_chunks = np.unique(rows // chunk_rows)
        col_chunks = np.unique(cols // chunk_cols)
        row_cuts = np.append(np.searchsorted(rows, row_chunks * chunk_rows), len(rows))
        col_cuts = np.append(np.searchsorted(cols, col_chunks * chunk_cols), len(cols))
        ids = (row_chunks[:, None] * n_col_chunks + col_chunks[None, :]).reshape(-1)
        last_rows = rows[row_cuts[1:] - 1] - row_chunks * chunk_rows
        stops = np.repeat((last_rows + 1) * chunk_cols, len(col_chunks))

        def place(position: int, decoded: npt.NDArray[Any] | None) -> None:
            i, j = divmod(position, len(col_chunks))
            r0, r1 = int(row_cuts[i]), int(row_cuts[i + 1])
            c0, c1 = int(col_cuts[j]), int(col_cuts[j + 1])
            # output positions follow the selection's order (any order, not
            # sorted): a slice only where they truly count up by one
            target_rows, target_cols = as_slice(out_rows[r0:r1]), as_slice(out_cols[c0:c1])
            target: Any = (target_rows, target_cols)
            if not isinstance(target_rows, slice) and not isinstance(target_cols, slice):
                target = np.ix_(target_rows, target_cols)  # two arrays: orthogonal, as one would be
            if decoded is None:
                out[target] = self._fill
                return
            block = decoded.reshape(-1, chunk_cols)
            local_rows = as_slice(rows[r0:r1] - int(row_chunks[i]) * chunk_rows)
            local_cols = as_slice(cols[c0:c1] - int(col_chunks[j]) * chunk_cols)
            out[target] = block[local_rows][:, local_cols]

        await self._each_chunk(ids, stops, place)
        return len(ids)

    # ------------------------------------------------------------ fetching

    async def _each_chunk(
        self,
        chunks: Indices,
        stops: Indices,
        use: Callable[[int, npt.NDArray[Any] | None], None],
    ) -> None:
        """Fetch each chunk, decode its first ``stops[i]`` values, and call ``use`` on a
        decoding thread."""
        if not len(chunks):
            return

        def decode(position: int, data: Any) -> None:
            if data is None:
                use(position, None)
                return
            nbytes = int(stops[position]) * self.wire.itemsize
            try:
                decoded = self._decode(data, nbytes)[:nbytes].view(self.wire)
            except Exception as exc:  # a codec's own error names no chunk
                coords = tuple(int(c) for c in np.unravel_index(int(chunks[position]), self.grid))
                raise ChunkDecodeError(
                    f"chunk {coords} of {self._path or 'the array'} cannot be decoded "
                    f"({type(exc).__name__}: {exc}); the source is damaged: restore it"
                ) from exc
            use(position, decoded)

        async def one(position: int, data: Any) -> None:
            await hand_over(decode, position, data)

        # made per call: a read may run on any event loop
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)
        prototype = default_buffer_prototype()
        coords = np.stack(np.unravel_index(chunks, self.grid), axis=1)
        if self._local is not None:
            root, counters = self._local
            keys = [self._key(tuple(int(c) for c in at)) for at in coords]
            recorded = self._recorded[1] if self._recorded is not None else None

            def read_and_decode(position: int) -> None:
                data = read_file(root, keys[position], recorded)
                if counters is not None and data is not None:
                    counters.add(nbytes=len(data), requests=1)
                decode(position, data)

            await gather_all(*(hand_over(read_and_decode, p) for p in range(len(chunks))))
            return
        if self._sharding is None:

            async def fetch(position: int) -> None:
                key = self._key(tuple(int(c) for c in coords[position]))

                async def attempt() -> None:
                    async with gate:
                        buffer = await self._store.get(key, prototype)
                    await one(position, None if buffer is None else buffer.as_numpy_array())

                await self._with_refetch(key, attempt)

            await gather_all(*(fetch(p) for p in range(len(chunks))))
            return
        per_shard = np.asarray(self._sharding.per_shard)
        shard_coords = coords // per_shard
        shard_grid = tuple(-(-g // p) for g, p in zip(self.grid, per_shard.tolist(), strict=True))
        shards = np.ravel_multi_index(tuple(shard_coords.T), shard_grid)
        inner = np.ravel_multi_index(tuple((coords % per_shard).T), tuple(per_shard.tolist()))
        order = np.argsort(shards, kind="stable")
        edges = np.concatenate(([0], np.flatnonzero(np.diff(shards[order])) + 1, [len(order)]))
        grid = np.asarray(self.grid)
        tasks = []
        for a, b in itertools.pairwise(edges.tolist()):
            positions = order[a:b]
            corner = shard_coords[positions[0]]
            in_bounds = int(np.prod(np.minimum(per_shard, grid - corner * per_shard)))
            key = self._key(tuple(int(c) for c in corner))
            shard = int(shards[positions[0]])
            tasks.append(
                self._with_refetch(
                    key,
                    functools.partial(
                        self._shard,
                        shard,
                        key,
                        positions,
                        inner[positions],
                        in_bounds,
                        one,
                        decode,
                        gate,
                    ),
                    shard=shard,
                )
            )
        await gather_all(*tasks)

    async def _with_refetch(
        self, key: str, attempt: Callable[[], Awaitable[None]], *, shard: int | None = None
    ) -> None:
        """``attempt`` (the reads of chunk or shard ``key``), made once more when a chunk
        or shard index did not decode and ``key`` came from a remote source.

        A transfer can damage bytes (a proxy, a faulty link) that the source
        holds intact; kept in the source cache, they would fail every later
        read. What the cache holds of ``key`` is dropped, and a shard's kept
        index, so the repeat fetches from the source. Chunks placed by the
        first attempt are placed again with the same values.
        """
        try:
            await attempt()
            return
        except ChunkDecodeError:
            if not forget_failed(self._store, key):
                raise
        if shard is not None:
            self._indexes.pop(shard, None)
        try:
            await attempt()
        except ChunkDecodeError as again:
            raise ChunkDecodeError(
                f"{again}; it failed again when fetched anew from the source (past the "
                "cache): the source's stored bytes are damaged, or every transfer from it "
                "is damaged on the way (a proxy or network fault)"
            ) from again

    async def _shard(
        self,
        shard: int,
        key: str,
        positions: Indices,
        inner: Indices,
        in_bounds: int,
        one: Callable[[int, Any], Any],
        decode: Callable[[int, Any], None],
        gate: asyncio.Semaphore,
    ) -> None:
        """The touched inner chunks of one shard: the whole shard in one request when
        every inner chunk is touched (as zarr does), else its index and their ranges."""
        sharding = self._sharding
        assert sharding is not None
        if self._local_shards is not None:
            await self._local_shard(shard, key, positions, inner, one, decode)
            return
        if self._recorded is not None:
            # the shard's index is kept by the reader: a shard rewritten since must
            # not be read through it
            await asyncio.to_thread(self._recorded[1].check_path, self._recorded[0], key)
        prototype = default_buffer_prototype()
        if len(positions) == in_bounds and shard not in self._indexes:
            async with gate:
                buffer = await self._store.get(key, prototype)
            if buffer is None:
                await gather_all(*(one(int(p), None) for p in positions))
                return
            whole = buffer.as_numpy_array()
            index = self._indexes[shard] = sharding.parse(sharding.index_in(whole), key)
            await gather_all(
                *(
                    one(int(p), inner_chunk(whole, index[int(i)]))
                    for p, i in zip(positions, inner, strict=True)
                )
            )
            return
        async with gate:
            found = await self._index(shard, key)
        if found is None:
            await gather_all(*(one(int(p), None) for p in positions))
            return
        index = found
        stored = [
            (int(p), int(index[int(i), 0]), int(index[int(i), 1]))
            for p, i in zip(positions, inner, strict=True)
        ]
        tasks: list[Any] = [one(p, None) for p, offset, _ in stored if offset == MISSING]
        present = [(p, offset, n) for p, offset, n in stored if offset != MISSING]
        requests = [RangeByteRequest(offset, offset + n) for _, offset, n in present]
        async with gate:
            async for batch in self._store.get_ranges(key, requests, prototype=prototype):
                for number, part in batch:
                    p = present[number][0]
                    tasks.append(one(p, None if part is None else part.as_numpy_array()))
        await gather_all(*tasks)

    async def _local_shard(
        self,
        shard: int,
        key: str,
        positions: Indices,
        inner: Indices,
        one: Callable[[int, Any], Any],
        decode: Callable[[int, Any], None],
    ) -> None:
        """The touched inner chunks of one shard of a plain local store: its index
        (kept from an earlier read, or read once), then each chunk read with
        ``pread`` and decoded on one decoding thread, one job per chunk. Each job
        checks the shard file it opens against the record (a kept index must not
        be used on a shard rewritten since)."""
        sharding, local = self._sharding, self._local_shards
        assert sharding is not None and local is not None
        root, counters = local
        recorded = self._recorded[1] if self._recorded is not None else None
        index = await self._index(shard, key)
        if index is None:
            if recorded is not None:
                await asyncio.to_thread(recorded.check_path, root, key)
            await gather_all(*(one(int(p), None) for p in positions))
            return
        entries = index[inner]
        present = entries[:, 0] != MISSING

        def read_and_decode(position: int, offset: int, nbytes: int) -> None:
            data = read_file(root, key, recorded, (offset, nbytes))
            if data is None:  # the shard is gone: as zarr reads it, all fill
                decode(position, None)
                return
            if counters is not None:
                counters.add(nbytes=len(data), requests=1)
            if len(data) < nbytes:
                raise ChunkDecodeError(
                    f"shard {key}: its index places an inner chunk at bytes {offset}-"
                    f"{offset + nbytes}, past the file's end; the shard is damaged (restore "
                    "the source)"
                )
            decode(position, data)

        await gather_all(
            *(one(int(p), None) for p in positions[~present]),
            *(
                hand_over(read_and_decode, int(p), int(offset), int(nbytes))
                for p, (offset, nbytes) in zip(
                    positions[present].tolist(), entries[present].tolist(), strict=True
                )
            ),
        )
