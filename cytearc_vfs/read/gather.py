"""Gathering a selection of one count matrix: orientation choice and chunk arithmetic.

Pure functions over chunk grids. Given the sorted unique rows and columns a
read needs from one source, :func:`touched_chunks` counts the inner chunks
each orientation would decode, and :func:`choose_orientation` picks the one
that touches fewer chunk bytes (``counts`` on a tie).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np
import numpy.typing as npt

from ..encoding.row_frames import rows_per_frame
from ..format.records import ArrayGeometry, CountLayout
from .placement import contiguous

__all__ = [
    "Orientation",
    "OrientationChoice",
    "choose_orientation",
    "distinct_chunks",
    "sorted_unique",
    "touched_chunks",
    "TouchedChunks",
]

Orientation = Literal["counts", "countsT"]
Indices = npt.NDArray[np.int64]


def distinct_chunks(values: Indices, size: int) -> Indices:
    """Sorted indices of the chunks of ``size`` that hold ``values`` (any order, repeats).

    Marks a boolean array instead of sorting, so it costs one pass.

    >>> distinct_chunks(np.array([9, 0, 3, 9]), 4).tolist()
    [0, 2]
    """
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    run = contiguous(values)
    if run is not None:
        return np.arange(run.start // size, (run.stop - 1) // size + 1, dtype=np.int64)
    chunks = values // size
    marks = np.zeros(int(chunks.max()) + 1, dtype=bool)
    marks[chunks] = True
    return np.flatnonzero(marks)


class TouchedChunks:
    """The sorted chunks of each size that fixed ``values`` touch, each size worked out once
    (plans keep them across the reads of a stream).

    >>> touched = TouchedChunks(np.array([9, 0, 3]))
    >>> touched.chunks(4).tolist(), touched.count(4)
    ([0, 2], 2)
    """

    __slots__ = ("_by_size", "_values")

    def __init__(self, values: Indices) -> None:
        self._values = values
        self._by_size: dict[int, Indices] = {}

    def chunks(self, size: int) -> Indices:
        """Sorted chunks of ``size`` that the values touch (:func:`distinct_chunks`)."""
        if size not in self._by_size:
            self._by_size[size] = distinct_chunks(self._values, size)
        return self._by_size[size]

    def count(self, size: int) -> int:
        """How many chunks of ``size`` the values touch."""
        return len(self.chunks(size))


def touched_chunks(rows: Indices, cols: Indices, geometry: ArrayGeometry) -> int:
    """Inner chunks an orthogonal read of ``rows`` x ``cols`` (any order) decodes.

    >>> from cytearc_vfs.format.records import ArrayGeometry
    >>> g = ArrayGeometry((10, 5), (20, 10))
    >>> touched_chunks(np.array([0, 1, 25]), np.array([7, 0]), g)
    4
    """
    if len(rows) == 0 or len(cols) == 0:
        return 0
    row_chunks = len(distinct_chunks(rows, geometry.chunks[0]))
    col_chunks = len(distinct_chunks(cols, geometry.chunks[1]))
    return row_chunks * col_chunks


@dataclass(frozen=True, slots=True)
class OrientationChoice:
    """Which array a read uses and what each would have cost."""

    orientation: Orientation
    """The chosen array."""
    chunks: int
    """Inner chunks the chosen array decodes."""
    counts_bytes: int
    """Uncompressed bytes decoded through ``counts``."""
    counts_t_bytes: int | None
    """Uncompressed bytes decoded through ``countsT`` (``None`` without one)."""


def choose_orientation(
    rows: Indices,
    cols: Indices,
    layout: CountLayout,
    itemsize: int,
    *,
    count_rows: Callable[[int], int] | None = None,
    count_cols: Callable[[int], int] | None = None,
) -> OrientationChoice:
    """The orientation that decodes fewer bytes for ``rows`` x ``cols``.

    Along its rows an array decodes blocks (row frames before), not whole
    chunks: the fewest rows making 8 KiB (``rows_per_frame``), or the
    chunk's rows where a chunk is one frame. A read of 1,000 cells of a
    store with 2 MiB chunks decodes 1,000 blocks of ``counts``, not 1,000
    chunks. On a tie, the orientation whose selected rows are the smaller
    share of its rows.

    ``rows`` are cells and ``cols`` features of the source, in any order.
    ``count_rows(size)`` and ``count_cols(size)``, when given, say how many
    chunks of ``size`` the rows and columns touch (a caller that kept the
    answers from an earlier read).
    """
    return _choose(
        count_rows if count_rows is not None else partial(_count, rows),
        count_cols if count_cols is not None else partial(_count, cols),
        layout,
        itemsize,
    )


def _count(values: Indices, size: int) -> int:
    return len(distinct_chunks(values, size))


def _choose(
    count_rows: Callable[[int], int],
    count_cols: Callable[[int], int],
    layout: CountLayout,
    itemsize: int,
) -> OrientationChoice:
    counts = layout.counts
    counts_chunks = count_rows(counts.chunks[0]) * count_cols(counts.chunks[1])
    counts_bytes = _decoded(counts, count_rows, count_cols, itemsize)
    if layout.counts_t is None:
        return OrientationChoice("counts", counts_chunks, counts_bytes, None)
    transposed = layout.counts_t
    t_chunks = count_cols(transposed.chunks[0]) * count_rows(transposed.chunks[1])
    t_bytes = _decoded(transposed, count_cols, count_rows, itemsize)
    # On a tie (a small store is often one chunk each way) the orientation
    # whose rows are the smaller share of the selection wins: small chunks
    # (and the row frames of older stores) decode about the selected rows only.
    n_cells, n_features = layout.shape
    if t_bytes < counts_bytes or (
        t_bytes == counts_bytes and count_cols(1) * n_cells < count_rows(1) * n_features
    ):
        return OrientationChoice("countsT", t_chunks, counts_bytes, t_bytes)
    return OrientationChoice("counts", counts_chunks, counts_bytes, t_bytes)


def _decoded(
    geometry: ArrayGeometry,
    count_rows: Callable[[int], int],
    count_cols: Callable[[int], int],
    itemsize: int,
) -> int:
    """Bytes a read decodes from an array: its touched blocks of rows across its touched
    column chunks."""
    chunk_rows, chunk_cols = geometry.chunks
    block_rows = rows_per_frame((chunk_rows, chunk_cols), itemsize)
    return count_rows(block_rows) * block_rows * count_cols(chunk_cols) * chunk_cols * itemsize


def sorted_unique(values: Indices) -> tuple[Indices, Indices]:
    """Sorted unique ``values`` and the inverse; no sort when already sorted unique.

    >>> sorted_unique(np.array([4, 2, 4]))[0].tolist(), sorted_unique(np.array([4, 2, 4]))[1].tolist()
    ([2, 4], [1, 0, 1])
    >>> sorted_unique(np.array([1, 5]))[1].tolist()
    [0, 1]
    """
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return values, np.arange(len(values), dtype=np.int64)
    unique, inverse = np.unique(values, return_inverse=True)
    return unique, inverse.astype(np.int64, copy=False)
