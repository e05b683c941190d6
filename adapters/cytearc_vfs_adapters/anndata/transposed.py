"""The other orientation of a sparse matrix element, spilled to a temporary directory.

Rows of a CSC matrix (or columns of a CSR) are scattered over every stored
column: reading one band straight from the store would read the whole
matrix each time. Instead the element is transposed once, out of core:

1. a first pass counts the entries of each minor index (reading only
   ``indices``) and cuts the minor axis into *buckets* of consecutive minor
   indices holding at most ``CYTEARC_ANNDATA_PIECE_ENTRIES`` entries (fewer
   under a memory budget: :func:`spill_entries`);
2. a second pass reads pieces of major indices (of at most as many entries)
   and appends each entry to its bucket's files with plain writes.

A band is then served from the buckets it overlaps, one bucket in memory at
a time (the last one is kept, since bands usually come in order). Major
indices are visited in order, so a stable sort by minor index leaves each
minor index's entries sorted. Memory holds one piece or one bucket, plus two
integers per minor index; no file is memory-mapped, so the spill never
counts in the process's resident memory. The directory is deleted when the
element is garbage-collected or :meth:`close` is called.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from itertools import pairwise
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "PIECE_ENTRIES_ENV",
    "SparseSource",
    "TransposedSpill",
    "least_spill_bytes",
    "piece_entries",
    "spill_entries",
]


class _Recording(Protocol):
    def record(self, entries: int, nbytes: int) -> None: ...


class SparseSource(Protocol):
    """What a spill reads its matrix through (:class:`~.matrices.SparseMatrixElement`)."""

    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def format(self) -> Literal["csr", "csc"]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def stats(self) -> _Recording: ...

    def read_indptr(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """``indptr[start:stop + 1]``."""
        ...

    def major_band(
        self, start: int, stop: int, *, with_data: bool = True
    ) -> tuple[npt.NDArray[Any], ...]:
        """``(indptr, indices, data)`` of majors ``start:stop``."""
        ...


#: Environment variable bounding the entries one pass reads at a time.
PIECE_ENTRIES_ENV = "CYTEARC_ANNDATA_PIECE_ENTRIES"
_DEFAULT_PIECE_ENTRIES = 4_000_000


def piece_entries() -> int:
    """Stored entries read at a time while transposing (``CYTEARC_ANNDATA_PIECE_ENTRIES``)."""
    text = os.environ.get(PIECE_ENTRIES_ENV, "").strip()
    if not text:
        return _DEFAULT_PIECE_ENTRIES
    # int()'s own words named no variable, and 0 or -5 became 1 entry a piece silently
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"{PIECE_ENTRIES_ENV}={text!r} is not a positive whole number of entries; give "
            f"one such as {_DEFAULT_PIECE_ENTRIES} (the default), or unset it"
        )
    return int(text)


# Peak bytes per entry of a piece or a bucket: the entries read (indices, data),
# their major indices (int64), bucket numbers and sort order, the permuted
# copies and the narrowed writes, for values up to 8 bytes (measured 60-70).
_BYTES_PER_ENTRY = 80
# Fewest entries a piece holds, however small the budget: below it the passes
# are all per-call overhead.
_MIN_ENTRIES = 1024


def _axes(shape: tuple[int, int], fmt: str) -> tuple[int, int]:
    return (shape[0], shape[1]) if fmt == "csr" else (shape[1], shape[0])


def spill_entries(shape: tuple[int, int], fmt: str, nbytes: int) -> int:
    """Entries of a piece and of a bucket for a spill of ``shape`` within ``nbytes``
    (at most :func:`piece_entries`); ``0`` when ``nbytes`` cannot hold the spill's
    pointers and one piece of the fewest entries.

    >>> spill_entries((100_000, 2_000), "csc", 32 << 20) > 300_000
    True
    >>> spill_entries((100_000, 2_000), "csc", 1 << 20)
    0
    """
    entries = (nbytes - _fixed_bytes(shape, fmt)) // _BYTES_PER_ENTRY
    return 0 if entries < _MIN_ENTRIES else min(piece_entries(), entries)


def _fixed_bytes(shape: tuple[int, int], fmt: str) -> int:
    major, minor = _axes(shape, fmt)
    return 8 * (major + 2 * minor + 4)  # the source's indptr, the counts, the new indptr


def least_spill_bytes(shape: tuple[int, int], fmt: str) -> int:
    """The fewest bytes a spill of ``shape`` is built in (:func:`spill_entries` > 0)."""
    return _fixed_bytes(shape, fmt) + _MIN_ENTRIES * _BYTES_PER_ENTRY


def _pieces(indptr: npt.NDArray[np.int64], limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges of at most ``limit`` entries (or one index holding more).

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
    """The minor-axis orientation of a sparse element, built once on disk in buckets."""

    def __init__(self, element: SparseSource, limit: int | None = None) -> None:
        """Build the spill, reading ``limit`` entries at a time (default:
        :func:`piece_entries`); a bucket holds at most as many."""
        self._element = element
        major_len, minor_len = _axes(element.shape, element.format)
        limit = limit or piece_entries()
        source_indptr = element.read_indptr(0, major_len)
        counts = np.zeros(minor_len, dtype=np.int64)
        for start, stop in _pieces(source_indptr, limit):
            _, indices, _ = element.major_band(start, stop, with_data=False)
            counts += np.bincount(indices, minlength=minor_len)
        #: Entries of each minor index, as a compressed pointer.
        self.indptr = np.zeros(minor_len + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        del counts
        self._bucket_starts = np.array(
            [start for start, _ in _pieces(self.indptr, limit)] + [minor_len], dtype=np.int64
        )
        self._directory = tempfile.mkdtemp(prefix="cytearc-anndata-transpose-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._directory, ignore_errors=True)
        self._major_dtype = np.dtype(np.int32 if major_len < 2**31 else np.int64)
        self._minor_dtype = np.dtype(np.int32 if minor_len < 2**31 else np.int64)
        self._value_dtype = np.dtype(element.dtype)
        for start, stop in _pieces(source_indptr, limit):
            indptr, indices, data = element.major_band(start, stop)
            if len(indices):
                majors = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(indptr))
                self._append(indices, majors, data)
        self._lock = threading.Lock()
        self._held: tuple[int, npt.NDArray[Any], npt.NDArray[Any]] | None = None

    def _path(self, bucket: int, what: str) -> str:
        return os.path.join(self._directory, f"{bucket}.{what}")

    def _append(
        self, minors: npt.NDArray[Any], majors: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        buckets = np.searchsorted(self._bucket_starts, minors, side="right") - 1
        order = np.argsort(buckets, kind="stable")  # keeps majors ascending in a bucket
        buckets, minors, majors, data = buckets[order], minors[order], majors[order], data[order]
        edges = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1], True])
        for low, high in pairwise(edges.tolist()):
            bucket = int(buckets[low])
            for what, values, dtype in (
                ("minor", minors[low:high], self._minor_dtype),
                ("major", majors[low:high], self._major_dtype),
                ("data", data[low:high], self._value_dtype),
            ):
                with open(self._path(bucket, what), "ab") as file:
                    np.asarray(values, dtype=dtype).tofile(file)

    def _bucket(self, bucket: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(majors, data)`` of a bucket, ordered by minor index then major index."""
        held = self._held
        if held is not None and held[0] == bucket:
            return held[1], held[2]
        if not os.path.exists(self._path(bucket, "minor")):  # a bucket of empty indices
            empty = (np.empty(0, self._major_dtype), np.empty(0, self._value_dtype))
            self._held = (bucket, *empty)
            return empty
        minors = np.fromfile(self._path(bucket, "minor"), dtype=self._minor_dtype)
        majors = np.fromfile(self._path(bucket, "major"), dtype=self._major_dtype)
        data = np.fromfile(self._path(bucket, "data"), dtype=self._value_dtype)
        order = np.argsort(minors, kind="stable")
        majors, data = majors[order], data[order]
        self._element.stats.record(len(minors), majors.nbytes + data.nbytes + minors.nbytes)
        self._held = (bucket, majors, data)
        return majors, data

    def band(self, start: int, stop: int) -> tuple[npt.NDArray[Any], ...]:
        """``(indptr, indices, data)`` of minor indices ``start:stop``."""
        indptr = self.indptr[start : stop + 1] - self.indptr[start]
        if stop <= start:
            return indptr, np.empty(0, self._major_dtype), np.empty(0, self._value_dtype)
        first = int(np.searchsorted(self._bucket_starts, start, side="right")) - 1
        last = int(np.searchsorted(self._bucket_starts, stop - 1, side="right")) - 1
        indices, values = [], []
        with self._lock:
            for bucket in range(first, last + 1):
                majors, data = self._bucket(bucket)
                offset = int(self.indptr[self._bucket_starts[bucket]])
                low = int(self.indptr[max(start, int(self._bucket_starts[bucket]))]) - offset
                high = int(self.indptr[min(stop, int(self._bucket_starts[bucket + 1]))]) - offset
                indices.append(majors[low:high].copy())
                values.append(data[low:high].copy())
        return indptr, np.concatenate(indices), np.concatenate(values)

    def close(self) -> None:
        """Delete the spill now (it is deleted on garbage collection otherwise)."""
        self._finalizer()
