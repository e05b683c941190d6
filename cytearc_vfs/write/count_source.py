"""Count matrices in any input form, read as canonical CSR row bands.

Writers never densify a whole matrix: they ask a :class:`CountSource` for
row bands. A band is canonical CSR: sorted column indices, duplicates summed
(integers exactly in 64 bits, floats in source order), explicit zeros
dropped. So the same values give the same bands whatever the input form or
index order.

The core reads scipy.sparse matrices, numpy arrays and row-sliceable arrays
itself. Other inputs (an ``anndata.AnnData``) are turned into one of those by
an adapter found through the ``cytearc_vfs.count_sources`` entry-point group:
each entry loads a function ``(counts, layer) -> CountInput | None`` that
answers ``None`` for objects it does not know. The AnnData adapter lives in
``cytearc_vfs_adapters.anndata_input``, so the core never imports anndata.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, Protocol, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp

from ..errors import VfsError
from ..format.count_dtype import ValueRange, checked_cast, empty_range, scan_values, summary_dtype
from ..format.count_totals import RowTotalOverflowError, exact_group_sums, may_overflow, row_totals
from ..format.table_names import CELL_DATA, FEATURE_DATA, TableName
from .sparse_structure import checked_sparse

__all__ = [
    "COUNT_SOURCE_ENTRY_POINTS",
    "CountInput",
    "CountSource",
    "DuplicateSumOverflowError",
    "as_count_source",
    "canonical_csr",
    "check_row_totals",
    "scan_source",
    "stored_band",
]


class CountSource(Protocol):
    """A cells x features matrix read in row bands."""

    shape: tuple[int, int]
    dtype: np.dtype
    nnz_estimate: int

    def band(self, start: int, stop: int) -> sp.csr_array:
        """Canonical CSR of rows ``start:stop``."""
        ...


class DuplicateSumOverflowError(VfsError, OverflowError):
    """Duplicate entries of one matrix position sum past the 64-bit integer range.

    Integer duplicates are summed exactly (signed and narrow inputs in
    int64, uint64 inputs in uint64); a sum that does not fit is refused
    rather than stored wrapped. Attributes name the first such position.
    """

    def __init__(
        self,
        *,
        row: int,
        column: int,
        total: int | float,
        dtype: np.dtype,
        cell: str | None = None,
        feature: str | None = None,
    ) -> None:
        self.row = row
        self.column = column
        self.total = total
        self.dtype = np.dtype(dtype)
        cell_text = f"cell {cell!r} (row {row})" if cell is not None else f"row {row}"
        feature_text = (
            f"feature {feature!r} (column {column})" if feature is not None else f"column {column}"
        )
        how = (
            "each entry is finite, but float duplicates are summed in source order and their "
            "sum overflows"
            if self.dtype.kind == "f"
            else "integer duplicates are summed exactly in 64 bits, never wrapped"
        )
        fits = "smaller values" if self.dtype.kind == "f" else "values that fit (e.g. float64)"
        super().__init__(
            f"duplicate count entries of {cell_text} and {feature_text} sum to {total}, which "
            f"{self.dtype} cannot hold ({how}); check the input for corrupt values, or sum the "
            f"duplicates yourself into {fits} before writing. Nothing was written"
        )

    def naming(self, cell: str, feature: str) -> DuplicateSumOverflowError:
        """The same refusal, naming the cell and feature by their ids."""
        return type(self)(
            row=self.row,
            column=self.column,
            total=self.total,
            dtype=self.dtype,
            cell=cell,
            feature=feature,
        )


def _summed_exactly(matrix: sp.csr_array, row_offset: int) -> sp.csr_array:
    """Canonical CSR of an integer CSR with duplicates, summed without wrapping."""
    wide = np.uint64 if matrix.data.dtype == np.uint64 else np.int64
    matrix = sp.csr_array(
        (matrix.data.astype(wide), matrix.indices.copy(), matrix.indptr.copy()),
        shape=matrix.shape,
    )
    matrix.sort_indices()
    indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
    if not len(data):
        return matrix
    # a group of equal coordinates starts at every new column and every new row
    first = np.empty(len(data), dtype=bool)
    first[0] = True
    np.not_equal(indices[1:], indices[:-1], out=first[1:])
    row_starts = indptr[1:-1]
    first[row_starts[row_starts < len(data)]] = True
    starts = np.flatnonzero(first)
    sums, bad, total = exact_group_sums(data, starts)
    if bad is not None:
        position = int(starts[bad])
        row = int(np.searchsorted(indptr, position, side="right")) - 1
        raise DuplicateSumOverflowError(
            row=row_offset + row, column=int(indices[position]), total=total, dtype=np.dtype(wide)
        )
    summed = sp.csr_array(
        (sums, indices[starts], np.searchsorted(starts, indptr)), shape=matrix.shape
    )
    summed.has_canonical_format = True
    return summed


def canonical_csr(matrix: Any, *, row_offset: int = 0) -> sp.csr_array:
    """Canonical CSR of any scipy sparse matrix or array (copying only when needed).

    Integer duplicates are summed exactly in 64 bits; a sum beyond them raises
    :class:`DuplicateSumOverflowError` naming the first such position (its row
    counted from ``row_offset``).
    """
    integer = matrix.dtype == np.bool_ or matrix.dtype.kind in "iu"
    if integer and not matrix.has_canonical_format and not _cannot_wrap(matrix.data):
        # values near the 64-bit limits: scipy would sum (and wrap) them in place
        if isinstance(matrix, (sp.coo_array, sp.coo_matrix)):
            matrix = _csr_keeping_duplicates(matrix)
        return canonical_csr(_summed_exactly(sp.csr_array(matrix), row_offset))
    if integer and not matrix.has_canonical_format:
        # no sum can leave 64 bits: scipy's own summation in them is exact
        wide = np.uint64 if matrix.dtype == np.uint64 else np.int64
        if isinstance(matrix, (sp.coo_array, sp.coo_matrix)):
            matrix = sp.coo_array((matrix.data.astype(wide), matrix.coords), shape=matrix.shape)
        else:
            matrix = sp.csr_array(matrix)
            matrix = sp.csr_array(
                (matrix.data.astype(wide), matrix.indices, matrix.indptr), shape=matrix.shape
            )
    given = matrix
    matrix = sp.csr_array(matrix) if not isinstance(matrix, sp.csr_array) else matrix
    if not matrix.has_canonical_format:
        matrix = matrix.copy()  # never edit the caller's arrays in place
        matrix.sum_duplicates()
    if matrix.dtype.kind == "f" and not given.has_canonical_format:
        _refuse_infinite_sums(given, matrix, row_offset)
    if matrix.nnz and not np.all(matrix.data != 0):
        matrix = matrix.copy()
        matrix.eliminate_zeros()
    return cast("sp.csr_array", matrix)


def _refuse_infinite_sums(given: Any, summed: sp.csr_array, row_offset: int) -> None:
    """Refuse finite float duplicates whose sum overflowed to infinity.

    The scan refuses non-finite values afterwards, but it would blame the
    input for holding an infinity that only the sum made.
    """
    infinite = np.isinf(summed.data)
    if not infinite.any() or not np.isfinite(given.data).all():
        return  # none, or the input's own (the scan names them)
    position = int(np.flatnonzero(infinite)[0])
    row = int(np.searchsorted(summed.indptr, position, side="right")) - 1
    raise DuplicateSumOverflowError(
        row=row_offset + row,
        column=int(summed.indices[position]),
        total=float(summed.data[position]),
        dtype=summed.dtype,
    )


def _cannot_wrap(values: npt.NDArray[Any]) -> bool:
    """Whether no sum of any of ``values`` can leave 64 bits (true of any real counts).

    >>> _cannot_wrap(np.array([3, -7], dtype=np.int64))
    True
    >>> _cannot_wrap(np.array([2**62, 2**62], dtype=np.int64))
    False
    """
    if not len(values):
        return True
    largest = max(int(values.max()), -int(values.min()))
    limit = int(np.iinfo(np.uint64).max) if values.dtype == np.uint64 else (1 << 63) - 1
    return largest * len(values) <= limit


def _csr_keeping_duplicates(matrix: Any) -> sp.csr_array:
    # scipy's own COO to CSR conversion sums duplicates in the values' dtype,
    # which wraps integers; this one only reorders them by row.
    rows, columns = (np.asarray(axis) for axis in matrix.coords)
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(matrix.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=matrix.shape[0]), out=indptr[1:])
    return sp.csr_array((matrix.data[order], columns[order], indptr), shape=matrix.shape)


class _SparseSource:
    def __init__(self, matrix: Any) -> None:
        # The dtype the caller holds, before integer widening for exact sums:
        # the count rule keeps a signed source's own dtype when it fits.
        self.dtype = np.dtype(matrix.dtype)
        self.shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.nnz_estimate = int(matrix.nnz)
        # made canonical on first use, so the writer checks ids (cheap) before
        # a sum of duplicates can refuse (a pass over every value)
        self._matrix: Any = matrix
        self._canonical: sp.csr_array | None = None
        #: Bytes of the canonical CSR copy held for the write (0: the input as given).
        self.copied_bytes = 0

    @property
    def _csr(self) -> sp.csr_array:
        if self._canonical is None:
            # checked here, in the scan before the destination exists: slicing a
            # matrix with an index past its shape fails deep in numpy, mid-write
            given = self._matrix
            self._canonical = canonical_csr(checked_sparse(given))
            self._matrix = None
            self.nnz_estimate = int(self._canonical.nnz)
            # a DIA, LIL or DOK input is held as a CSR copy: counted like a canonical copy
            if self._canonical is not given:
                canonical = self._canonical
                self.copied_bytes = canonical.data.nbytes + canonical.indices.nbytes
                self.copied_bytes += canonical.indptr.nbytes
        return self._canonical

    def band(self, start: int, stop: int) -> sp.csr_array:
        return self._csr[start:stop]

    def scan(self, max_bytes: int) -> ValueRange:
        """Range of the canonical values, scanned through views of the data."""
        data, indptr = self._csr.data, self._csr.indptr
        step = max(1, max_bytes // (4 * max(1, data.itemsize)))
        result = empty_range(data.dtype if data.dtype != np.bool_ else np.dtype(np.uint8))
        for start in range(0, len(data), step):
            stop = min(len(data), start + step)
            first = int(np.searchsorted(indptr, start, side="right")) - 1
            last = int(np.searchsorted(indptr, stop - 1, side="right"))
            result = result.merge(scan_values(data[start:stop], where=f"rows {first}:{last}"))
        return result


def _dense_band(values: npt.NDArray[Any]) -> sp.csr_array:
    # scipy.sparse has no float16; it widens exactly to float32, the storage
    # dtype the count rule gives float16 anyway.
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    return sp.csr_array(values)


class _DenseSource:
    def __init__(self, matrix: npt.NDArray[Any]) -> None:
        if matrix.ndim != 2:
            raise ValueError(f"counts must be 2-D (cells x features), got shape {matrix.shape}")
        self._dense = matrix
        self.shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.dtype = matrix.dtype
        sample = matrix[: min(len(matrix), 1000)]
        density = float(np.count_nonzero(sample)) / max(1, sample.size)
        self.nnz_estimate = int(density * matrix.size)

    def band(self, start: int, stop: int) -> sp.csr_array:
        return _dense_band(np.asarray(self._dense[start:stop]))


class _BandedSource:
    """A matrix that can only be sliced by rows (a backed AnnData X)."""

    def __init__(self, matrix: Any) -> None:
        self._matrix = matrix
        self.shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.dtype = np.dtype(matrix.dtype)
        nnz = getattr(matrix, "nnz", None)
        self.nnz_estimate = int(nnz) if nnz is not None else self.shape[0] * self.shape[1] // 10
        #: Bytes the matrix holds through the write beside the bands (:meth:`reserve`).
        self.copied_bytes = 0

    def reserve(self, nbytes: int) -> int:
        """Let the matrix keep what it builds to serve row bands (a CSC element's
        row-major spill) within ``nbytes``; the bytes it then holds through the
        write, more than ``nbytes`` when it cannot fit them (nothing is changed)."""
        reserve = getattr(self._matrix, "reserve_memory", None)
        self.copied_bytes = int(reserve(nbytes)) if reserve is not None else 0
        return self.copied_bytes

    def band(self, start: int, stop: int) -> sp.csr_array:
        piece = self._matrix[start:stop]
        compute = getattr(piece, "compute", None)
        if callable(compute):
            # a lazy (dask) matrix, such as to_anndata's X: its band computed, a
            # scipy.sparse matrix when its blocks are (np.asarray would not take those)
            piece = compute()
        if sp.issparse(piece):
            return canonical_csr(piece, row_offset=start)
        return _dense_band(np.asarray(piece))


#: Entry-point group of the adapters that read other inputs as counts.
COUNT_SOURCE_ENTRY_POINTS = "cytearc_vfs.count_sources"


class CountInput(NamedTuple):
    """What an input adapter finds in an object: the counts and their tables."""

    #: A scipy.sparse matrix, a numpy array, or an array sliceable by rows.
    matrix: Any
    #: Cell table (index = cell ids), or ``None``.
    cells: pd.DataFrame | None
    #: Feature table (index = feature ids), or ``None``.
    features: pd.DataFrame | None
    #: ``uns["cytearc"]["assayMembership"]`` (assay -> membership column), or ``None``.
    membership: Mapping[str, Any] | None = None
    #: Paths of the input's elements the write leaves out (``obsm/X_pca``, ``uns/neighbors``);
    #: ``None`` where they could not be listed (``WriteInfo.not_imported``).
    not_imported: tuple[str, ...] | None = ()
    #: How refusals name ``cells``: an AnnData's as ``obs``.
    cell_table: TableName = CELL_DATA
    #: How refusals name ``features``: an AnnData's as ``var`` (``raw/var`` beside ``raw/X``).
    feature_table: TableName = FEATURE_DATA
    #: Called once the write is done with ``matrix`` (it succeeded or not): frees what
    #: the adapter kept for the write's passes (an AnnData element's fetched chunks).
    release: Callable[[], None] | None = None


#: ``adapter(counts, layer, storage_options)``: the input it recognises, else ``None``;
#: ``storage_options`` are the backend options of counts given as a URL.
InputAdapter = Callable[[Any, "str | None", "Mapping[str, Any] | None"], "CountInput | None"]
_adapters: list[InputAdapter] | None = None
_adapters_lock = threading.Lock()


def _input_adapters() -> list[InputAdapter]:
    global _adapters
    with _adapters_lock:
        if _adapters is None:
            from importlib.metadata import entry_points

            found = sorted(entry_points(group=COUNT_SOURCE_ENTRY_POINTS), key=lambda e: e.name)
            _adapters = [entry.load() for entry in found]
        return _adapters


def as_count_source(
    counts: Any, *, layer: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> tuple[CountSource, CountInput]:
    """A :class:`CountSource` for ``counts``, and what it carries beside (tables,
    membership); ``storage_options`` are the backend options of counts given as a URL."""
    if not (sp.issparse(counts) or isinstance(counts, np.ndarray)):
        for adapter in _input_adapters():
            found = adapter(counts, layer, storage_options)
            if found is not None:
                return _source_of(found.matrix), found
    if layer is not None:
        raise ValueError("layer= applies only to AnnData input")
    if storage_options:
        raise ValueError(
            "source_storage_options= applies only to counts given as the URL of an AnnData "
            "store or .h5ad file; leave it out for counts in memory"
        )
    return _source_of(counts), CountInput(counts, None, None)


def _source_of(matrix: Any) -> CountSource:
    dtype = getattr(matrix, "dtype", None)
    if dtype is not None and np.dtype(dtype).kind not in "biuf":
        raise TypeError(
            f"counts must be numeric, found dtype {np.dtype(dtype)}; convert them to integers "
            "or floats first. Nothing was written"
        )
    if sp.issparse(matrix):
        shape = getattr(matrix, "shape", ())
        if len(shape) != 2:
            raise ValueError(f"counts must be 2-D (cells x features), got shape {shape}")
        return _SparseSource(matrix)
    if isinstance(matrix, np.ndarray):
        if np.ma.isMaskedArray(matrix):
            masked = int(np.ma.count_masked(matrix))
            if masked:
                # the values under the mask would be stored as counts
                raise TypeError(
                    f"counts are a masked array with {masked} masked cell(s), whose hidden "
                    "values would be stored as counts; pass counts.filled(0) to store them as "
                    "zeros, or counts.data to store the values under the mask. Nothing was written"
                )
            matrix = np.ma.getdata(matrix)
        return _DenseSource(matrix)
    if hasattr(matrix, "shape") and hasattr(matrix, "dtype") and hasattr(matrix, "__getitem__"):
        return _BandedSource(matrix)
    kind = type(matrix).__name__
    hint = (
        " (no installed adapter reads AnnData: reinstall cytearc-vfs so its "
        f"{COUNT_SOURCE_ENTRY_POINTS} entry points exist)"
        if kind == "AnnData"
        else ""
    )
    if kind == "DataFrame":
        # a cells x features table: its values are the counts, its labels the ids
        hint = (
            "; pass frame.to_numpy() with cells=frame.index.astype(str) and "
            "features=frame.columns.astype(str)"
        )
    elif isinstance(matrix, (list, tuple)):
        hint = "; pass numpy.asarray(counts) for nested lists of numbers"
    raise TypeError(
        f"counts must be a scipy.sparse matrix, a numpy array or an AnnData, not {kind}{hint}"
    )


def iter_bands(source: CountSource, rows: int) -> Iterator[tuple[int, int, sp.csr_array]]:
    """Consecutive ``(start, stop, band)`` of at most ``rows`` rows."""
    n_rows = source.shape[0]
    for start in range(0, n_rows, max(1, rows)):
        stop = min(n_rows, start + rows)
        yield start, stop, source.band(start, stop)


def scan_source(source: CountSource, max_bytes: int) -> ValueRange:
    """Range of every canonical value; raises for NaN or infinity before anything is written.

    Works in pieces of about ``max_bytes``: an in-memory sparse matrix is
    scanned through views of its values (no copies); other sources in row
    bands whose dense form fits.
    """
    declared = source.dtype if source.dtype != np.bool_ else np.dtype(np.uint8)
    result = empty_range(declared)
    if isinstance(source, _SparseSource):
        result = source.scan(max_bytes)
    else:
        row_bytes = 8 * max(1, source.shape[1])
        rows = max(1, min(source.shape[0], max_bytes // row_bytes))
        for start, stop, band in iter_bands(source, rows):
            result = result.merge(scan_values(band.data, where=f"rows {start}:{stop}"))
    # Bands may arrive widened (exact integer sums); the rule speaks of the
    # source's dtype, so report that one.
    if declared.kind in "bui":
        return replace(result, source_dtype=declared)
    return result


def stored_band(band: sp.csr_array, dtype: np.dtype, start: int, stop: int) -> sp.csr_array:
    """``band`` (rows ``start:stop``) in the storage dtype, through the checked cast."""
    data = checked_cast(band.data, dtype, where=f"rows {start}:{stop}")
    return sp.csr_array((data, band.indices, band.indptr), shape=band.shape)


def check_row_totals(
    source: CountSource,
    dtype: np.dtype,
    value_range: ValueRange,
    cell_ids: npt.NDArray[Any],
    max_bytes: int,
) -> None:
    """Refuse, before the destination exists, a cell whose total ``rowSums`` cannot hold.

    The values' bound settles it for real counts (no pass); only values near
    the summary dtype's limit cost a pass over bands of about ``max_bytes``
    (as the scan's), each summed exactly
    (:func:`~cytearc_vfs.format.count_totals.row_totals`).
    """
    sum_dtype = summary_dtype(dtype)
    largest = max(abs(value_range.minimum), abs(value_range.maximum))
    if not may_overflow(largest, source.shape[1], sum_dtype):
        return
    rows = max(1, max_bytes // (8 * max(1, source.shape[1])))
    try:
        for start, stop, band in iter_bands(source, rows):
            row_totals(stored_band(band, dtype, start, stop), sum_dtype, row_offset=start)
    except RowTotalOverflowError as exc:
        raise exc.naming(str(cell_ids[exc.row])) from None
