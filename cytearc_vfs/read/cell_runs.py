"""A composite's cell mapping as runs, so resolving a read's cells needs no I/O.

Output cells are in source order, and a source without a cell selection
contributes its rows in order, so ``rowSources`` and ``sourceRows`` are
almost always a few *runs*: stretches of output cells from one source whose
source rows count up by one. While a composite is opened (its mappings are
streamed anyway, to check their fingerprints) the run boundaries are
collected; a read then resolves its cells with one ``searchsorted`` instead
of reading two mapping windows. A mapping with more than :data:`MAX_RUNS`
runs (scattered cell selections) is not summarized, and reads fall back to
windows, so memory stays bounded whatever the cell count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .placement import contiguous

__all__ = ["MAX_RUNS", "CellRuns", "RunCollector", "merge_runs"]

Indices = npt.NDArray[np.int64]
# Beyond this many runs (~1.5 MiB of run table) the mapping is read in windows.
MAX_RUNS = 1 << 16


@dataclass(frozen=True, slots=True)
class CellRuns:
    """Runs of output cells: each starts at ``starts[i]``, from source ``codes[i]``,
    at source row ``rows[i]``, and counts up by one."""

    starts: Indices
    codes: Indices
    rows: Indices

    def lookup(self, cells: Indices) -> tuple[Indices, Indices]:
        """(source index, source row) of each output cell.

        >>> runs = CellRuns(np.array([0, 3]), np.array([0, 1]), np.array([5, 0]))
        >>> [v.tolist() for v in runs.lookup(np.array([4, 0, 2]))]
        [[1, 0, 0], [1, 5, 7]]
        >>> [v.tolist() for v in runs.lookup(np.array([2, 3, 4]))]
        [[0, 1, 1], [7, 0, 1]]
        """
        run = self._runs_of_range(cells)
        if run is None:
            run = np.searchsorted(self.starts, cells, side="right") - 1
        return self.codes[run], self.rows[run] + (cells - self.starts[run])

    def _runs_of_range(self, cells: Indices) -> Indices | None:
        """The run of each cell when ``cells`` count up by one (a band, or all
        cells), found by repeating run numbers instead of a search per cell;
        else ``None``."""
        span = contiguous(cells) if len(cells) >= 2 else None
        if span is None:
            return None
        first, last = span.start, span.stop - 1
        lo, hi = (np.searchsorted(self.starts, [first, last], side="right") - 1).tolist()
        bounds = np.clip(self.starts[lo + 1 : hi + 1], first, last + 1)
        lengths = np.diff(np.concatenate(([first], bounds, [last + 1])))
        return np.repeat(np.arange(lo, hi + 1), lengths)


class RunCollector:
    """Collects run boundaries while a mapping array is streamed window by window.

    ``steps_by`` is what consecutive values of a run differ by: 0 for
    ``rowSources`` (one source per run), 1 for ``sourceRows``.
    """

    def __init__(self, steps_by: int) -> None:
        self._step = steps_by
        self._positions: list[Indices] = []
        self._values: list[Indices] = []
        self._count = 0
        self._last: int | None = None
        self.overflowed = False

    def observe(self, start: int, window: npt.NDArray[np.integer]) -> None:
        """Take the next window, which begins at output cell ``start``."""
        if self.overflowed or not len(window):
            return
        values = window.astype(np.int64, copy=False)
        breaks = np.flatnonzero(values[1:] - values[:-1] != self._step) + 1
        if self._last is None or int(values[0]) - self._last != self._step:
            breaks = np.concatenate(([0], breaks))
        self._last = int(values[-1])
        self._count += len(breaks)
        if self._count > MAX_RUNS:
            self.overflowed = True
            self._positions, self._values = [], []
            return
        self._positions.append(breaks + start)
        self._values.append(values[breaks])

    def boundaries(self) -> tuple[Indices, Indices]:
        """Run starts and the value at each."""
        if not self._positions:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(self._positions), np.concatenate(self._values)


def merge_runs(sources: RunCollector, rows: RunCollector) -> CellRuns | None:
    """The runs of both mappings together, or ``None`` when either had too many.

    >>> s, r = RunCollector(0), RunCollector(1)
    >>> s.observe(0, np.array([0, 0, 1, 1])); r.observe(0, np.array([0, 1, 0, 1]))
    >>> merge_runs(s, r)
    CellRuns(starts=array([0, 2]), codes=array([0, 1]), rows=array([0, 0]))
    """
    if sources.overflowed or rows.overflowed:
        return None
    code_starts, codes = sources.boundaries()
    row_starts, row_values = rows.boundaries()
    starts = np.union1d(code_starts, row_starts).astype(np.int64)
    if len(starts) > MAX_RUNS:
        return None
    code_run = np.searchsorted(code_starts, starts, side="right") - 1
    row_run = np.searchsorted(row_starts, starts, side="right") - 1
    return CellRuns(
        starts=starts,
        codes=codes[code_run],
        rows=row_values[row_run] + (starts - row_starts[row_run]),
    )
