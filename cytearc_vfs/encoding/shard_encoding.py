"""Encoding whole shards of a count array directly, in the sharding codec's format.

zarr's sharding codec spends a few hundred microseconds of Python per inner
chunk when it writes, which dominates a count write with many chunks per
shard. A writer that holds a complete shard band can encode it itself. Each
inner chunk is the little-endian ``bytes`` of its values, then either

* (what writers write, ``block_bytes`` given) a Blosc container of zstd
  blocks of ``block_bytes``, each with its checksum, which zarr's ``blosc``
  codec reads (:mod:`~cytearc_vfs.encoding.blosc_blocks`);
* or (the layouts before, for tests and fixtures) zstd frames with content
  size and checksum: one plain frame, as ``ZstdCodec`` writes, for chunks of
  one frame's rows, else row frames (:mod:`~cytearc_vfs.encoding.row_frames`).

All-zero chunks are left out (as zarr does when ``write_empty_chunks`` is
off), and the shard ends with the index of ``(offset, nbytes)`` pairs,
``uint64`` little-endian, ``2**64-1`` for a missing chunk, followed by its
crc32c (the format of the Zarr v3 ``sharding_indexed`` codec with
``index_location="end"``). Compression runs on a thread pool: zstd releases
the GIL.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt

from .blosc_blocks import encode_chunk
from .row_frames import RowFrameEncoder, rows_per_frame

__all__ = ["ShardEncoder"]

MISSING = np.uint64(2**64 - 1)


class ShardEncoder:
    """Encodes dense shard bands of one array (chunks span the band's rows)."""

    def __init__(
        self,
        chunks: tuple[int, int],
        shards: tuple[int, int],
        dtype: np.dtype,
        *,
        level: int,
        pool: ThreadPoolExecutor,
        block_bytes: int | None = None,
    ) -> None:
        """``block_bytes``: Blosc blocks of this size (the current layout); ``None``:
        zstd frames (the layouts before)."""
        self._chunks = chunks
        self._block_bytes = block_bytes
        self._shards = shards
        self._dtype = np.dtype(dtype).newbyteorder("<")
        self._encoder = RowFrameEncoder(level=level)
        self._rows_per_frame = rows_per_frame(chunks, self._dtype.itemsize)
        self._pool = pool
        self._grid = (shards[0] // chunks[0], shards[1] // chunks[1])

    def _chunk(self, band: npt.NDArray[Any], row: int, col: int) -> bytes | None:
        r, c = self._chunks
        block = band[row * r : (row + 1) * r, col * c : (col + 1) * c]
        if not block.any():
            return None
        if block.shape != (r, c):
            padded = np.zeros((r, c), dtype=self._dtype)
            padded[: block.shape[0], : block.shape[1]] = block
            block = padded
        data = np.ascontiguousarray(block, dtype=self._dtype)
        if self._block_bytes is not None:
            return encode_chunk(data, self._block_bytes, self._encoder.compressor())
        return self._encoder.encode(data, rows_per_frame=self._rows_per_frame)

    def encode(self, band: npt.NDArray[Any]) -> bytes | None:
        """The shard bytes of ``band`` (at most one shard of rows), or ``None`` if all zero."""
        whole_rows = self._block_bytes is not None or self._rows_per_frame >= self._chunks[0]
        if self._grid[1] == 1 and whole_rows:
            return self._encode_row_chunks(band)
        rows, cols = self._grid
        coords = [(i, j) for i in range(rows) for j in range(cols)]
        # one task per worker over a contiguous run of chunks keeps dispatch cheap
        workers = max(1, getattr(self._pool, "_max_workers", 1))
        step = -(-len(coords) // workers)
        runs = [coords[k : k + step] for k in range(0, len(coords), step)]
        encoded = [
            data
            for run in self._pool.map(lambda run: [self._chunk(band, i, j) for i, j in run], runs)
            for data in run
        ]
        index = np.full((rows, cols, 2), MISSING, dtype="<u8")
        parts: list[bytes] = []
        offset = 0
        for (i, j), data in zip(coords, encoded, strict=True):
            if data is None:
                continue
            index[i, j] = (offset, len(data))
            parts.append(data)
            offset += len(data)
        if not parts:
            return None
        return _with_index(parts, index)

    def _encode_row_chunks(self, band: npt.NDArray[Any]) -> bytes | None:
        """:meth:`encode` for Blosc or single-frame chunks of whole rows.

        Such a chunk is a run of the band's bytes, compressed as it lies: no
        block copies (only the band's last, partial chunk is padded), and each
        chunk tested for zeros alone (a test of the whole band at once would
        copy it as booleans, over the write's memory budget).
        """
        r, c = self._chunks
        data = np.ascontiguousarray(band, dtype=self._dtype)
        if data.shape[1] != c:  # not a band of whole rows: pad it (never for this layout)
            padded = np.zeros((data.shape[0], c), dtype=self._dtype)
            padded[:, : data.shape[1]] = data
            data = padded
        n_full, tail_rows = divmod(data.shape[0], r)
        n_chunks = n_full + (tail_rows > 0)
        size = r * c * self._dtype.itemsize
        flat = memoryview(data.reshape(-1).view(np.uint8))
        tail = np.zeros((r, c), dtype=self._dtype)
        tail[:tail_rows] = data[n_full * r :]
        workers = max(1, getattr(self._pool, "_max_workers", 1))
        step = max(1, -(-n_chunks // workers))

        def chunk(i: int) -> tuple[npt.NDArray[Any], memoryview]:
            if i < n_full:
                return data[i * r : (i + 1) * r], flat[i * size : (i + 1) * size]
            return tail, memoryview(tail.reshape(-1).view(np.uint8))

        def compress(first: int) -> tuple[list[int], list[int], bytearray]:
            """The present chunks of a run, their sizes, and their bytes one after
            another. Each frame is appended and dropped at once: zstd's bytes
            object keeps its worst-case output allocation (about the chunk's
            size), so holding a shard's frames until the end would cost a band."""
            compressor = self._encoder.compressor()  # this thread's
            present, sizes, joined = [], [], bytearray()
            for i in range(first, min(n_chunks, first + step)):
                values, raw = chunk(i)
                if values.any():  # all-zero chunks are left out
                    if self._block_bytes is not None:
                        frame = encode_chunk(values, self._block_bytes, compressor)
                    else:
                        frame = compressor.compress(raw)
                    present.append(i)
                    sizes.append(len(frame))
                    joined += frame
            return present, sizes, joined

        runs = list(self._pool.map(compress, range(0, n_chunks, step)))
        present = [i for run in runs for i in run[0]]
        if not present:
            return None
        sizes = np.array([size for run in runs for size in run[1]], dtype="<u8")
        parts = [run[2] for run in runs]
        index = np.full((self._grid[0], 1, 2), MISSING, dtype="<u8")
        index[present, 0, 0] = np.cumsum(sizes) - sizes
        index[present, 0, 1] = sizes
        return _with_index(parts, index)


def _with_index(parts: Sequence[bytes | bytearray], index: npt.NDArray[np.uint64]) -> bytes:
    """A shard: its chunks, then their index and the index's crc32c."""
    index_bytes = index.tobytes()
    checksum = np.array([google_crc32c.value(index_bytes)], dtype="<u4").tobytes()
    return b"".join([*parts, index_bytes, checksum])
