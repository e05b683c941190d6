"""Streaming per-column moments: count, sum and sum of squared deviations.

Implements the moments rule of the spec's "Normalized feature statistics".
Each row band is reduced to its own count, sum, mean and ``m2`` (the sum of
squared deviations from the band mean), and merged into the running state
with the parallel update of Chan, Golub and LeVeque (1979)::

    delta = mean_b - mean_a
    m2    = m2_a + m2_b + delta**2 * n_a * n_b / (n_a + n_b)
    mean  = mean_a + delta * n_b / (n_a + n_b)

Every term is a sum of squares, so ``m2`` is never negative; the variance is
never computed as a mean of squares minus a squared mean, which cancels
catastrophically when a column's values sit far from zero.

A band's mean is computed as its first row plus the mean of the deviations
from that row. That shift makes a column of equal values give deviations of
exactly zero, a band mean equal to the value, a ``delta`` of exactly zero
and so an ``m2`` of exactly zero, which the spec requires (its scale is 1).
It also keeps the band's arithmetic near zero for large offsets.

A ``scipy.sparse`` band (CSR, CSC, COO; arrays or matrices) is reduced from
its stored entries alone, never densified: a column's implicit zeros each
add ``(0 - mean)**2`` to its ``m2``, counted, not materialised. Its shift is
a stored value only for a column with no implicit zero (so equal values
still give exactly zero) and zero otherwise, where the zeros are the shift.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = ["ColumnMoments"]

Float64Array = npt.NDArray[np.float64]

#: Value kinds a band may hold: booleans, integers and real floats.
_NUMERIC_KINDS = "biuf"


class ColumnMoments:
    """Per-column count, ``feature_sum`` and ``feature_m2`` of streamed row bands.

    All arithmetic is float64 whatever the dtype of the bands.

    Parameters
    ----------
    n_columns
        Number of columns (features) of every band.

    Examples
    --------
    >>> import numpy as np
    >>> moments = ColumnMoments(2)
    >>> moments.update(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> moments.update(np.array([[5.0, 5.0]]))
    >>> moments.n
    3
    >>> moments.feature_sum
    array([ 9., 15.])
    >>> moments.feature_m2
    array([8., 0.])
    >>> moments.mean
    array([3., 5.])
    >>> moments.scale  # a column of equal values scales by 1
    array([1.63299316, 1.        ])

    Two accumulators of disjoint bands merge into the moments of both:

    >>> left, right = ColumnMoments(1), ColumnMoments(1)
    >>> left.update(np.array([[1.0], [2.0]]))
    >>> right.update(np.array([[3.0], [4.0]]))
    >>> left.merge(right)
    >>> left.feature_m2
    array([5.])
    """

    __slots__ = ("_m2", "_mean", "_n", "_sum")

    def __init__(self, n_columns: int) -> None:
        if isinstance(n_columns, bool) or not isinstance(n_columns, int) or n_columns < 0:
            raise ValueError(f"n_columns must be a non-negative integer, not {n_columns!r}")
        self._n = 0
        self._sum: Float64Array = np.zeros(n_columns, dtype=np.float64)
        self._mean: Float64Array = np.zeros(n_columns, dtype=np.float64)
        self._m2: Float64Array = np.zeros(n_columns, dtype=np.float64)

    @classmethod
    def from_band(cls, band: npt.ArrayLike) -> ColumnMoments:
        """The moments of one band, with as many columns as it has.

        Examples
        --------
        >>> ColumnMoments.from_band([[1.0], [3.0]]).feature_m2
        array([2.])
        """
        values = band if sp.issparse(band) else _dense_values(band, None)
        shape = values.shape
        if len(shape) != 2:
            raise ValueError(
                f"a band must be 2-D (rows, columns), not {_described(band)} of shape {shape}"
            )
        moments = cls(int(shape[1]))
        moments.update(values)
        return moments

    @property
    def n_columns(self) -> int:
        """Number of columns."""
        return int(self._sum.shape[0])

    @property
    def n(self) -> int:
        """Number of rows accumulated."""
        return self._n

    @property
    def feature_sum(self) -> Float64Array:
        """Per-column sum of the values (a copy)."""
        return self._sum.copy()

    @property
    def feature_m2(self) -> Float64Array:
        """Per-column sum of squared deviations from the column mean (a copy); never negative."""
        return self._m2.copy()

    @property
    def mean(self) -> Float64Array:
        """Per-column mean, streamed; exact for a column of equal values.

        ``feature_sum / n`` agrees with it up to rounding.

        Raises
        ------
        ValueError
            No rows were accumulated.
        """
        self._require_rows("mean")
        return self._mean.copy()

    @property
    def std(self) -> Float64Array:
        """Per-column population standard deviation, ``sqrt(feature_m2 / n)``.

        Raises
        ------
        ValueError
            No rows were accumulated.
        """
        self._require_rows("std")
        std: Float64Array = np.sqrt(self._m2 / self._n)
        return std

    @property
    def scale(self) -> Float64Array:
        """``std`` with exact zeros replaced by 1, the divisor of feature scaling.

        Raises
        ------
        ValueError
            No rows were accumulated.
        """
        std = self.std
        std[std == 0.0] = 1.0
        return std

    def update(self, band: npt.ArrayLike | sp.sparray | sp.spmatrix) -> None:
        """Accumulate a band of rows, ``[rows, n_columns]``: a numeric ``ndarray`` (or
        anything ``numpy.asarray`` reads as one) or a ``scipy.sparse`` array or
        matrix (CSR, CSC, COO; duplicate COO entries count as their sum).

        A sparse band is reduced from its stored entries, never densified,
        and gives the moments of its dense equivalent (up to rounding).

        NaN or infinity in a band propagates to its columns' moments; check
        values before accumulating them when that matters.

        Raises
        ------
        ValueError
            ``band`` is not a 2-D band of real numbers with ``n_columns``
            columns; the message names what was given.
        """
        if isinstance(band, (sp.sparray, sp.spmatrix)):  # what sp.issparse finds
            self._update_sparse(band)
            return
        values = _dense_values(band, self.n_columns)
        if values.ndim != 2 or values.shape[1] != self.n_columns:
            raise ValueError(
                f"a band must have shape (rows, {self.n_columns}), not {values.shape} "
                f"({_described(band)}); pass one 2-D band of rows with {self.n_columns} columns"
            )
        rows = int(values.shape[0])
        if rows == 0:
            return
        band_sum = values.sum(axis=0)
        # Deviations from the first row: exactly zero for a column of equal values.
        pivot = values[0]
        shifted = values - pivot
        shifted_mean = shifted.mean(axis=0)
        shifted -= shifted_mean
        band_m2 = np.einsum("ij,ij->j", shifted, shifted)
        self._combine(rows, band_sum, pivot + shifted_mean, band_m2)

    def _update_sparse(self, band: Any) -> None:
        """:meth:`update` with a ``scipy.sparse`` band, from its stored entries."""
        shape = tuple(band.shape)
        if len(shape) != 2 or shape[1] != self.n_columns:
            raise ValueError(
                f"a band must have shape (rows, {self.n_columns}), not {shape} "
                f"({_described(band)}); pass one 2-D band of rows with {self.n_columns} columns"
            )
        if band.dtype.kind not in _NUMERIC_KINDS:
            raise ValueError(
                f"a band must hold real numbers, not {band.dtype} ({_described(band)}); "
                "convert it to a float or integer dtype"
            )
        rows = int(shape[0])
        if rows == 0:
            return
        columns, data = _stored_entries(band)
        width = self.n_columns
        stored = np.bincount(columns, minlength=width)
        band_sum = _column_sums(columns, data, width)
        # The shift: a stored value where the column has no implicit zero (equal
        # values then deviate by exactly zero), else zero, the implicit entries' value.
        pivot = np.zeros(width, dtype=np.float64)
        pivot[columns] = data
        pivot[stored < rows] = 0.0
        shifted = data - pivot[columns]
        shifted_mean = _column_sums(columns, shifted, width) / rows
        shifted -= shifted_mean[columns]
        # each implicit zero deviates by -shifted_mean (its shift is zero)
        band_m2 = _column_sums(columns, shifted * shifted, width)
        band_m2 += (rows - stored) * (shifted_mean * shifted_mean)
        self._combine(rows, band_sum, pivot + shifted_mean, band_m2)

    def merge(self, other: ColumnMoments) -> None:
        """Add the rows accumulated by ``other`` (disjoint from this one's) into this one.

        Raises
        ------
        ValueError
            ``other`` has another number of columns.
        """
        if other.n_columns != self.n_columns:
            raise ValueError(
                f"cannot merge moments of {other.n_columns} columns into {self.n_columns}"
            )
        if other._n:
            self._combine(other._n, other._sum, other._mean, other._m2)

    def _combine(
        self, rows: int, band_sum: Float64Array, band_mean: Float64Array, band_m2: Float64Array
    ) -> None:
        before = self._n
        total = before + rows
        if before == 0:
            self._mean = band_mean.copy()
            self._m2 = band_m2.copy()
        else:
            delta = band_mean - self._mean
            # Python ints: the weight is exact before its one rounding to float.
            weight = before * rows / total
            self._m2 = self._m2 + band_m2 + delta * delta * weight
            self._mean = self._mean + delta * (rows / total)
        self._sum = self._sum + band_sum
        self._n = total

    def _require_rows(self, what: str) -> None:
        if self._n == 0:
            raise ValueError(f"the {what} of no rows is undefined; update with a band first")

    def __repr__(self) -> str:
        return f"ColumnMoments(n_columns={self.n_columns}, n={self._n})"


def _described(band: object) -> str:
    """What ``band`` is, for a refusal: its type, and its dtype when it has one."""
    dtype = getattr(band, "dtype", None)
    kind = type(band).__name__
    return kind if dtype is None else f"{kind} of {dtype}"


def _dense_values(band: object, n_columns: int | None) -> Float64Array:
    """``band`` as a float64 ndarray, or a ``ValueError`` naming what it is."""
    expected = "(rows, columns)" if n_columns is None else f"(rows, {n_columns})"
    try:
        values = np.asarray(band)
    except (TypeError, ValueError) as exc:
        # ragged nested sequences: numpy's "setting an array element with a sequence"
        raise ValueError(
            f"a band must be a 2-D array of real numbers of shape {expected}; "
            f"{_described(band)} is not one ({exc}). Pass a numpy array or a scipy.sparse "
            "matrix or array"
        ) from exc
    if values.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(
            f"a band must be a 2-D array of real numbers of shape {expected}, not "
            f"{_described(band)} (read as {values.dtype}, shape {values.shape}); pass a numpy "
            "array of floats or integers (.astype(float) converts numbers held otherwise) or "
            "a scipy.sparse matrix or array"
        )
    return values.astype(np.float64, copy=False)


def _column_sums(columns: npt.NDArray[np.intp], weights: Float64Array, width: int) -> Float64Array:
    """Per-column sums of ``weights``; float64 even for no entries (where
    ``numpy.bincount`` answers int64)."""
    sums: Float64Array = np.bincount(columns, weights=weights, minlength=width).astype(
        np.float64, copy=False
    )
    return sums


def _stored_entries(band: Any) -> tuple[npt.NDArray[np.intp], Float64Array]:
    """The column and float64 value of each stored entry of a sparse ``band``,
    duplicates summed; the caller's band is never modified."""
    if getattr(band, "has_canonical_format", False):
        entries = band.tocoo()
    else:
        # a COO (or non-canonical CSR/CSC) band may repeat a position, meaning the
        # sum: the conversion to CSC sums repeats, into new arrays
        entries = band.tocoo().tocsc().tocoo()
    columns = np.asarray(entries.col, dtype=np.intp)
    return columns, np.asarray(entries.data, dtype=np.float64)
