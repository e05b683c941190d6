"""Checks that loaded values are counts, and the AnnData shape every loader returns.

Every loader in :mod:`.loaders` hands its matrix through :func:`_require_counts`
(whole, finite, non-negative numbers, within a stated rounding tolerance) and
assembles its result with :func:`_build`: a canonical CSR matrix and
string-labelled ``obs`` and ``var`` frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anndata as ad
import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp

from .errors import CountsError


def _require_counts(
    name: str, values: npt.NDArray[Any], *, tolerance: float | npt.NDArray[Any] = 0.0
) -> npt.NDArray[Any]:
    """Return ``values`` rounded to integers, or raise if they are not counts."""
    if values.size and not np.all(np.isfinite(values)):
        raise CountsError(f"{name}: non-finite values")
    rounded = np.rint(values)
    if values.size:
        error = np.abs(values - rounded)
        if np.any(error > tolerance):
            worst = float(np.max(error))
            raise CountsError(f"{name}: values are {worst:.3g} away from integers")
        if rounded.min() < 0:
            raise CountsError(f"{name}: negative counts")
    return rounded


def _canonical(matrix: sp.csr_matrix) -> sp.csr_matrix:
    # Drop stored zeros and duplicates so nnz means non-zero counts.
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def _unique_index(name: str, values: Iterable[Any], axis: str) -> pd.Index:
    index = pd.Index([str(v) for v in values], dtype=str)
    if not index.is_unique:
        raise CountsError(f"{name}: {axis} ids are not unique")
    return index


def _build(matrix: sp.csr_matrix, obs: pd.DataFrame, var: pd.DataFrame) -> ad.AnnData:
    """Assemble the AnnData every loader returns: canonical CSR, str-labelled frames."""
    for frame in (obs, var):
        # anndata converts non-string column labels through a pandas option that
        # pandas 3 deprecates (a warning, an error under pytest's settings);
        # an empty frame's labels are a RangeIndex, so give every frame str labels.
        frame.columns = pd.Index([str(c) for c in frame.columns], dtype=str)
    return ad.AnnData(X=_canonical(matrix), obs=obs, var=var)


def _decode(values: npt.NDArray[Any]) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]
