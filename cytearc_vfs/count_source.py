"""Count matrices in any input form, read as canonical CSR row bands.

Writers never densify a whole matrix: they ask a :class:`CountSource` for
row bands. A band is canonical CSR: sorted column indices, duplicates summed
(integers exactly in 64 bits, floats in source order), explicit zeros
dropped. So the same values give the same bands whatever the input form or
index order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp

from .count_dtype import ValueRange, empty_range, scan_values

__all__ = ["CountSource", "as_count_source", "canonical_csr", "scan_source"]


class CountSource(Protocol):
    """A cells x features matrix read in row bands."""

    shape: tuple[int, int]
    dtype: np.dtype
    nnz_estimate: int

    def band(self, start: int, stop: int) -> sp.csr_array:
        """Canonical CSR of rows ``start:stop``."""
        ...


def canonical_csr(matrix: Any) -> sp.csr_array:
    """Canonical CSR of any scipy sparse matrix or array (copying only when needed)."""
    matrix = sp.csr_array(matrix) if not isinstance(matrix, sp.csr_array) else matrix
    data = matrix.data
    if data.dtype == np.bool_ or data.dtype.kind in "iu":
        if not matrix.has_canonical_format:
            # Integer duplicates are summed exactly in 64 bits before any narrowing.
            wide = np.int64 if data.dtype.kind in "bi" or data.dtype.itemsize < 8 else np.uint64
            matrix = sp.csr_array(
                (data.astype(wide), matrix.indices, matrix.indptr), shape=matrix.shape
            )
            matrix.sum_duplicates()
    elif not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sum_duplicates()
    if matrix.nnz and not np.all(matrix.data != 0):
        matrix = matrix.copy()  # never edit the caller's arrays in place
        matrix.eliminate_zeros()
    return cast("sp.csr_array", matrix)


class _SparseSource:
    def __init__(self, matrix: Any) -> None:
        # The dtype the caller holds, before integer widening for exact sums:
        # the count rule keeps a signed source's own dtype when it fits.
        input_dtype = np.dtype(matrix.dtype)
        if isinstance(matrix, (sp.coo_array, sp.coo_matrix)):
            # COO's own conversion sums duplicates in the source dtype; widen
            # integers first so the sum is exact.
            data = matrix.data
            if data.dtype == np.bool_ or data.dtype.kind in "iu":
                wide = np.uint64 if data.dtype == np.uint64 else np.int64
                matrix = sp.coo_array((data.astype(wide), matrix.coords), shape=matrix.shape)
        self._csr = canonical_csr(matrix)
        self.shape = (int(self._csr.shape[0]), int(self._csr.shape[1]))
        self.dtype = input_dtype
        self.nnz_estimate = int(self._csr.nnz)

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

    def band(self, start: int, stop: int) -> sp.csr_array:
        piece = self._matrix[start:stop]
        if sp.issparse(piece):
            return canonical_csr(piece)
        return _dense_band(np.asarray(piece))


def as_count_source(
    counts: Any, *, layer: str | None = None
) -> tuple[CountSource, pd.DataFrame | None, pd.DataFrame | None]:
    """A :class:`CountSource` for ``counts``, plus cell and feature tables when it carries them."""
    import anndata

    if isinstance(counts, anndata.AnnData):
        matrix = counts.X if layer is None else counts.layers[layer]
        if matrix is None:
            raise ValueError("the AnnData has no X; pass layer= naming the layer with counts")
        source = _source_of(matrix)
        return source, cast("pd.DataFrame", counts.obs), cast("pd.DataFrame", counts.var)
    if layer is not None:
        raise ValueError("layer= applies only to AnnData input")
    return _source_of(counts), None, None


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
        return _DenseSource(matrix)
    if hasattr(matrix, "shape") and hasattr(matrix, "dtype") and hasattr(matrix, "__getitem__"):
        return _BandedSource(matrix)
    raise TypeError(
        f"counts must be a scipy.sparse matrix, a numpy array or an AnnData, not "
        f"{type(matrix).__name__}"
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
