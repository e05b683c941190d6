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

__all__ = ["exact_values", "require_bytes"]


def _integers_changed(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Integers ``given`` that a float or complex ``cast`` rounded (past 2**53 in float64).

    The cast is turned back into ``given``'s dtype and compared, after
    marking what no integer of that dtype can be (infinity, or a value
    rounded up past its largest one, as ``2**63 - 1`` becomes ``2.0**63``).

    >>> given = np.array([2**53 + 1, 3], dtype="i8")
    >>> _integers_changed(given, given.astype("f8")).tolist()
    [True, False]
    """
    # float64 at least: the bounds below would overflow a float16 scalar
    real = np.asarray(cast.real if cast.dtype.kind == "c" else cast, dtype=np.float64)
    info = np.iinfo(given.dtype)
    with np.errstate(invalid="ignore"):
        beyond = ~np.isfinite(real) | (real >= float(info.max) + 1) | (real < float(info.min))
        back = np.where(beyond, 0, real).astype(given.dtype)
    return np.asarray(beyond | (back != given), dtype=bool)


def _texts_changed(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Cells a fixed-length string ``cast`` cut short (``"abc"`` in ``<U2`` is ``"ab"``).

    >>> _texts_changed(np.array(["abc", "d"]), np.array(["abc", "d"]).astype("U2")).tolist()
    [True, False]
    """
    # the same kind with no length limit: numpy sizes it to the longest value
    whole = given.astype(cast.dtype.kind)
    return np.asarray(cast.astype(whole.dtype) != whole, dtype=bool)


def _times_changed(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Dates or durations a coarser unit truncated (``00:00:00.5`` in seconds is ``00:00:00``).

    >>> given = np.array(["2020-01-01T00:00:00.500", "NaT"], dtype="M8[ms]")
    >>> _times_changed(given, given.astype("M8[s]")).tolist()
    [True, False]
    """
    back = cast.astype(given.dtype)
    both_nat = np.isnat(back) & np.isnat(given)
    return np.asarray(~both_nat & (back != given), dtype=bool)


def _first_truncated_time(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> int | None:
    """Flat index of the first text or Python date/duration a coarser ``cast`` truncated.

    numpy reads ``"2020-01-01T12:00"`` into ``datetime64[D]`` as the day, and a
    ``datetime`` with microseconds into ``datetime64[s]`` as the second. The
    values are read again in the unit they carry and compared.

    >>> given = np.array(["2020-01-01T12:00", "2020-01-02"])
    >>> _first_truncated_time(given, given.astype("M8[D]"))
    0
    """
    try:
        with np.errstate(all="ignore"):
            natural = np.asarray(given, dtype=f"{cast.dtype.kind}8")
            if natural.dtype.kind != cast.dtype.kind:
                return None
            hits = np.flatnonzero(_times_changed(natural, cast))
    except (TypeError, ValueError, OverflowError):
        return None  # not one unit numpy can infer: left to its cast
    return int(hits[0]) if hits.size else None


def _texts_overflowed(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Numbers given as text that became infinite (``"1e39"`` in float32); ``"inf"`` stays.

    >>> _texts_overflowed(np.array(["1e39", "inf", "2"]), np.array([np.inf, np.inf, 2.0])).tolist()
    [True, False, False]
    """
    words = np.char.lower(given if given.dtype.kind == "U" else np.char.decode(given, "latin-1"))
    spelled = (np.char.find(words, "inf") >= 0) | (np.char.find(words, "nan") >= 0)
    return np.asarray(~np.isfinite(cast) & ~spelled, dtype=bool)


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
    elif cast.dtype.kind in "fc" and given.dtype.kind in "iu":
        outside = _integers_changed(given, cast)
    elif cast.dtype.kind in "fc" and given.dtype.kind in "fc":
        # a finite value beyond the dtype's range becomes infinity
        with np.errstate(invalid="ignore"):
            outside = np.isfinite(given) & ~np.isfinite(cast)
    elif cast.dtype.kind == "b" and given.dtype.kind in "fc":
        # NaN, a float's missing value, is True to numpy (the seed writes NA as FALSE)
        outside = np.isnan(given)
    elif cast.dtype.kind in "fc" and given.dtype.kind in "US":
        outside = _texts_overflowed(given, cast)
    elif cast.dtype.kind in "US" and given.dtype.kind in "iufcUSb":
        outside = _texts_changed(given, cast)
    elif cast.dtype.kind in "mM" and given.dtype.kind == cast.dtype.kind:
        outside = _times_changed(given, cast)
    elif cast.dtype.kind in "mM" and given.dtype.kind in "US":
        return _first_truncated_time(given, cast)
    else:
        return None
    hits = np.flatnonzero(outside)
    return int(hits[0]) if hits.size else None


def _first_rounded_object(given: npt.NDArray[Any], cast: npt.NDArray[Any]) -> int | None:
    """Flat index of the first Python integer a float or complex ``cast`` rounded, or ``None``.

    Integers past int64 reach numpy as objects, which it casts to floats
    without a word (``2**70 + 1`` becomes ``2.0**70``).

    >>> given = np.array([2**70 + 1, 2**70], dtype=object)
    >>> _first_rounded_object(given, given.astype("f8"))
    0
    """
    if cast.dtype.kind not in "fc":
        return None
    for index, (value, stored) in enumerate(zip(given.flat, cast.flat, strict=True)):
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            real = complex(stored).real
            if not np.isfinite(real) or int(real) != int(value):
                return index
    return None


def _refuse_none(given: npt.NDArray[Any], dtype: np.dtype[Any], what: str) -> None:
    """Refuse ``None`` in ``given``: numpy stores it as NaN, ``"None"`` or ``False``.

    >>> _refuse_none(np.array([1, None], dtype=object), np.dtype("f8"), "array 'a'")
    Traceback (most recent call last):
    ...
    ValueError: value None at position (1,) of the data for array 'a' of dtype float64 ...
    """
    for index, value in enumerate(given.flat):
        if value is None:
            at = np.unravel_index(index, given.shape) if given.ndim else ()
            raise ValueError(
                f"value None at position {tuple(int(i) for i in at)} of the data for {what} "
                f"of dtype {dtype} is no value of it (numpy would store NaN, 'None' or False); "
                "to write a missing value, mask the cell (numpy.ma.masked: it is written as "
                "the fill value). This write was refused whole"
            )


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
        _refuse_none(given, dtype, what)
        # Python integers past int64 arrive as objects; numpy checks their range itself
        try:
            cast = np.asarray(data, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"the data for {what} cannot be stored as its dtype {dtype} ({exc}); "
                "convert the data to numbers of that dtype first. This write was refused whole"
            ) from exc
        changed = (
            _first_truncated_time(given, cast)
            if dtype.kind in "mM"
            else _first_rounded_object(given, cast)
        )
    else:
        try:
            with np.errstate(invalid="ignore", over="ignore"):
                cast = given.astype(dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"the data for {what} (dtype {given.dtype}) cannot be stored as its dtype "
                f"{dtype} ({exc}); convert the data first. This write was refused whole"
            ) from exc
        changed = _first_changed(given, cast)
    if changed is not None:
        at = np.unravel_index(changed, given.shape) if given.ndim else ()
        value = given.flat[changed]
        value = value.item() if isinstance(value, np.generic) else value
        raise ValueError(
            f"value {value!r} at position {tuple(int(i) for i in at)} of the data does not fit "
            f"{what} of dtype {dtype}: it would be stored as {cast.flat[changed].item()!r}. "
            "Convert the data yourself (np.clip, np.round, or fill missing values) or write "
            "into an array of a wider dtype. This write was refused whole"
        )
    return cast


def require_bytes(values: npt.NDArray[Any], what: str) -> None:
    """Refuse a cell of ``values`` that is not ``bytes``, for a ``variable_length_bytes`` array.

    Its numpy dtype is ``object``, which takes anything: zarr then refuses
    text only when the chunk is encoded (at a flush, for a whole unit, every
    flush again) and stores a number as its digits.

    >>> require_bytes(np.array([b"a", "b"], dtype=object), "array 'a'")
    Traceback (most recent call last):
    ...
    ValueError: value 'b' at position (1,) of the data for array 'a' ... is str, not bytes; ...
    """
    for index, value in enumerate(values.flat):
        if not isinstance(value, bytes):
            at = np.unravel_index(index, values.shape) if values.ndim else ()
            raise ValueError(
                f"value {value!r} at position {tuple(int(i) for i in at)} of the data for "
                f"{what} (Zarr data type variable_length_bytes) is "
                f"{type(value).__name__}, not bytes; encode text first (str.encode), and "
                "mask a cell (numpy.ma.masked) to write a missing value. This write was "
                "refused whole"
            )
