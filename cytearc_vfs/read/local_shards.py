"""Reading the touched chunks of a local store's shard files directly.

A plain local store's shard files are read with ``pread``, only the touched
chunks, on the thread that decodes them: one thread hop per shard, and no
coalescing across gaps (which pays off only on object stores). Row-framed
chunks (and Blosc chunks whose blocks are whole rows) spanning every column
are read by the compiled ``read_row_frames``: only the frames of the wanted
rows, without the GIL. Chunks of the portable layout (at most one frame each)
are read a strip at a time into one buffer, consecutive chunks in one call
(the compiled ``read_ranges``, or ``preadv``), and decoded as one zstd stream.
"""

from __future__ import annotations

import os
from collections.abc import Buffer, Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.store import Store
from zarr.storage import LocalStore

from ..encoding.blosc_blocks import chunk_block_bytes
from ..encoding.row_frames import frame_rows
from .decode_threads import thread_scratch
from .local_ranges import pread_ranges, read_local_ranges
from .opened_files import ShardFiles, open_checked
from .read_stats import CountingStore, ReadCounters
from .strip_assembly import ShardWork, StripAssembler

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

__all__ = ["LocalShardReader", "local_files"]

Indices = npt.NDArray[np.int64]


def local_files(store: Store) -> tuple[str, ReadCounters | None] | None:
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


class LocalShardReader:
    """Reads, decodes and places a job's touched chunks of one local shard file.

    Parameters
    ----------
    root
        The local store's directory.
    counters
        Where the bytes and requests read are counted (``None``: nowhere).
    assembler
        The array's strip assembler (and through it, its chunk decoder).
    rows_per_frame
        Rows of a row frame of the array's chunks.
    blosc_block_bytes
        The Blosc codec's block size, or ``None`` when chunks are zstd frames.
    files
        The shard files as their indexes were read: each descriptor a read opens
        is compared with them (``None``: not a bound source; nothing compared).
    """

    def __init__(
        self,
        root: str,
        counters: ReadCounters | None,
        assembler: StripAssembler,
        *,
        rows_per_frame: int,
        blosc_block_bytes: int | None,
        files: ShardFiles | None = None,
    ) -> None:
        self.root = root
        """The local store's directory."""
        self.files = files
        """The shard files as their indexes were read (see :mod:`.opened_files`)."""
        self.rows_per_frame = rows_per_frame
        """Rows of a row frame of the array's chunks."""
        self.counters = counters
        """Where the bytes and requests read are counted (``None``: nowhere)."""
        self._assembler = assembler
        decoder = assembler.decoder
        chunks = decoder.chunks
        # Blosc chunks are read by the compiled loop too, where their blocks
        # are the frames' whole rows
        frame_bytes = chunk_block_bytes(chunks, decoder.dtype.itemsize)
        self._block_bytes = 0 if blosc_block_bytes is None else frame_bytes
        self.frame_reads = (
            read_row_frames is not None
            and blosc_block_bytes in (None, frame_bytes)
            and decoder.native
            and assembler.col_chunks == 1
            and chunks[0] >= 2
            and rows_per_frame < chunks[0]  # else one plain frame, no index
        )
        """Whether the compiled loop reads only the wanted rows' frames."""

    def read(self, path: str, offsets: Indices, sizes: Indices, work: ShardWork) -> None:
        """Read the chunks at ``offsets`` (of ``sizes`` bytes) of the shard file ``path``,
        decode their wanted rows and place them as ``work`` says."""
        counters = self.counters
        read_bytes = 0
        if self._assembler.joined:
            self._read_joined(path, offsets, sizes, work)
            if counters is not None:
                counters.add(nbytes=int(sizes.sum()), requests=1)
            return
        if self.frame_reads:
            done, done_chunks, read_bytes = self._read_frames(path, offsets, sizes, work)
            # a chunk not framed as expected (zarr rewrote it as one frame):
            # the rest of the job reads whole chunks
            rows, row_chunks, bounds, col_chunks, present, placement = work
            work = ShardWork(
                rows, row_chunks[done:], bounds[done:], col_chunks, present[done:], placement
            )
            offsets, sizes = offsets[done_chunks:], sizes[done_chunks:]
        if len(work.row_chunks):
            blobs = read_local_ranges(path, offsets.tolist(), sizes.tolist(), self.files)
            self._assembler.decode_and_place(work, blobs)
        if counters is not None:
            counters.add(nbytes=read_bytes + int(sizes.sum()), requests=1)

    def _read_frames(
        self, path: str, chunk_offsets: Indices, chunk_sizes: Indices, work: ShardWork
    ) -> tuple[int, int, int]:
        """Read, decode and place the frames of the wanted rows of a job's chunks, strip
        by strip, with the compiled ``read_row_frames`` (no GIL, only the frames read).

        Returns how many of the job's row chunks and of ``offsets`` it placed (all,
        unless a strip holds a chunk not framed as expected), and the bytes it read.
        """
        assert read_row_frames is not None
        rows, _, bounds, _, _, placement = work
        assembler = self._assembler
        decoder = assembler.decoder
        r, c = decoder.chunks
        dtype = decoder.dtype
        rows_per_frame = self.rows_per_frame
        stored, entry_of, per_chunk, batches = assembler.strips(work)
        read_bytes = done = 0
        descriptor = open_checked(path, self.files)
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
                        rows_per_frame,
                        self._block_bytes,
                    )
                except EOFError as exc:
                    raise OSError(f"{path}: {exc}; the shard is truncated") from None
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror, path) from None
                if got is None:
                    break
                read_bytes += got[1]
                decoded, picks = frame_rows(local, counts, r, rows_per_frame)
                values = thread_scratch(decoded * c * dtype.itemsize, "pending")
                decoder.decode_frames(frames[: got[0]], b - a, values)
                strip = np.empty((stop - start, c + 1), dtype=dtype)
                assembler.rows_into_strip(strip, values, decoded, picks, kept)
                strip[:, c] = 0
                placement.place(start, strip)
                done = last
        finally:
            os.close(descriptor)
        return done, entry_of[done], read_bytes

    def _read_joined(
        self, path: str, chunk_offsets: Indices, chunk_sizes: Indices, work: ShardWork
    ) -> None:
        """Read a job's touched chunks of one shard file, strip by strip, each strip's
        chunks into one buffer (consecutive chunks in one ``pread``; with the compiled
        ``read_ranges``, without the GIL), and place them."""
        descriptor = open_checked(path, self.files)
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

            self._assembler.place_joined(work, read)
        finally:
            os.close(descriptor)
