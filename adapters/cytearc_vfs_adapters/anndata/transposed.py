"""The other orientation of a sparse matrix element, spilled to a temporary directory.

Rows of a CSC matrix (or columns of a CSR) are scattered over every stored
column: reading one band straight from the store would read the whole
matrix each time. Instead the element is transposed once, out of core: a
first pass counts the entries of each minor index (reading only
``indices``), a second pass reads bands of major indices and writes each
entry to its place in memory-mapped files. Major indices are visited in
order, so the entries of each minor index come out sorted. Memory holds one
band of bounded entries and two integers per minor index; the spill is
deleted when the element is garbage-collected or :meth:`close` is called.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .matrices import SparseMatrixElement

__all__ = ["PIECE_ENTRIES_ENV", "TransposedSpill", "piece_entries"]

#: Environment variable bounding the entries one pass reads at a time.
PIECE_ENTRIES_ENV = "CYTEARC_ANNDATA_PIECE_ENTRIES"
_DEFAULT_PIECE_ENTRIES = 4_000_000


def piece_entries() -> int:
    """Stored entries read at a time while transposing (``CYTEARC_ANNDATA_PIECE_ENTRIES``)."""
    text = os.environ.get(PIECE_ENTRIES_ENV, "")
    return max(1, int(text)) if text.strip() else _DEFAULT_PIECE_ENTRIES


def _pieces(indptr: npt.NDArray[np.int64], limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive major ranges of at most ``limit`` entries (or one major index).

    >>> list(_pieces(np.array([0, 2, 4, 9, 9]), 4))
    [(0, 2), (2, 3), (3, 4)]
    """
    start, majors = 0, len(indptr) - 1
    while start < majors:
        stop = int(np.searchsorted(indptr, indptr[start] + limit, side="right")) - 1
        stop = min(majors, max(start + 1, stop))
        yield start, stop
        start = stop


class TransposedSpill:
    """The minor-axis orientation of a sparse element, built once on disk."""

    def __init__(self, element: SparseMatrixElement) -> None:
        self._element = element
        major_len = element.shape[0] if element.format == "csr" else element.shape[1]
        minor_len = element.shape[1] if element.format == "csr" else element.shape[0]
        limit = piece_entries()
        source_indptr = element.read_indptr(0, major_len)
        counts = np.zeros(minor_len, dtype=np.int64)
        for start, stop in _pieces(source_indptr, limit):
            _, indices, _ = element.major_band(start, stop, with_data=False)
            counts += np.bincount(indices, minlength=minor_len)
        self.indptr = np.zeros(minor_len + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        total = int(self.indptr[-1])
        self._directory = tempfile.mkdtemp(prefix="cytearc-anndata-transpose-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._directory, ignore_errors=True)
        index_dtype = np.int32 if major_len < 2**31 else np.int64
        self._indices = self._file("indices", index_dtype, total)
        self._data = self._file("data", element.dtype, total)
        filled = self.indptr[:-1].copy()  # next free position of each minor index
        for start, stop in _pieces(source_indptr, limit):
            indptr, indices, data = element.major_band(start, stop)
            if not len(indices):
                continue
            majors = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(indptr))
            order = np.argsort(indices, kind="stable")  # majors stay ascending per minor
            minors = indices[order]
            first = np.flatnonzero(np.r_[True, minors[1:] != minors[:-1]])
            runs = np.diff(np.r_[first, len(minors)])
            rank = np.arange(len(minors)) - np.repeat(first, runs)
            positions = filled[minors] + rank
            self._indices[positions] = majors[order]
            self._data[positions] = data[order]
            filled[minors[first]] += runs
        self._indices.flush()
        self._data.flush()

    def _file(self, name: str, dtype: Any, length: int) -> np.memmap[Any, Any]:
        path = os.path.join(self._directory, name)
        if length == 0:
            return np.memmap(path, dtype=dtype, mode="w+", shape=(1,))[:0]  # type: ignore[return-value]
        return np.memmap(path, dtype=dtype, mode="w+", shape=(length,))

    def band(self, start: int, stop: int) -> tuple[npt.NDArray[Any], ...]:
        """``(indptr, indices, data)`` of minor indices ``start:stop``, copied out of the spill."""
        indptr = self.indptr[start : stop + 1]
        low, high = int(indptr[0]), int(indptr[-1])
        indices = np.array(self._indices[low:high])
        data = np.array(self._data[low:high])
        self._element.stats.record(high - low, indices.nbytes + data.nbytes)
        return indptr - low, indices, data

    def close(self) -> None:
        """Delete the spill now (it is deleted on garbage collection otherwise)."""
        self._finalizer()
