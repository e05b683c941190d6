"""Writing the row-framed layout of stores written before the portable one (tests, fixtures).

From issue 14 on, :func:`~cytearc_vfs.write.writer.write_counts` writes the
portable geometry (:func:`~cytearc_vfs.format.layout.array_geometry`: inner
chunks of about 8 KiB, one zstd frame each). Stores written before hold large
inner chunks of row frames (``encoding/row_frames.py``), and they keep opening
and reading as they are: the spec never rewrites an existing store. Inside
:func:`row_framed_writes`, ``write_counts`` writes that older layout again, so
tests, fixtures and benchmarks can make such stores with today's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ..format.layout import GeometryRule, array_geometry, row_frame_geometry

__all__ = ["current_rule", "row_framed_writes"]

_RULE: ContextVar[GeometryRule] = ContextVar("cytearc_geometry_rule", default=array_geometry)


def current_rule() -> GeometryRule:
    """The geometry rule ``write_counts`` uses in this context (the portable one by default)."""
    return _RULE.get()


@contextmanager
def row_framed_writes() -> Iterator[None]:
    """Within the block, ``write_counts`` writes row-framed stores, as before issue 14."""
    token = _RULE.set(row_frame_geometry)
    try:
        yield
    finally:
        _RULE.reset(token)
