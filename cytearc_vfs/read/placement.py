"""Where the strips a shard reader decodes land in a read's output.

A :class:`~cytearc_vfs.read.shard_reader.ShardedReader` decodes the row chunks a
read touches one by one and gathers their selected rows, a batch of chunks
at a time, into a *strip* (:mod:`~cytearc_vfs.read.strip_assembly`): those rows across every column of the array, plus
one all-zero column at the end (``zero_column``). A placement writes each
strip straight into the output of the read, on the worker thread that
decoded it:

* :class:`RowPlacement` (cell-major ``counts``): strip rows are output rows;
  output columns come from a *column map* (a source column per output
  column, the zero column where the source lacks the feature), applied by
  slice copies when the map is a few stretches, else one gather per strip
  (the compiled ``_kernels.gather_columns`` with the map's shuffle plan, or
  ``np.take`` where the package was installed without a C compiler); or a
  plain slice when the columns are already in order.
* :class:`ColumnPlacement` (feature-major ``countsT``): strip rows are
  output columns and the selected strip columns are output rows (the
  compiled ``_kernels.scatter_columns``, which unlike numpy's fancy
  assignment lets the other decoding thread run meanwhile).

Each output row of a read comes from exactly one source, so placements of
different sources write disjoint memory and run concurrently.
"""

from __future__ import annotations

from collections.abc import Buffer, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

GatherColumns = Callable[[Buffer, int, int, Buffer, Buffer, int, bytes | None], None]
PlanGather = Callable[[Buffer, int, int, int], bytes | None]
ScatterColumns = Callable[[Buffer, int, int, Buffer, Buffer, int, Buffer, Buffer], None]
gather_columns: GatherColumns | None
plan_gather: PlanGather | None
scatter_columns: ScatterColumns | None
try:
    from ..encoding._kernels import gather_columns, plan_gather, scatter_columns
except ImportError:  # installed without a C compiler: numpy does the same, slower
    gather_columns = plan_gather = scatter_columns = None

__all__ = [
    "ColumnMap",
    "ColumnPlacement",
    "Placement",
    "RowPlacement",
    "as_slice",
    "chunk_runs",
    "column_map",
    "contiguous",
    "copy_runs",
    "first_positions",
]

Indices = npt.NDArray[np.int64]
# A column map of at most this many stretches is placed by slice copies.
MAX_COPY_RUNS = 64
# Strips of fewer rows are gathered without making a shuffle plan.
PLAN_ROWS = 16


class Placement(Protocol):
    """Receives the strips of one read."""

    def place(self, start: int, strip: npt.NDArray[Any]) -> None:
        """Write ``strip``, the selected rows ``start : start + len(strip)``."""
        ...


def chunk_runs(values: Indices, size: int) -> tuple[Indices, Indices]:
    """Chunk index of each run of sorted ``values`` in chunks of ``size``, and run bounds.

    >>> ids, bounds = chunk_runs(np.array([0, 3, 4, 9]), 4)
    >>> ids.tolist(), bounds.tolist()
    ([0, 1, 2], [0, 2, 3, 4])
    """
    chunks = values // size
    starts = np.flatnonzero(chunks[1:] != chunks[:-1]) + 1
    bounds = np.concatenate(([0], starts, [len(values)])).astype(np.int64)
    return chunks[bounds[:-1]], bounds


def contiguous(positions: Indices) -> slice | None:
    """``positions`` as a slice when they are consecutive ascending integers.

    >>> contiguous(np.array([4, 5, 6]))
    slice(4, 7, None)
    >>> contiguous(np.array([4, 6])) is None
    True
    """
    if not len(positions):
        return slice(0, 0)
    first, last = int(positions[0]), int(positions[-1])
    if last - first + 1 == len(positions) and (
        len(positions) < 3 or bool(np.all(positions[1:] - positions[:-1] == 1))
    ):
        return slice(first, last + 1)
    return None


def as_slice(positions: Indices) -> slice | Indices:
    """``positions`` as a slice when they are consecutive ascending integers (zarr
    and numpy read and write those fastest), else as they are: positions in any
    order, or repeated, stay an array (one whose span equals its length, like
    ``[0, 2, 1, 3]``, is not ``0:4``).

    >>> as_slice(np.array([3, 4, 5]))
    slice(3, 6, None)
    >>> as_slice(np.array([0, 2, 1, 3])).tolist()
    [0, 2, 1, 3]
    """
    run = contiguous(positions)
    return positions if run is None else run


