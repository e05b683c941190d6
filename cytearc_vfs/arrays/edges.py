"""Edge chunks: the cells past an array's edge that must hold the fill value.

A chunk on the high edge of a dimension whose length is not a multiple of
the chunk size holds cells beyond the edge. They must hold the fill value,
or growing the array would show them: after a shrink that cuts through a
chunk, the cut-off cells still hold the old values (zarr's own
``Array.resize`` leaves them so), and a resize must clear them. Clearing
is a read, a fill and a write of that one chunk (shard), the only chunk a
resize ever re-encodes; a chunk left with nothing but the fill value is
deleted instead, as zarr does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store

from .documents import fill_cells, view_array

__all__ = ["EdgeChunks", "Outcome", "holds_fill"]

#: What clearing a chunk does: nothing (``clean``), a rewrite, or a delete.
Outcome = Literal["clean", "clear", "empty"]


def holds_fill(values: npt.NDArray[Any], fill: object) -> npt.NDArray[np.bool_]:
    """Which cells of ``values`` hold exactly ``fill``'s bytes (numbers) or equal it (text).

    Stricter than :func:`fill_cells`, which reads ``-0.0`` as a fill value of
    ``0.0`` and any NaN as a NaN fill: a cell that merely compares equal is a
    value, and clearing or deleting its chunk would change it.

    >>> holds_fill(np.array([0.0, -0.0, 1.0]), np.float64(0.0)).tolist()
    [True, False, False]
    """
    if values.dtype.kind not in "biufcmM":
        return fill_cells(values, fill)
    width = values.dtype.itemsize
    cells = np.ascontiguousarray(values).view(np.uint8).reshape(*values.shape, width)
    pattern = np.asarray(fill, dtype=values.dtype).reshape(1).view(np.uint8)
    return np.asarray((cells == pattern).all(axis=-1), dtype=bool)


class EdgeChunks:
    """The chunks of an array (as ``document`` describes it) to clear past ``bounds``.

    Parameters
    ----------
    store, path
        Where the array is.
    document
        Its ``zarr.json`` (the old one, for a resize).
    bounds
        Per dimension, the index from which cells must hold the fill value,
        or ``None``.
    """

    def __init__(
        self,
        store: Store,
        path: str,
        document: Mapping[str, Any],
        bounds: Sequence[int | None],
    ) -> None:
        self.grid: list[int] = list(document["chunk_grid"]["configuration"]["chunk_shape"])
        # whole chunks: the view reaches the cells past the edge
        widened = [-(-n // c) * c for n, c in zip(document["shape"], self.grid, strict=True)]
        self.view: zarr.Array[Any] = view_array(store, path, {**document, "shape": widened})
        self.bounds = tuple(bounds)

    def _region(self, coords: Sequence[int]) -> tuple[slice, ...]:
        return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, self.grid, strict=True))

    def _outside(self, coords: Sequence[int], shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
        outside = np.zeros(shape, dtype=bool)
        for axis, bound in enumerate(self.bounds):
            if bound is None:
                continue
            local = bound - coords[axis] * self.grid[axis]
            if local < self.grid[axis]:
                index: list[slice] = [slice(None)] * len(shape)
                index[axis] = slice(max(local, 0), None)
                outside[tuple(index)] = True
        return outside

    def _cleared(self, coords: Sequence[int]) -> tuple[npt.NDArray[Any], bool, bool]:
        """The chunk's values with the outside filled; whether anything changed; whether empty."""
        values = np.asarray(self.view[self._region(coords)])
        fill = self.view.fill_value
        is_fill = holds_fill(values, fill)
        outside = self._outside(coords, values.shape)
        changed = bool((outside & ~is_fill).any())
        values[outside] = fill
        empty = bool((is_fill | outside).all())
        return values, changed, empty

    def inspect(self, coords: Sequence[int]) -> Outcome:
        """What :meth:`clear` will do to the chunk at ``coords`` (reads it)."""
        _, changed, empty = self._cleared(coords)
        if not changed:
            return "clean"
        return "empty" if empty else "clear"

    def clear(self, coords: Sequence[int]) -> None:
        """Fill the chunk's cells past the bounds; idempotent (the same bytes again)."""
        values, changed, _ = self._cleared(coords)
        if changed:
            self.view[self._region(coords)] = values
