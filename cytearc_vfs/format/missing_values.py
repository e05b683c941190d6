"""Missing values in a table column: how ``fill_missing`` stores them, and how a
column of values with gaps is recognised for its refusal.

A Zarr column has no mask, so a column with missing values is refused by
:func:`~.tables.column_values` unless ``fill_missing=True`` stores them as a
composite does (:func:`fill_missing`). An object column of booleans or
numbers with gaps (:func:`values_with_gaps`) is refused naming a type that
marks them, since filling it cannot help.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["fill_missing", "values_with_gaps"]


def fill_missing(series: pd.Series) -> pd.Series:
    """``series`` with its missing values as a composite stores them, so a column
    that holds them can be stored (``write_counts(fill_missing=True)``).

    A categorical's missing value becomes ``""``, added as its last category (a
    categorical of numbers becomes ``float64`` with NaN); an integer or boolean
    column with missing values (pandas' nullable types) becomes ``float64``
    with NaN, and a float column keeps its own width (NaN is its missing
    value: a ``float32`` column stays ``float32``, as ``write_counts`` stores
    it); missing text becomes ``""``. A column without missing values is
    returned as it is.

    >>> fill_missing(pd.Series(pd.Categorical(["a", None]))).tolist()
    ['a', '']
    >>> fill_missing(pd.Series([1, None], dtype="Int64")).tolist()
    [1.0, nan]
    >>> fill_missing(pd.Series([0.5, None], dtype=np.float32)).dtype
    dtype('float32')
    """
    dtype = series.dtype
    missing = series.isna()
    if not missing.any():
        return series
    if dtype.kind == "f":
        # NaN already marks a float's missing values; a nullable Float32/Float64
        # becomes its numpy dtype, never wider
        return series.astype(getattr(dtype, "numpy_dtype", dtype))
    if isinstance(dtype, pd.CategoricalDtype):
        if dtype.categories.dtype.kind in "biuf":
            return series.astype(np.float64)
        text = series.astype(object).where(~missing, "")
        categories = [*dtype.categories, *([] if "" in dtype.categories else [""])]
        return pd.Series(
            pd.Categorical(text, categories=categories, ordered=dtype.ordered),
            index=series.index,
            name=series.name,
        )
    if dtype.kind in "biuf":
        return series.astype(np.float64)
    return series.astype(object).where(~missing, "")


def values_with_gaps(values: npt.NDArray[Any]) -> str | None:
    """``"boolean"`` or ``"numbers"`` when object ``values`` are booleans (or numbers)
    and missing values (``None``, NaN, or ``""`` as :func:`fill_missing` makes them)
    and nothing else, some of each; ``None`` otherwise.

    >>> values_with_gaps(np.array([True, None], dtype=object))
    'boolean'
    >>> values_with_gaps(np.array([1, pd.NA], dtype=object))
    'numbers'
    >>> values_with_gaps(np.array([1, "x", None], dtype=object)) is None
    True
    """
    kinds: set[str] = set()
    gaps = 0
    for value in values.tolist():
        if (
            value is None
            or value is pd.NA
            or (isinstance(value, str) and not value)
            or (isinstance(value, (float, np.floating)) and np.isnan(value))
        ):
            gaps += 1
        elif isinstance(value, (bool, np.bool_)):
            kinds.add("boolean")
        elif isinstance(value, (int, float, np.number)):
            kinds.add("numbers")
        else:
            return None
    return kinds.pop() if gaps and len(kinds) == 1 else None
