"""``ArrayWriter``: writes that stay in memory per chunk until flushed.

The R package's ``write(data, selection, flush = FALSE)`` leaves written
chunks *stale*: held in memory for further writes to the same chunk, and
persisted by ``flush()``. Here the unit is the chunk, or the shard of a
sharded array (zarr writes a shard whole). A unit holds its new values and
which cells were written; :meth:`ArrayWriter.flush` writes every pending
unit once: a unit written all over (within the array's shape) is encoded
straight away, a partial one is read first and the written cells laid over
it. Masked values are written as the fill value (``False`` for booleans,
which cannot be missing). ``max_stale_bytes`` bounds the memory the stale
units hold: past it, the least recently written units are flushed. Threads
may share a writer (``docs/arrays.md``).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import zarr
from zarr.core.dtype import VariableLengthBytes

from ..errors import warn_at_caller
from .documents import (
    array_location,
    array_lock,
    describe,
    refuse_unfinished,
    require_current,
    require_v3,
    require_writable,
    stored_document,
    view_array,
    writes_refused,
)
from .journal import same_document
from .selection import Region, Selection, region_of
from .store_records import require_unfingerprinted
from .value_casts import exact_values, require_bytes

__all__ = ["ArrayWriter"]


@dataclass(slots=True)
class _Stale:
    """One unit's pending edits."""

    values: npt.NDArray[Any]
    written: npt.NDArray[np.bool_]

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.written.nbytes)


