"""``read``: an array's values with cells that hold the fill value as missing.

As the R package reads: every cell equal to the array's fill value is
missing (NA there; masked here), because a Zarr array cannot tell a cell
nobody wrote from one written with the fill value. Booleans cannot be
missing (``False`` is a value, as R's logical type cannot encode NA in
Zarr): they come back as a plain array. ``raw=True`` keeps fill values as
values.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import zarr

from ..errors import IncompleteStoreError
from ..format.store_io import get_json
from .documents import JOURNAL_NAME, array_location, describe, fill_cells, refresh
from .journal import recover_array
from .selection import Selection, region_of

__all__ = ["ensure_finished", "read"]


def ensure_finished(array: zarr.Array[Any]) -> None:
    """Finish an operation a crash left unfinished on ``array``, and refresh ``array``.

    One ``get`` when there is none. On a read-only store an unfinished
    operation cannot be finished here and is refused.
    """
    store, path = array_location(array)
    key = f"{path}/{JOURNAL_NAME}" if path else JOURNAL_NAME
    if get_json(store, key, where=describe(store, path)) is None:
        return
    if store.read_only:
        raise IncompleteStoreError(
            f"{describe(store, path)}: an array operation did not finish and this store is "
            "read-only; open it writable and call cytearc_vfs.arrays.recover, or run "
            "cytearc-vfs array recover LOCATION PATH"
        )
    recover_array(store, path)
    document = get_json(store, f"{path}/zarr.json" if path else "zarr.json")
    assert isinstance(document, dict)
    refresh(array, document)


def read(
    array: zarr.Array[Any],
    selection: Selection = None,
    *,
    raw: bool = False,
    missing: Literal["mask", "nan"] = "mask",
) -> np.ma.MaskedArray[Any, Any] | npt.NDArray[Any]:
    """Read ``selection`` of ``array``; cells holding the fill value come back missing.

    Parameters
    ----------
    array
        A zarr array (any Zarr format).
    selection
        ``None`` for everything; a list with one entry per dimension (R's
        ranges: ``range`` 0-based half-open, ``int``, ``slice`` or ``None``;
        no dimension is dropped); or numpy basic indexing (ints drop their
        dimension). See :mod:`cytearc_vfs.arrays.selection`.
    raw
        Keep the fill value as a value: a plain ``numpy.ndarray``.
    missing
        ``"mask"`` (default): a ``numpy.ma.MaskedArray`` masked where the
        fill value is. ``"nan"``: for float and complex arrays, a plain
        array with NaN in those cells.

    Returns
    -------
    numpy.ma.MaskedArray or numpy.ndarray
        A plain array for ``raw=True``, for boolean arrays (never missing)
        and for ``missing="nan"``.

    Examples
    --------
    >>> a = zarr.create_array({}, shape=(4,), chunks=(2,), dtype="i4", fill_value=0)
    >>> a[:3] = [5, 0, 7]
    >>> read(a)
    masked_array(data=[5, --, 7, --],
                 mask=[False,  True, False,  True],
           fill_value=0,
                dtype=int32)
    >>> read(a, [range(0, 2)], raw=True)
    array([5, 0], dtype=int32)
    """
    if missing not in ("mask", "nan"):
        raise ValueError(f"missing={missing!r}: give 'mask' or 'nan'")
    ensure_finished(array)
    region = region_of(selection, array.shape)
    values = np.asarray(array[region.key()])
    if raw or values.dtype == np.bool_:
        return values
    fill = array.fill_value
    absent = fill_cells(values, fill)
    if missing == "nan":
        if values.dtype.kind not in "fc":
            raise TypeError(
                f"missing='nan' needs a float or complex array; this one is {values.dtype} "
                "(use the default masked array)"
            )
        out = values.copy()
        out[absent] = np.nan
        return out
    return np.ma.MaskedArray(values, mask=absent, fill_value=fill)
