"""Reading selected rows of a sharded count array without zarr's pipeline.

For arrays in the layout this package writes (``sharding_indexed`` with the
index at the end, shards spanning every column, inner codecs ``bytes`` +
``zstd`` or ``bytes`` + ``blosc`` + ``crc32c``, index codecs ``bytes`` +
``crc32c``), a gather can locate and decode inner chunks itself: the shard
index is read once per shard and kept, only the touched chunks' byte ranges
are fetched (coalesced by the store's ``get_ranges``, or the whole shard
when most of it is needed), and each touched chunk is decoded exactly once
on a worker thread.

A :class:`ShardedReader` plans a read and fetches; the rest is in modules of
their own: decoding a chunk's wanted rows in each of the three chunk
encodings (``chunk_decoding.py``), assembling them into strips that a
:class:`~cytearc_vfs.read.placement.Placement` writes straight into the
caller's output on the decoding thread (``strip_assembly.py``), and reading a
local store's shard files directly (``local_shards.py``). So a read makes no
intermediate block, and zarr's per-chunk overhead (a few hundred
microseconds of Python) disappears too, which matters when a read touches
hundreds of small chunks.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata.v3 import ArrayV3Metadata

from ..encoding.row_frames import rows_per_frame
from ..errors import RecordShapeError, SourceGoneError
from ..format.gathering import gather_all
from ..format.shard_tables import ShardTable, read_shard_table
from ..remote.cached_store import forget_failed
from . import range_requests
from .chunk_decoding import ChunkDecoder, failed_check
from .decode_threads import decoder_threads, hand_over
from .local_shards import LocalShardReader, local_files
from .opened_files import OpenedSource, ShardFiles, open_checked
from .placement import Placement, chunk_runs
from .range_requests import (
    COALESCE_RATIO,
    MAX_RANGE_REQUESTS,
    SMALL_GAP_BYTES,
    WHOLE_SHARD_SHARE,
    coalesce_ranges,
)
from .read_stats import ReadCounters
from .shard_indexes import ranges_ignored
from .strip_assembly import ShardWork, StripAssembler

__all__ = [
    "COALESCE_RATIO",
    "PIECE_BYTES",
    "ShardedReader",
    "coalesce_ranges",
    "fast_reader_for",
    "fast_reader_from",
    "job_pieces",
    "work_pieces",
]

Indices = npt.NDArray[np.int64]
MISSING = 2**64 - 1

#: Decoded bytes of wanted rows a piece of a shard's job holds at least.
PIECE_BYTES = 4 << 20


def job_pieces(bounds: Indices, row_bytes: int, threads: int) -> list[tuple[int, int]]:
    """Ranges ``[p, q)`` of a shard job's row chunks, one job each on the decoding threads.

    ``bounds`` are where each row chunk's wanted rows start (and the last
    ends), ``row_bytes`` what a wanted row decodes to. A shard's chunks were
    one job, on one thread: a read within one shard (a band of a few
    thousand cells) decoded on one core while the others idled, at about
    half the speed of the same rows across two shards. A job is cut into as
    many pieces as there are threads, of about equal wanted rows, each of at
    least :data:`PIECE_BYTES` (smaller pieces would cost more hand-overs than
    they save), at row-chunk edges.

    >>> job_pieces(np.array([0, 100, 200, 300, 400]), 50_000, 2)
    [(0, 2), (2, 4)]
    >>> job_pieces(np.array([0, 100, 200]), 1_000, 2)
    [(0, 2)]
    """
    chunks = len(bounds) - 1
    wanted = int(bounds[-1] - bounds[0])
    count = min(threads, chunks, wanted * row_bytes // PIECE_BYTES)
    if count <= 1:
        return [(0, chunks)]
    targets = bounds[0] + wanted * np.arange(1, count) // count
    # each cut at the chunk edge nearest its target
    above = np.clip(np.searchsorted(bounds, targets), 1, chunks)
    nearer_below = targets - bounds[above - 1] < bounds[above] - targets
    cuts = np.unique(np.clip(above - nearer_below, 1, chunks - 1)).tolist()
    edges = [0, *cuts, chunks]
    return list(itertools.pairwise(edges))


def work_pieces(work: ShardWork, row_bytes: int, threads: int) -> list[tuple[ShardWork, int, int]]:
    """A shard's job cut by :func:`job_pieces`: each piece's work, and the range
    ``[e, f)`` of the job's stored chunks (row-major, as fetched) that it decodes.

    The local and the remote path cut alike: a piece is the same job on fewer
    row chunks, so what it places is keyed by the same strips.
    """
    stored = np.concatenate([[0], np.cumsum(work.present.sum(axis=1))])
    return [
        (
            work._replace(
                row_chunks=work.row_chunks[p:q],
                bounds=work.bounds[p : q + 1],
                present=work.present[p:q],
            ),
            int(stored[p]),
            int(stored[q]),
        )
        for p, q in job_pieces(work.bounds, row_bytes, threads)
    ]


def fast_reader_for(
    array: zarr.Array[Any], *, where: str | None = None, opened: OpenedSource | None = None
) -> ShardedReader | None:
    """A :class:`ShardedReader` when ``array`` uses the layout it understands, else ``None``.

    ``where`` names the store in the errors of chunks that do not decode (a
    composite has several sources: the error must say which one is damaged).
    ``opened`` is what the open of a local source found: reads of a source
    replaced since are refused (:mod:`.opened_files`).
    """
    metadata = array.metadata
    if not isinstance(metadata, ArrayV3Metadata) or _sharding_of(metadata) is None:
        return None
    assert metadata.shards is not None  # sharded: _sharding_of found the codec
    table = read_shard_table(
        array.attrs, shards=-(-int(array.shape[0]) // int(metadata.shards[0])), where=array.path
    )
    return fast_reader_from(
        metadata, array.store_path.store, array.path, table, where=where, opened=opened
    )


def fast_reader_from(
    metadata: ArrayV3Metadata,
    store: Store,
    path: str,
    shard_table: ShardTable | None,
    *,
    where: str | None = None,
    opened: OpenedSource | None = None,
) -> ShardedReader | None:
    """:func:`fast_reader_for` from the array's parsed metadata and recorded shard table
    (as verification parsed them): no zarr array is built, no document read."""
    sharding = _sharding_of(metadata)
    if sharding is None:
        return None
    inner = sharding.codecs
    shape, shards = metadata.shape, metadata.shards
    assert shards is not None
    return ShardedReader(
        store,
        path,
        (int(shape[0]), int(shape[1])),
        (int(sharding.chunk_shape[0]), int(sharding.chunk_shape[1])),
        (int(shards[0]), int(shards[1])),
        metadata.dtype.to_native_dtype(),
        local_files=local_files(store),
        shard_table=shard_table,
        blosc_block_bytes=int(inner[1].blocksize) if isinstance(inner[1], BloscCodec) else None,
        label=None if where is None else f"{where.rstrip('/')}/{path}",
        opened=opened,
    )


def _sharding_of(metadata: ArrayV3Metadata) -> ShardingCodec | None:
    """The sharding codec of a 2-D array in a layout the reader decodes, else ``None``."""
    codecs = metadata.codecs
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec) or len(metadata.shape) != 2:
        return None
    sharding = codecs[0]
    inner = sharding.codecs
    blosc_blocks = (
        len(inner) == 3 and isinstance(inner[1], BloscCodec) and isinstance(inner[2], Crc32cCodec)
    )
    zstd_frames = len(inner) == 2 and isinstance(inner[1], ZstdCodec)
    if (
        sharding.index_location != "end"
        or not (blosc_blocks or zstd_frames)
        or not isinstance(inner[0], BytesCodec)
        or inner[0].endian not in (None, "little")
        or len(sharding.index_codecs) != 2
        or not isinstance(sharding.index_codecs[0], BytesCodec)
        or not isinstance(sharding.index_codecs[1], Crc32cCodec)
    ):
        return None
    shards = metadata.shards
    assert shards is not None
    if shards[1] < metadata.shape[1]:
        return None  # a row chunk would span shards; zarr's pipeline reads those
    return sharding


class ShardedReader:
    """Reads of selected rows of one sharded 2-D array, each touched chunk decoded once."""

    def __init__(
        self,
        store: Store,
        path: str,
        shape: tuple[int, int],
        chunks: tuple[int, int],
        shards: tuple[int, int],
        dtype: np.dtype,
        *,
        local_files: tuple[str, ReadCounters | None] | None = None,
        shard_table: ShardTable | None = None,
        blosc_block_bytes: int | None = None,
        label: str | None = None,
        opened: OpenedSource | None = None,
    ) -> None:
        self._store = store
        # inner chunks are Blosc containers of zstd blocks of this many bytes
        # (the codec's blocksize) and a crc32c, else zstd frames
        self._blocks = blosc_block_bytes is not None
        # every shard index read is compared with the table its writer recorded
        self._table = shard_table
        self._path = path
        self._label = label or path
        self.shape = shape
        self.chunks = chunks
        self._per_shard = (shards[0] // chunks[0], shards[1] // chunks[1])
        self.dtype = np.dtype(dtype)
        self._indexes: dict[int, npt.NDArray[np.uint64] | None] = {}
        self.col_chunks = -(-shape[1] // chunks[1])
        self.zero_column = self.col_chunks * chunks[1]
        """Index of the all-zero column appended to every strip (column maps point there)."""
        per_frame = rows_per_frame(chunks, self.dtype.itemsize)
        # Chunks of at most one frame's rows spanning every column (the
        # portable layout): a strip's touched chunks decode as one stream.
        self._joined = not self._blocks and self.col_chunks == 1 and per_frame >= chunks[0]
        self._strips = StripAssembler(
            # errors name the array by `label` (store and path) when given
            ChunkDecoder(label or path, chunks, self.dtype, blocks=self._blocks),
            self.col_chunks,
            joined=self._joined,
        )
        # A local store's shard files are read directly, on the thread that
        # decodes them (local_shards.py); those of a bound source are checked
        # to be the files the open found and the indexes kept were read from.
        self._files = None if local_files is None or opened is None else ShardFiles(opened, path)
        self._local = (
            None
            if local_files is None
            else LocalShardReader(
                *local_files,
                self._strips,
                rows_per_frame=per_frame,
                blosc_block_bytes=blosc_block_bytes,
                files=self._files,
            )
        )

    def _key(self, shard_row: int) -> str:
        return f"{self._path}/c/{shard_row}/0"

    def _check_still_there(self) -> None:
        """Refuse to read a local array that was deleted while open as zeros.

        An absent shard reads as zeros because an all-zero shard is never
        written; but a source directory deleted (or moved) after the open
        leaves every shard absent too. Its array document tells the two apart
        (a stat). Remote sources need no check: their shards are pinned, and
        a pinned object that disappears is an error already.
        """
        if self._local is None:
            return
        document = os.path.join(self._local.root, self._path, "zarr.json")
        if not os.path.exists(document):
            raise SourceGoneError(
                f"the array {self._path} is gone from {self._local.root} (its zarr.json is "
                "missing): the store was deleted or moved while open; restore it and open "
                f"it again (no {document})"
            )

    @property
    def _index_bytes(self) -> int:
        return 16 * self._per_shard[0] * self._per_shard[1] + 4

    async def _index(self, shard_row: int) -> npt.NDArray[np.uint64] | None:
        if shard_row in self._indexes:
            return self._indexes[shard_row]
        if self._local is not None:
            tail = await asyncio.to_thread(self._local_tail, shard_row)
            return self._keep_index(shard_row, tail)
        raw = await self._store.get(
            self._key(shard_row), default_buffer_prototype(), SuffixByteRequest(self._index_bytes)
        )
        return self._keep_index(shard_row, None if raw is None else raw.to_bytes())

    def _local_tail(self, shard_row: int) -> bytes | None:
        """The index bytes of a local shard file (``None``: no such file), its identity
        recorded from the descriptor they are read from (see :mod:`.opened_files`)."""
        local = self._local
        assert local is not None
        path = f"{local.root}/{self._key(shard_row)}"
        files = self._files
        try:
            descriptor = open_checked(path, None)
        except (FileNotFoundError, NotADirectoryError):
            if files is not None:
                files.first_read(path, None)
            data = None
        else:
            try:
                stat = os.fstat(descriptor)
                if files is not None:
                    files.first_read(path, stat)
                data = os.pread(
                    descriptor, self._index_bytes, max(0, stat.st_size - self._index_bytes)
                )
            finally:
                os.close(descriptor)
        if local.counters is not None:
            local.counters.add(nbytes=0 if data is None else len(data), requests=1)
        return data

    async def _whole(self, shard_row: int) -> Any:
        """The whole shard (``None`` if absent), its index kept from its tail: one request."""
        raw = await self._store.get(self._key(shard_row), default_buffer_prototype())
        data = None if raw is None else raw.as_numpy_array()
        tail = None if data is None else data[max(0, len(data) - self._index_bytes) :].tobytes()
        self._keep_index(shard_row, tail)
        return data

    def _small(self, shard_row: int) -> bool:
        """Whether the shard's table records it as at most :data:`~cytearc_vfs.read.range_requests.SMALL_SHARD_BYTES`:
        fetched whole, it costs one round trip instead of its index's and its
        chunks' (the bytes beyond the touched chunks cost less than a trip)."""
        table = self._table
        if table is None or not 0 <= shard_row < len(table.sizes):
            return False
        # read at call time: tests of the ranged path set it to 0
        return 0 < int(table.sizes[shard_row]) <= range_requests.SMALL_SHARD_BYTES

    def _whole_share(self, shard_row: int, touched_row_chunks: int, col_chunks: int) -> float:
        """The share of a shard's chunks a read touches (its index not yet known)."""
        row_chunks = -(-self.shape[0] // self.chunks[0])
        in_shard = min(self._per_shard[0], row_chunks - shard_row * self._per_shard[0])
        return (touched_row_chunks * col_chunks) / max(1, in_shard * self.col_chunks)

    def _keep_index(self, shard_row: int, data: bytes | None) -> npt.NDArray[np.uint64] | None:
        """Check a shard's index bytes (``None``: no such shard) and keep the index."""
        if data is None:
            self._check_still_there()  # a deleted store is named as such first
        if data is None and self._table is not None:
            self._table.check_index(
                self._key(shard_row), shard_row, None, where=f"count array {self._path!r}"
            )
        if data is None:
            index = None  # a shard never written holds only the fill value
        else:
            if len(data) > self._index_bytes:
                raise ranges_ignored(self._key(shard_row), self._index_bytes, len(data))
            if len(data) != self._index_bytes:
                raise failed_check(
                    f"{self._label}: shard {self._key(shard_row)} has an index of {len(data)} "
                    f"bytes, not {self._index_bytes}"
                )
            body, checksum = data[:-4], data[-4:]
            if np.frombuffer(checksum, dtype="<u4")[0] != google_crc32c.value(body):
                raise failed_check(
                    f"{self._label}: shard {self._key(shard_row)} has an index whose crc32c does "
                    "not match"
                )
            if self._table is not None:  # a damaged index is named as such first
                self._table.check_index(
                    self._key(shard_row), shard_row, checksum, where=f"count array {self._path!r}"
                )
            index = np.frombuffer(body, dtype="<u8").reshape(*self._per_shard, 2)
        self._indexes[shard_row] = index
        return index

    async def read_into(self, rows: Indices, col_chunks: Indices, placement: Placement) -> int:
        """Hand the selected ``rows`` (sorted unique), strip by strip, to ``placement``.

        Only ``col_chunks`` (sorted unique column-chunk indices) are decoded;
        a strip's other columns read as zero. Returns the chunks decoded.
        """
        if not len(rows) or not len(col_chunks):
            return 0
        row_chunks, bounds = chunk_runs(rows, self.chunks[0])
        shard_of = row_chunks // self._per_shard[0]
        edges = [0, *(np.flatnonzero(np.diff(shard_of)) + 1).tolist(), len(row_chunks)]
        shards = shard_of[edges[:-1]].tolist()
        missing = [
            (shard, b - a)
            for shard, a, b in zip(shards, edges[:-1], edges[1:], strict=True)
            if shard not in self._indexes
        ]
        # A shard most of whose chunks are touched is fetched whole, index and
        # all, in one request; the others' indexes first. All concurrently: on
        # an object store each is a round trip.
        wholes: dict[int, Any] = {}
        if self._local is None:
            dense = [
                shard
                for shard, n in missing
                if self._whole_share(shard, n, len(col_chunks)) >= WHOLE_SHARD_SHARE
                or self._small(shard)
            ]
            found = await gather_all(
                *(self._checked(shard, self._whole) for shard in dense),
                *(self._checked(shard, self._index) for shard, _ in missing if shard not in dense),
            )
            wholes = dict(zip(dense, found[: len(dense)], strict=True))
        elif missing:
            await gather_all(*(self._index(shard) for shard, _ in missing))
        # Shards are planned here, without a task each: once the indexes are
        # known a read's planning is pure computation.
        jobs: list[Awaitable[None]] = []
        decoded = 0
        files = self._local
        threads = decoder_threads()
        row_bytes = len(col_chunks) * self.chunks[1] * self.dtype.itemsize
        for shard_row, a, b in zip(shards, edges[:-1], edges[1:], strict=True):
            index = self._indexes[shard_row]
            local = row_chunks[a:b] - shard_row * self._per_shard[0]
            if index is None:
                present = np.zeros((len(local), len(col_chunks)), dtype=bool)
                stored = np.zeros((2, 0), dtype=np.int64)
            else:
                entries = index[local[:, None], col_chunks]
                present = entries[..., 0] != MISSING
                # offsets and sizes, each contiguous, chunks row-major as decoded
                stored = np.array(entries[present].T, dtype=np.int64, order="C")
            offsets, sizes = stored
            work = ShardWork(
                rows, row_chunks[a:b], bounds[a : b + 1], col_chunks, present, placement
            )
            decoded += len(offsets)
            if files is not None and len(offsets):
                # pread and zstd release the GIL: reading, decoding and placing
                # off the event loop keeps other shards flowing, and a large
                # job is cut in pieces that the threads decode side by side
                path = f"{files.root}/{self._key(shard_row)}"
                for piece, e, f in work_pieces(work, row_bytes, threads):
                    jobs.append(hand_over(files.read, path, offsets[e:f], sizes[e:f], piece))
            else:
                jobs.append(
                    self._checked(
                        shard_row,
                        self._fetch_and_decode,
                        index,
                        offsets,
                        sizes,
                        work,
                        row_bytes,
                        threads,
                        wholes.get(shard_row),
                    )
                )
        await gather_all(*jobs)
        return decoded

    async def _checked(self, shard_row: int, attempt: Any, *args: Any) -> Any:
        """``await attempt(shard_row, *args)``; if the shard's bytes fail their check and
        the store reads a remote source, once more from the source (its cached bytes
        dropped, and a shard the first attempt fetched whole fetched anew).

        A transfer can damage bytes (a proxy, a faulty link) while the source
        holds them intact; kept in the cache, they would fail every later read.
        Placements are keyed by strip, so strips placed by the first attempt are
        placed again, not twice.
        """
        try:
            return await attempt(shard_row, *args)
        except RecordShapeError as exc:
            check = getattr(exc, "check", None)
            if check is None or not forget_failed(self._store, self._key(shard_row)):
                raise
        if attempt == self._fetch_and_decode:
            args = (*args[:-1], None)  # not the whole shard the first attempt fetched
        try:
            return await attempt(shard_row, *args)
        except RecordShapeError as again:
            check = getattr(again, "check", None)
            if check is None:
                raise
            raise RecordShapeError(
                f"{check}, and again when fetched anew from the source (past the cache). "
                "The source's stored bytes are damaged, or every transfer from it is "
                "damaged on the way (a proxy or network fault). Check the source with "
                "`cytearc-vfs verify`: if it fails there too, restore it or re-import the "
                "dataset; if it passes, the transfers are at fault"
            ) from again

    async def _fetch_and_decode(
        self,
        shard_row: int,
        index: npt.NDArray[np.uint64] | None,
        chunk_offsets: Indices,
        chunk_sizes: Indices,
        work: ShardWork,
        row_bytes: int,
        threads: int,
        whole: Any = None,
    ) -> None:
        """Fetch a shard's touched chunks from the store (unless ``whole``, the shard
        this read already fetched, holds them), then decode and place them, a large
        job in pieces (:func:`work_pieces`, wanted rows of ``row_bytes``) that the
        ``threads`` decode side by side."""
        offsets, sizes = chunk_offsets.tolist(), chunk_sizes.tolist()
        blobs: list[Any] = [None] * len(offsets)
        if offsets:
            assert index is not None
            key = self._key(shard_row)
            prototype = default_buffer_prototype()
            stored = index[..., 1][index[..., 0] != MISSING]
            if whole is None and sum(sizes) >= WHOLE_SHARD_SHARE * int(stored.sum()):
                fetched = await self._store.get(key, prototype)
                if fetched is None:
                    raise self._vanished(key)
                whole = fetched.as_numpy_array()
            if whole is not None:
                blobs = [whole[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
            else:
                # one request per run of ranges close enough to share one
                runs = coalesce_ranges(
                    offsets,
                    sizes,
                    max_requests=MAX_RANGE_REQUESTS if self._joined or self._blocks else None,
                    max_gap=SMALL_GAP_BYTES,
                )
                fetched_runs = await gather_all(
                    *(self._store.get(key, prototype, RangeByteRequest(a, b)) for a, b, _ in runs)
                )
                for (start, _, members), buffer in zip(runs, fetched_runs, strict=True):
                    if buffer is None:
                        raise self._vanished(key)
                    data = buffer.as_numpy_array()
                    for i in members:
                        blobs[i] = data[offsets[i] - start : offsets[i] - start + sizes[i]]
        # Only decoding is cut: the fetch above stays one request per shard or
        # coalesced run. The pieces, handed over in one turn of the loop, end
        # together (see hand_over): none is still placing when a failed check
        # makes _checked fetch and place the shard again.
        await gather_all(
            *(
                hand_over(self._strips.decode_and_place, piece, blobs[e:f])
                for piece, e, f in work_pieces(work, row_bytes, threads)
            )
        )

    def _vanished(self, key: str) -> SourceGoneError:
        return SourceGoneError(
            f"shard {key} of count array {self._path!r} disappeared after its index was read; "
            "the store changed while it was read. Reopen it"
        )
