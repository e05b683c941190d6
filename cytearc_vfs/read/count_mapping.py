"""Where each output cell and feature of a (virtual) count matrix comes from.

An ordinary store maps to itself. A composite maps each output cell to a
(source, row) pair and each output feature to a column of every source (-1:
the source lacks it, read as zeros). Mappings of composites live in chunked
arrays and are read in windows, only for the cells and features a read
selects, so memory does not grow with the total cell count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pandas as pd
import zarr
from zarr.core.array import AsyncArray

from .cell_runs import CellRuns
from .gather import sorted_unique
from .placement import as_slice
from .read_stats import ReadCounters
from .sources import BoundSource

__all__ = [
    "ArrayMapping",
    "CountMapping",
    "FeatureMap",
    "IdentityMapping",
    "ProvidesCountMapping",
    "read_ids",
]

Indices = npt.NDArray[np.int64]
# Feature maps up to this size are kept in memory after their first read.
FEATURE_MAP_CACHE_BYTES = 64 << 20


class CountMapping(Protocol):
    """What a reader needs to know about a virtual matrix."""

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features)."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """dtype of the values."""
        ...

    @property
    def sources(self) -> Sequence[BoundSource]:
        """Bound sources, indexed by the source codes of :meth:`cells`."""
        ...

    async def cells(self, cells: Indices) -> tuple[Indices, Indices]:
        """(source index, source row) of each requested output cell."""
        ...

    async def features(self, features: Indices) -> Indices:
        """Source columns of each requested feature, shape (n_sources, len(features))."""
        ...

    def cell_ids(self) -> pd.Index:
        """Output cell ids, in order."""
        ...

    def feature_ids(self) -> pd.Index:
        """Output feature ids, in order."""
        ...


@runtime_checkable
class ProvidesCountMapping(Protocol):
    """A store that carries its own mapping (composite stores)."""

    def count_mapping(
        self, assay: str, counters: ReadCounters, *, workspace: str | None = None
    ) -> CountMapping:
        """The mapping of ``assay``'s virtual counts, reading sources into ``counters``.

        An assay or ``workspace`` the store does not hold raises the ``ValueError``
        of :func:`~cytearc_vfs.format.missing_assay.missing_assay_error`.
        """
        ...


def read_ids(array: zarr.Array[Any]) -> pd.Index:
    """An ids column as a pandas Index (read when asked, not at open)."""
    values: list[str] = np.asarray(array[:]).astype(str).tolist()
    return pd.Index(values, dtype=object)


@dataclass
class IdentityMapping:
    """An ordinary store: one source, rows and columns as they are."""

    source: BoundSource
    cell_id_array: zarr.Array[Any]
    feature_id_array: zarr.Array[Any]

    @property
    def shape(self) -> tuple[int, int]:
        return self.source.info.shape

    @property
    def dtype(self) -> np.dtype:
        return self.source.info.dtype

    @property
    def sources(self) -> Sequence[BoundSource]:
        return (self.source,)

    async def cells(self, cells: Indices) -> tuple[Indices, Indices]:
        return np.zeros(len(cells), dtype=np.int64), cells

    async def features(self, features: Indices) -> Indices:
        return features[np.newaxis, :]

    def cell_ids(self) -> pd.Index:
        return read_ids(self.cell_id_array)

    def feature_ids(self) -> pd.Index:
        return read_ids(self.feature_id_array)


async def _window(array: AsyncArray[Any], indices: Indices, *, axis: int = 0) -> npt.NDArray[Any]:
    """``array`` at ``indices`` along ``axis``, reading only the chunks that hold them."""
    if len(indices) == 0:
        shape = list(array.shape)
        shape[axis] = 0
        return np.zeros(shape, dtype=array.dtype)
    unique, inverse = sorted_unique(indices)
    selection: list[Any] = [slice(None)] * len(array.shape)
    selection[axis] = as_slice(unique)
    values = np.asarray(await array.get_orthogonal_selection(tuple(selection)))
    if unique is indices:  # already sorted unique: values are in the requested order
        return values
    return np.take(values, inverse, axis=axis)


@dataclass
class FeatureMap:
    """The feature map of one open composite, once read: kept for all its readers.

    Every reader of an open composite (a new ``reader()``, zarr's reads of its
    computed chunks) maps features through the same published, immutable
    ``featureColumns``; read once per open store, not once per reader (on a
    remote composite store, a request each).
    """

    values: Indices | None = None
    """``featureColumns`` as int64, or ``None`` until read (or when too large to keep)."""


@dataclass
class ArrayMapping:
    """A composite: mappings read from its chunked ``_composite`` arrays."""

    shape: tuple[int, int]
    dtype: np.dtype
    sources: Sequence[BoundSource]
    row_sources: AsyncArray[Any]
    source_rows: AsyncArray[Any]
    feature_columns: AsyncArray[Any]
    cell_id_array: zarr.Array[Any]
    feature_id_array: zarr.Array[Any]
    cell_runs: CellRuns | None = None
    """The cell mappings as runs, when they were summarized at open."""
    feature_map: FeatureMap = field(default_factory=FeatureMap, repr=False)
    """Where the feature map is kept once read (one per open composite, shared)."""

    async def cells(self, cells: Indices) -> tuple[Indices, Indices]:
        if self.cell_runs is not None:
            return self.cell_runs.lookup(cells)
        codes = await _window(self.row_sources, cells)
        rows = await _window(self.source_rows, cells)
        return codes.astype(np.int64, copy=False), rows.astype(np.int64, copy=False)

    async def features(self, features: Indices) -> Indices:
        # The feature map grows with sources x features, never with cells:
        # small ones are read once and kept, large ones read in windows.
        kept = self.feature_map.values
        if kept is None and self.feature_columns.nbytes <= FEATURE_MAP_CACHE_BYTES:
            kept = np.asarray(await self.feature_columns.getitem(())).astype(np.int64)
            self.feature_map.values = kept  # readers racing here store equal values
        if kept is not None:
            return kept[:, features]
        return (await _window(self.feature_columns, features, axis=1)).astype(np.int64, copy=False)

    def cell_ids(self) -> pd.Index:
        return read_ids(self.cell_id_array)

    def feature_ids(self) -> pd.Index:
        return read_ids(self.feature_id_array)
