"""Per-cell count totals (``countSummaries/rowSums``), exact or refused.

Spec, "Count dtype": "Writers cast through a checked cast, so a count that
the stored dtype cannot hold raises instead of wrapping", and the summaries
hold per-cell totals. Integer counts total in 64 bits
(:func:`~cytearc_vfs.format.count_dtype.summary_dtype`: ``uint64`` for
unsigned counts, ``int64`` for signed), which numpy's sums wrap: a cell of
``2**64 - 1`` and ``1`` would total ``0``. No wider integer exists for
Zarr, and a float total would not be exact, so a total the summary dtype
cannot hold is refused (:class:`RowTotalOverflowError`), as is a float total
that overflows to infinity. Real counts never come near: the exact path
runs only when the values' bound allows a wrap (:func:`may_overflow`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ..errors import VfsError

__all__ = [
    "RowTotalOverflowError",
    "add_totals",
    "exact_group_sums",
    "may_overflow",
    "row_totals",
]

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


class RowTotalOverflowError(VfsError, OverflowError):
    """A cell's counts total more than its per-cell total (``rowSums``) can hold.

    Attributes name the first such row (counted in the matrix written), its
    exact total and the summary dtype.
    """

    def __init__(
        self, *, row: int, total: int | float, dtype: np.dtype, cell: str | None = None
    ) -> None:
        self.row = row
        self.total = total
        self.dtype = np.dtype(dtype)
        what = f"cell {cell!r} (row {row})" if cell is not None else f"row {row}"
        super().__init__(
            f"the counts of {what} total {total}, which the per-cell totals "
            f"(countSummaries/rowSums, {self.dtype}) cannot hold; totals are stored exactly, "
            "never wrapped. Check the input for corrupt values (no real count matrix has such "
            "a cell total), or scale the counts down before writing. Nothing was written"
        )

    def naming(self, cell: str, *, row: int | None = None) -> RowTotalOverflowError:
        """The same refusal, naming the cell by its id (and its row in the output)."""
        return type(self)(
            row=self.row if row is None else row, total=self.total, dtype=self.dtype, cell=cell
        )


def exact_group_sums(
    values: npt.NDArray[Any], starts: npt.NDArray[np.integer[Any]]
) -> tuple[npt.NDArray[Any], int | None, int]:
    """Sums of ``values`` over the groups beginning at ``starts``, exactly.

    ``values`` are int64 or uint64. Each value is split into a high and a
    low 32-bit half; the halves are summed separately (exact for groups of
    fewer than 2**31 entries, far beyond any real matrix), the low sums'
    carries are moved into the high sums, and a group fits its dtype exactly
    when its high sum fits 32 bits. Returns the sums (wrapped where a group
    overflows), the first overflowing group (or ``None``) and its exact total.

    >>> exact_group_sums(np.array([2**64 - 1, 1, 5], dtype=np.uint64), np.array([0, 2]))[1:]
    (0, 18446744073709551616)
    """
    signed = values.dtype == np.int64
    low = np.add.reduceat(values.view(np.uint64) & _LOW, starts)
    high = np.add.reduceat(values >> (32 if signed else _SHIFT), starts)
    if signed:
        high = high + (low >> _SHIFT).astype(np.int64)
        fits = (high >= -(1 << 31)) & (high < (1 << 31))
    else:
        high = high + (low >> _SHIFT)
        fits = high < np.uint64(1 << 32)
    low &= _LOW
    if fits.all():
        sums = (high.view(np.uint64) << _SHIFT) | low
        return sums.view(values.dtype), None, 0
    bad = int(np.flatnonzero(~fits)[0])
    return values[:0], bad, int(high[bad]) * (1 << 32) + int(low[bad])


def may_overflow(largest: int | float, terms: int, dtype: np.dtype) -> bool:
    """Whether ``terms`` values of magnitude up to ``largest`` can total past ``dtype``.

    >>> may_overflow(10**5, 40_000, np.dtype("uint64"))
    False
    >>> may_overflow(2**63, 2, np.dtype("uint64"))
    True
    """
    if dtype.kind == "f":
        return float(largest) * terms > float(np.finfo(dtype).max) / 2
    return int(largest) * terms > int(np.iinfo(dtype).max)


def _largest(values: npt.NDArray[Any]) -> int | float:
    if not values.size:
        return 0
    if values.dtype.kind == "f":
        return float(np.abs(values).max())
    return max(int(values.max()), -int(values.min()))


def row_totals(
    values: sp.csr_array | npt.NDArray[Any], dtype: np.dtype, *, row_offset: int = 0
) -> npt.NDArray[Any]:
    """Per-row totals of ``values`` (canonical CSR or a dense 2-D block) in ``dtype``.

    ``dtype`` is the summary dtype of the counts. Float totals come out the
    same bits whichever form the values arrive in (the non-zeros of a row
    summed in column order), so a verification that reads the stored counts
    back densely finds the totals the writer stored. A total it cannot hold
    raises :class:`RowTotalOverflowError` naming the row (counted from
    ``row_offset``) and the exact total; nothing is wrapped.
    """
    if not sp.issparse(values):
        dense = np.asarray(values)
        if dense.dtype.kind != "f" and not may_overflow(_largest(dense), dense.shape[1], dtype):
            return dense.sum(axis=1, dtype=dtype)  # integers: exact in any order
        # Floats are summed as the writers sum them, over the row's non-zeros in
        # column order (numpy's pairwise sum of a dense row groups them otherwise,
        # and the last bit could differ from the stored total); integers near 64
        # bits take the exact path.
        values = sp.csr_array(dense)
    csr = sp.csr_array(values)
    lengths = np.diff(csr.indptr)
    sums = np.zeros(len(lengths), dtype=dtype)
    if not csr.nnz:
        return sums
    filled = lengths > 0
    starts = csr.indptr[:-1][filled]
    data = csr.data.astype(dtype, copy=False)
    if dtype.kind == "f" or not may_overflow(_largest(csr.data), int(lengths.max()), dtype):
        # segments of empty rows are skipped, so each sum runs to the next start
        with np.errstate(over="ignore"):  # an infinite float total is refused below
            sums[filled] = np.add.reduceat(data, starts)
        _check_finite(sums, row_offset)
        return sums
    exact, bad, total = exact_group_sums(data, starts)
    if bad is not None:
        row = int(np.flatnonzero(filled)[bad])
        raise RowTotalOverflowError(row=row_offset + row, total=total, dtype=dtype)
    sums[filled] = exact
    return sums


def add_totals(into: npt.NDArray[Any], more: npt.NDArray[Any], *, row_offset: int = 0) -> None:
    """``into += more`` for per-row totals, refusing a sum ``into``'s dtype cannot hold."""
    with np.errstate(over="ignore"):  # an infinite float total is refused below
        total = into + more
    if into.dtype.kind == "f":
        _check_finite(total, row_offset)
    elif into.dtype.kind == "u":
        wrapped = total < into
        if wrapped.any():
            row = int(np.flatnonzero(wrapped)[0])
            exact = int(into[row]) + int(more[row])
            raise RowTotalOverflowError(row=row_offset + row, total=exact, dtype=into.dtype)
    else:
        wrapped = ((more > 0) & (total < into)) | ((more < 0) & (total > into))
        if wrapped.any():
            row = int(np.flatnonzero(wrapped)[0])
            exact = int(into[row]) + int(more[row])
            raise RowTotalOverflowError(row=row_offset + row, total=exact, dtype=into.dtype)
    into[...] = total


def _check_finite(sums: npt.NDArray[Any], row_offset: int) -> None:
    if sums.dtype.kind == "f" and not np.isfinite(sums).all():
        row = int(np.flatnonzero(~np.isfinite(sums))[0])
        raise RowTotalOverflowError(row=row_offset + row, total=float(sums[row]), dtype=sums.dtype)
