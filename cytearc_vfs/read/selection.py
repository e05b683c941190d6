"""What a selection of cells or features means: positions, masks, ids, numpy keys.

Pure functions shared by every read path of :class:`~cytearc_vfs.read.reader.VirtualArrayReader`.
One axis's selection becomes integer positions (:func:`normalize_selection`);
a numpy-style key ``reader[rows, cols]`` becomes one selection per axis plus
which axes an integer drops (:func:`split_key`). Ids resolve through a
``pandas.Index`` with ``get_indexer``, whose hash table pandas builds once per
Index object, so the caller keeps one Index per axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..errors import VfsError

__all__ = [
    "AxisKey",
    "Selection",
    "UnknownIdError",
    "aligned_mask",
    "normalize_selection",
    "split_key",
]

Selection = slice | str | Sequence[str] | pd.Index | pd.Series | npt.ArrayLike | None
Indices = npt.NDArray[np.int64]
#: How many missing ids an error message lists before it says how many more.
SHOWN_MISSING = 3


class UnknownIdError(VfsError, KeyError):
    """Ids in a selection that the axis does not hold.

    A ``KeyError`` (as pandas raises for unknown labels) whose message prints
    as written: ``KeyError`` alone would show it quoted.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def normalize_selection(
    selection: Selection,
    length: int,
    *,
    axis: str,
    ids: Callable[[], pd.Index] | None = None,
    owner: str = "store",
) -> Indices:
    """Integer positions of one axis's selection, in the requested order.

    Parameters
    ----------
    selection
        ``None`` (everything), a slice (any step), integers (any order,
        repeats, negatives), a boolean mask (a numpy array, a list or a
        pandas Index of bools, by position; a pandas Series of bools,
        aligned on its index as :func:`aligned_mask` says), or ids: a
        string (one id) or a sequence of strings (a list, a numpy array of
        str or object dtype, a ``pandas.Index``).
    length
        Length of the axis.
    axis
        Plural name of the axis (``"cells"``, ``"features"``), for messages.
    ids
        Returns the axis's ids as a ``pandas.Index``; called only when the
        selection holds ids. ``None``: ids are refused.
    owner
        What holds the axis (``"composite"``, ``"store"``), for messages.

    Returns
    -------
    numpy.ndarray
        int64 positions in ``[0, length)``.

    Raises
    ------
    UnknownIdError
        An id is not on the axis (a ``KeyError``); the message names the
        first few, how many there are and the axis.
    IndexError
        A position out of range, a mask of the wrong length, a float or a
        mix of ids and positions.

    Examples
    --------
    >>> normalize_selection(slice(1, 4), 10, axis="cells").tolist()
    [1, 2, 3]
    >>> normalize_selection([3, -1, 3], 5, axis="cells").tolist()
    [3, 4, 3]
    >>> genes = pd.Index(["CD3E", "MS4A1", "LYZ"])
    >>> normalize_selection(["LYZ", "CD3E", "LYZ"], 3, axis="features", ids=lambda: genes).tolist()
    [2, 0, 2]
    >>> normalize_selection("MS4A1", 3, axis="features", ids=lambda: genes).tolist()
    [1]
    >>> normalize_selection(["CD3E", "FOO", "BAR"], 3, axis="features", ids=lambda: genes)
    Traceback (most recent call last):
    ...
    cytearc_vfs.read.selection.UnknownIdError: 2 feature ids are not in this store's features: 'FOO', 'BAR'; reader.feature_ids lists them
    """
    if selection is None:
        return np.arange(length, dtype=np.int64)
    if isinstance(selection, slice):
        return np.arange(length, dtype=np.int64)[selection]
    values = _values(aligned_mask(selection, length, axis=axis, ids=ids), axis)
    kind = values.dtype.kind
    if kind == "b":
        if values.shape != (length,):
            raise IndexError(f"boolean {axis} mask has length {len(values)}, expected {length}")
        return np.flatnonzero(values).astype(np.int64)
    if kind in "UO":
        return _id_positions(values, axis=axis, ids=ids, owner=owner)
    if values.size and kind not in "iu":
        raise IndexError(
            f"{axis} must be a slice, integers, a boolean mask or ids, not {values.dtype} values"
        )
    if kind == "u" and values.size and values.max() >= length:
        # before the cast: uint64 2**64 - 1 (a -1 cast to unsigned) would wrap to -1, the last
        bad = values[values >= length][0]
        raise IndexError(f"{axis} index {bad} is out of range for {length} {axis}")
    positions = values.astype(np.int64, copy=False)
    if positions.size and (positions.min() < -length or positions.max() >= length):
        bad = positions[(positions < -length) | (positions >= length)][0]
        raise IndexError(f"{axis} index {bad} is out of range for {length} {axis}")
    return np.where(positions < 0, positions + length, positions)


