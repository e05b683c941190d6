"""Reading selected rows of a sharded count array without zarr's pipeline.

For arrays in the layout this package writes (``sharding_indexed`` with the
index at the end, shards spanning every column, inner codecs ``bytes`` +
``zstd``, index codecs ``bytes`` + ``crc32c``), a gather can locate and
decode inner chunks itself: the shard index is read once per shard and kept,
only the touched chunks' byte ranges are fetched (coalesced by the store's
``get_ranges``, or the whole shard when most of it is needed), and each
touched chunk is decoded exactly once by zstd on a worker thread.

Three chunk encodings are read. What writers write (``format/layout.py``)
are inner chunks of about 2 MiB of rows, each a Blosc container of
checksummed zstd blocks of a few rows and a crc32c (``encoding/blosc_blocks.py``):
only the blocks of the wanted rows are decoded (one-row blocks of a strip's
chunks as one zstd stream, into one buffer; a whole chunk's blocks as one
stream too, its crc32c checked). Stores written before hold large row-framed chunks
(``encoding/row_frames.py``): only the frames of the wanted rows are read and
decoded (on a local disk by the compiled ``read_row_frames``); or, briefly
during issue 14, chunks of a few rows each one plain zstd frame: the touched
chunks of a run of row chunks are fetched together (local files with
``pread``, consecutive chunks in one call) and decoded as one zstd stream.

The selected rows of each row chunk are handed, as one *strip*, to a
:class:`~cytearc_vfs.read.placement.Placement` on that same worker thread, which
writes them straight into the caller's output. So a read makes no
intermediate block, and the copies into the output run in parallel with
other chunks' decoding. zarr's per-chunk overhead (a few hundred
microseconds of Python) disappears too, which matters when a read touches
hundreds of small chunks.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Buffer, Callable, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import google_crc32c
import numpy as np
import numpy.typing as npt
import zarr
import zstandard
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from ..encoding.blosc_blocks import BlockChunk, DamagedChunkError, chunk_block_bytes, open_chunk
from ..encoding.row_frames import frame_index, frame_rows, rows_per_frame
from ..errors import RecordShapeError
from ..format.shard_tables import ShardTable, read_shard_table
from . import range_requests
from .decode_threads import hand_over, thread_decompressor, thread_scratch
from .local_ranges import pread_ranges, read_local_ranges
from .placement import Placement, chunk_runs
from .range_requests import (
    COALESCE_RATIO,
    MAX_RANGE_REQUESTS,
    SMALL_GAP_BYTES,
    WHOLE_SHARD_SHARE,
    coalesce_ranges,
)
from .read_stats import CountingStore, ReadCounters

ReadRowFrames = Callable[
    [int, int, Buffer, Buffer, Buffer, Buffer, Buffer, int, int], tuple[int, int] | None
]
ReadRanges = Callable[[int, Buffer, Buffer, Buffer], int]
read_row_frames: ReadRowFrames | None
read_ranges: ReadRanges | None
try:
    from ..encoding._kernels import read_ranges, read_row_frames
except ImportError:  # installed without a C compiler: chunks are read whole, in Python
    read_row_frames = read_ranges = None

__all__ = ["COALESCE_RATIO", "ShardedReader", "coalesce_ranges", "fast_reader_for"]

Indices = npt.NDArray[np.int64]
MISSING = 2**64 - 1
# Bytes of selected rows placed at once: the rows of many small chunks go into
# the output in one numpy call rather than one per chunk, and a decoding
# thread never holds a strip larger than this.
STRIP_BATCH_BYTES = 8 << 20
# One-row blocks at least this wide are decoded straight into their strip
# rows: a decode call per row costs under 2 % of decoding it, and the strip
# is spared a copy; narrower rows are decoded a strip at a time.
WIDE_ROW_BYTES = 64 << 10


def fast_reader_for(array: zarr.Array[Any]) -> ShardedReader | None:
    """A :class:`ShardedReader` when ``array`` uses the layout it understands, else ``None``."""
    codecs = array.metadata.codecs if array.metadata.zarr_format == 3 else ()
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec) or array.ndim != 2:
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
    assert array.shards is not None
    if array.shards[1] < array.shape[1]:
        return None  # a row chunk would span shards; zarr's pipeline reads those
    store = array.store_path.store
    table = read_shard_table(
        array.attrs, shards=-(-int(array.shape[0]) // int(array.shards[0])), where=array.path
    )
    return ShardedReader(
        store,
        array.path,
        (int(array.shape[0]), int(array.shape[1])),
        (int(sharding.chunk_shape[0]), int(sharding.chunk_shape[1])),
        (int(array.shards[0]), int(array.shards[1])),
        array.dtype,
        local_files=_local_files(store),
        shard_table=table,
        blosc_block_bytes=int(inner[1].blocksize) if isinstance(inner[1], BloscCodec) else None,
    )


def _batches(wanted: Indices, row_bytes: int) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of row chunks whose ``wanted`` rows make a strip of about
    :data:`STRIP_BATCH_BYTES` (rows of ``row_bytes``); each at least one chunk.

    Counted in wanted rows, not chunk rows: a read of scattered cells wants a
    few rows of each large chunk, and a strip per few chunks would cost a
    strip's fixed work (a compiled read, a decode call, a placement) for a
    handful of rows.

    >>> _batches(np.array([2, 2, 2, 2, 2]), 1 << 22)  # 2 rows of 4 MiB a strip
    [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    >>> _batches(np.array([1, 0, 3, 1]), 1 << 20)
    [(0, 4)]
    """
    if not len(wanted):
        return []
    rows_per_strip = max(1, STRIP_BATCH_BYTES // max(1, row_bytes))
    before = np.cumsum(wanted) - wanted  # wanted rows before each chunk
    strip = before // rows_per_strip
    edges = [0, *(np.flatnonzero(np.diff(strip)) + 1).tolist(), len(wanted)]
    return list(pairwise(edges))


def _local_files(store: Store) -> tuple[str, ReadCounters | None] | None:
    """The directory of a plain local store (and its counters), whose files are read directly.

    Only an unwrapped :class:`LocalStore` (or one inside a :class:`CountingStore`)
    qualifies: any other wrapper (latency, faults, caching) must see every fetch.
    """
    counters = None
    if isinstance(store, CountingStore):
        counters = store.counters
        store = store.wrapped
    if type(store) is LocalStore:
        return str(store.root), counters
    return None


class _PendingRows(NamedTuple):
    """One-row frames of a strip, waiting to be decoded together."""

    pieces: list[Any]
    """Each frame's bytes."""
    rows: list[int]
    """The strip row of each."""
    cols: list[tuple[int, int]]
    """(first strip column, number of frames) of each run of frames with one
    first column, in order."""

    def add(self, frames: Sequence[Any], lo: int, col0: int) -> None:
        """Add the frames of strip rows ``lo`` on, from strip column ``col0``."""
        self.pieces.extend(frames)
        self.rows.extend(range(lo, lo + len(frames)))
        if self.cols and self.cols[-1][0] == col0:  # the run continues
            self.cols[-1] = (col0, self.cols[-1][1] + len(frames))
        else:
            self.cols.append((col0, len(frames)))


class _ShardWork(NamedTuple):
    """What decoding one shard's touched chunks needs besides their bytes."""

    rows: Indices
    """The read's sorted unique rows."""
    row_chunks: Indices
    """The shard's touched row chunks."""
    bounds: Indices
    """Where each row chunk's rows start in ``rows`` (and where the last ends)."""
    col_chunks: Indices
    """Touched column chunks."""
    present: npt.NDArray[np.bool_]
    """Which (row chunk, column chunk) pairs are stored (the rest hold zeros)."""
    placement: Placement


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
    ) -> None:
        self._store = store
        # inner chunks are Blosc containers of zstd blocks of this many bytes
        # (the codec's blocksize) and a crc32c, else zstd frames
        self._blocks = blosc_block_bytes is not None
        # every shard index read is compared with the table its writer recorded
        self._table = shard_table
        # A local store's shard files are read with pread, only the touched
        # chunks, on the thread that decodes them: one thread hop per shard,
        # and no coalescing across gaps (which pays off only on object stores).
        self._local = local_files
        self._path = path
        self.shape = shape
        self.chunks = chunks
        self._per_shard = (shards[0] // chunks[0], shards[1] // chunks[1])
        self.dtype = np.dtype(dtype)
        self._wire = self.dtype.newbyteorder("<")
        # one-row frames decode straight into strip rows when no byte swap is needed
        self._native = self.dtype == self._wire
        self._indexes: dict[int, npt.NDArray[np.uint64] | None] = {}
        self.col_chunks = -(-shape[1] // chunks[1])
        self.zero_column = self.col_chunks * chunks[1]
        """Index of the all-zero column appended to every strip (column maps point there)."""
        # Local row-framed chunks across every column are read by the compiled
        # loop: only the frames of the wanted rows, without the GIL; Blosc
        # chunks too, where their blocks are the frames' whole rows.
        self._rows_per_frame = rows_per_frame(chunks, self.dtype.itemsize)
        frame_bytes = chunk_block_bytes(chunks, self.dtype.itemsize)
        self._block_bytes = 0 if blosc_block_bytes is None else frame_bytes
        self._frame_reads = (
            read_row_frames is not None
            and blosc_block_bytes in (None, frame_bytes)
            and local_files is not None
            and self._native
            and self.col_chunks == 1
            and chunks[0] >= 2
            and self._rows_per_frame < chunks[0]  # else one plain frame, no index
        )
        # Chunks of at most one frame's rows spanning every column (the
        # portable layout): a strip's touched chunks decode as one stream.
        self._joined = (
            not self._blocks and self.col_chunks == 1 and self._rows_per_frame >= chunks[0]
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
        document = os.path.join(self._local[0], self._path, "zarr.json")
        if not os.path.exists(document):
            raise FileNotFoundError(
                errno.ENOENT,
                f"the array {self._path} is gone from {self._local[0]} (its zarr.json is "
                "missing): the store was deleted or moved while open; restore it and open "
                "it again",
                document,
            )

    @property
    def _index_bytes(self) -> int:
        return 16 * self._per_shard[0] * self._per_shard[1] + 4

    async def _index(self, shard_row: int) -> npt.NDArray[np.uint64] | None:
        if shard_row in self._indexes:
            return self._indexes[shard_row]
        raw = await self._store.get(
            self._key(shard_row), default_buffer_prototype(), SuffixByteRequest(self._index_bytes)
        )
        return self._keep_index(shard_row, None if raw is None else raw.to_bytes())

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
            body, checksum = data[:-4], data[-4:]
            if np.frombuffer(checksum, dtype="<u4")[0] != google_crc32c.value(body):
                raise RecordShapeError(
                    f"shard {self._key(shard_row)} has an index whose crc32c does not match; the "
                    "array is damaged. Re-import the dataset"
                )
            if self._table is not None:  # a damaged index is named as such first
                self._table.check_index(
                    self._key(shard_row), shard_row, checksum, where=f"count array {self._path!r}"
                )
            index = np.frombuffer(body, dtype="<u8").reshape(*self._per_shard, 2)
        self._indexes[shard_row] = index
        return index

    def _decode(
        self,
        data: Any,
        rows: list[int] | None,
        strip: npt.NDArray[Any],
        lo: int,
        col0: int,
        scratch: npt.NDArray[Any],
        pending: _PendingRows,
    ) -> None:
        """Decode the ``rows`` (sorted local indices, ``None``: all) of one inner chunk
        into ``strip``, from row ``lo`` and column ``col0`` on.

        ``scratch`` is a chunk-shaped buffer. A row-framed chunk
        (:mod:`~cytearc_vfs.encoding.row_frames`) decodes only the frames that hold
        ``rows``; one-row frames are added to ``pending``, to be decoded with
        the strip's other one-row frames in one call (:meth:`_inflate_pending`).
        A single-frame chunk stops once the last of ``rows`` is out (zstd
        decodes in 128 KiB blocks, so the blocks after it are skipped).
        A Blosc chunk decodes only the blocks that hold ``rows``
        (:meth:`_decode_blocks`).
        """
        if self._blocks:
            try:
                pended = self._decode_blocks(data, rows, scratch, pending, (strip, lo, col0))
            except DamagedChunkError as exc:
                raise RecordShapeError(
                    f"an inner chunk of {self._path} does not decode ({exc}); the array is "
                    "damaged. Re-import the dataset"
                ) from exc
            if not pended:
                n = scratch.shape[0] if rows is None else len(rows)
                block = scratch[:n] if rows is None else scratch[rows]
                strip[lo : lo + n, col0 : col0 + scratch.shape[1]] = block
            return
        frames = frame_index(data)
        if frames is not None and rows is not None and frames.rows_per_frame == 1 and self._native:
            # the common case first, with as little work as possible: this
            # runs once per chunk a read touches
            offsets = frames.offsets
            pending.add([data[offsets[row] : offsets[row + 1]] for row in rows], lo, col0)
            return
        r, c = scratch.shape
        flat = memoryview(scratch.reshape(-1).view(np.uint8))
        row_bytes = flat.nbytes // r
        if frames is None:
            stop = r if rows is None else rows[-1] + 1
            self._inflate(data, flat[: stop * row_bytes])
        elif rows is None:
            self._inflate(data, flat)
        else:
            per_frame, offsets = frames
            wanted = dict.fromkeys(row // per_frame for row in rows)
            # consecutive frames decode as one stream
            run_start = previous = -2
            for frame in [*wanted, -1]:
                if frame == previous + 1:
                    previous = frame
                    continue
                if run_start >= 0:
                    first, stop = run_start * per_frame, min(r, (previous + 1) * per_frame)
                    self._inflate(
                        data[offsets[run_start] : offsets[previous + 1]],
                        flat[first * row_bytes : stop * row_bytes],
                    )
                run_start = previous = frame
        n = r if rows is None else len(rows)
        strip[lo : lo + n, col0 : col0 + c] = scratch[:n] if rows is None else scratch[rows]

    def _open_chunk(self, data: Any, nbytes: int, *, whole: bool) -> BlockChunk:
        """A Blosc chunk's header, its crc32c checked if it is decoded ``whole`` (it is
        too when not made of separate blocks); :class:`DamagedChunkError` where they
        do not fit."""
        chunk = open_chunk(data, verify=whole)
        if not whole and not chunk.n_blocks:
            chunk = open_chunk(data, verify=True)
        if chunk.nbytes != nbytes:
            raise DamagedChunkError(f"it holds {chunk.nbytes} bytes, not the chunk's {nbytes}")
        return chunk

    def _decode_blocks(
        self,
        data: Any,
        rows: list[int] | None,
        scratch: npt.NDArray[Any],
        pending: _PendingRows,
        at: tuple[npt.NDArray[Any], int, int],
    ) -> bool:
        """:meth:`_decode` for a Blosc chunk: only the blocks holding ``rows``.

        One-row blocks go to the strip ``at`` (strip, first row, first
        column): rows of :data:`WIDE_ROW_BYTES` or more are decoded straight
        into their strip rows, smaller ones join ``pending`` (decoded with the
        strip's others in one call), as one-row frames do; then it returns
        ``True``. Else other blocks, or all of a chunk wanted whole
        (its crc32c checked first), are decoded into ``scratch`` where they
        lie, and a chunk not made of separate zstd blocks (stored raw, or
        written by another Blosc) by c-blosc; it returns ``False``.
        """
        flat = memoryview(scratch.reshape(-1).view(np.uint8))
        row_bytes = flat.nbytes // scratch.shape[0]
        chunk = self._open_chunk(data, flat.nbytes, whole=rows is None)
        if not chunk.n_blocks:  # stored raw, or not in separate zstd blocks
            try:
                chunk.decode_whole(flat)
            except RuntimeError as exc:  # c-blosc's error, as numcodecs raises it
                raise RecordShapeError(
                    f"an inner chunk of {self._path} does not decode ({exc}); the array is "
                    "damaged. Re-import the dataset"
                ) from exc
        elif rows is None:
            self._inflate_blocks(chunk, range(chunk.n_blocks), flat)
        else:
            block_bytes = chunk.block_bytes
            if block_bytes == row_bytes and self._native:
                frames = [chunk.frame(row) for row in rows]
                strip, lo, col0 = at
                if row_bytes >= WIDE_ROW_BYTES:
                    width = scratch.shape[1]
                    for i, (frame, compressed) in enumerate(frames):
                        target = memoryview(strip[lo + i, col0 : col0 + width]).cast("B")
                        if compressed:
                            self._inflate(frame, target, exact=True)
                        elif len(frame) == len(target):
                            target[:] = frame
                        else:
                            raise DamagedChunkError(
                                f"block {rows[i]} is stored raw with {len(frame)} bytes, "
                                f"not {len(target)}"
                            )
                    return True
                if all(compressed for _, compressed in frames):
                    pending.add([frame for frame, _ in frames], lo, col0)
                    return True
            # the blocks each wanted row spans (whole rows a block, in this layout)
            wanted = dict.fromkeys(
                block
                for row in rows
                for block in range(
                    row * row_bytes // block_bytes, ((row + 1) * row_bytes - 1) // block_bytes + 1
                )
            )
            self._inflate_blocks(chunk, list(wanted), flat)
        return False

    def _inflate_blocks(self, chunk: BlockChunk, blocks: Sequence[int], flat: memoryview) -> None:
        """Decode ``blocks`` (ascending) of ``chunk`` where they lie in ``flat``.

        Each run of consecutive compressed blocks is joined and decoded as
        one zstd stream (one call: a whole chunk's blocks cost one call, as a
        single frame would); raw blocks are copied.
        """
        size = chunk.block_bytes
        run: list[Any] = []
        run_start = run_end = -1
        for block in [*blocks, -1]:
            frame, compressed = chunk.frame(block) if block >= 0 else (b"", False)
            if compressed and block == run_end:
                run.append(frame)
                run_end = block + 1
                continue
            if run:
                target = flat[run_start * size : min(chunk.nbytes, run_end * size)]
                self._inflate(b"".join(run), target, exact=True)
                run = []
            if block < 0:
                break
            if compressed:
                run, run_start, run_end = [frame], block, block + 1
                continue
            target = flat[block * size : block * size + chunk.block_size(block)]
            if len(frame) != len(target):
                raise DamagedChunkError(
                    f"block {block} is stored raw with {len(frame)} bytes, not {len(target)}"
                )
            target[:] = frame

    def _inflate_pending(self, pending: _PendingRows, strip: npt.NDArray[Any]) -> None:
        """Decode ``pending`` one-row frames into their strip rows.

        The frames are joined and decoded as one zstd stream: one call, which
        releases the GIL once, into one buffer, placed with one copy per
        column chunk.
        """
        c = self.chunks[1]
        count = len(pending.pieces)
        values = thread_scratch(count * c * self.dtype.itemsize, name="pending")
        self._inflate(b"".join(pending.pieces), memoryview(values), exact=True)
        values_2d = values.view(self._wire).reshape(count, c)
        rows = np.asarray(pending.rows, dtype=np.intp)
        taken = 0
        for col0, n in pending.cols:
            strip[rows[taken : taken + n], col0 : col0 + c] = values_2d[taken : taken + n]
            taken += n
        pending.pieces.clear()
        pending.rows.clear()
        pending.cols.clear()

    def _inflate(self, data: Any, target: memoryview, *, exact: bool = False) -> None:
        """Decompress the zstd frames ``data`` until ``target`` is full.

        With ``exact``, ``data`` must hold exactly ``target``'s bytes: frames
        joined from several chunks must not shift each other's rows.
        """
        try:
            with thread_decompressor().stream_reader(data, read_across_frames=True) as reader:
                filled = 0
                while filled < len(target):
                    n = reader.readinto(target[filled:])
                    if n == 0:
                        raise zstandard.ZstdError(f"the chunk ends after {filled} bytes")
                    filled += n
                if exact and reader.read(1):
                    raise zstandard.ZstdError(f"the frames hold more than {filled} bytes")
        except zstandard.ZstdError as exc:
            raise RecordShapeError(
                f"an inner chunk of {self._path} does not decode ({exc}); the array is damaged. "
                "Re-import the dataset"
            ) from exc

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
            found = await asyncio.gather(
                *(self._whole(shard) for shard in dense),
                *(self._index(shard) for shard, _ in missing if shard not in dense),
            )
            wholes = dict(zip(dense, found[: len(dense)], strict=True))
        elif missing:
            await asyncio.gather(*(self._index(shard) for shard, _ in missing))
        # Shards are planned here, without a task each: once the indexes are
        # known a read's planning is pure computation.
        jobs: list[Awaitable[None]] = []
        decoded = 0
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
            work = _ShardWork(
                rows, row_chunks[a:b], bounds[a : b + 1], col_chunks, present, placement
            )
            decoded += len(offsets)
            if self._local is not None and len(offsets):
                root, counters = self._local
                # pread and zstd release the GIL: reading, decoding and placing
                # off the event loop keeps other shards flowing
                path = f"{root}/{self._key(shard_row)}"
                jobs.append(hand_over(self._read_local, path, offsets, sizes, counters, work))
            else:
                jobs.append(
                    self._fetch_and_decode(
                        shard_row, index, offsets, sizes, work, wholes.get(shard_row)
                    )
                )
        await asyncio.gather(*jobs)
        return decoded

    async def _fetch_and_decode(
        self,
        shard_row: int,
        index: npt.NDArray[np.uint64] | None,
        chunk_offsets: Indices,
        chunk_sizes: Indices,
        work: _ShardWork,
        whole: Any = None,
    ) -> None:
        """Fetch a shard's touched chunks from the store (unless ``whole``, the shard
        this read already fetched, holds them), then decode and place them."""
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
                fetched_runs = await asyncio.gather(
                    *(self._store.get(key, prototype, RangeByteRequest(a, b)) for a, b, _ in runs)
                )
                for (start, _, members), buffer in zip(runs, fetched_runs, strict=True):
                    if buffer is None:
                        raise self._vanished(key)
                    data = buffer.as_numpy_array()
                    for i in members:
                        blobs[i] = data[offsets[i] - start : offsets[i] - start + sizes[i]]
        await hand_over(self._decode_and_place, work, blobs)

    def _vanished(self, key: str) -> OSError:
        return FileNotFoundError(
            f"shard {key} of count array {self._path!r} disappeared after its index was read; "
            "the store changed while it was read. Reopen it"
        )

    def _read_local(
        self,
        path: str,
        offsets: Indices,
        sizes: Indices,
        counters: ReadCounters | None,
        work: _ShardWork,
    ) -> None:
        read_bytes = 0
        if self._joined:
            self._read_local_joined(path, offsets, sizes, work)
            if counters is not None:
                counters.add(nbytes=int(sizes.sum()), requests=1)
            return
        if self._frame_reads:
            done, done_chunks, read_bytes = self._read_local_frames(path, offsets, sizes, work)
            # a chunk not framed as expected (zarr rewrote it as one frame):
            # the rest of the job reads whole chunks
            rows, row_chunks, bounds, col_chunks, present, placement = work
            work = _ShardWork(
                rows, row_chunks[done:], bounds[done:], col_chunks, present[done:], placement
            )
            offsets, sizes = offsets[done_chunks:], sizes[done_chunks:]
        if len(work.row_chunks):
            blobs = read_local_ranges(path, offsets.tolist(), sizes.tolist())
            self._decode_and_place(work, blobs)
        if counters is not None:
            counters.add(nbytes=read_bytes + int(sizes.sum()), requests=1)

    def _read_local_frames(
        self, path: str, chunk_offsets: Indices, chunk_sizes: Indices, work: _ShardWork
    ) -> tuple[int, int, int]:
        """Read, decode and place the frames of the wanted rows of a job's chunks, strip
        by strip, with the compiled ``read_row_frames`` (no GIL, only the frames read).

        Returns how many of the job's row chunks and of ``offsets`` it placed (all,
        unless a strip holds a chunk not framed as expected), and the bytes it read.
        """
        assert read_row_frames is not None
        rows, _, bounds, _, _, placement = work
        r, c = self.chunks
        stored, entry_of, per_chunk, batches = self._strips(work)
        read_bytes = done = 0
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            for first, last in batches:
                start, stop = int(bounds[first]), int(bounds[last])
                kept = np.repeat(stored[first:last], per_chunk[first:last])
                local = rows[start:stop][kept] % r
                a, b = entry_of[first], entry_of[last]
                counts = per_chunk[first:last][stored[first:last]]
                frames = thread_scratch(int(chunk_sizes[a:b].sum()), "frames")
                try:
                    got = read_row_frames(
                        descriptor,
                        r,
                        chunk_offsets[a:b],
                        chunk_sizes[a:b],
                        counts,
                        local,
                        frames,
                        self._rows_per_frame,
                        self._block_bytes,
                    )
                except EOFError as exc:
                    raise OSError(f"{path}: {exc}; the shard is truncated") from None
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror, path) from None
                if got is None:
                    break
                read_bytes += got[1]
                decoded, picks = frame_rows(local, counts, r, self._rows_per_frame)
                values = thread_scratch(decoded * c * self.dtype.itemsize, "pending")
                self._decode_frames(frames[: got[0]], b - a, values)
                strip = np.empty((stop - start, c + 1), dtype=self.dtype)
                self._rows_into_strip(strip, values, decoded, picks, kept)
                strip[:, c] = 0
                placement.place(start, strip)
                done = last
        finally:
            os.close(descriptor)
        return done, entry_of[done], read_bytes

    def _read_local_joined(
        self, path: str, chunk_offsets: Indices, chunk_sizes: Indices, work: _ShardWork
    ) -> None:
        """Read a job's touched chunks of one shard file, strip by strip, each strip's
        chunks into one buffer (consecutive chunks in one ``pread``; with the compiled
        ``read_ranges``, without the GIL), and place them."""
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:

            def read(a: int, b: int) -> Any:
                joined = thread_scratch(int(chunk_sizes[a:b].sum()), "frames")
                try:
                    if read_ranges is not None:
                        read_ranges(descriptor, chunk_offsets[a:b], chunk_sizes[a:b], joined)
                    else:
                        pread_ranges(descriptor, chunk_offsets[a:b], chunk_sizes[a:b], joined)
                except EOFError as exc:
                    raise OSError(f"{path}: {exc}; the shard is truncated") from None
                return joined

            self._place_joined(work, read)
        finally:
            os.close(descriptor)

    def _place_joined(self, work: _ShardWork, read: Callable[[int, int], Any]) -> None:
        """Decode and place a job's chunks of at most one frame each (the portable layout).

        ``read(a, b)`` returns the stored bytes of the job's present chunks
        ``a:b``, one after another. The chunks of each strip decode as one zstd
        stream into one buffer (exactly their rows: none shifted), from which
        the wanted rows are taken with one copy.
        """
        rows, _, bounds, _, _, placement = work
        r, c = self.chunks
        stored, entry_of, per_chunk, batches = self._strips(work)
        for first, last in batches:
            start, stop = int(bounds[first]), int(bounds[last])
            strip = np.empty((stop - start, c + 1), dtype=self.dtype)
            strip[:, c] = 0
            a, b = entry_of[first], entry_of[last]
            if a == b:  # only chunks never written: the fill value
                strip[:, :c] = 0
                placement.place(start, strip)
                continue
            kept = np.repeat(stored[first:last], per_chunk[first:last])
            local = rows[start:stop][kept] % r
            counts = per_chunk[first:last][stored[first:last]]
            decoded, picks = frame_rows(local, counts, r, r)
            values = thread_scratch(decoded * c * self.dtype.itemsize, "pending")
            self._decode_frames(read(a, b), b - a, values)
            self._rows_into_strip(strip, values, decoded, picks, kept)
            placement.place(start, strip)

    def _strips(
        self, work: _ShardWork
    ) -> tuple[npt.NDArray[np.bool_], list[int], Indices, list[tuple[int, int]]]:
        """For a job of chunks spanning every column: which row chunks are stored,
        where each one's entries start among the stored chunks' offsets (missing
        chunks have none), the wanted rows of each, and the row chunks per strip."""
        stored = work.present[:, 0]
        entry_of = np.concatenate(([0], np.cumsum(stored))).tolist()
        c = self.chunks[1]
        per_chunk = np.diff(work.bounds)
        return stored, entry_of, per_chunk, _batches(per_chunk, (c + 1) * self.dtype.itemsize)

    def _rows_into_strip(
        self,
        strip: npt.NDArray[Any],
        values: npt.NDArray[np.uint8],
        decoded: int,
        picks: npt.NDArray[np.intp] | None,
        kept: npt.NDArray[np.bool_],
    ) -> None:
        """Copy the wanted rows of ``values`` (``decoded`` rows, as decoded; ``picks``
        the wanted ones, ``None``: all) into the first columns of ``strip``; the strip
        rows whose chunk was never written (not ``kept``) hold the fill value."""
        c = self.chunks[1]
        block = values.view(self._wire).reshape(decoded, c)
        # the frames' or chunks' other rows were decoded too (unless every decoded
        # row is wanted: rows are sorted and unique, so then they are all, in order)
        if picks is not None and len(picks) != decoded:
            block = block[picks]
        if len(block) == len(strip):
            strip[:, :c] = block
        else:
            strip[:, :c] = 0
            strip[kept, :c] = block

    def _decode_frames(self, frames: Any, n_chunks: int, values: npt.NDArray[Any]) -> None:
        """Decode the joined frames of ``n_chunks`` chunks (their wanted rows' row frames,
        or whole portable chunks) into ``values`` (exactly: each frame's rows are
        decoded once, none shifted)."""
        self._inflate(frames, memoryview(values), exact=True)

    def _decode_and_place(self, work: _ShardWork, blobs: Sequence[Any]) -> None:
        if self._joined:
            self._place_joined(work, lambda a, b: b"".join(blobs[a:b]))
            return
        rows, _, bounds, col_chunks, present, placement = work
        r, c = self.chunks
        width = self.zero_column
        itemsize = self.dtype.itemsize
        blob_iter = iter(blobs)
        # Each chunk is decoded into one small reused buffer (it stays in the
        # core's cache), only as far as its selected rows need, and those rows
        # are copied into the strip at once.
        chunk = thread_scratch(r * c * itemsize).view(self._wire).reshape(r, c)
        edges = bounds.tolist()
        first_row = edges[0]
        local = (rows[first_row : edges[-1]] % r).tolist()
        touched = col_chunks.tolist()
        present_list = present.tolist()
        pending = _PendingRows([], [], [])
        for first, last in _batches(np.diff(bounds), (width + 1) * itemsize):
            start, stop = edges[first], edges[last]
            strip = np.empty((stop - start, width + 1), dtype=self.dtype)
            if len(touched) < self.col_chunks:
                strip[:] = 0  # untouched column chunks read as zero
            for i in range(first, last):
                lo, hi = edges[i] - start, edges[i + 1] - start
                selected = (
                    None if hi - lo == r else local[edges[i] - first_row : edges[i + 1] - first_row]
                )
                for b, col_chunk in enumerate(touched):
                    if present_list[i][b]:
                        self._decode(
                            next(blob_iter), selected, strip, lo, col_chunk * c, chunk, pending
                        )
                    else:  # a chunk never written holds the fill value
                        strip[lo:hi, col_chunk * c : (col_chunk + 1) * c] = 0
            if pending.pieces:
                self._inflate_pending(pending, strip)
            strip[:, width] = 0
            placement.place(start, strip)
