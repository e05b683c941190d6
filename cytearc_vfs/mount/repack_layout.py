"""The layout ``repack`` writes counts in under its memory budget.

A store whose policy fits is copied shard by shard; one that must be made
smaller is rewritten band by band, each band read through zarr as it is
written, beside the destination's write-behind share
(:mod:`cytearc_vfs.write.budget`; docs/writing.md, "Memory budget").
"""

from __future__ import annotations

from ..format.layout import LayoutPolicy, count_layout, fit_policy, write_cost
from ..format.option_names import option_name
from ..format.records import CountLayout
from ..format.sizes import format_size
from ..format.source_store import AssayInfo
from ..write.budget import budget_for, held_bytes

__all__ = ["MIN_REPACK_SHARD_ROWS", "repack_layout"]

#: A budget that would halve count shards below this many rows is refused:
#: thousands of tiny shards make the rewrite and every later read slow.
MIN_REPACK_SHARD_ROWS = 8


def _rewrite_budget(layout: CountLayout, itemsize: int) -> int:
    """The smallest budget that rewrites counts in ``layout``: each band is read as it is written.

    Reading a band through zarr holds about what writing it does (the band,
    its decoded chunks, their stored bytes: :func:`write_cost` of dense
    bands), and the destination's write-behind holds its share beside them.
    """
    return budget_for(2 * write_cost(layout, itemsize, 0))


def repack_layout(info: AssayInfo, budget: int) -> CountLayout:
    """The layout ``repack`` writes ``info``'s counts in under ``budget``, or refuse naming one that works.

    The store's own policy when a copy of its shards fits; else the largest
    halving whose rewrite fits (each band read as it is written), refused
    below :data:`MIN_REPACK_SHARD_ROWS` rows a shard.
    """
    layout = info.layout
    itemsize = info.dtype.itemsize
    policy = LayoutPolicy(layout.unit_bytes, layout.chunk_bytes)
    transpose = layout.counts_t is not None
    # the destination's write-behind holds its share of the budget beside the bands
    held = held_bytes(budget)
    # a store kept in its policy is copied shard by shard, which a budget of its
    # band writes covers; one halved is rewritten, each band read as it is written
    kept = budget_for(write_cost(layout, itemsize, 0)) <= budget
    fitted = (
        policy
        if kept
        else fit_policy(
            policy,
            layout.shape,
            layout.dtype,
            itemsize,
            0,
            max(0, budget - held) // 2,  # what _rewrite_budget(layout) <= budget means
            transpose=transpose,
        )
    )
    if fitted == policy:
        # The policy is kept; its geometry is replayed by today's rule (a
        # row-framed store's is the same: _copy_assays looks at the encoding)
        return count_layout(layout.shape, layout.dtype, itemsize, policy, transpose=transpose)
    if fitted is None:
        smallest = count_layout(
            layout.shape, layout.dtype, itemsize, LayoutPolicy(1, 1), transpose=transpose
        )
        least = _rewrite_budget(smallest, itemsize)
        raise ValueError(
            f"{option_name('mem_budget')} {format_size(budget)} is below what rewriting {info.paths.assay}'s "
            f"{layout.shape[0]} x {layout.shape[1]} counts needs even in one-row shards "
            f"(the smallest {option_name('mem_budget')} that works is {format_size(least)}, "
            f"{least} bytes); give a larger {option_name('mem_budget')} (the store's own layout "
            f"needs {format_size(_rewrite_budget(layout, itemsize))})"
        )
    fitted_layout = count_layout(layout.shape, layout.dtype, itemsize, fitted, transpose=transpose)
    if fitted_layout.counts.shards[0] < MIN_REPACK_SHARD_ROWS:
        least = _budget_for_rows(layout, itemsize, policy, MIN_REPACK_SHARD_ROWS)
        raise ValueError(
            f"{option_name('mem_budget')} {format_size(budget)} would rewrite {info.paths.assay}'s counts in "
            f"shards of {fitted_layout.counts.shards[0]} row(s) "
            f"({-(-layout.shape[0] // fitted_layout.counts.shards[0]):,} shard files), which is "
            f"very slow to write and to read; give a {option_name('mem_budget')} of at least "
            f"{format_size(least)} ({least} bytes)"
        )
    return fitted_layout


def _budget_for_rows(layout: CountLayout, itemsize: int, policy: LayoutPolicy, rows: int) -> int:
    """The rewrite budget of the largest halving of ``policy`` whose count shards still hold ``rows``."""
    transpose = layout.counts_t is not None
    current = policy
    cost = _rewrite_budget(layout, itemsize)
    while True:
        candidate = count_layout(layout.shape, layout.dtype, itemsize, current, transpose=transpose)
        if candidate.counts.shards[0] < rows:
            return cost
        cost = _rewrite_budget(candidate, itemsize)
        if current == current.halved():
            return cost
        current = current.halved()
