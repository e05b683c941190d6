"""The cell side of a source's share of a read, worked out once per selection.

For each source, a read needs the output rows the source fills and its rows
for them, how many chunks those rows touch, their first occurrences (a
selection may repeat cells) and whether they are contiguous (then strips are
placed through slices). All of it depends on the cell selection only, so a
reader keeps the plans of its last cell selection, as it keeps those of its
last feature selection (:mod:`~cytearc_vfs.read.feature_plan`): a stream of
feature batches over the same cells (``iter_features``, a composite's
computed ``countsT`` chunks, any "all cells, these genes" workload, such as a
DataStore's feature-wise statistics) works them out once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .gather import TouchedChunks
from .placement import contiguous, first_positions

__all__ = ["CellPlan"]

Indices = npt.NDArray[np.int64]


@dataclass
class CellPlan:
    """One source's rows for one cell selection; parts computed when first asked.

    >>> plan = CellPlan(np.array([0, 1, 2]), np.array([5, 6, 6]))
    >>> plan.touched.count(4)
    1
    >>> [part.tolist() for part in plan.firsts()]  # output row 2 repeats output row 1
    [[5, 6], [0, 1], [[2, 1]]]
    >>> plan.axes()
    (slice(5, 7, None), slice(0, 2, None))
    """

    out_rows: Indices
    """Output rows the source fills."""
    rows: Indices
    """The source row of each."""
    touched: TouchedChunks = field(init=False, repr=False)
    """The chunks of each size that the source rows touch."""
    _firsts: tuple[Indices, Indices, Indices] | None = field(default=None, init=False, repr=False)
    _axes: tuple[slice | Indices, slice | Indices] | None = field(
        default=None, init=False, repr=False
    )

    def __post_init__(self) -> None:
        self.touched = TouchedChunks(self.rows)

    def firsts(self) -> tuple[Indices, Indices, Indices]:
        """Sorted unique source rows, the output row of each, and repeats (see
        :func:`~cytearc_vfs.read.placement.first_positions`)."""
        if self._firsts is None:
            self._firsts = first_positions(self.rows, self.out_rows)
        return self._firsts

    def axes(self) -> tuple[slice | Indices, slice | Indices]:
        """The unique source rows and their output rows, each as a slice when contiguous."""
        if self._axes is None:
            unique_rows, first_rows, _ = self.firsts()
            cells = contiguous(unique_rows)
            targets = contiguous(first_rows)
            self._axes = (
                unique_rows if cells is None else cells,
                first_rows if targets is None else targets,
            )
        return self._axes
