"""Ranges of a 1-D array cut at its chunk edges, grouped by chunk (:mod:`.direct_chunks`).

A read of some rows of an AnnData sparse element wants a few ranges of its
``indices`` and ``data`` arrays; each range may cross chunk edges. The
pieces are computed for all ranges at once with numpy, never per entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ChunkPieces", "chunk_pieces"]

Indices = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ChunkPieces:
    """The pieces of some ranges of a 1-D array, grouped by the chunk holding them."""

    chunks: Indices
    """Touched chunks, ascending."""
    bounds: Indices
    """Where each chunk's pieces start in the piece arrays (and where the last ends)."""
    starts: Indices
    """Each piece's first position within its chunk."""
    ends: Indices
    """Each piece's end within its chunk."""
    targets: Indices
    """Where each piece goes in the concatenated result."""


def chunk_pieces(starts: Indices, ends: Indices, size: int) -> ChunkPieces:
    """Ranges ``[starts[i], ends[i])`` (ascending, disjoint, non-empty) cut at chunk edges.

    >>> p = chunk_pieces(np.array([2, 9]), np.array([5, 13]), 4)
    >>> p.chunks.tolist(), p.bounds.tolist(), p.starts.tolist(), p.ends.tolist()
    ([0, 1, 2, 3], [0, 1, 2, 3, 4], [2, 0, 1, 0], [4, 1, 4, 1])
    >>> p.targets.tolist()
    [0, 2, 3, 6]
    """
    first, last = starts // size, (ends - 1) // size
    counts = last - first + 1
    offsets = np.cumsum(counts) - counts
    n = int(counts.sum())
    owner = np.repeat(np.arange(len(starts)), counts)
    chunk = first[owner] + (np.arange(n, dtype=np.int64) - offsets[owner])
    lo = np.maximum(starts[owner], chunk * size)
    hi = np.minimum(ends[owner], (chunk + 1) * size)
    lengths = ends - starts
    targets = (np.cumsum(lengths) - lengths)[owner] + (lo - starts[owner])
    edges = np.flatnonzero(np.diff(chunk)) + 1
    bounds = np.concatenate(([0], edges, [n])).astype(np.int64)
    return ChunkPieces(chunk[bounds[:-1]], bounds, lo - chunk * size, hi - chunk * size, targets)
