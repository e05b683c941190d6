"""One source's share of a sparse read (``VirtualArrayReader.read_sparse``).

:func:`source_rows` reads the rows a source holds as
:class:`~.sparse_rows.SourceRows`, the cheapest way its encoding allows:

* an AnnData CSR or CSC element straight from its entries
  (:meth:`~.anndata_reads.ElementReads.read_rows`), no dense block;
* a CyteArc source that the orientation choice reads cell-major strip by
  strip, each strip made CSR on the decoding thread that decoded it
  (:class:`~.sparse_rows.SparseRowPlacement`), no dense block;
* any other (a CyteArc source read feature-major, a dense AnnData array)
  in dense bands of rows of at most :data:`SPARSE_BAND_BYTES`, each made
  CSR on a decoding thread while the next is read.

The reader assembles the shares into one canonical matrix
(:func:`~.sparse_rows.assemble`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from .cell_plan import CellPlan
from .decode_threads import hand_over
from .feature_plan import FeaturePlan
from .read_stats import ReadCounters
from .sources import BoundSource
from .sparse_rows import (
    SourceRows,
    SparseRowPlacement,
    concatenate,
    dense_rows,
    index_dtype,
    row_bands,
)

__all__ = ["SPARSE_BAND_BYTES", "ReadSource", "source_rows"]

Indices = npt.NDArray[np.int64]
#: Dense bytes of one band of a sparse read from a source read in bands
#: (read densely, then made CSR while the next band is read).
SPARSE_BAND_BYTES = 32 << 20

ReadSource = Callable[[BoundSource, npt.NDArray[Any], CellPlan, FeaturePlan], Awaitable[None]]
"""The reader's dense read of one source into a block (``_read_source``)."""


async def source_rows(
    source: BoundSource,
    cells: CellPlan,
    plan: FeaturePlan,
    dtype: np.dtype,
    read_source: ReadSource,
    counters: ReadCounters,
) -> tuple[SourceRows, Indices, Indices]:
    """``source``'s share of a sparse read: its rows (values of ``dtype``), their
    output rows, and the repeated output rows (as :meth:`CellPlan.firsts`).

    ``read_source`` reads a dense band where the source has no cheaper way;
    ``counters`` count the chunks decoded.
    """
    unique_rows, first_rows, repeats = cells.firsts()
    idx = index_dtype(len(plan.columns))
    anndata = source.anndata
    if anndata is not None and anndata.element.encoding != "array":
        rows, decoded = await anndata.read_rows(cells, plan, idx)
        counters.add(chunks=decoded)
        return rows, first_rows, repeats
    narrow = plan.narrowed()
    fast = source.counts_fast
    if (
        anndata is None
        and fast is not None
        and source.orientation(cells, plan).orientation == "counts"
    ):
        # each strip made CSR where it is decoded: no dense block
        placement = SparseRowPlacement(
            narrow.cell_major(fast.zero_column), plan.out_cols, idx, dtype
        )
        decoded = await fast.read_into(
            unique_rows, narrow.touched.chunks(fast.chunks[1]), placement
        )
        counters.add(chunks=decoded)
        return placement.rows(len(unique_rows)), first_rows, repeats
    return await _in_bands(source, unique_rows, plan, dtype, idx, read_source), first_rows, repeats


async def _in_bands(
    source: BoundSource,
    unique_rows: Indices,
    plan: FeaturePlan,
    dtype: np.dtype,
    idx: np.dtype,
    read_source: ReadSource,
) -> SourceRows:
    """Dense bands of the columns the source fills, cut where its row chunks start
    (each chunk decoded once), each made CSR on a decoding thread while the next
    is read (the kernel runs without the GIL): memory holds at most two bands."""
    narrow = plan.narrowed()
    width = len(plan.cols)
    limit = SPARSE_BAND_BYTES // max(1, width * dtype.itemsize)
    anndata = source.anndata
    chunk_rows = (
        source.info.layout.counts.chunks[0]
        if anndata is None
        else int(anndata.arrays["dense"].chunks[0])
    )
    bands = row_bands(unique_rows, chunk_rows, limit)
    parts: list[SourceRows | None] = [None] * len(bands)

    def convert(number: int, block: npt.NDArray[Any]) -> None:
        parts[number] = dense_rows(block, plan.out_cols, idx)

    converting: list[asyncio.Future[None]] = []
    for number, (start, stop) in enumerate(bands):
        band = unique_rows[start:stop]
        block = np.zeros((len(band), width), dtype=dtype)
        await read_source(source, block, CellPlan(np.arange(len(band)), band), narrow)
        if converting:
            await converting[-1]
        converting.append(hand_over(convert, number, block))
    await asyncio.gather(*converting)
    return concatenate([part for part in parts if part is not None])
