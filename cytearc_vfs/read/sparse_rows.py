"""Sparse reads: each source's rows as CSR, assembled into one canonical CSR matrix.

A sparse read (:meth:`~cytearc_vfs.read.reader.VirtualArrayReader.read_sparse`)
asks every source for the rows it holds, as :class:`SourceRows`: a CSR block
over the source's sorted unique rows whose column indices are already output
columns, sorted within each row, with no stored zeros. :func:`assemble` then
lays the blocks into the output rows (a selection may order and repeat
cells freely) with one copy per block, or one gather when the rows are out
of order, so the result costs its entries and an index per output row.

Sources that have no sparse encoding of their own are made CSR from dense
values by :func:`dense_rows` (a compiled pass without the GIL). A CyteArc
source read cell-major does it strip by strip on the decoding threads
(:class:`SparseRowPlacement`), with no dense block of the read; others
(read feature-major, dense AnnData arrays) are read in bands of rows
(:func:`row_bands`), each made CSR while the next is read, so memory holds
the result's entries and two bands.
"""

from __future__ import annotations

from collections.abc import Buffer, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .decode_threads import thread_scratch
from .placement import ColumnMap, RowPlacement, contiguous

NonzeroRows = Callable[
    [Buffer, int, int, bool, Buffer, int, int, Buffer, Buffer, Buffer], tuple[int, int]
]
nonzero_rows: NonzeroRows | None
try:
    from ..encoding._kernels import nonzero_rows
except ImportError:  # installed without a C compiler: numpy does the same, slower
    nonzero_rows = None

__all__ = [
    "SourceRows",
    "SparseRowPlacement",
    "assemble",
    "concatenate",
    "dense_rows",
    "index_dtype",
    "row_bands",
    "sorted_rows",
]

Indices = npt.NDArray[np.int64]


def index_dtype(*extents: int) -> np.dtype:
    """``int32`` when every extent (entries, columns) fits it, else ``int64``: the index
    dtype scipy would pick, chosen up front so scipy does not copy the indices.

    >>> index_dtype(10, 2**31 - 1), index_dtype(2**31)
    (dtype('int32'), dtype('int64'))
    """
    return np.dtype(np.int32) if max(extents, default=0) < 2**31 else np.dtype(np.int64)


@dataclass(frozen=True, slots=True)
class SourceRows:
    """One source's share of a sparse read: a CSR block of its sorted unique rows.

    The entries are kept in the parts they were read in (batches, bands):
    :func:`assemble` copies each part once, into the result.
    """

    indptr: Indices
    """Where each row's entries start (``int64``, one more than the rows)."""
    indices: list[npt.NDArray[Any]]
    """Output column of each entry, ascending within a row (in parts)."""
    data: list[npt.NDArray[Any]]
    """Each entry's value, in the reader's dtype; never zero (in parts, as ``indices``)."""

    @property
    def nnz(self) -> int:
        """Entries stored."""
        return int(self.indptr[-1])

    def joined(self) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The entries' columns and values, each as one array."""
        return _join(self.indices), _join(self.data)


def _join(parts: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def sorted_rows(
    indptr: Indices, indices: npt.NDArray[Any], data: npt.NDArray[Any], n_cols: int
) -> SourceRows:
    """:class:`SourceRows` of a CSR block whose column indices may be out of order in a row.

    A source's columns map to output columns in union order, which need not
    follow the source's own; scipy sorts each row (in place, in C++).

    >>> rows = sorted_rows(np.array([0, 2]), np.array([5, 1]), np.array([7, 3]), 6)
    >>> rows.indices[0].tolist(), rows.data[0].tolist()
    ([1, 5], [3, 7])
    """
    matrix = sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, n_cols), copy=False)
    matrix.sort_indices()
    return SourceRows(indptr, [matrix.indices], [matrix.data])


def row_bands(rows: Indices, chunk_rows: int, limit: int) -> list[tuple[int, int]]:
    """``[start, stop)`` positions of sorted unique ``rows`` cut into bands of at most
    ``limit`` rows, each cut moved back to where a row chunk starts, so that no
    chunk is decoded for two bands (unless one chunk holds more than ``limit``
    of the rows).

    >>> row_bands(np.arange(10), 4, 6)
    [(0, 4), (4, 10)]
    >>> row_bands(np.array([0, 1, 2, 3, 4]), 10, 2)
    [(0, 2), (2, 4), (4, 5)]
    """
    bands: list[tuple[int, int]] = []
    start, n = 0, len(rows)
    limit = max(1, limit)
    while start < n:
        stop = start + limit
        if stop < n:
            chunk_start = int(rows[stop]) // chunk_rows * chunk_rows
            back = int(np.searchsorted(rows, chunk_start, side="left"))
            if back > start:
                stop = back
        stop = min(stop, n)
        bands.append((start, stop))
        start = stop
    return bands


