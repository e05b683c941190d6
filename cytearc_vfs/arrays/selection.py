"""Selections of :func:`~.reading.read` and :meth:`~.buffered_writes.ArrayWriter.write`.

Two spellings, told apart by type:

- a **list**, one entry per dimension, as the R package's ``selection``
  (a list of index ranges). Each entry is ``None`` (the whole dimension), a
  ``range`` (0-based, half-open, positive step: R's ``1:10`` is
  ``range(0, 10)``), a ``slice``, or an ``int`` ``i`` (the same as
  ``range(i, i + 1)``: the dimension is kept). Ranges out of bounds are
  refused, as R refuses them; slices are clipped, as Python clips them.
- anything else is numpy's basic indexing: an ``int`` (drops its
  dimension; negative counts from the end), a ``slice`` with a positive
  step, ``...``, or a tuple of those.

``None`` selects the whole array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Region", "Selection", "region_of"]

Entry = int | slice | range | None
Selection = list[Entry] | tuple[int | slice | EllipsisType, ...] | int | slice | EllipsisType | None


@dataclass(frozen=True, slots=True)
class Region:
    """A box of cells: per dimension a start, stop and step, and whether an int dropped it."""

    starts: tuple[int, ...]
    """First index per dimension."""
    stops: tuple[int, ...]
    """Exclusive end per dimension (``start`` when empty)."""
    steps: tuple[int, ...]
    """Positive step per dimension."""
    dropped: tuple[bool, ...]
    """Dimensions an integer index removes from the result."""

    @property
    def lengths(self) -> tuple[int, ...]:
        """Cells per dimension, dropped ones included (length 1).

        >>> region_of([range(2, 9, 3), None], (10, 4)).lengths
        (3, 4)
        """
        return tuple(
            len(range(a, b, s)) for a, b, s in zip(self.starts, self.stops, self.steps, strict=True)
        )

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of what the selection reads (dropped dimensions left out)."""
        return tuple(n for n, gone in zip(self.lengths, self.dropped, strict=True) if not gone)

    def key(self) -> tuple[int | slice, ...]:
        """The selection as zarr's basic indexing key."""
        return tuple(
            a if gone else slice(a, b, s)
            for a, b, s, gone in zip(self.starts, self.stops, self.steps, self.dropped, strict=True)
        )

    def indices(self, axis: int) -> npt.NDArray[np.intp]:
        """The indices selected along ``axis``."""
        return np.arange(self.starts[axis], self.stops[axis], self.steps[axis], dtype=np.intp)


def _index(value: object, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} is {value!r}; give an int, a range, a slice or None")
    number: int = value.__index__()
    return number


def _slice(value: slice, length: int, axis: int) -> tuple[int, int, int]:
    start, stop, step = value.indices(length)
    if step < 1:
        raise IndexError(f"dimension {axis}: step {step} of {value!r}; only positive steps read")
    return start, max(start, stop), step


def _seed_entry(entry: Entry, length: int, axis: int) -> tuple[int, int, int]:
    if entry is None:
        return 0, length, 1
    if isinstance(entry, slice):
        return _slice(entry, length, axis)
    if isinstance(entry, range):
        if entry.step < 1:
            raise IndexError(f"dimension {axis}: {entry!r} steps backwards; use a positive step")
        if len(entry) == 0:
            if not 0 <= entry.start <= length:
                raise IndexError(f"dimension {axis}: {entry!r} is outside 0..{length}")
            return entry.start, entry.start, 1
        if entry.start < 0 or entry[-1] >= length:
            raise IndexError(
                f"dimension {axis}: {entry!r} is outside the dimension's indices range(0, {length})"
            )
        return entry.start, entry[-1] + 1, entry.step
    index = _index(entry, f"dimension {axis}'s entry")
    if not 0 <= index < length:
        raise IndexError(f"dimension {axis}: index {index} is outside range(0, {length})")
    return index, index + 1, 1


def region_of(selection: Selection | Sequence[Any], shape: Sequence[int]) -> Region:
    """The cells ``selection`` names in an array of ``shape`` (see the module).

    Examples
    --------
    >>> region_of([range(0, 10), 4], (20, 8))
    Region(starts=(0, 4), stops=(10, 5), steps=(1, 1), dropped=(False, False))
    >>> region_of((-1, slice(None, None, 2)), (20, 8))
    Region(starts=(19, 0), stops=(20, 8), steps=(1, 2), dropped=(True, False))
    >>> region_of([range(0, 30)], (20,))
    Traceback (most recent call last):
    ...
    IndexError: dimension 0: range(0, 30) is outside the dimension's indices range(0, 20)
    """
    rank = len(shape)
    if selection is None:
        return Region((0,) * rank, tuple(shape), (1,) * rank, (False,) * rank)
    if isinstance(selection, list):
        if len(selection) != rank:
            raise IndexError(
                f"a list selection has one entry per dimension: {len(selection)} given for "
                f"{rank} dimensions (use None for a whole dimension)"
            )
        parts = [
            _seed_entry(e, n, axis)
            for axis, (e, n) in enumerate(zip(selection, shape, strict=True))
        ]
        return Region(
            tuple(p[0] for p in parts),
            tuple(p[1] for p in parts),
            tuple(p[2] for p in parts),
            (False,) * rank,
        )
    items = selection if isinstance(selection, tuple) else (selection,)
    # identity, not ==: an index array among the items has no truth value
    marks = [at for at, item in enumerate(items) if item is Ellipsis]
    if len(marks) > 1:
        raise IndexError("a selection holds at most one '...'")
    if marks:
        at = marks[0]
        fill = rank - (len(items) - 1)
        items = items[:at] + (slice(None),) * max(fill, 0) + items[at + 1 :]
    if len(items) > rank:
        raise IndexError(f"{len(items)} indices for an array of {rank} dimensions")
    items = items + (slice(None),) * (rank - len(items))
    starts, stops, steps, dropped = [], [], [], []
    for axis, (item, length) in enumerate(zip(items, shape, strict=True)):
        if isinstance(item, slice):
            start, stop, step = _slice(item, length, axis)
            gone = False
        elif isinstance(item, (range, list, np.ndarray)) or item is None:
            raise TypeError(
                f"dimension {axis}: {item!r} in a tuple selection; a tuple takes ints, slices "
                "and '...' (numpy's basic indexing); give a list for per-dimension ranges, or "
                "use zarr's oindex for index arrays"
            )
        else:
            index = _index(item, f"dimension {axis}'s index")
            if not -length <= index < length:
                raise IndexError(f"dimension {axis}: index {index} is outside an axis of {length}")
            start, stop, step, gone = index % length, index % length + 1, 1, True
        starts.append(start)
        stops.append(stop)
        steps.append(step)
        dropped.append(gone)
    return Region(tuple(starts), tuple(stops), tuple(steps), tuple(dropped))
