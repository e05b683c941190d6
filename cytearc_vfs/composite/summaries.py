"""A composite's count summaries: from its sources' summaries, else by reading them.

A source whose every cell and feature the composite keeps lends its own
``countSummaries``; a CyteArc source of which only part is kept lends its
row summaries when every feature is kept, and the rest is read once, in
bands; an AnnData source (which has no summaries) is read whole. The bands
are sized from the bytes of the budget that remain beside what creation
holds (:mod:`cytearc_vfs.composite.budget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.api.asynchronous import open_array as open_array_async
from zarr.core.array import AsyncArray
from zarr.core.sync import sync

from ..errors import RecordShapeError
from ..format.count_dtype import summary_dtype
from ..format.count_totals import RowTotalOverflowError, add_totals, row_totals
from ..format.gathering import gather_bounded
from ..format.nodes import array_at
from ..format.paths import join
from ..format.source_store import REPAIR
from ..read.count_mapping import IdentityMapping
from ..read.prefetch import MAX_IN_FLIGHT
from ..read.read_stats import ReadCounters
from ..read.reader import VirtualArrayReader
from ..read.sources import BoundSource, rebind
from .maps import CompositePlan

__all__ = [
    "MIN_BAND_BYTES",
    "SourcePart",
    "band_value_bytes",
    "check_consistent_summaries",
    "composite_summaries",
    "source_parts",
]

Progress = Callable[[str, int, int], None]
#: Bytes of the smallest band worth reading: a band of a few rows would cost a
#: request and a decode of its source's framing for each few rows.
MIN_BAND_BYTES = 1 << 20
_SUMMARY_NAMES = ("rowSums", "rowPositive", "columnPositive")


@dataclass(frozen=True, slots=True)
class SourcePart:
    """The part of one source a composite keeps, and how its summaries are had."""

    out_rows: npt.NDArray[np.int64]
    """Output cells of the source."""
    rows: npt.NDArray[np.int64]
    """Their rows in the source."""
    mapped: npt.NDArray[np.int64]
    """Output features the source holds."""
    columns: npt.NDArray[np.int64]
    """Their columns in the source."""
    all_features: bool
    """Every feature of the source is kept (its row summaries apply)."""
    read: bool
    """The part is read for its summaries (not every cell and feature kept, or AnnData)."""
    by_features: bool
    """Read in bands of features (a feature-major AnnData source) rather than of rows."""
    unit: int
    """Bytes a row (or, by features, a feature) of a band costs: its values as read
    (:func:`band_value_bytes`) and the source's stored entries decoded for it."""
    edge: int
    """Bytes beside a band of any size: the source chunks at its edges, decoded whole
    (and their encoded bytes)."""

    @property
    def smallest(self) -> int:
        """Bytes of the smallest band read: :data:`MIN_BAND_BYTES` of rows (features),
        or one, or all when fewer; with its edges."""
        count = len(self.columns) if self.by_features else len(self.rows)
        return self.edge + max(self.unit, min(MIN_BAND_BYTES, self.unit * count))

    def band(self, read_bytes: int) -> int:
        """Rows (features) of a band that fits ``read_bytes``; at least one."""
        return max(1, (read_bytes - self.edge) // max(1, self.unit))


def _chunk_bytes(array: AsyncArray[Any]) -> int:
    """Bytes of one decoded chunk (inner chunk of a sharded array) of ``array``."""
    return int(np.prod(array.chunks, dtype=np.int64)) * array.dtype.itemsize


def _stored_costs(source: BoundSource, by_features: bool) -> tuple[int, int]:
    """Bytes of stored entries decoded per row (feature) read, and of the chunks at a band's edges.

    From the arrays' metadata, read when the source was bound: a CyteArc
    source's rows (decoded a row at a time, so no chunk at the edges; a row
    counted dense), an AnnData source's ``data`` and ``indices`` (sparse:
    its entries spread evenly) or dense ``X``.
    """
    n_cells, n_features = source.info.shape
    if source.anndata is None:
        return n_features * source.counts.dtype.itemsize, 0
    arrays = source.anndata.arrays
    if "data" not in arrays:  # dense
        array = next(iter(arrays.values()))
        across = n_cells if by_features else n_features
        return across * array.dtype.itemsize, 2 * _chunk_bytes(array)
    entry = arrays["data"].dtype.itemsize + arrays["indices"].dtype.itemsize
    along = max(1, n_features if by_features else n_cells)
    per = -(-arrays["data"].shape[0] * entry // along)
    edge = sum(2 * _chunk_bytes(array) for array in arrays.values())
    return per, edge


def source_parts(plan: CompositePlan, sources: list[BoundSource]) -> Iterator[SourcePart]:
    """Each source's :class:`SourcePart`, in mapping order, one at a time."""
    value_bytes = band_value_bytes(plan.dtype)
    for index, source in enumerate(sources):
        out_rows = np.flatnonzero(plan.row_sources == index)
        mapped = np.flatnonzero(plan.feature_columns[index] >= 0)
        all_features = len(mapped) == source.info.shape[1] and source.anndata is None
        all_cells = len(out_rows) == source.info.shape[0]
        by_features = source.anndata is not None and source.anndata.element.encoding == "csc_matrix"
        stored, edge = _stored_costs(source, by_features)
        across = len(out_rows) if by_features else len(mapped)
        yield SourcePart(
            out_rows=out_rows,
            rows=plan.source_rows[out_rows],
            mapped=mapped,
            columns=plan.feature_columns[index][mapped],
            all_features=all_features,
            read=not (all_features and all_cells),
            by_features=by_features,
            unit=value_bytes * across + stored,
            edge=edge,
        )


def band_value_bytes(dtype: np.dtype) -> int:
    """Bytes a value of a read band costs: the block, its ``> 0`` and the sums' work."""
    return 3 * max(8, dtype.itemsize)


def check_consistent_summaries(
    summaries: dict[str, npt.NDArray[Any]], row_sums_dtype: Any, *, where: str
) -> None:
    """Refuse summaries that contradict each other, as a lost chunk makes them.

    zarr reads a missing chunk as zeros, so a summary chunk deleted from a
    source reads as cells without counts, and the composite would publish
    those zeros as its own. Two facts hold for every store a writer made:
    the cells' and the features' positive counts both count the matrix's
    positive values, and for unsigned counts a cell sums to zero exactly when
    it has no positive value. Checking them costs nothing beyond the read.
    """
    row_positive, column_positive = summaries["rowPositive"], summaries["columnPositive"]
    by_cells, by_features = int(row_positive.sum()), int(column_positive.sum())
    problem = None
    if by_cells != by_features:
        problem = f"rowPositive counts {by_cells} positive values, columnPositive {by_features}"
    elif np.dtype(row_sums_dtype).kind == "u":
        empty = (summaries["rowSums"] == 0) != (row_positive == 0)
        if empty.any():
            cell = int(np.flatnonzero(empty)[0])
            problem = (
                f"cell {cell} has rowSums {summaries['rowSums'][cell]} but rowPositive "
                f"{row_positive[cell]} ({int(empty.sum())} such cells)"
            )
    if problem is not None:
        raise RecordShapeError(
            f"{where}: its countSummaries contradict each other ({problem}); a summary chunk "
            f"is missing or damaged, and a composite would publish it. Run `cytearc-vfs verify` "
            f"on the source; {REPAIR}"
        )


async def _source_summaries(
    sources: list[BoundSource],
) -> list[dict[str, npt.NDArray[Any]] | None]:
    """Every source's countSummaries arrays, read concurrently.

    Their documents were fetched (and verified) with the source, so each
    array costs its chunks only; up to :data:`~..read.prefetch.MAX_IN_FLIGHT`
    sources are read at once, as many as the views' shared limit lets
    requests through (see :func:`~..format.gathering.gather_bounded`).
    """

    async def one(source: BoundSource) -> dict[str, npt.NDArray[Any]]:
        store = source.view if source.view is not None else source.store
        arrays = await asyncio.gather(
            *(
                open_array_async(
                    store=store,
                    path=join(source.info.paths.summaries, name),
                    mode="r",
                    zarr_format=3,
                )
                for name in _SUMMARY_NAMES
            )
        )
        values = await asyncio.gather(*(array.getitem(...) for array in arrays))
        summaries = {
            name: np.asarray(value) for name, value in zip(_SUMMARY_NAMES, values, strict=True)
        }
        check_consistent_summaries(summaries, arrays[0].dtype, where=f"source {source.name!r}")
        return summaries

    async def summaries_of(source: BoundSource) -> dict[str, npt.NDArray[Any]] | None:
        # an AnnData source has no summaries: it is read (see composite_summaries)
        return None if source.anndata is not None else await one(source)

    return await gather_bounded(summaries_of, sources, MAX_IN_FLIGHT)


def composite_summaries(
    plan: CompositePlan, sources: list[BoundSource], read_bytes: int, progress: Progress | None
) -> dict[str, npt.NDArray[Any]]:
    """countSummaries of the composite, from source summaries where they apply, else by reading.

    ``read_bytes`` bounds each band read (at least one row or feature is read at a time).
    """
    n_cells, n_features = len(plan.row_sources), len(plan.feature_ids)
    dtype = summary_dtype(plan.dtype)
    row_sums = np.zeros(n_cells, dtype=dtype)
    row_positive = np.zeros(n_cells, dtype=np.int64)
    column_positive = np.zeros(n_features, dtype=np.int64)
    stored = sync(_source_summaries(sources))
    for source, part, summaries in zip(sources, source_parts(plan, sources), stored, strict=True):
        out_rows, rows, mapped, columns = part.out_rows, part.rows, part.mapped, part.columns
        if part.all_features:
            assert summaries is not None
            row_sums[out_rows] = summaries["rowSums"][rows]
            row_positive[out_rows] = summaries["rowPositive"][rows]
        if not part.read:
            assert summaries is not None
            column_positive[mapped] += summaries["columnPositive"][columns]
            continue
        # Part of the source is used: read exactly that part once, in bands,
        # through the source as it was bound (verified, pinned; no second open).
        reader = _reader_of(source)
        if part.by_features:
            # a feature-major source is read once in feature bands (a row band
            # would read every stored entry each time)
            band = part.band(read_bytes)
            _summaries_by_features(
                reader, part, band, dtype, (row_sums, row_positive, column_positive), plan
            )
            continue
        band = part.band(read_bytes)
        for start in range(0, len(rows), band):
            block = reader.read(rows[start : start + band], columns)
            positive = block > 0
            if not part.all_features:
                try:
                    row_sums[out_rows[start : start + band]] = row_totals(block, dtype)
                except RowTotalOverflowError as exc:
                    raise _named(exc, plan, out_rows[start + exc.row]) from None
                row_positive[out_rows[start : start + band]] = positive.sum(axis=1)
            column_positive[mapped] += positive.sum(axis=0)
            del block, positive  # the next band's read is not added to this one
            if progress:
                progress(f"summaries {source.name}", min(len(rows), start + band), len(rows))
    return {"rowSums": row_sums, "rowPositive": row_positive, "columnPositive": column_positive}


def _summaries_by_features(
    reader: VirtualArrayReader,
    part: SourcePart,
    band: int,
    dtype: np.dtype,
    totals: tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]],
    plan: CompositePlan,
) -> None:
    """Add one source's summaries to ``totals`` (row sums, row positives, column
    positives), reading its part in bands of ``band`` columns."""
    row_sums, row_positive, column_positive = totals
    rows, columns, mapped = part.rows, part.columns, part.mapped
    sums = np.zeros(len(rows), dtype=dtype)
    positives = np.zeros(len(rows), dtype=np.int64)
    for start in range(0, len(columns), band):
        block = reader.read(rows, columns[start : start + band])
        positive = block > 0
        try:
            add_totals(sums, row_totals(block, dtype))
        except RowTotalOverflowError as exc:
            raise _named(exc, plan, part.out_rows[exc.row]) from None
        positives += positive.sum(axis=1)
        column_positive[mapped[start : start + band]] += positive.sum(axis=0)
        del block, positive
    row_sums[part.out_rows] = sums
    row_positive[part.out_rows] = positives


def _named(exc: RowTotalOverflowError, plan: CompositePlan, out_row: int) -> RowTotalOverflowError:
    """The refusal naming the composite's cell (``exc.row`` counted in a band)."""
    return exc.naming(str(plan.cell_ids[out_row]), row=int(out_row))


def _reader_of(source: BoundSource) -> VirtualArrayReader:
    """A reader of one bound source's counts, rows and columns as they are."""
    counters = ReadCounters()
    if source.anndata is not None:
        mapping = IdentityMapping(rebind(source, counters), *source.anndata.index_arrays)
        return VirtualArrayReader.from_mapping(mapping, counters, source.location)
    store = source.view if source.view is not None else source.store
    root = zarr.open_group(store, mode="r", zarr_format=3)
    mapping = IdentityMapping(
        rebind(source, counters),
        array_at(root, join(source.info.paths.cell_data, "ids")),
        array_at(root, join(source.info.paths.feature_data, "ids")),
    )
    return VirtualArrayReader.from_mapping(
        mapping, counters, source.location, source.info.paths.assay
    )
