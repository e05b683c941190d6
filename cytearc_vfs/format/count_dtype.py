"""The count dtype rule: which dtype an assay's counts are stored in.

Spec, "Count dtype": unsigned and as narrow as the largest value allows
exactly when every (duplicate-summed) value is a non-negative integer;
otherwise the source's float32/float64, or its signed integer dtype when
values are negative. float16 is never a storage dtype, and a wider float
(``numpy.longdouble``) is stored as float64 only when float64 holds every value
exactly (else refused). Values must be finite, and every cast into the storage
dtype is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ValueRange",
    "checked_cast",
    "merge_dtype",
    "resolve_count_dtype",
    "scan_values",
    "summary_dtype",
]

_UNSIGNED = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64))


@dataclass(frozen=True, slots=True)
class ValueRange:
    """What the dtype rule needs to know of a matrix's canonical values."""

    source_dtype: np.dtype
    """dtype the values arrived in (after duplicate summation)."""
    minimum: float | int
    """Smallest value, counting implicit zeros only when ``has_zeros``."""
    maximum: float | int
    """Largest value."""
    integral: bool
    """Every value is a whole number."""
    nnz: int
    """Number of stored non-zero values."""
    inexact: str | None = None
    """The first value of a float wider than float64 (``numpy.longdouble``) that
    float64 does not hold exactly, and where it is (``None``: every one is held
    exactly, or the dtype is no wider). Such counts are stored only when they are
    stored as integers."""

    def merge(self, other: ValueRange) -> ValueRange:
        """Combine the ranges of two parts of one matrix."""
        return ValueRange(
            np.promote_types(self.source_dtype, other.source_dtype),
            min(self.minimum, other.minimum),
            max(self.maximum, other.maximum),
            self.integral and other.integral,
            self.nnz + other.nnz,
            self.inexact if self.inexact is not None else other.inexact,
        )


def empty_range(dtype: np.dtype) -> ValueRange:
    """The range of a matrix of zeros in ``dtype``."""
    return ValueRange(np.dtype(dtype), 0, 0, True, 0)


def scan_values(values: npt.NDArray[np.generic], *, where: str) -> ValueRange:
    """Range of ``values``; raises ``ValueError`` for NaN, infinity or a non-numeric dtype.

    ``where`` names the part being scanned, so the refusal can say which rows.
    """
    dtype = values.dtype
    if dtype == np.bool_:
        values = values.view(np.uint8)
    elif dtype.kind not in "uif":
        raise TypeError(
            f"counts must be numeric, found dtype {dtype} in {where}; convert them to "
            "integers or floats first"
        )
    if values.size == 0:
        return empty_range(dtype)
    if dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.all():
            bad = np.flatnonzero(~finite)[0]
            raise ValueError(
                f"counts hold a non-finite value ({values.flat[bad]!r}) in {where}; count "
                "matrices must be finite. Replace NaN/inf (e.g. np.nan_to_num) before writing; "
                "nothing was written"
            )
        integral = bool(np.all(np.floor(values) == values))
        inexact = None
        if dtype.itemsize > 8:
            # numpy.longdouble: stored as float64 unless they are whole counts, so
            # a value float64 rounds is found here, before anything is written
            rounded = np.flatnonzero(values.astype(np.float64) != values)
            if rounded.size:
                inexact = f"{values.flat[rounded[0]]!r} in {where}"
        low, high = values.min(), values.max()
        if inexact is not None and integral:
            # whole counts of a wide float, exact as Python ints: float() would round
            # 2**64 - 1 up to 2**64, and uint64, which holds it, would not be chosen
            return ValueRange(dtype, int(low), int(high), integral, values.size, inexact)
        return ValueRange(dtype, float(low), float(high), integral, values.size, inexact)
    return ValueRange(dtype, int(values.min()), int(values.max()), True, values.size)