def first_positions(values: Indices, positions: Indices) -> tuple[Indices, Indices, Indices]:
    """Sorted unique ``values``, the output position of each one's first occurrence,
    and the repeats as pairs of rows ``[[repeat position, first position], ...]``.

    ``positions[i]`` is where ``values[i]`` goes in the output. A read fills the
    first positions and then copies them to the repeats.

    >>> unique, first, repeats = first_positions(np.array([7, 2, 7]), np.array([10, 11, 12]))
    >>> unique.tolist(), first.tolist(), repeats.tolist()
    ([2, 7], [11, 10], [[12, 10]])
    """
    no_repeats = np.zeros((0, 2), dtype=np.int64)
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return values, positions, no_repeats
    # a composite's source columns in union order: out of order, rarely repeated
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    if bool(np.all(ordered[1:] > ordered[:-1])):
        return ordered, positions[order], no_repeats
    unique, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    first_pos = positions[first]
    is_repeat = np.ones(len(values), dtype=bool)
    is_repeat[first] = False
    repeats = np.stack([positions[is_repeat], first_pos[inverse[is_repeat]]], axis=1)
    return unique, first_pos, repeats.astype(np.int64, copy=False)


def copy_runs(columns: Indices, zero_column: int) -> list[tuple[int, int, int]] | None:
    """``(output column, strip column, width)`` of each stretch of a column map
    that copies consecutive strip columns, or ``None`` when there are more than
    :data:`MAX_COPY_RUNS`. Output columns that map to the zero column are left out.

    >>> copy_runs(np.array([0, 1, 2, 9, 9, 5, 6]), 9)
    [(0, 0, 3), (5, 5, 2)]
    """
    present = columns != zero_column
    follows = np.zeros(len(columns), dtype=bool)
    follows[1:] = present[1:] & present[:-1] & (columns[1:] == columns[:-1] + 1)
    starts = np.flatnonzero(present & ~follows)
    if len(starts) > MAX_COPY_RUNS:
        return None
    breaks = np.append(np.flatnonzero(~follows), len(columns))
    ends = breaks[np.searchsorted(breaks, starts, side="right")]
    return [
        (start, int(columns[start]), end - start)
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """How the columns of a cell-major strip land in the output's columns."""

    in_order: slice | None
    """Strip columns that *are* the output's columns, in order (else ``None``)."""
    indices: Indices | None
    """Strip column of each output column (the zero column where the source lacks it)."""
    runs: list[tuple[int, int, int]] | None
    """The stretches of ``indices`` as slice copies, when there are few (:func:`copy_runs`)."""
    zero_column: int = -1
    """The strip's all-zero column (its last)."""
    _plans: dict[int, bytes | None] = field(default_factory=dict, compare=False, repr=False)

    def gather_plan(self, itemsize: int, *, make: bool = True) -> bytes | None:
        """The compiled gather's shuffle plan for strips of ``itemsize``-byte items,
        made when first asked with ``make`` (``None`` where there is no compiled
        gather or a plan cannot help, or not made yet). Two threads asking at
        once make the same plan."""
        if itemsize not in self._plans:
            if not make:
                return None
            plan = None
            if plan_gather is not None and self.indices is not None:
                plan = plan_gather(self.indices, self.zero_column + 1, itemsize, self.zero_column)
            self._plans[itemsize] = plan
        return self._plans[itemsize]


def column_map(columns: Indices, zero_column: int) -> ColumnMap:
    """The :class:`ColumnMap` of ``columns`` (a source column per output column, -1: absent).

    >>> column_map(np.array([3, 4, 5]), 9).in_order
    slice(3, 6, None)
    >>> column_map(np.array([-1, 0, 1]), 9).runs
    [(1, 0, 2)]
    """
    in_order = contiguous(columns)
    if in_order is not None and (len(columns) == 0 or int(columns[0]) >= 0):
        return ColumnMap(in_order, None, None, zero_column)
    indices = np.where(columns >= 0, columns, zero_column).astype(np.int64, copy=False)
    # read-only: the compiled gather checks the indices once, then reads them
    # without the GIL
    indices.flags.writeable = False
    return ColumnMap(None, indices, copy_runs(indices, zero_column), zero_column)


class RowPlacement:
    """Strip rows become output rows, their columns placed through a :class:`ColumnMap`.

    Parameters
    ----------
    out
        The read's output, zero where nothing is placed.
    out_rows
        Output row of each selected strip row.
    columns
        How strip columns land in output columns. Sources that share most
        features in the same order (one reference annotation) map in a few
        long stretches: slice copies beat a per-element gather. The zero
        stretches are already zero in ``out``.
    """

    def __init__(self, out: npt.NDArray[Any], out_rows: Indices, columns: ColumnMap) -> None:
        self._out = out
        self._rows = out_rows
        self._rows_slice = contiguous(out_rows)
        self._columns = columns

    def place(self, start: int, strip: npt.NDArray[Any]) -> None:
        stop = start + len(strip)
        if self._rows_slice is not None:
            first = self._rows_slice.start
            target: slice | Indices | None = slice(first + start, first + stop)
        else:
            target = contiguous(self._rows[start:stop])
        columns = self._columns
        if target is None:
            rows_at = self._rows[start:stop]
            if columns.in_order is not None:
                self._out[rows_at] = strip[:, columns.in_order]
            else:
                assert columns.indices is not None
                self._out[rows_at] = np.take(strip, columns.indices, axis=1, mode="clip")
        elif columns.in_order is not None:
            self._out[target] = strip[:, columns.in_order]
        elif columns.runs is not None:
            rows = self._out[target]
            for out_start, strip_start, width in columns.runs:
                rows[:, out_start : out_start + width] = strip[:, strip_start : strip_start + width]
        else:
            _gather(strip, columns, self._out[target])


def _gather(strip: npt.NDArray[Any], columns: ColumnMap, out: npt.NDArray[Any]) -> None:
    """``out[i, j] = strip[i, columns.indices[j]]``: the compiled loop when it is
    there and the arrays allow it (with its shuffle plan ~6x faster than
    ``np.take`` for 1-byte counts of a composite's maps; it runs without the
    GIL)."""
    indices = columns.indices
    assert indices is not None
    itemsize = strip.dtype.itemsize
    if (
        gather_columns is not None
        and strip.flags.c_contiguous
        and out.flags.c_contiguous
        and strip.dtype == out.dtype
        and itemsize in (1, 2, 4, 8)
        and strip.shape[1] == columns.zero_column + 1
    ):
        # a plan costs about the gather of PLAN_ROWS rows without one; it is
        # kept with the map, for the next strips and reads of these features
        plan = columns.gather_plan(itemsize, make=len(strip) >= PLAN_ROWS)
        gather_columns(strip, strip.shape[1], itemsize, indices, out, columns.zero_column, plan)
    else:
        np.take(strip, indices, axis=1, out=out, mode="clip")


class ColumnPlacement:
    """Strip rows become output columns; the selected strip columns, output rows.

    Parameters
    ----------
    out
        The read's output.
    out_cols
        Output column of each selected strip row.
    cells
        The strip columns to read (a slice, or sorted positions).
    out_rows
        The output rows they go to (a slice, or positions), in the same order.
    """

    def __init__(
        self,
        out: npt.NDArray[Any],
        out_cols: Indices,
        cells: slice | Indices,
        out_rows: slice | Indices,
    ) -> None:
        self._out = out
        self._cols = out_cols
        self._cells = cells
        self._rows = out_rows
        # the compiled scatter takes positions, worked out once per read
        self._positions: tuple[Indices, Indices] | None = None

    def place(self, start: int, strip: npt.NDArray[Any]) -> None:
        stop = start + len(strip)
        columns = self._cols[start:stop]
        out = self._out
        if (
            scatter_columns is not None
            and strip.flags.c_contiguous
            and out.flags.c_contiguous
            and strip.dtype == out.dtype
            and strip.dtype.itemsize in (1, 2, 4, 8)
            and out.ndim == 2
        ):
            if self._positions is None:
                self._positions = (_positions(self._cells), _positions(self._rows))
            cells, rows = self._positions
            itemsize = strip.dtype.itemsize
            targets = np.ascontiguousarray(columns, dtype=np.int64)
            scatter_columns(
                strip, strip.shape[1], itemsize, cells, out, out.shape[1], rows, targets
            )
            return
        values = strip[:, self._cells].T
        targets_at: slice | Indices = as_slice(columns)
        if isinstance(self._rows, slice) or isinstance(targets_at, slice):
            out[self._rows, targets_at] = values
        else:
            out[np.ix_(self._rows, targets_at)] = values


def _positions(selection: slice | Indices) -> Indices:
    """A slice (of a known stop) or positions as contiguous int64 positions."""
    if isinstance(selection, slice):
        return np.arange(selection.start or 0, selection.stop, selection.step or 1, dtype=np.int64)
    return np.ascontiguousarray(selection, dtype=np.int64)
