"""The structure of a scipy sparse input, checked before anything is written.

scipy builds a matrix from arrays it checks only partly: one whose
``indices``, ``indptr`` or ``coords`` were set afterwards (or that came from
a damaged file) may hold a column past the matrix or a decreasing
``indptr``. Slicing such a matrix fails deep inside numpy ("operands could
not be broadcast together ...") or reads other values, and a writer meets it
only after the destination exists. :func:`checked_sparse` looks at the index
arrays once (scipy's own ``check_format(full_check=True)`` would edit the
caller's arrays in place) and converts the formats that have no canonical
form of their own (DIA, LIL, DOK) to CSR.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["checked_sparse"]

_REMEDY = (
    "rebuild the matrix from its arrays (scipy.sparse.csr_matrix((data, indices, indptr), "
    "shape=...) checks them) or fix the arrays it was built from. Nothing was written"
)


def _refuse(matrix: Any, problem: str) -> ValueError:
    return ValueError(
        f"counts are a malformed scipy.sparse {type(matrix).__name__} of shape {matrix.shape}: "
        f"{problem}; {_REMEDY}"
    )


def _check_bounds(matrix: Any, values: np.ndarray, length: int, what: str) -> None:
    if values.size and (int(values.min()) < 0 or int(values.max()) >= length):
        bad = values[(values < 0) | (values >= length)][0]
        raise _refuse(matrix, f"it holds {what} {int(bad)}, outside 0..{length - 1}")


def _check_compressed(matrix: Any) -> None:
    major, minor = matrix.shape if matrix.format == "csr" else matrix.shape[::-1]
    indptr, indices = np.asarray(matrix.indptr), np.asarray(matrix.indices)
    axis = "row" if matrix.format == "csr" else "column"
    other = "column" if matrix.format == "csr" else "row"
    if indptr.ndim != 1 or len(indptr) != major + 1:
        raise _refuse(matrix, f"indptr has {len(indptr)} entries, not one per {axis} plus one")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise _refuse(matrix, "its indptr must start at 0 and never decrease")
    if len(indices) != len(matrix.data):
        raise _refuse(matrix, f"it has {len(indices)} indices but {len(matrix.data)} values")
    if int(indptr[-1]) > len(indices):
        raise _refuse(
            matrix, f"its indptr ends at {int(indptr[-1])}, past its {len(indices)} entries"
        )
    _check_bounds(matrix, indices[: int(indptr[-1])], minor, f"{other} index")


def _check_coordinates(matrix: Any) -> None:
    coords = [np.asarray(axis) for axis in matrix.coords]
    if any(len(axis) != len(matrix.data) for axis in coords):
        raise _refuse(matrix, "its coordinate arrays and values differ in length")
    for axis, length, what in zip(coords, matrix.shape, ("row index", "column index"), strict=True):
        _check_bounds(matrix, axis, length, what)


def checked_sparse(matrix: Any) -> Any:
    """``matrix`` with its index arrays checked; DIA, LIL and DOK as a CSR copy.

    Raises
    ------
    ValueError
        An index outside the shape, an ``indptr`` that is not a range of the
        stored entries, or arrays of different lengths.
    """
    if matrix.format in ("csr", "csc"):
        _check_compressed(matrix)
    elif matrix.format == "coo":
        _check_coordinates(matrix)
    elif not hasattr(matrix, "has_canonical_format"):
        # DIA, LIL and DOK hold no duplicates and have no canonical form to ask about
        return sp.csr_array(matrix)
    return matrix