def _layout(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without its attributes: what places cells in chunks and encodes them.

    >>> _layout({"shape": [4], "attributes": {"units": "counts"}})
    {'shape': [4]}
    """
    return {name: value for name, value in document.items() if name != "attributes"}


def _to_values(data: object, array: zarr.Array[Any], what: str) -> npt.NDArray[Any]:
    """``data`` as ``array``'s dtype, its masked cells set to the fill value (``False`` for booleans).

    A value the dtype cannot hold is refused, never wrapped or truncated
    (:func:`exact_values`); so is a cell of a ``variable_length_bytes``
    array that is not ``bytes`` (:func:`require_bytes`).
    """
    dtype = array.dtype
    if np.ma.isMaskedArray(data):
        mask = np.ma.getmaskarray(data)
        given = np.ma.getdata(data)
        # only cells that carry values are checked: a masked cell may hold
        # anything, NaN among them, which an integer cast would refuse
        carried = np.where(mask, np.zeros((), dtype=given.dtype), given)
        values = exact_values(carried, dtype, what=what)
        values[mask] = False if dtype == np.bool_ else array.fill_value
    else:
        values = exact_values(data, dtype, what=what)
    if isinstance(getattr(array.metadata, "data_type", None), VariableLengthBytes):  # v3 only
        require_bytes(values, what)
    return values


class ArrayWriter:
    """Buffered writes to ``array``: stale chunks in memory, persisted by :meth:`flush`.

    Parameters
    ----------
    array
        A Zarr v3 array on a writable store.
    max_stale_bytes
        Memory the pending units may hold (values plus a written-cell mask);
        a write that goes past it flushes the least recently written units
        until the rest fit. Default 64 MiB.

    Examples
    --------
    >>> a = zarr.create_array({}, shape=(6,), chunks=(3,), dtype="i4", fill_value=0)
    >>> with ArrayWriter(a) as writer:
    ...     writer.write([1, 2], [range(0, 2)])
    ...     writer.write(np.ma.masked_array([9, 9], mask=[False, True]), [range(2, 4)])
    ...     writer.stale_units
    2
    >>> a[:].tolist()
    [1, 2, 9, 0, 0, 0]
    """

    def __init__(self, array: zarr.Array[Any], max_stale_bytes: int = 64 << 20) -> None:
        store, path = array_location(array)
        require_writable(store, path, "ArrayWriter")
        if isinstance(max_stale_bytes, bool) or not isinstance(max_stale_bytes, (int, np.integer)):
            raise TypeError(
                f"max_stale_bytes is a number of bytes (an int such as 64 << 20), not "
                f"{max_stale_bytes!r} ({type(max_stale_bytes).__name__})"
            )
        if max_stale_bytes < 0:
            raise ValueError(f"max_stale_bytes {max_stale_bytes} is negative")
        require_v3(array, "ArrayWriter")
        refuse_unfinished(store, path)
        self._store, self._path = store, path
        self._array = array
        self._metadata = array.metadata
        # the pending units will be positions in this grid: it must be the stored one
        self._document = require_current(array, store, path)
        require_unfingerprinted(store, path, self._document, "ArrayWriter")
        self._unit = tuple(array.shards or array.chunks)
        self._max = int(max_stale_bytes)
        self._stale: OrderedDict[tuple[int, ...], _Stale] = OrderedDict()
        self._bytes = 0
        # Threads may share a writer. _pending guards the units and is never
        # held during I/O; _flushing lets one unit be persisted at a time, as a
        # read-modify-write of a unit racing another of the same unit would
        # write back the older cells over the newer ones.
        self._pending = threading.Lock()
        self._flushing = threading.Lock()
        self._target = view_array(store, path, array.metadata.to_dict())
        self._array_lock = array_lock(store, path)

    @property
    def stale_bytes(self) -> int:
        """Memory held by pending units."""
        return self._bytes

    @property
    def stale_units(self) -> int:
        """Chunks (shards, for a sharded array) with pending edits."""
        return len(self._stale)

    def _check_unchanged(self) -> None:
        if self._array.metadata is not self._metadata:
            raise ValueError(
                "the array's metadata changed since this ArrayWriter was created (resize or "
                "promote); flush the writer before changing the array, then create a new one"
            )

    def _check_stored(self) -> None:
        """Refuse to write when ``zarr.json`` changed since the writer was made.

        Another object or process may have resized or promoted the array: the
        pending units are positions in the old grid, and writing them would
        put values where other cells now are. Attributes are not compared
        (they place no cell). One ``get`` per flush.
        """
        self._check_unchanged()
        stored = stored_document(self._store, self._path, stopped="written")
        if not same_document(_layout(stored), _layout(self._document)):
            raise ValueError(
                f"{describe(self._store, self._path)}: zarr.json changed since this "
                f"ArrayWriter was created (resized or promoted through another object or "
                f"process); its {len(self._stale)} pending unit(s) are positions in the old "
                "chunk grid and were not written. Open the array again and write them anew"
            )

    def write(self, data: object, selection: Selection = None, flush: bool = False) -> None:
        """Write ``data`` into ``selection`` (see :mod:`cytearc_vfs.arrays.selection`).

        Parameters
        ----------
        data
            Values broadcastable to the selection's shape; a masked array's
            masked cells are written as the fill value.
        selection
            ``None`` (the whole array), a list of per-dimension ranges, or numpy
            basic indexing. Ignored when the array is scalar (0-d), as the
            spec says: a scalar has one cell to write.
        flush
            Persist every pending unit afterwards (as :meth:`flush`).
        """
        self._check_unchanged()
        array = self._array
        region = region_of(None if array.ndim == 0 else selection, array.shape)
        values = _to_values(data, array, describe(self._store, self._path))
        given = values.shape
        while values.ndim > len(region.shape) and values.shape[0] == 1:
            values = values[0]  # as numpy assigns: leading length-1 axes drop
        try:
            values = np.broadcast_to(values, region.shape).reshape(region.lengths)
        except ValueError as exc:
            raise ValueError(
                f"data of shape {given} does not fit the selection {selection!r}, "
                f"which holds {region.shape} cells in {array.shape}: give data of shape "
                f"{region.shape} (or one that broadcasts to it), or a selection of the data's shape"
            ) from exc
        if values.size:
            with self._pending:
                for coords, local, source in _pieces(region, self._unit):
                    unit = self._unit_at(coords)
                    unit.values[local] = values[source]
                    unit.written[local] = True
        if flush:
            self.flush()
        else:
            self._bound()

    def _unit_at(self, coords: tuple[int, ...]) -> _Stale:
        unit = self._stale.get(coords)
        if unit is None:
            dtype = self._array.dtype
            unit = _Stale(
                np.zeros(self._unit, dtype=dtype),
                np.zeros(self._unit, dtype=bool),
            )
            self._stale[coords] = unit
            self._bytes += unit.nbytes
        else:
            self._stale.move_to_end(coords)
        return unit

    def _over_bound(self) -> tuple[int, ...] | None:
        """The least recently written unit while the units hold more than the bound."""
        with self._pending:
            if self._bytes > self._max and self._stale:
                return next(iter(self._stale))
            return None

    def _bound(self) -> None:
        if self._bytes <= self._max:
            return
        with self._flushing, self._array_lock:
            if self._over_bound() is None:
                return  # another thread flushed meanwhile
            self._check_stored()
            while (coords := self._over_bound()) is not None:
                self._persist(coords)

    def flush(self) -> int:
        """Persist every unit with pending edits; returns how many were written.

        Raises
        ------
        ValueError
            The array was resized or promoted since the writer was made (through
            this object, another one, or another process): nothing is written.
        IncompleteStoreError
            A resize or promote is under way on the array (or was interrupted).
        """
        with self._flushing:
            with self._pending:
                # what is pending now: units written while the flush runs may wait
                pending = list(self._stale)
            if not pending:
                self._check_unchanged()
                return 0
            # from the check to the last unit: no resize, promote or other writer between
            with self._array_lock:
                self._check_stored()
                kept = "the edits not written are kept: flush again once it can be written"
                with writes_refused("flush", self._store, self._path, kept):
                    return sum(self._persist(coords) for coords in pending)

    def _persist(self, coords: tuple[int, ...]) -> bool:
        """Write the unit at ``coords``, if still pending (the caller holds ``_flushing``).

        The unit leaves the pending ones before its I/O, so that writes made
        meanwhile go to a new unit rather than into one half written.
        """
        with self._pending:
            unit = self._stale.pop(coords, None)
            if unit is None:
                return False
            self._bytes -= unit.nbytes
        try:
            self._store_unit(coords, unit)
        except BaseException:
            self._restore(coords, unit)
            raise
        return True

    def _restore(self, coords: tuple[int, ...], unit: _Stale) -> None:
        """Put back the edits of a unit whose write failed, under any made since."""
        with self._pending:
            newer = self._stale.get(coords)
            if newer is None:
                self._stale[coords] = unit
                self._stale.move_to_end(coords, last=False)  # still the least recent
                self._bytes += unit.nbytes
            else:
                older = ~newer.written
                newer.values[older] = unit.values[older]
                newer.written |= unit.written

    def _store_unit(self, coords: tuple[int, ...], unit: _Stale) -> None:
        shape = self._array.shape
        region = tuple(
            slice(i * u, min((i + 1) * u, n))
            for i, u, n in zip(coords, self._unit, shape, strict=True)
        )
        inside = tuple(slice(0, r.stop - r.start) for r in region)
        values, written = unit.values[inside], unit.written[inside]
        if not written.all():
            # read-modify-write (the caller holds the array's lock): the cells
            # not written keep what is stored
            stored = np.asarray(self._target[region])
            values = np.where(written, values, stored)
        self._target[region] = values

    def discard(self) -> None:
        """Drop every pending edit without writing it."""
        with self._pending:
            self._stale.clear()
            self._bytes = 0

    def __del__(self) -> None:
        # Edits never flushed are lost when the writer goes; say so, as
        # Python does of a file never closed, but where a user sees it.
        stale = getattr(self, "_stale", None)
        if stale:
            warn_at_caller(
                f"an ArrayWriter of {describe(self._store, self._path)} was dropped with "
                f"{len(stale)} unit(s) of edits never flushed: they are lost. Call flush() "
                "(or use the writer as a context manager) before letting it go, or "
                "discard() to drop edits on purpose",
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.flush()
        else:
            self.discard()


def _pieces(
    region: Region, unit: tuple[int, ...]
) -> Iterator[tuple[tuple[int, ...], tuple[Any, ...], tuple[Any, ...]]]:
    """Per unit the region touches: its grid position, the cells in it, the cells of the data.

    >>> r = region_of([range(2, 5)], (10,))
    >>> [(c, [x.tolist() for x in l], [x.tolist() for x in s]) for c, l, s in _pieces(r, (3,))]
    [((0,), [[2]], [[0]]), ((1,), [[0, 1]], [[1, 2]])]
    """
    per_axis: list[list[tuple[int, npt.NDArray[np.intp], npt.NDArray[np.intp]]]] = []
    for axis, size in enumerate(unit):
        indices = region.indices(axis)
        owners = indices // size
        groups = []
        for owner in np.unique(owners):
            positions = np.flatnonzero(owners == owner)
            groups.append((int(owner), indices[positions] - int(owner) * size, positions))
        per_axis.append(groups)
    for combination in itertools.product(*per_axis):
        coords = tuple(g[0] for g in combination)
        local = np.ix_(*[g[1] for g in combination])
        source = np.ix_(*[g[2] for g in combination])
        yield coords, local, source