def aligned_mask(
    selection: Any, length: int, *, axis: str, ids: Callable[[], pd.Index] | None
) -> Any:
    """A boolean pandas Series put in the axis's order by its index; any other selection as given.

    pandas selects with a boolean Series by its labels (``df.loc[mask]``), so
    a mask computed from a table in another order (sorted, shuffled) names
    its cells by its index, not by its positions: taken by position it would
    select other cells without a word. Its index must hold the axis's ids or
    the positions ``0 .. length - 1``, each once; a Series of another length
    is left to the caller's refusal.

    >>> cells = pd.Index(["a", "b", "c"])
    >>> mask = pd.Series([True, False, False], index=["c", "a", "b"])
    >>> aligned_mask(mask, 3, axis="cells", ids=lambda: cells).tolist()
    [False, False, True]
    >>> aligned_mask(pd.Series([True, False, True], index=["x", "y", "z"]), 3, axis="cells", ids=lambda: cells)
    Traceback (most recent call last):
    ...
    IndexError: a boolean Series selects cells by its index (as pandas does), ...
    """
    if not isinstance(selection, pd.Series) or not pd.api.types.is_bool_dtype(selection.dtype):
        return selection
    index = selection.index
    if len(index) != length or index.equals(pd.RangeIndex(length)):
        return selection  # already in position order, or refused by its length
    axis_ids = ids() if ids is not None else None
    if axis_ids is not None and index.equals(axis_ids):
        return selection
    if index.is_unique:
        if axis_ids is not None and axis_ids.is_unique and bool(index.isin(axis_ids).all()):
            return selection.reindex(axis_ids)
        if pd.api.types.is_integer_dtype(index.dtype) and bool(index.isin(range(length)).all()):
            return selection.reindex(pd.RangeIndex(length))
    shown = ", ".join(repr(label) for label in index[:SHOWN_MISSING])
    holds = f"{axis} ids or " if axis_ids is not None else ""
    raise IndexError(
        f"a boolean Series selects {axis} by its index (as pandas does), and its index "
        f"({shown}, ...) is neither the {holds}positions 0..{length - 1}, each once; select "
        "with a Series indexed by those, or pass mask.to_numpy() to select by position"
    )


def _values(selection: Any, axis: str) -> npt.NDArray[Any]:
    """``selection`` as a 1-D array: bool, integers, str or object (ids)."""
    if isinstance(selection, str):
        return np.asarray([selection], dtype=object)
    if isinstance(selection, pd.Series | pd.Index | pd.api.extensions.ExtensionArray):
        if bool(np.asarray(selection.isna()).any()):
            raise IndexError(f"{axis} selection holds missing values (NA)")
        if pd.api.types.is_bool_dtype(selection.dtype):
            return selection.to_numpy(dtype=bool)
        if pd.api.types.is_integer_dtype(selection.dtype):
            # the values' own type (UInt64 kept unsigned, checked before any cast)
            return selection.to_numpy(dtype=getattr(selection.dtype, "numpy_dtype", None))
        values = selection.to_numpy()
    else:
        values = np.asarray(selection)
        # numpy turns [3, "CD3E"] into strings: look at the values as given
        if values.dtype.kind == "U" and not isinstance(selection, np.ndarray):
            values = np.asarray(selection, dtype=object)
    if values.ndim == 0:
        values = values.reshape(1)
    if values.ndim != 1:
        raise IndexError(f"{axis} selection must be one-dimensional, not of shape {values.shape}")
    if values.dtype.kind != "O" or values.size == 0:
        return values
    inferred = pd.api.types.infer_dtype(values, skipna=False)
    if inferred == "string":
        return values
    if inferred == "integer":
        try:
            return values.astype(np.int64)
        except OverflowError:
            bad = next(v for v in values if not -(2**63) <= int(v) < 2**63)
            raise IndexError(f"{axis} index {bad} is out of range") from None
    if inferred == "boolean":
        return values.astype(bool)
    if inferred == "mixed-integer":
        raise IndexError(
            f"{axis} selection mixes ids (str) and positions (int); select by one or the other"
        )
    raise IndexError(f"{axis} must be a slice, integers, a boolean mask or ids, not {inferred}")