def dense_rows(block: npt.NDArray[Any], out_cols: Indices, idx: np.dtype) -> SourceRows:
    """The non-zero entries of a dense band, its column ``j`` being output column
    ``out_cols[j]`` (ascending), as :class:`SourceRows`.

    Runs without the GIL where the compiled kernels are built (one pass,
    zeros skipped 32 bytes at a time: ~6x numpy's ``flatnonzero``
    and the arithmetic after it on a 2 %-dense block), so bands convert on
    the decoding threads while others are read.

    >>> rows = dense_rows(np.array([[0, 4], [5, 0]]), np.array([2, 7]), np.dtype(np.int32))
    >>> rows.indptr.tolist(), rows.indices[0].tolist(), rows.data[0].tolist()
    ([0, 1, 2], [7, 2], [4, 5])
    """
    n_rows, width = block.shape
    kind = block.dtype.kind
    if (
        nonzero_rows is not None
        and width
        and block.flags.c_contiguous
        and block.flags.aligned
        and (kind in "uib" or (kind == "f" and block.dtype.itemsize in (4, 8)))
    ):
        itemsize, is_float = block.dtype.itemsize, kind == "f"
        columns = np.ascontiguousarray(out_cols, dtype=np.int64)
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        capacity = max(1 << 12, block.size // 32)  # count data are a few % non-zero
        indices = np.empty(capacity, dtype=idx)
        data = np.empty(capacity, dtype=block.dtype)
        row = at = 0
        while True:
            row, at = nonzero_rows(
                block, width, itemsize, is_float, columns, row, at, indptr, indices, data
            )
            if row == n_rows:
                break
            # a denser block than guessed: room for twice as many (a row at
            # least, and the slot the kernel keeps free)
            capacity = max(2 * capacity, at + width + 1)
            indices = np.concatenate([indices[:at], np.empty(capacity - at, dtype=idx)])
            data = np.concatenate([data[:at], np.empty(capacity - at, dtype=block.dtype)])
        if at < capacity // 2:  # a sparser block than guessed: keep only the entries
            return SourceRows(indptr, [indices[:at].copy()], [data[:at].copy()])
        return SourceRows(indptr, [indices[:at]], [data[:at]])
    flat = block.reshape(-1)
    # flat positions, then rows by search and columns by subtraction: faster
    # than numpy's 2-D nonzero, and rows come in order with columns ascending
    positions = np.flatnonzero(flat)
    indptr = np.searchsorted(positions, np.arange(n_rows + 1, dtype=np.int64) * width)
    starts = np.repeat(np.arange(n_rows, dtype=np.int64) * width, np.diff(indptr))
    cols = out_cols[positions - starts].astype(idx, copy=False)
    return SourceRows(indptr.astype(np.int64, copy=False), [cols], [flat[positions]])


class SparseRowPlacement:
    """A :class:`~.placement.Placement` that keeps the strips of a cell-major read as
    CSR rows, with no block of the whole read.

    Each strip is placed through the column map into a block of its rows (a
    reused buffer of the decoding thread, still in its cache), whose
    non-zeros :func:`dense_rows` takes at once, on the same thread: a dense
    band would be written to memory, then read back for its non-zeros.

    Parameters
    ----------
    columns
        How strip columns land in the block's columns: a narrowed plan's map
        (every block column is one of the source's, so each is written).
    out_cols
        Output column of each block column (ascending).
    idx, dtype
        The entries' index and value types.
    """

    def __init__(
        self, columns: ColumnMap, out_cols: Indices, idx: np.dtype, dtype: np.dtype
    ) -> None:
        self._columns = columns
        self._out_cols = out_cols
        self._idx = idx
        self._dtype = np.dtype(dtype)
        # a map with absent columns leaves them unwritten: those blocks start zeroed
        self._zeroed = columns.indices is not None and bool(
            np.any(columns.indices == columns.zero_column)
        )
        self._parts: dict[int, SourceRows] = {}

    def place(self, start: int, strip: npt.NDArray[Any]) -> None:
        n, width = len(strip), len(self._out_cols)
        block = thread_scratch(n * width * self._dtype.itemsize, name="sparse")
        rows = block.view(self._dtype).reshape(n, width)
        if self._zeroed:
            rows[:] = 0
        RowPlacement(rows, np.arange(n), self._columns).place(0, strip)
        self._parts[start] = dense_rows(rows, self._out_cols, self._idx)

    def rows(self, n_rows: int) -> SourceRows:
        """The placed strips' rows, in order: all ``n_rows`` of the read."""
        parts, placed = [], 0
        for start in sorted(self._parts):
            if start != placed:
                break
            parts.append(self._parts[start])
            placed += len(parts[-1].indptr) - 1
        if placed != n_rows or len(parts) != len(self._parts):
            raise RuntimeError(f"the strips placed did not cover the {n_rows} rows, each once")
        if not parts:
            none = np.zeros(1, dtype=np.int64)
            return SourceRows(none, [np.zeros(0, self._idx)], [np.zeros(0, self._dtype)])
        return concatenate(parts)


def concatenate(parts: list[SourceRows]) -> SourceRows:
    """Blocks of consecutive rows (at least one) as one block; entries are not copied."""
    if len(parts) == 1:
        return parts[0]
    indptr = np.zeros(sum(len(p.indptr) - 1 for p in parts) + 1, dtype=np.int64)
    at, offset = 1, 0
    for part in parts:
        n = len(part.indptr) - 1
        indptr[at : at + n] = part.indptr[1:] + offset
        at, offset = at + n, offset + part.nnz
    return SourceRows(
        indptr,
        [piece for part in parts for piece in part.indices],
        [piece for part in parts for piece in part.data],
    )


def _entry_positions(indptr: Indices, rows: Indices) -> Indices:
    """Positions of the entries of ``rows`` (in that order) in a CSR with ``indptr``.

    >>> _entry_positions(np.array([0, 2, 2, 5]), np.array([2, 0])).tolist()
    [2, 3, 4, 0, 1]
    """
    lengths = indptr[rows + 1] - indptr[rows]
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    positions: Indices = np.arange(total, dtype=np.int64) + np.repeat(
        indptr[rows] - starts, lengths
    )
    return positions


def assemble(
    shape: tuple[int, int],
    dtype: np.dtype,
    shares: list[tuple[SourceRows, Indices, Indices]],
) -> sp.csr_matrix:
    """The canonical CSR matrix of ``shape`` from each source's rows.

    Each share is ``(rows, first_rows, repeats)``: the source's block, the
    output row of each of its rows, and ``[[repeat row, first row], ...]`` of
    output rows that repeat one of them (see
    :func:`~cytearc_vfs.read.placement.first_positions`). Output rows no
    share fills stay empty.
    """
    n_rows, n_cols = shape
    lengths = np.zeros(n_rows, dtype=np.int64)
    for rows, first_rows, repeats in shares:
        lengths[first_rows] = np.diff(rows.indptr)
        if len(repeats):
            lengths[repeats[:, 0]] = lengths[repeats[:, 1]]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    idx = index_dtype(nnz, n_cols)
    indices = np.empty(nnz, dtype=idx)
    data = np.empty(nnz, dtype=dtype)
    for rows, first_rows, repeats in shares:
        if rows.nnz:
            if len(first_rows) and contiguous(first_rows) is not None:
                # consecutive output rows (a slice, a sorted selection): one
                # copy per part
                start = int(indptr[first_rows[0]])
                for cols, values in zip(rows.indices, rows.data, strict=True):
                    indices[start : start + len(cols)] = cols
                    data[start : start + len(cols)] = values
                    start += len(cols)
            else:
                # each row's entries go where its output row starts
                lens = np.diff(rows.indptr)
                target = np.repeat(indptr[first_rows] - rows.indptr[:-1], lens)
                target += np.arange(rows.nnz, dtype=np.int64)
                cols, values = rows.joined()
                indices[target] = cols
                data[target] = values
        if len(repeats):
            source = _entry_positions(indptr, repeats[:, 1])
            target = _entry_positions(indptr, repeats[:, 0])
            indices[target] = indices[source]
            data[target] = data[source]
    matrix = sp.csr_matrix((data, indices, indptr.astype(idx, copy=False)), shape=shape, copy=False)
    matrix.has_sorted_indices = True
    return matrix
