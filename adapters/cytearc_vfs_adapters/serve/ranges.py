"""HTTP ``Range`` requests (RFC 9110, section 14) resolved against a value's size.

The server's rules, in one place (``docs/serve.md`` repeats them):

* one ``bytes`` range is served: ``bytes=a-b``, ``bytes=a-`` and the suffix
  ``bytes=-n`` (the last ``n`` bytes; a suffix longer than the value is the
  whole value), answered ``206`` with ``Content-Range``;
* a range that starts at or past the end (and ``bytes=-0``, and any range of
  an empty value) is unsatisfiable: ``416`` with ``Content-Range: bytes */SIZE``;
* a header the server does not take is ignored and the whole value is
  served (``200``), as RFC 9110 allows: another unit, a malformed
  specifier (``bytes=5-3``, ``bytes=-5-10``, ``bytes=a-b``, ``bytes=``), and
  more than one range (zarr clients ask for one range per request; a
  multipart answer would buy them nothing).

The functions are pure: :func:`parse_range` reads the header,
:func:`resolve_range` applies it to a size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ByteSpan", "RangeSpec", "Unsatisfiable", "parse_range", "resolve_range"]

# ASCII digits only: \d and int() would also take other scripts' digits.
_INT_RANGE = re.compile(r"([0-9]+)[ \t]*-[ \t]*([0-9]*)")
_SUFFIX_RANGE = re.compile(r"-[ \t]*([0-9]+)")


@dataclass(frozen=True, slots=True)
class RangeSpec:
    """One parsed range: ``first``-``last`` (inclusive), or a suffix of ``suffix`` bytes."""

    first: int | None
    """First byte position; ``None`` for a suffix range."""
    last: int | None
    """Last byte position (inclusive); ``None`` when open-ended or a suffix."""
    suffix: int | None = None
    """Length of a suffix range (``bytes=-n``); ``None`` otherwise."""


@dataclass(frozen=True, slots=True)
class ByteSpan:
    """The bytes ``start`` (inclusive) to ``stop`` (exclusive) of a value of ``size`` bytes."""

    start: int
    """First byte served."""
    stop: int
    """One past the last byte served."""
    size: int
    """Size of the whole value."""

    @property
    def length(self) -> int:
        """How many bytes are served."""
        return self.stop - self.start

    @property
    def content_range(self) -> str:
        """The ``Content-Range`` value of a ``206`` answer.

        >>> ByteSpan(0, 10, 100).content_range
        'bytes 0-9/100'
        """
        return f"bytes {self.start}-{self.stop - 1}/{self.size}"


@dataclass(frozen=True, slots=True)
class Unsatisfiable:
    """A range that selects no byte of a value of ``size`` bytes (``416``)."""

    size: int
    """Size of the whole value."""

    @property
    def content_range(self) -> str:
        """The ``Content-Range`` value of a ``416`` answer.

        >>> Unsatisfiable(100).content_range
        'bytes */100'
        """
        return f"bytes */{self.size}"


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:  # more digits than int() converts (sys.int_info)
        return None


def parse_range(header: str) -> RangeSpec | None:
    """The one byte range ``header`` asks for, or ``None`` when the server ignores it.

    Ignored: a unit other than ``bytes``, a malformed specifier, a range
    whose last position comes before its first, and more than one range.

    Examples
    --------
    >>> parse_range("bytes=0-99")
    RangeSpec(first=0, last=99, suffix=None)
    >>> parse_range("bytes=100-")
    RangeSpec(first=100, last=None, suffix=None)
    >>> parse_range("bytes=-500")
    RangeSpec(first=None, last=None, suffix=500)
    >>> parse_range("bytes=5-3") is None, parse_range("items=0-1") is None
    (True, True)
    >>> parse_range("bytes=0-1,4-5") is None
    True
    """
    unit, equals, ranges = header.partition("=")
    if not equals or unit.strip().lower() != "bytes":
        return None
    # a list may hold empty elements (RFC 9110, section 5.6.1); they count for nothing
    specs = [spec.strip(" \t") for spec in ranges.split(",")]
    specs = [spec for spec in specs if spec]
    if len(specs) != 1:
        return None
    (spec,) = specs
    suffix = _SUFFIX_RANGE.fullmatch(spec)
    if suffix is not None:
        length = _int(suffix.group(1))
        return None if length is None else RangeSpec(None, None, length)
    span = _INT_RANGE.fullmatch(spec)
    if span is None:
        return None
    first = _int(span.group(1))
    last = _int(span.group(2)) if span.group(2) else None
    if first is None or (span.group(2) and last is None):
        return None
    if last is not None and last < first:
        return None  # invalid (RFC 9110, section 14.1.1): ignored like other malformed ones
    return RangeSpec(first, last)


def resolve_range(spec: RangeSpec, size: int) -> ByteSpan | Unsatisfiable:
    """The bytes ``spec`` selects in a value of ``size`` bytes.

    Examples
    --------
    >>> resolve_range(RangeSpec(0, 9), 100)
    ByteSpan(start=0, stop=10, size=100)
    >>> resolve_range(RangeSpec(90, 1000), 100)
    ByteSpan(start=90, stop=100, size=100)
    >>> resolve_range(RangeSpec(None, None, 1000), 100)
    ByteSpan(start=0, stop=100, size=100)
    >>> resolve_range(RangeSpec(100, None), 100)
    Unsatisfiable(size=100)
    >>> resolve_range(RangeSpec(None, None, 0), 100)
    Unsatisfiable(size=100)
    """
    if spec.suffix is not None:
        if spec.suffix == 0 or size == 0:
            return Unsatisfiable(size)
        return ByteSpan(max(0, size - spec.suffix), size, size)
    assert spec.first is not None
    if spec.first >= size:
        return Unsatisfiable(size)
    stop = size if spec.last is None else min(size, spec.last + 1)
    return ByteSpan(spec.first, stop, size)