def _id_positions(
    values: npt.NDArray[Any], *, axis: str, ids: Callable[[], pd.Index] | None, owner: str
) -> Indices:
    """Positions of the ids ``values`` on the axis, in order, repeats kept."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if ids is None:
        raise IndexError(f"{axis} selection holds ids, but there are no {axis} ids to look up")
    index = ids()
    if not index.is_unique:
        raise IndexError(f"{axis} ids of this {owner} repeat, so ids cannot select; use positions")
    # an object Index: pandas then matches values without converting them again
    positions = index.get_indexer(pd.Index(values, dtype=object, copy=False))
    missing = positions < 0
    if missing.any():
        message = _missing_message(values[missing], axis=axis, owner=owner)
        if axis == "cells" and owner == "composite":
            message += _prefixed_hint(values[missing][0], index)
        raise UnknownIdError(message)
    return positions.astype(np.int64, copy=False)


def _prefixed_hint(first: Any, index: pd.Index) -> str:
    """The composite's cell ids ``"{prefix}-{first}"``, where it may have prefixed the
    missing id ``first`` (cell ids that repeat across its sources become
    ``"{source}-{id}"``, docs/composite.md); ``""`` when it has none.

    A user who composes two stores holding the same barcodes and reads a cell by the
    barcode got only "not in this composite's cells". Checked on the error path only,
    for the first missing id.
    """
    if not isinstance(first, str) or not pd.api.types.is_string_dtype(index):
        return ""
    matches = index[index.str.endswith(f"-{first}", na=False)]
    if not len(matches):
        return ""
    shown = " or ".join(repr(str(value)) for value in matches[:2])
    more = ", ..." if len(matches) > 2 else ""
    return (
        f" (this composite has {shown}{more}: cell ids that repeat across its sources "
        "are prefixed with the source's name)"
    )


def _missing_message(missing: npt.NDArray[Any], *, axis: str, owner: str) -> str:
    """ "3 feature ids are not in this composite's features: 'FOO', ...; reader.feature_ids lists them" """
    unique = pd.unique(missing)
    noun = axis.removesuffix("s")
    shown = ", ".join(repr(str(value)) for value in unique[:SHOWN_MISSING])
    more = ", ..." if len(unique) > SHOWN_MISSING else ""
    count = f"1 {noun} id is" if len(unique) == 1 else f"{len(unique)} {noun} ids are"
    return f"{count} not in this {owner}'s {axis}: {shown}{more}; reader.{noun}_ids lists them"


class AxisKey(NamedTuple):
    """One axis of a numpy-style key: its selection, and whether it drops the axis."""

    selection: Any
    """What :func:`normalize_selection` reads: a slice, positions, a mask or ids."""
    scalar: bool
    """An integer or a single id: the result has no such axis, as in numpy."""


def split_key(key: Any, axes: Sequence[str]) -> list[AxisKey]:
    """One :class:`AxisKey` per axis of a numpy-style key (``reader[rows, cols]``).

    An ellipsis stands for the axes the key leaves out, missing trailing axes
    are whole, an integer (or a single id) drops its axis.

    >>> [part.scalar for part in split_key(3, ("cells", "features"))]
    [True, False]
    >>> [part.selection for part in split_key((..., [1, 2]), ("cells", "features"))]
    [slice(None, None, None), [1, 2]]
    >>> split_key((1, 2, 3), ("cells", "features"))
    Traceback (most recent call last):
    ...
    IndexError: too many indices: the reader has 2 axes (cells, features), but 3 were given
    """
    parts = list(key) if isinstance(key, tuple) else [key]
    # identity, not ==: numpy arrays in the key would compare elementwise
    ellipses = [i for i, part in enumerate(parts) if part is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        fill = max(0, len(axes) - (len(parts) - 1))
        parts[at : at + 1] = [slice(None)] * fill
    if len(parts) > len(axes):
        raise IndexError(
            f"too many indices: the reader has {len(axes)} axes ({', '.join(axes)}), "
            f"but {len(parts)} were given"
        )
    parts += [slice(None)] * (len(axes) - len(parts))
    return [_axis_key(part, axis) for part, axis in zip(parts, axes, strict=True)]


def _axis_key(part: Any, axis: str) -> AxisKey:
    if part is None:
        raise IndexError(f"{axis}: None (numpy.newaxis) adds an axis, which the reader cannot")
    if isinstance(part, np.ndarray | np.generic) and np.ndim(part) == 0:
        part = part.item()
    if isinstance(part, bool):
        raise IndexError(f"{axis}: a bool is not an index; give a boolean mask of the whole axis")
    if isinstance(part, str):
        return AxisKey(part, True)
    if isinstance(part, int):
        return AxisKey([part], True)
    return AxisKey(part, False)