def resolve_count_dtype(value_range: ValueRange) -> np.dtype:
    """Storage dtype of counts with ``value_range`` (the spec's rule).

    >>> resolve_count_dtype(ValueRange(np.dtype("float32"), 0.0, 300.0, True, 5))
    dtype('uint16')
    >>> resolve_count_dtype(ValueRange(np.dtype("float32"), 0.0, 1.5, False, 5))
    dtype('float32')
    >>> resolve_count_dtype(ValueRange(np.dtype("int64"), -3, 7, True, 5))
    dtype('int64')
    """
    source = value_range.source_dtype
    if value_range.integral and value_range.minimum >= 0:
        for candidate in _UNSIGNED:
            if value_range.maximum <= np.iinfo(candidate).max:
                return candidate
        if source.kind == "f":
            return _float_storage(value_range)
        raise AssertionError("a non-negative integer above uint64 cannot come from numpy")
    if source.kind == "f":
        return _float_storage(value_range)
    if source.kind == "u":
        # unsigned sources are never negative; unreachable unless integral is wrong
        raise AssertionError("unsigned counts resolved as negative")
    info = np.iinfo(source)
    if value_range.minimum < info.min or value_range.maximum > info.max:
        # duplicates summed (exactly, in 64 bits) past the source's own range
        return np.dtype(np.int64)
    return source


def _float_storage(value_range: ValueRange) -> np.dtype:
    source = value_range.source_dtype
    # float16 is not a count storage dtype; it widens exactly to float32.
    if source.itemsize <= 4:
        return np.dtype(np.float32)
    if value_range.inexact is not None:
        # the spec stores float counts as float32 or float64: a wider float's values
        # are kept only when float64 holds them, never rounded on the way in
        raise ValueError(
            f"counts of dtype {source} (numpy.longdouble) hold a value that float64, the "
            f"widest float count dtype, cannot hold exactly ({value_range.inexact}); they "
            "would be rounded, which a count import never does silently. Convert the "
            "counts explicitly first, accepting the rounding (e.g. X.astype(numpy.float64)), "
            "or round them to whole counts. Nothing was written"
        )
    return np.dtype(np.float64)


def merge_dtype(dtypes: list[np.dtype], *, summed_terms: int = 1) -> np.dtype:
    """Storage dtype of a merge of counts stored in ``dtypes``.

    The common type of the sources, widened so that ``summed_terms`` values
    summed by feature name cannot overflow it. Integer sources without a
    common integer dtype (uint64 with a signed dtype) are refused rather than
    stored as floats.

    >>> merge_dtype([np.dtype("uint8"), np.dtype("uint16")])
    dtype('uint16')
    >>> merge_dtype([np.dtype("uint8"), np.dtype("uint8")], summed_terms=2)
    dtype('uint16')
    """
    if not dtypes:
        raise ValueError("a merge needs at least one source dtype")
    common = np.dtype(np.result_type(*dtypes))
    if all(d.kind in "ui" for d in dtypes) and common.kind == "f":
        raise ValueError(
            f"sources store counts as {sorted({str(d) for d in dtypes})}, which have no common "
            "integer dtype (uint64 with a signed dtype); re-import the uint64 source so its "
            "values fit int64, or merge the sources separately"
        )
    if summed_terms > 1 and common.kind in "ui":
        bound = np.iinfo(common).max
        needed = bound * summed_terms
        ladder = [
            d
            for d in (_UNSIGNED if common.kind == "u" else _SIGNED)
            if d.itemsize >= common.itemsize
        ]
        for candidate in ladder:
            if needed <= np.iinfo(candidate).max:
                return candidate
        raise ValueError(
            f"summing {summed_terms} {common} counts per feature can overflow every "
            f"{common.kind}int dtype; merge fewer sources per feature"
        )
    return common


_SIGNED = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64))


def checked_cast(values: npt.NDArray[Any], dtype: np.dtype, *, where: str) -> npt.NDArray[Any]:
    """``values`` as ``dtype``, raising instead of wrapping or rounding."""
    if values.dtype == dtype:
        return values
    cast = values.astype(dtype)
    if values.size and not np.array_equal(cast, values):
        mismatch = np.flatnonzero(cast != values)[0]
        raise OverflowError(
            f"count {values.flat[mismatch]!r} in {where} does not fit the storage dtype "
            f"{dtype}; it would be stored as {cast.flat[mismatch]!r}. Nothing was written"
        )
    return cast


def summary_dtype(dtype: np.dtype) -> np.dtype:
    """dtype of per-cell sums of counts stored as ``dtype`` (exact for integers).

    >>> summary_dtype(np.dtype("uint16"))
    dtype('uint64')
    """
    if dtype.kind == "u":
        return np.dtype(np.uint64)
    if dtype.kind == "i":
        return np.dtype(np.int64)
    return np.dtype(np.float64)
