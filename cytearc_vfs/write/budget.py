"""What a writer's memory budget bounds, and the one fixed allowance beside it.

``mem_budget`` of :func:`~cytearc_vfs.write.writer.write_counts` and
``repack`` bounds every buffer of the write that grows with the data
(``create_composite``'s too, costed by :mod:`cytearc_vfs.composite.budget`, and
the AnnData export's, by ``cytearc_vfs_adapters.anndata_output.export_budget``):
the bands being built, encoded and written
(:func:`~cytearc_vfs.format.layout.write_cost`), the transposed non-zeros
gathered for ``countsT``, the cell and feature tables and count summaries
held for the whole write (:func:`row_bytes`), and the values the
destination's write-behind store holds for writes not yet stored
(:func:`held_bytes`, taken out of the budget rather than added to it).

Beyond the budget a write may use :data:`BUDGET_ALLOWANCE`, a fixed amount
for what does not grow with the data (zarr's and the client's per-write
objects, the interpreter's buffers, thread state). Peaks are Python's
allocations as ``tracemalloc`` counts them; the input the caller holds is
not the writer's and is not counted. A budget that no layout fits is refused
before anything is written, naming the smallest that works.
"""

from __future__ import annotations

from typing import Any

from ..format.layout import LayoutTooLargeError
from ..format.option_names import option_name
from ..format.sizes import format_size
from .write_behind import MAX_HELD_BYTES

__all__ = [
    "BUDGET_ALLOWANCE",
    "budget_for",
    "held_bytes",
    "preparation_bytes",
    "reserve_for_source",
    "row_bytes",
]

#: Bytes a write may use beyond its budget, for what does not scale with the data.
BUDGET_ALLOWANCE = 4 << 20
# Share of the budget the write-behind store may hold: one eighth keeps a few
# shards going out behind the writer without crowding out its bands.
_HELD_SHARE = 8
# Bytes per cell or feature of the count summaries, held throughout a write
# (int64/float64 per cell twice, per feature once and bincount's result).
_SUMMARY_BYTES_PER_ROW = 24
# Bytes per id while the tables are prepared (before any band): its Python
# string and its entries in the index, list and set that check ids are unique.
_TABLE_BYTES_PER_ID = 112


def held_bytes(budget: int) -> int:
    """Bytes the destination's write-behind store may hold, out of ``budget``.

    >>> held_bytes(2 << 30) == MAX_HELD_BYTES, held_bytes(16 << 20)
    (True, 2097152)
    """
    return max(0, min(MAX_HELD_BYTES, budget // _HELD_SHARE))


def budget_for(cost: int) -> int:
    """The smallest budget whose write fits ``cost`` bytes beside the write-behind's share.

    >>> budget_for(7 << 20) == 8 << 20, budget_for(100 << 20) == (108 << 20)
    (True, True)
    """
    below_cap = -(-cost * _HELD_SHARE // (_HELD_SHARE - 1))
    while below_cap - held_bytes(below_cap) < cost:  # floor division's last bytes
        below_cap += 1
    return min(below_cap, cost + MAX_HELD_BYTES)


def row_bytes(n_cells: int, n_features: int, table_bytes: int) -> int:
    """Bytes held throughout a write beside its bands: tables and count summaries.

    ``table_bytes`` is what the prepared tables' columns hold.

    >>> row_bytes(1000, 100, 50_000)
    76400
    """
    return (n_cells + n_features) * _SUMMARY_BYTES_PER_ROW + table_bytes


def preparation_bytes(n_cells: int, n_features: int, table_bytes: int) -> int:
    """Peak bytes of preparing and writing the tables, before any band.

    Ids as Python strings and a set beside the prepared columns, then each
    column's encoded copy beside them.

    >>> preparation_bytes(1000, 100, 50_000)
    223200
    """
    return (n_cells + n_features) * _TABLE_BYTES_PER_ID + 2 * table_bytes


# Share of the budget a source may keep to serve row bands (a CSC AnnData
# element's row-major spill, built at the first band and held through the write).
_SOURCE_SHARE = 4


def reserve_for_source(source: Any, budget: int) -> None:
    """Give a source that builds something to serve row bands its share of the
    budget (its ``reserve``; counted in ``copied_bytes``), or refuse naming the
    smallest budget whose share holds it."""
    reserve = getattr(source, "reserve", None)
    if reserve is None:
        return
    share = budget // _SOURCE_SHARE
    needed = int(reserve(share))
    if needed > share:
        least = needed * _SOURCE_SHARE
        raise LayoutTooLargeError(
            f"reading the counts in row bands needs {format_size(needed)} for the input's "
            "row-major copy (a CSC element) or its dense chunks (a quarter of the budget), over "
            f"{option_name('mem_budget')} {format_size(budget)}; raise "
            f"{option_name('mem_budget')} to at least {format_size(least)} ({least} bytes), "
            "the smallest whose quarter holds it. Nothing was written"
        )
