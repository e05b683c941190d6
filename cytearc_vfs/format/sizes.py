"""Byte sizes written the way people write them: ``512M``, ``2G``, ``2 GiB``."""

from __future__ import annotations

import re

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
    # Kubernetes' spelling of the same binary units ("2Gi")
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str, *, what: str = "size") -> int:
    """Return ``value`` in bytes.

    Binary units throughout, as memory budgets are usually meant:

    >>> parse_size("512M")
    536870912
    >>> parse_size("2 GiB")
    2147483648
    >>> parse_size(1000)
    1000
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a byte count or a size string such as '2G', not a bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must not be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"{what} must be a byte count or a size string such as '2G', not {type(value).__name__}"
        )
    match = _SIZE.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{what} {value!r} is not a size; write bytes (1048576) or a number "
            "with a unit: K, M, G, T (binary, so 1M = 1048576 bytes)"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(nbytes: int) -> str:
    """Return a short human form of ``nbytes``.

    >>> format_size(3 * 1024**2)
    '3.0 MiB'
    """
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
