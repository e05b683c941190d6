"""Whether what a producer gives an artifact array fits it: its shape, and
values its dtype can hold.

numpy casts without complaint: NaN becomes an arbitrary integer, ``300``
wraps to ``44`` in ``uint8``, ``-1`` to ``255``, ``1.5`` truncates to ``1``,
``2`` becomes ``True``. :func:`first_unrepresentable` inspects the values
*before* the cast and names the first row whose value the stored dtype cannot
hold exactly, so the writer refuses it instead of publishing something else.

Floating and complex targets are checked after the cast instead (by the
writer, when the array must be finite): there a value that overflows becomes
infinity, which the finite check catches.

Before any of that, :func:`given_dimensions` refuses a shape that is not
whole, non-negative lengths (``2.5`` would otherwise be truncated), and
:func:`refuse_masked` a numpy masked array (``np.asarray`` drops its mask).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Unrepresentable", "first_unrepresentable", "given_dimensions", "refuse_masked"]


@dataclass(frozen=True, slots=True)
class Unrepresentable:
    """The first value of a band that its array's dtype cannot hold."""

    row: int
    """Row inside the band."""
    value: Any
    """The value as given (a Python scalar)."""
    non_finite: bool
    """NaN, infinity or outside the dtype's range (which counts as infinite)."""
    reason: str
    """Why, for the message: ``"is NaN"``, ``"is outside int8's range -128..127"``..."""


def first_unrepresentable(
    values: np.ndarray[Any, Any], dtype: np.dtype[Any]
) -> Unrepresentable | None:
    """The first row of ``values`` holding a value ``dtype`` cannot store exactly.

    Integer dtypes take finite, whole values inside their range; boolean
    takes ``False``/``True``, ``0`` and ``1``. Complex values with a non-zero
    imaginary part fit neither, nor a floating dtype. Floating values into a
    floating or complex dtype are not checked here (``None``).
    """
    if dtype.kind not in "biuf" or values.size == 0:
        return None
    source = values
    if source.dtype.kind == "c":
        bad = source.imag != 0
        found = _first(source, bad)
        if found is not None:
            row, value = found
            return Unrepresentable(row, value, False, "has a non-zero imaginary part")
        source = source.real
    if dtype.kind == "f":
        return None  # overflow to infinity is the writer's finite check
    if source.dtype.kind == "b":
        return None  # True and False fit every integer and boolean dtype
    if source.dtype.kind not in "biuf":
        return None  # strings, objects: numpy's own cast raises or converts them
    if source.dtype.kind == "f":
        found = _first(source, ~np.isfinite(source))
        if found is not None:
            row, value = found
            return Unrepresentable(row, value, True, "is NaN" if value != value else "is infinite")
        found = _first(source, np.trunc(source) != source)
        if found is not None:
            row, value = found
            return Unrepresentable(row, value, False, "is not a whole number")
    if dtype.kind == "b":
        found = _first(source, (source != 0) & (source != 1))
        if found is not None:
            row, value = found
            return Unrepresentable(row, value, False, "is neither 0 nor 1 (False nor True)")
        return None
    info = np.iinfo(dtype)
    if source.dtype.kind == "f":
        # Exact float bounds: -2**(bits-1) and 2**bits are powers of two, while
        # float(info.max) rounds up to the first value outside the range.
        low, high = float(info.min), float(info.max) + 1.0
        outside = (source < low) | (source >= high)
    else:
        # numpy compares integers against out-of-range Python ints exactly.
        outside = (source < int(info.min)) | (source > int(info.max))
    found = _first(source, outside)
    if found is not None:
        row, value = found
        return Unrepresentable(
            row,
            value,
            True,
            f"is outside {dtype.name}'s range {info.min}..{info.max} (which counts as infinite)",
        )
    return None


def _first(values: np.ndarray[Any, Any], bad: np.ndarray[Any, Any]) -> tuple[int, Any] | None:
    """(row, value) of the first ``True`` of ``bad`` in row-major order, or ``None``."""
    if not bad.any():
        return None
    index = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return int(index[0]), values[index].item()


def refuse_masked(name: str, values: object) -> None:
    """Refuse a numpy masked array: ``np.asarray`` would drop its mask without a word."""
    if isinstance(values, np.ma.MaskedArray):
        raise TypeError(
            f"values of array {name!r} are a numpy masked array, whose mask would be dropped "
            "and its masked values stored as they are; pass values.filled(np.nan) with "
            "finite=False to store them as missing, or values.filled(value) for a fill value"
        )


def given_dimensions(name: str, shape: object) -> tuple[int, ...]:
    """``shape`` as whole, non-negative lengths; ``2.5`` or ``"3"`` is refused, never truncated.

    >>> given_dimensions("x", 3), given_dimensions("x", (2, 0))
    ((3,), (2, 0))
    >>> given_dimensions("x", (2.5, 2))
    Traceback (most recent call last):
    ...
    TypeError: array 'x': shape (2.5, 2) must hold whole lengths (ints), not 2.5 (float)
    """
    given = (
        (shape,) if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable) else shape
    )
    dims = []
    for length in given:
        if isinstance(length, bool) or not hasattr(length, "__index__"):
            raise TypeError(
                f"array {name!r}: shape {shape!r} must hold whole lengths (ints), not "
                f"{length!r} ({type(length).__name__})"
            )
        if length.__index__() < 0:
            raise ValueError(f"array {name!r}: shape {shape!r} holds a negative length")
        dims.append(length.__index__())
    return tuple(dims)
