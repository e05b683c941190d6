"""Values written to an array, cast to its dtype without changing any of them.

numpy's ``astype`` (and zarr's own ``array[...] = values``) wraps integers
that do not fit (300 stored in ``uint8`` reads back as 44, -1 as 255),
truncates fractions and turns NaN into an arbitrary integer, all silently.
:func:`exact_values` casts the same way and then refuses any cell whose value
changed, naming the first one, so a write either stores what was given or
writes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["exact_values"]


def _first_changed(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> int | None:
    """Flat index of the first cell whose value ``cast`` does not keep, or ``None``."""
    if cast.dtype.kind in "iu":
        if given.dtype.kind in "iu":
            # compare in Python's integers: numpy may promote uint64 and int64 to float64
            info = np.iinfo(cast.dtype)
            outside = (given < info.min) | (given > info.max)
        elif given.dtype.kind in "fc":
            with np.errstate(invalid="ignore"):
                outside = ~np.isfinite(given) | (given != cast)
        else:
            return None
    elif cast.dtype.kind in "fc" and given.dtype.kind in "iufc":
        # a finite value beyond the dtype's range becomes infinity
        with np.errstate(invalid="ignore"):
            outside = np.isfinite(given) & ~np.isfinite(cast)
    else:
        return None
    hits = np.flatnonzero(outside)
    return int(hits[0]) if hits.size else None


def exact_values(data: object, dtype: np.dtype[Any], *, what: str) -> npt.NDArray[Any]:
    """``data`` as an array of ``dtype``; refuses a value the cast would change.

    ``what`` names the array in messages. Booleans, strings and other dtypes
    are cast as numpy casts them.

    Examples
    --------
    >>> exact_values([1, 2], np.dtype("u1"), what="array 'a'").tolist()
    [1, 2]
    >>> exact_values(np.array([1, 300]), np.dtype("u1"), what="array 'a'")
    Traceback (most recent call last):
    ...
    ValueError: value 300 at position (1,) of the data does not fit array 'a' of dtype uint8: it would be stored as 44...
    """
    given = data if isinstance(data, np.ndarray) else None
    if given is None:
        try:
            given = np.asarray(data)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"the data for {what} is not array-like ({type(data).__name__}: {exc}); "
                "give a numpy array, a list of numbers or a scalar"
            ) from exc
    if given.dtype == dtype:
        return given
    if given.dtype.kind == "c" and dtype.kind != "c":
        imaginary = np.flatnonzero(given.imag)
        if imaginary.size:
            at = np.unravel_index(int(imaginary[0]), given.shape) if given.ndim else ()
            raise ValueError(
                f"value {given.flat[imaginary[0]].item()!r} at position "
                f"{tuple(int(i) for i in at)} of the data is complex, and {what} of dtype "
                f"{dtype} would drop its imaginary part; write its real part (data.real) if "
                "that is what you mean. This write was refused whole"
            )
        given = given.real
    if given.dtype == object:
        # Python integers past int64 arrive as objects; numpy checks their range itself
        try:
            return np.asarray(data, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"the data for {what} cannot be stored as its dtype {dtype} ({exc}); "
                "convert the data to numbers of that dtype first. This write was refused whole"
            ) from exc
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            cast = given.astype(dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the data for {what} (dtype {given.dtype}) cannot be stored as its dtype {dtype} "
            f"({exc}); convert the data first. This write was refused whole"
        ) from exc
    changed = _first_changed(given, cast)
    if changed is not None:
        at = np.unravel_index(changed, given.shape) if given.ndim else ()
        value = given.flat[changed].item()
        raise ValueError(
            f"value {value!r} at position {tuple(int(i) for i in at)} of the data does not fit "
            f"{what} of dtype {dtype}: it would be stored as {cast.flat[changed].item()!r}. "
            "Convert the data yourself (np.clip, np.round, or fill missing values) or write "
            "into an array of a wider dtype. This write was refused whole"
        )
    return cast
