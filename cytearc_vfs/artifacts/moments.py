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
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["ColumnMoments"]

Float64Array = npt.NDArray[np.float64]


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
        values = np.asarray(band, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(f"a band must be 2-D (rows, columns), not of shape {values.shape}")
        moments = cls(values.shape[1])
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

    def update(self, band: npt.ArrayLike) -> None:
        """Accumulate a band of rows, ``ndarray[rows, n_columns]``.

        NaN or infinity in a band propagates to its columns' moments; check
        values before accumulating them when that matters.

        Raises
        ------
        ValueError
            ``band`` is not 2-D with ``n_columns`` columns.
        """
        values = np.asarray(band, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != self.n_columns:
            raise ValueError(f"a band must have shape (rows, {self.n_columns}), not {values.shape}")
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
