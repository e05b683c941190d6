"""The feature side of a source's share of a read, worked out once per selection.

For each source, a read needs to know which output columns the source fills,
from which of its columns, how many chunks those columns touch in each
orientation, and how a decoded strip maps onto the output columns. All of it
depends on the feature selection only, not on the cells, so a reader keeps
the plans of its last feature selection: a stream of cell batches over the
same features (``iter_cells``, a composite's computed chunks, any
"these cells, all genes" workload) works them out once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .gather import TouchedChunks
from .placement import ColumnMap, column_map, first_positions

__all__ = ["FeaturePlan"]

Indices = npt.NDArray[np.int64]


@dataclass
class FeaturePlan:
    """One source's columns for one feature selection; parts computed when first asked."""

    columns: Indices
    """Source column of each output column (-1: the source lacks the feature)."""
    out_cols: Indices = field(init=False)
    """Output columns the source fills."""
    cols: Indices = field(init=False)
    """Their source columns."""
    touched: TouchedChunks = field(init=False, repr=False)
    """The chunks of each size that the source columns touch."""
    _maps: dict[int, ColumnMap] = field(default_factory=dict, init=False, repr=False)
    _firsts: tuple[Indices, Indices, Indices] | None = field(default=None, init=False, repr=False)
    _narrowed: FeaturePlan | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.out_cols = np.flatnonzero(self.columns >= 0)
        self.cols = self.columns[self.out_cols]
        self.touched = TouchedChunks(self.cols)

    @property
    def empty(self) -> bool:
        """The source holds none of the selected features."""
        return len(self.out_cols) == 0

    def cell_major(self, zero_column: int) -> ColumnMap:
        """How a cell-major strip (zero column at ``zero_column``) maps onto the output."""
        if zero_column not in self._maps:
            self._maps[zero_column] = column_map(self.columns, zero_column)
        return self._maps[zero_column]

    def narrowed(self) -> FeaturePlan:
        """The plan of an output holding only the columns this source fills, in
        order (a sparse read's dense bands); made once, kept with this plan."""
        if self._narrowed is None:
            self._narrowed = FeaturePlan(self.cols)
        return self._narrowed

    def feature_major(self) -> tuple[Indices, Indices, Indices]:
        """Sorted unique source columns, the output column of each, and repeats."""
        if self._firsts is None:
            self._firsts = first_positions(self.cols, self.out_cols)
        return self._firsts
