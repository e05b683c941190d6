"""Assembling strips from a shard's touched chunks and handing them to a placement.

The selected rows of each run of row chunks are handed, as one *strip*, to a
:class:`~cytearc_vfs.read.placement.Placement` on the worker thread that
decoded them, which writes them straight into the caller's output. So a read
makes no intermediate block, and the copies into the output run in parallel
with other chunks' decoding. A strip holds the wanted rows of as many chunks
as make about :data:`STRIP_BATCH_BYTES`: the rows of many small chunks go
into the output in one numpy call rather than one per chunk.

A :class:`StripAssembler` decodes through the array's
:class:`~cytearc_vfs.read.chunk_decoding.ChunkDecoder`, from chunk bytes the
shard reader fetched (``shard_reader.py``) or read from a local file
(``local_shards.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..encoding.row_frames import frame_rows
from .chunk_decoding import ChunkDecoder, PendingRows
from .decode_threads import thread_scratch
from .placement import Placement

__all__ = ["STRIP_BATCH_BYTES", "ShardWork", "StripAssembler"]

Indices = npt.NDArray[np.int64]
# Bytes of selected rows placed at once: the rows of many small chunks go into
# the output in one numpy call rather than one per chunk, and a decoding
# thread never holds a strip larger than this.
STRIP_BATCH_BYTES = 8 << 20


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


class ShardWork(NamedTuple):
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


class StripAssembler:
    """Decodes a shard's touched chunks strip by strip and places each strip.

    A strip has the array's columns and one more, all zero, that column maps
    point at for features a source lacks.

    Parameters
    ----------
    decoder
        The array's chunk decoder (its chunk shape and dtype are the strips').
    col_chunks
        Column chunks of the array.
    joined
        Whether chunks hold at most one frame's rows across every column (the
        portable layout): a strip's chunks then decode as one zstd stream.
    """

    def __init__(self, decoder: ChunkDecoder, col_chunks: int, *, joined: bool) -> None:
        self.decoder = decoder
        """The array's chunk decoder."""
        self.joined = joined
        """Whether a strip's chunks decode as one stream (see the class)."""
        self._chunks = decoder.chunks
        self._dtype = decoder.dtype
        self._wire = decoder.wire
        self.col_chunks = col_chunks
        """Column chunks of the array."""
        self._width = col_chunks * decoder.chunks[1]

    def strips(
        self, work: ShardWork
    ) -> tuple[npt.NDArray[np.bool_], list[int], Indices, list[tuple[int, int]]]:
        """For a job of chunks spanning every column: which row chunks are stored,
        where each one's entries start among the stored chunks' offsets (missing
        chunks have none), the wanted rows of each, and the row chunks per strip."""
        stored = work.present[:, 0]
        entry_of = np.concatenate(([0], np.cumsum(stored))).tolist()
        c = self._chunks[1]
        per_chunk = np.diff(work.bounds)
        return stored, entry_of, per_chunk, _batches(per_chunk, (c + 1) * self._dtype.itemsize)

    def rows_into_strip(
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
        c = self._chunks[1]
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

    def place_joined(self, work: ShardWork, read: Callable[[int, int], Any]) -> None:
        """Decode and place a job's chunks of at most one frame each (the portable layout).

        ``read(a, b)`` returns the stored bytes of the job's present chunks
        ``a:b``, one after another. The chunks of each strip decode as one zstd
        stream into one buffer (exactly their rows: none shifted), from which
        the wanted rows are taken with one copy.
        """
        rows, _, bounds, _, _, placement = work
        r, c = self._chunks
        dtype = self._dtype
        decode_frames = self.decoder.decode_frames
        stored, entry_of, per_chunk, batches = self.strips(work)
        for first, last in batches:
            start, stop = int(bounds[first]), int(bounds[last])
            strip = np.empty((stop - start, c + 1), dtype=dtype)
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
            values = thread_scratch(decoded * c * dtype.itemsize, "pending")
            decode_frames(read(a, b), b - a, values)
            self.rows_into_strip(strip, values, decoded, picks, kept)
            placement.place(start, strip)

    def decode_and_place(self, work: ShardWork, blobs: Sequence[Any]) -> None:
        """Decode the wanted rows of a job's chunks from ``blobs`` (the present
        chunks' stored bytes, row-major) and place them, strip by strip."""
        if self.joined:
            self.place_joined(work, lambda a, b: b"".join(blobs[a:b]))
            return
        rows, _, bounds, col_chunks, present, placement = work
        r, c = self._chunks
        width = self._width
        dtype = self._dtype
        itemsize = dtype.itemsize
        decoder = self.decoder
        decode = decoder.decode
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
        pending = PendingRows([], [], [])
        for first, last in _batches(np.diff(bounds), (width + 1) * itemsize):
            start, stop = edges[first], edges[last]
            strip = np.empty((stop - start, width + 1), dtype=dtype)
            if len(touched) < self.col_chunks:
                strip[:] = 0  # untouched column chunks read as zero
            for i in range(first, last):
                lo, hi = edges[i] - start, edges[i + 1] - start
                selected = (
                    None if hi - lo == r else local[edges[i] - first_row : edges[i + 1] - first_row]
                )
                for b, col_chunk in enumerate(touched):
                    if present_list[i][b]:
                        decode(next(blob_iter), selected, strip, lo, col_chunk * c, chunk, pending)
                    else:  # a chunk never written holds the fill value
                        strip[lo:hi, col_chunk * c : (col_chunk + 1) * c] = 0
            if pending.pieces:
                decoder.inflate_pending(pending, strip)
            strip[:, width] = 0
            placement.place(start, strip)
