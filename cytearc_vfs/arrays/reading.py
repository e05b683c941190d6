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

from .documents import array_location, fill_cells, refuse_unfinished, require_current
from .selection import Selection, region_of

__all__ = ["read"]


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
    store, path = array_location(array)
    refuse_unfinished(store, path)
    if array.metadata.zarr_format == 3:
        require_current(array, store, path)  # a stale object would read shifted values
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
