"""Writing the layouts of stores written before the current one (tests, fixtures, benchmarks).

:func:`~cytearc_vfs.write.writer.write_counts` writes the current layout
(:func:`~cytearc_vfs.format.layout.array_geometry`: inner chunks of about
``chunkBytes``, stored as Blosc zstd blocks of about 8 KiB and a crc32c).
Stores written before keep opening and reading as they are (the spec never
rewrites an existing store): row-framed stores (large inner chunks of row
frames, ``encoding/row_frames.py``) and, from the first half of issue 14,
single-frame stores (inner chunks of about 8 KiB, one zstd frame each).
Inside :func:`row_framed_writes` or :func:`single_frame_writes`,
``write_counts`` writes that older layout again, so tests, fixtures and
benchmarks can make such stores with today's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import NamedTuple

from ..format.layout import (
    DEFAULT_POLICY,
    GeometryRule,
    LayoutPolicy,
    array_geometry,
    row_frame_geometry,
    single_frame_geometry,
)

__all__ = ["WriteLayout", "current_layout", "row_framed_writes", "single_frame_writes"]


class WriteLayout(NamedTuple):
    """How ``write_counts`` lays count arrays out."""

    rule: GeometryRule
    """Chunk and shard shapes."""
    blosc_blocks: bool
    """Blosc zstd blocks (the current layout), else zstd frames (the layouts before)."""
    default_policy: LayoutPolicy
    """The policy of a write given none (the default of the time)."""


# Until the Blosc layout, chunkBytes defaulted to 256 KiB.
_BEFORE = LayoutPolicy(64 * 1024**2, 256 * 1024)
_CURRENT = WriteLayout(array_geometry, blosc_blocks=True, default_policy=DEFAULT_POLICY)
_LAYOUT: ContextVar[WriteLayout] = ContextVar("cytearc_write_layout", default=_CURRENT)


def current_layout() -> WriteLayout:
    """The layout ``write_counts`` writes in this context (the current one by default)."""
    return _LAYOUT.get()


@contextmanager
def _writes(layout: WriteLayout) -> Iterator[None]:
    token = _LAYOUT.set(layout)
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def row_framed_writes() -> AbstractContextManager[None]:
    """Within the block, ``write_counts`` writes row-framed stores, as before issue 14."""
    return _writes(WriteLayout(row_frame_geometry, blosc_blocks=False, default_policy=_BEFORE))


def single_frame_writes() -> AbstractContextManager[None]:
    """Within the block, ``write_counts`` writes single-frame stores, as during issue 14."""
    return _writes(WriteLayout(single_frame_geometry, blosc_blocks=False, default_policy=_BEFORE))
