"""Inner chunks stored as row frames: zstd frames of a few rows each, with an index.

A zstd stream may hold several frames one after another, and a decoder
returns their contents concatenated (RFC 8878, section 3.1); it also skips
*skippable* frames, which carry data for applications. So an inner chunk of
a count array can be stored as one zstd frame per group of rows, followed by
a skippable frame that lists the compressed size of every row frame:

* zarr (numcodecs >= 0.16.4, whose zstd decodes concatenated frames) reads
  the chunk exactly as before: one chunk, one decode call, the same values.
* The gather reader reads the index and decodes only the frames that hold
  the rows it needs. A random gene of a ``countsT`` chunk of 26 genes costs
  one gene's decode, not up to 26; a random cell of a ``counts`` chunk the
  same. Inner chunks can therefore stay large (cheap for plain zarr, which
  pays ~0.25 ms of Python per chunk) and still be cheap to read row by row.

A row frame holds at least :data:`FRAME_MIN_BYTES` uncompressed (whole rows):
smaller frames compress worse and cost zarr's decoder a little per frame. A
chunk whose rows all fit in one frame is stored as a single plain frame, with
no index, as zarr itself would write it.

The index frame (all integers ``uint32`` little-endian)::

    magic 0x184D2A5E | payload size | n sizes of the row frames | rows per frame | n | b"CRF1"

Its fixed end (``rows per frame``, ``n``, tag) lets a reader find it from the
chunk's last bytes; :func:`frame_index` accepts it only if the magic, the
payload size and the frame sizes all agree with the chunk's length.
"""

from __future__ import annotations

import re
import struct
import threading
from functools import cache
from itertools import accumulate
from typing import Any, NamedTuple

import numcodecs
import numpy as np
import numpy.typing as npt
import zstandard

__all__ = [
    "FRAME_MIN_BYTES",
    "MIN_NUMCODECS",
    "FrameIndex",
    "RowFrameEncoder",
    "frame_index",
    "frame_rows",
    "require_multi_frame_zstd",
    "rows_per_frame",
]

FRAME_MIN_BYTES = 8 * 1024
# numcodecs decodes concatenated zstd frames from this release on (its pull request 757)
MIN_NUMCODECS = (0, 16, 4)
_MAGIC = 0x184D2A5E  # one of the sixteen skippable-frame magic numbers
_TAG = b"CRF1"
_END = struct.Struct("<II4s")  # rows per frame, number of frames, tag
_END_BYTES = _END.size
_HEADER = struct.Struct("<II")  # magic, payload size
_HEADER_BYTES = _HEADER.size


class FrameIndex(NamedTuple):
    """Where a row-framed chunk's frames are."""

    rows_per_frame: int
    offsets: list[int]
    """Start of each row frame in the chunk's bytes, and the end of the last one."""


