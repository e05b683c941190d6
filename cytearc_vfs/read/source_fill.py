"""One source's share of a dense gather read, written into the reader's output.

The reader (``reader.py``) plans each source's cells and features; here a
source fills its rows of the output: an AnnData source through its own
element (``anndata_reads.py``), a CyteArc source from whichever of
``counts`` and ``countsT`` touches fewer chunk bytes, through the shard
reader and a placement (``placement.py``) that writes the selected values
straight into the output in the requested order. Repeated cells and
features are copied from their first occurrence. A source whose codecs the
shard reader does not know is read through zarr's orthogonal indexing and
placed the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .cell_plan import CellPlan
from .feature_plan import FeaturePlan
from .gather import OrientationChoice, sorted_unique
from .placement import ColumnPlacement, Placement, RowPlacement, as_slice, column_map
from .sources import BoundSource

__all__ = ["fill_from_source"]

Indices = npt.NDArray[np.int64]


async def fill_from_source(
    source: BoundSource, out: npt.NDArray[Any], cells: CellPlan, plan: FeaturePlan
) -> int:
    """Fill ``out`` from ``source``: rows as ``cells``, columns as ``plan`` say.
    Returns the chunks decoded."""
    if source.anndata is not None:
        # one orientation, the element's encoding (anndata_reads.py)
        decoded = await source.anndata.read_into(out, cells, plan)
        _, _, repeated = cells.firsts()
        if len(repeated):
            out[repeated[:, 0]] = out[repeated[:, 1]]
        return decoded
    choice = source.orientation(cells, plan)
    fast = source.counts_t_fast if choice.orientation == "countsT" else source.counts_fast
    unique_rows, first_rows, repeated_rows = cells.firsts()
    if fast is None:
        decoded = await _through_zarr(source, choice, out, unique_rows, first_rows, plan)
    elif choice.orientation == "counts":
        placement: Placement = RowPlacement(out, first_rows, plan.cell_major(fast.zero_column))
        decoded = await fast.read_into(unique_rows, plan.touched.chunks(fast.chunks[1]), placement)
    else:
        unique_cols, first_cols, repeated_cols = plan.feature_major()
        placement = ColumnPlacement(out, first_cols, *cells.axes())
        # the unique rows touch the same chunks as the rows
        decoded = await fast.read_into(unique_cols, cells.touched.chunks(fast.chunks[1]), placement)
        if len(repeated_cols):
            out[np.ix_(first_rows, repeated_cols[:, 0])] = out[
                np.ix_(first_rows, repeated_cols[:, 1])
            ]
    if len(repeated_rows):
        out[repeated_rows[:, 0]] = out[repeated_rows[:, 1]]
    return decoded


async def _through_zarr(
    source: BoundSource,
    choice: OrientationChoice,
    out: npt.NDArray[Any],
    unique_rows: Indices,
    first_rows: Indices,
    plan: FeaturePlan,
) -> int:
    """A source whose codecs the shard reader does not know: zarr reads the block
    of unique rows and columns, which is placed as one strip. Returns the chunks
    zarr decoded."""
    unique_cols, inverse = sorted_unique(plan.cols)
    if choice.orientation == "countsT":
        assert source.counts_t is not None
        block = np.asarray(
            await source.counts_t.get_orthogonal_selection(
                (as_slice(unique_cols), as_slice(unique_rows))
            )
        ).T
    else:
        block = np.asarray(
            await source.counts.get_orthogonal_selection(
                (as_slice(unique_rows), as_slice(unique_cols))
            )
        )
    strip = np.zeros((len(unique_rows), len(unique_cols) + 1), dtype=block.dtype)
    strip[:, :-1] = block
    columns = np.full(len(plan.columns), -1, dtype=np.int64)
    columns[plan.out_cols] = inverse
    RowPlacement(out, first_rows, column_map(columns, len(unique_cols))).place(0, strip)
    return choice.chunks
