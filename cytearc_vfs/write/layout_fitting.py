"""How a write's count layout and its transpose groups are fitted to the memory budget.

An import uses its layout policy exactly, or refuses naming the smallest
budget that works (spec, "Count layout"); inside :func:`fitting_layout`
(``repack --data-only``) the policy is halved until it fits. The transposed
``countsT`` is built per group of features whose non-zeros fit what the
budget leaves beside the row bands (:func:`feature_groups`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..format.layout import (
    LayoutPolicy,
    LayoutTooLargeError,
    count_layout,
    fit_layout,
    group_bytes,
    least_fitting_budget,
    require_fit,
    write_cost,
)
from ..format.option_names import option_name, option_offered
from ..format.records import CountLayout
from ..format.sizes import format_size
from .budget import budget_for, preparation_bytes
from .row_framed import current_layout

__all__ = ["feature_groups", "fitted_layout", "fitting_layout"]


def fitted_layout(
    policy: LayoutPolicy,
    shape: tuple[int, int],
    dtype: np.dtype,
    nnz: int,
    budget: int,
    *,
    tables: int,
    reserved: int,
    transpose: bool,
) -> CountLayout:
    """The layout of ``policy`` if the write fits ``budget``, else refuse naming the smallest that works.

    Inside :func:`fitting_layout`, the largest halving of ``policy`` that fits
    (refused naming the smallest budget). ``tables`` is what the prepared tables hold, ``reserved`` what the write
    holds beside its bands (docs/writing.md, "Memory budget").
    """
    rule = current_layout().rule
    fit_rows = _FIT_SHARD_ROWS.get()
    sizes = (policy, shape, dtype.name, dtype.itemsize, nnz)
    options: dict[str, Any] = {
        "transpose": transpose,
        "rule": rule,
        "reserved": reserved,
        "budget_for": budget_for,
    }
    preparation = preparation_bytes(*shape, tables)
    if preparation > budget:
        if fit_rows is None:
            layout = count_layout(*sizes[1:4], policy, transpose=transpose, rule=rule)
            cost = budget_for(write_cost(layout, dtype.itemsize, nnz, reserved=reserved))
        else:  # the budget of the smallest layout it would fit
            cost = least_fitting_budget(*sizes, min_shard_rows=fit_rows, **options)
        least = max(preparation, cost)
        # the counts' own need, when it sets the budget, is named: a remedy larger
        # than the one need the message gives reads as a mistake
        counts = f" and writing the counts {format_size(cost)}" if cost > preparation else ""
        exact = ""
        if fit_rows is None:
            exact = f" with {policy.named(pasteable=option_offered('layout'))}"
        raise LayoutTooLargeError(
            f"preparing the cell and feature tables needs {format_size(preparation)}{counts}, "
            f"over {option_name('mem_budget')} {format_size(budget)}; raise "
            f"{option_name('mem_budget')} to at least {format_size(least)} ({least} bytes), "
            f"the smallest that works{exact}. Nothing was written"
        )
    if fit_rows is not None:
        return fit_layout(*sizes, budget, min_shard_rows=fit_rows, **options)
    # the command line takes no layout: its refusal names only the budget
    return require_fit(*sizes, budget, layout_option=option_offered("layout"), **options)


#: While set (:func:`fitting_layout`), the policy is fitted to the budget instead of used exactly.
_FIT_SHARD_ROWS: ContextVar[int | None] = ContextVar("fit_shard_rows", default=None)


@contextmanager
def fitting_layout(min_shard_rows: int) -> Iterator[None]:
    """Let :func:`write_counts` calls in the block fit their policy to ``mem_budget``.

    Imports use their policy exactly or refuse (spec, "Count layout");
    ``repack --data-only``, which rewrites counts through this writer, fits
    it as every repack does: halved down to shards of ``min_shard_rows``
    rows, below which the budget is refused naming the one that works.
    """
    token = _FIT_SHARD_ROWS.set(min_shard_rows)
    try:
        yield
    finally:
        _FIT_SHARD_ROWS.reset(token)


def feature_groups(
    layout: CountLayout, itemsize: int, nnz: int, mem_budget: int
) -> list[tuple[int, int]]:
    """Feature ranges whose transposed non-zeros fit the budget beside the band writes.

    ``mem_budget`` is what is left once everything held beside the bands is
    taken out; :func:`~cytearc_vfs.format.layout.write_cost` of the layout
    (which counts one countsT band of features) has fitted it.
    """
    assert layout.counts_t is not None
    n_features = layout.shape[1]
    band_rows = layout.counts_t.shards[0]
    # the band writes' cost without a group, then as many features as the rest holds
    bands = write_cost(layout, itemsize, nnz) - group_bytes(layout, itemsize, nnz, band_rows)
    per_feature = max(1, group_bytes(layout, itemsize, nnz, band_rows)) / band_rows
    capacity = max(band_rows, int(max(0, mem_budget - bands) / per_feature))
    capacity = max(band_rows, capacity // band_rows * band_rows)
    return [
        (start, min(n_features, start + capacity)) for start in range(0, n_features, capacity)
    ] or [(0, 0)]