def rows_per_frame(chunk_shape: tuple[int, int], itemsize: int) -> int:
    """Rows per frame of chunks of ``chunk_shape``: whole rows of at least ``FRAME_MIN_BYTES``.

    >>> rows_per_frame((26, 10_000), 1)
    1
    >>> rows_per_frame((131, 1_000), 1)
    9
    >>> rows_per_frame((4, 1_000), 1)  # one frame: stored as a plain chunk
    4
    """
    rows, cols = chunk_shape
    row_bytes = max(1, cols * itemsize)
    return min(max(1, rows), -(-FRAME_MIN_BYTES // row_bytes))


def frame_rows(
    rows: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], chunk_rows: int, per_frame: int
) -> tuple[int, npt.NDArray[np.intp] | None]:
    """Where the wanted rows are once their frames are decoded one after another.

    ``rows`` are the wanted rows of consecutive chunks (local to their chunk,
    sorted in each), ``counts`` how many belong to each chunk. Decoding the
    frames that hold them, in order, gives the first returned number of rows;
    the array says which of those is each wanted row (``None``: all, in order,
    as with one row per frame).

    >>> decoded, picks = frame_rows(np.array([1, 2, 7, 0]), np.array([3, 1]), 8, 3)
    >>> decoded, picks.tolist()  # frames 0 and 2 (2 rows) of chunk 0, frame 0 of chunk 1
    (8, [1, 2, 4, 5])
    """
    if per_frame == 1:
        return len(rows), None
    n_frames = -(-chunk_rows // per_frame)
    frame = rows // per_frame
    key = np.repeat(np.arange(len(counts), dtype=np.int64), counts) * n_frames + frame
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    last_rows = chunk_rows - (n_frames - 1) * per_frame
    sizes = np.where(frame[first] == n_frames - 1, last_rows, per_frame)
    starts = np.cumsum(sizes) - sizes
    picks = starts[np.cumsum(first) - 1] + rows % per_frame
    return int(sizes.sum()), picks.astype(np.intp, copy=False)


def frame_index(chunk: Any) -> FrameIndex | None:
    """The row frames of ``chunk`` (its stored bytes), or ``None`` for a single-frame chunk.

    >>> import numpy as np
    >>> encoder = RowFrameEncoder(level=1)
    >>> block = np.arange(6 * 4096, dtype=np.uint16).reshape(6, 4096)
    >>> index = frame_index(encoder.encode(block, rows_per_frame=2))
    >>> index.rows_per_frame, len(index.offsets) - 1
    (2, 3)
    >>> frame_index(encoder.encode(block, rows_per_frame=6)) is None
    True
    """
    # struct and plain ints: this runs once per chunk a read touches
    size = len(chunk) if isinstance(chunk, bytes) else memoryview(chunk).nbytes
    if size < _HEADER_BYTES + _END_BYTES:
        return None
    rows, n_frames, tag = _END.unpack_from(chunk, size - _END_BYTES)
    if tag != _TAG:
        return None
    payload = 4 * n_frames + _END_BYTES
    start = size - payload - _HEADER_BYTES
    if n_frames < 2 or rows < 1 or start < 0:
        return None
    if _HEADER.unpack_from(chunk, start) != (_MAGIC, payload):
        return None
    sizes = _sizes_format(n_frames).unpack_from(chunk, start + _HEADER_BYTES)
    offsets = list(accumulate(sizes, initial=0))
    if offsets[-1] != start:
        return None
    return FrameIndex(rows, offsets)


@cache
def _sizes_format(n_frames: int) -> struct.Struct:
    return struct.Struct(f"<{n_frames}I")


def require_multi_frame_zstd(installed: str) -> None:
    """Refuse a numcodecs that cannot decode row-framed chunks (before 0.16.4).

    Every zarr reader of this package's stores decodes zstd through
    numcodecs; an older one fails on the first row-framed chunk with
    "Destination buffer is too small". Failing at import names the remedy.

    >>> require_multi_frame_zstd("0.17.1")
    >>> require_multi_frame_zstd("0.15.1")
    Traceback (most recent call last):
    ...
    ImportError: numcodecs 0.15.1 cannot decode zstd chunks of several frames, which this package writes (docs/layout.md, "Inner chunks: row frames"); install numcodecs>=0.16.4
    """
    parts = [int(part) for part in re.findall(r"\d+", installed)[:3]]
    if tuple(parts) < MIN_NUMCODECS:
        raise ImportError(
            f"numcodecs {installed} cannot decode zstd chunks of several frames, which this "
            'package writes (docs/layout.md, "Inner chunks: row frames"); install '
            "numcodecs>=" + ".".join(map(str, MIN_NUMCODECS))
        )


require_multi_frame_zstd(numcodecs.__version__)

_THREAD = threading.local()
#: Every row frame carries zstd's content checksum (XXH64 of its rows), which
#: every zstd decoder checks: a flipped byte is a decoding error in zarr,
#: zarrs, tensorstore and the gather reader alike, never a wrong value.
FRAME_CHECKSUMS = True


class RowFrameEncoder:
    """Compresses chunk blocks into row frames (thread-safe: one zstd context per thread)."""

    def __init__(self, *, level: int) -> None:
        self._level = level

    def compressor(self) -> zstandard.ZstdCompressor:
        """This thread's compressor: content size and checksum in every frame."""
        compressors: dict[int, zstandard.ZstdCompressor] = _THREAD.__dict__.setdefault(
            "compressors", {}
        )
        compressor = compressors.get(self._level)
        if compressor is None:
            compressor = compressors[self._level] = zstandard.ZstdCompressor(
                level=self._level, write_content_size=True, write_checksum=FRAME_CHECKSUMS
            )
        return compressor

    def encode(self, block: npt.NDArray[Any], *, rows_per_frame: int) -> bytes:
        """The stored bytes of ``block`` (a C-contiguous chunk, little-endian values)."""
        compressor = self.compressor()
        rows = block.shape[0]
        data = memoryview(block).cast("B")  # C-contiguous: whole rows are byte runs
        row_bytes = block.strides[0]
        if rows_per_frame >= rows:
            return compressor.compress(data)
        frames = [
            compressor.compress(data[start * row_bytes : (start + rows_per_frame) * row_bytes])
            for start in range(0, rows, rows_per_frame)
        ]
        payload = _sizes_format(len(frames)).pack(*map(len, frames)) + _END.pack(
            rows_per_frame, len(frames), _TAG
        )
        return b"".join([*frames, _HEADER.pack(_MAGIC, len(payload)), payload])
