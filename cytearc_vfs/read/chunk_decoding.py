"""Decoding the wanted rows of one inner chunk of a sharded count array.

Three chunk encodings are read. What writers write (``format/layout.py``)
are inner chunks of about 2 MiB of rows, each a Blosc container of
checksummed zstd blocks of a few rows and a crc32c (``encoding/blosc_blocks.py``):
only the blocks of the wanted rows are decoded (one-row blocks of a strip's
chunks as one zstd stream, into one buffer; a whole chunk's blocks as one
stream too, its crc32c checked). Stores written before hold large row-framed chunks
(``encoding/row_frames.py``): only the frames of the wanted rows are decoded;
or, briefly during issue 14, chunks of a few rows each one plain zstd frame,
decoded only as far as the last wanted row.

A :class:`ChunkDecoder` knows one array's chunk shape, dtype and encoding;
the shard reader (``shard_reader.py``) owns one and calls it from the
decoding threads, once per touched chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import zstandard

from ..encoding.blosc_blocks import BlockChunk, DamagedChunkError, open_chunk
from ..encoding.row_frames import frame_index
from ..errors import RecordShapeError
from .decode_threads import thread_decompressor, thread_scratch

__all__ = ["WIDE_ROW_BYTES", "ChunkDecoder", "PendingRows", "failed_check"]

# One-row blocks at least this wide are decoded straight into their strip
# rows: a decode call per row costs under 2 % of decoding it, and the strip
# is spared a copy; narrower rows are decoded a strip at a time.
WIDE_ROW_BYTES = 64 << 10


def failed_check(check: str) -> RecordShapeError:
    """The error for stored bytes that fail their check (``check`` says which, and how).

    The error keeps ``check`` as its attribute ``check``: a reader of a
    remote source fetches such bytes once more (they may have been damaged
    on the way) and, if they fail again, says so in words of its own.
    """
    error = RecordShapeError(f"{check}; the array is damaged. Re-import the dataset")
    error.check = check  # type: ignore[attr-defined]
    return error


class PendingRows(NamedTuple):
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


class ChunkDecoder:
    """Decodes selected rows of one array's inner chunks (Blosc blocks, row frames or
    single zstd frames) into strips; thread-safe (it keeps no state between calls).

    Parameters
    ----------
    path
        The array's path, named in the errors of a chunk that does not decode.
    chunks
        The inner chunk shape (rows, columns).
    dtype
        The values' dtype; chunks hold them little-endian.
    blocks
        Whether chunks are Blosc containers of zstd blocks (else zstd frames).
    """

    def __init__(
        self, path: str, chunks: tuple[int, int], dtype: np.dtype, *, blocks: bool
    ) -> None:
        self._path = path
        self._blocks = blocks
        self.chunks = chunks
        """The inner chunk shape (rows, columns)."""
        self.dtype = np.dtype(dtype)
        """The values' dtype."""
        self.wire = self.dtype.newbyteorder("<")
        """The dtype as stored: little-endian."""
        # one-row frames decode straight into strip rows when no byte swap is needed
        self.native = self.dtype == self.wire
        """Whether stored values need no byte swap."""

    def _undecodable(self, exc: Exception) -> RecordShapeError:
        """The error for an inner chunk that does not decode (``exc`` says why)."""
        return failed_check(f"an inner chunk of {self._path} does not decode ({exc})")

    def decode(
        self,
        data: Any,
        rows: list[int] | None,
        strip: npt.NDArray[Any],
        lo: int,
        col0: int,
        scratch: npt.NDArray[Any],
        pending: PendingRows,
    ) -> None:
        """Decode the ``rows`` (sorted local indices, ``None``: all) of one inner chunk
        into ``strip``, from row ``lo`` and column ``col0`` on.

        ``scratch`` is a chunk-shaped buffer. A row-framed chunk
        (:mod:`~cytearc_vfs.encoding.row_frames`) decodes only the frames that hold
        ``rows``; one-row frames are added to ``pending``, to be decoded with
        the strip's other one-row frames in one call (:meth:`inflate_pending`).
        A single-frame chunk stops once the last of ``rows`` is out (zstd
        decodes in 128 KiB blocks, so the blocks after it are skipped).
        A Blosc chunk decodes only the blocks that hold ``rows``
        (:meth:`_decode_blocks`).
        """
        if self._blocks:
            try:
                pended = self._decode_blocks(data, rows, scratch, pending, (strip, lo, col0))
            except DamagedChunkError as exc:
                raise self._undecodable(exc) from exc
            if not pended:
                n = scratch.shape[0] if rows is None else len(rows)
                block = scratch[:n] if rows is None else scratch[rows]
                strip[lo : lo + n, col0 : col0 + scratch.shape[1]] = block
            return
        frames = frame_index(data)
        if frames is not None and rows is not None and frames.rows_per_frame == 1 and self.native:
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
            self.inflate(data, flat[: stop * row_bytes])
        elif rows is None:
            self.inflate(data, flat)
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
                    self.inflate(
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
        pending: PendingRows,
        at: tuple[npt.NDArray[Any], int, int],
    ) -> bool:
        """:meth:`decode` for a Blosc chunk: only the blocks holding ``rows``.

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
                raise self._undecodable(exc) from exc
        elif rows is None:
            self._inflate_blocks(chunk, range(chunk.n_blocks), flat)
        else:
            block_bytes = chunk.block_bytes
            if block_bytes == row_bytes and self.native:
                frames = [chunk.frame(row) for row in rows]
                strip, lo, col0 = at
                if row_bytes >= WIDE_ROW_BYTES:
                    width = scratch.shape[1]
                    for i, (frame, compressed) in enumerate(frames):
                        target = memoryview(strip[lo + i, col0 : col0 + width]).cast("B")
                        if compressed:
                            self.inflate(frame, target, exact=True)
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
                self.inflate(b"".join(run), target, exact=True)
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

    def inflate_pending(self, pending: PendingRows, strip: npt.NDArray[Any]) -> None:
        """Decode ``pending`` one-row frames into their strip rows.

        The frames are joined and decoded as one zstd stream: one call, which
        releases the GIL once, into one buffer, placed with one copy per
        column chunk.
        """
        c = self.chunks[1]
        count = len(pending.pieces)
        values = thread_scratch(count * c * self.dtype.itemsize, name="pending")
        self.inflate(b"".join(pending.pieces), memoryview(values), exact=True)
        values_2d = values.view(self.wire).reshape(count, c)
        rows = np.asarray(pending.rows, dtype=np.intp)
        taken = 0
        for col0, n in pending.cols:
            strip[rows[taken : taken + n], col0 : col0 + c] = values_2d[taken : taken + n]
            taken += n
        pending.pieces.clear()
        pending.rows.clear()
        pending.cols.clear()

    def decode_frames(self, frames: Any, n_chunks: int, values: npt.NDArray[Any]) -> None:
        """Decode the joined frames of ``n_chunks`` chunks (their wanted rows' row frames,
        or whole portable chunks) into ``values`` (exactly: each frame's rows are
        decoded once, none shifted)."""
        self.inflate(frames, memoryview(values), exact=True)

    def inflate(self, data: Any, target: memoryview, *, exact: bool = False) -> None:
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
            raise self._undecodable(exc) from exc
