"""Compressed sparse (CSR/CSC) entries: reading the ranges of some majors, placing them.

Pure functions over zarr arrays and numpy, used by the AnnData sources'
gather reads (:mod:`.anndata_sources`): :func:`read_ranges` reads the
entries of ``[start, end)`` ranges of a 1-D array, decoding only the chunks
that hold them, and :func:`scatter_entries` writes the entries of sorted
majors into a dense output block.
"""

from __future__ import annotations

from collections.abc import Buffer, Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.core.array import AsyncArray

from ..format.gathering import gather_all

ScatterKernel = Callable[
    [Buffer, int, int, bool, Buffer, Buffer, Buffer, int, Buffer, Buffer], None
]
scatter_kernel: ScatterKernel | None
try:
    from ..encoding._kernels import scatter_entries as scatter_kernel
except ImportError:  # installed without a C compiler: numpy does the same, slower
    scatter_kernel = None

__all__ = ["canonical_entries", "read_ranges", "scatter_entries"]

Indices = npt.NDArray[np.int64]

# Entries placed per window: the window's temporaries (a few int64 arrays)
# stay in the CPU's caches, where one pass over tens of millions would not.
SCATTER_WINDOW = 1 << 18


def scatter_entries(
    out: npt.NDArray[Any],
    cell_major: bool,
    out_majors: Indices,
    bounds: Indices,
    minor: npt.NDArray[Any],
    values: npt.NDArray[Any],
    lookup: Indices | None,
) -> None:
    """Write the entries of sorted majors into ``out``, a window of majors at a time.

    ``bounds[i]`` is where major ``i``'s entries start in ``minor``/``values``;
    ``out_majors[i]`` is its output row (CSR) or column (CSC); ``lookup`` maps
    a minor index to its output position (-1: not selected), ``None`` when
    every minor is selected in order. One flat scatter per window: much
    faster than numpy's 2-D fancy assignment. Where the compiled kernel is
    built and the arrays allow, one pass in C without the GIL instead (the
    values cast to ``out``'s type first, as numpy's assignment casts them).
    """
    n_entries, width = len(minor), out.shape[1]
    if (
        scatter_kernel is not None
        and width
        and out.flags.c_contiguous
        and out.flags.aligned
        and out.dtype.kind in "uifb"
        and out.dtype.itemsize in (1, 2, 4, 8)
        and minor.dtype in (np.int32, np.int64)
    ):
        scatter_kernel(
            out,
            width,
            out.dtype.itemsize,
            cell_major,
            np.ascontiguousarray(out_majors, dtype=np.int64),
            np.append(bounds, n_entries).astype(np.int64, copy=False),
            np.ascontiguousarray(minor),
            minor.dtype.itemsize,
            np.ascontiguousarray(values.astype(out.dtype, copy=False)),
            b"" if lookup is None else np.ascontiguousarray(lookup, dtype=np.int64),
        )
        return
    flat_out = out.reshape(-1)
    lengths = np.diff(np.append(bounds, n_entries))
    # numpy's flat indices would wrap a negative index (or a row's past its
    # end) onto another entry's place: refused, as the compiled loop does
    majors_out, minors_out = out.shape if cell_major else out.shape[::-1]
    n_minor = minors_out if lookup is None else len(lookup)
    if len(out_majors) and not 0 <= int(out_majors.min()) <= int(out_majors.max()) < majors_out:
        raise IndexError("scatter_entries: a major is outside the block")
    if n_entries and not 0 <= int(minor.min()) <= int(minor.max()) < n_minor:
        raise IndexError("scatter_entries: an entry's minor index is outside the block")
    first = 0
    while first < len(bounds):
        start = int(bounds[first])
        stop_major = max(first + 1, int(np.searchsorted(bounds, start + SCATTER_WINDOW, "right")))
        stop = int(bounds[stop_major]) if stop_major < len(bounds) else n_entries
        owner = np.repeat(out_majors[first:stop_major], lengths[first:stop_major])
        target = minor[start:stop].astype(np.int64)
        picked = values[start:stop]
        if lookup is not None:
            target = lookup[target]
            keep = target >= 0
            if not bool(keep.all()):
                owner, target, picked = owner[keep], target[keep], picked[keep]
        if cell_major:
            owner *= width
            owner += target
        else:
            target *= width
            owner += target
        flat_out[owner] = picked
        first = stop_major


def canonical_entries(
    lengths: Indices, minor: npt.NDArray[Any], values: npt.NDArray[Any]
) -> tuple[Indices, npt.NDArray[Any], npt.NDArray[Any]]:
    """The entries of consecutive majors in canonical form: minor indices strictly
    increasing within each major, repeated indices summed (as scipy's
    ``sum_duplicates`` and so anndata read them).

    ``lengths[i]`` is the number of entries of major ``i``. Entries already
    canonical (what anndata and scanpy write) are returned as they are, after
    one comparison pass; otherwise they are sorted by (major, minor) and the
    values of a repeated index summed in 64 bits (``float64`` for floats).

    >>> lengths, minor, values = canonical_entries(
    ...     np.array([3, 1]), np.array([4, 1, 4, 0]), np.array([1.0, 2.0, 5.0, 7.0])
    ... )
    >>> lengths.tolist(), minor.tolist(), values.tolist()
    ([2, 1], [1, 4, 0], [2.0, 6.0, 7.0])
    """
    n_entries = len(minor)
    if n_entries < 2:
        return lengths, minor, values
    # canonical when every step that does not increase starts a major: those
    # steps are few (about one per major), so they are checked, not every entry
    steps = np.flatnonzero(minor[1:] <= minor[:-1]) + 1
    starts = (np.cumsum(lengths) - lengths)[lengths > 0]
    at = np.searchsorted(starts, steps)
    if not len(steps) or (bool(np.all(at < len(starts))) and np.array_equal(starts[at], steps)):
        return lengths, minor, values
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    # one sort of (major, minor) keys: a stable argsort of int64 beats a lexsort
    keys = owner * (int(minor.max()) + 1) + minor.astype(np.int64, copy=False)
    order = np.argsort(keys, kind="stable")
    owner, minor, values = owner[order], minor[order], values[order]
    first = np.ones(n_entries, dtype=bool)
    first[1:] = (owner[1:] != owner[:-1]) | (minor[1:] != minor[:-1])
    heads = np.flatnonzero(first)
    if values.dtype.kind == "f":
        wide: np.dtype = np.dtype(np.float64)
    else:
        wide = np.dtype(np.uint64 if values.dtype.kind == "u" else np.int64)
    summed = np.add.reduceat(values.astype(wide, copy=False), heads)
    return np.bincount(owner[heads], minlength=len(lengths)), minor[heads], summed


# The touched chunks are read as slices (whole runs of chunks, then the
# entries picked out) when the entries fill at least this share of them;
# sparser selections are one orthogonal read of their positions, which
# decodes the same chunks but copies only the entries (zarr copies every
# decoded value of a slice into its result: most of the time of a sparse
# pick, measured on Wu 2020 tiled, 1,000 random cells of 20,503).
SLICE_SHARE = 0.5


async def read_ranges(
    array: AsyncArray[Any], starts: Indices, ends: Indices
) -> tuple[npt.NDArray[Any], int]:
    """The values at ``[starts[i], ends[i])`` of a 1-D array, concatenated, and the
    chunks decoded: only the chunks holding them are read, each once."""
    nonempty = ends > starts
    starts, ends = starts[nonempty], ends[nonempty]
    size = array.chunks[0]
    if bool(np.all(starts[1:] == ends[:-1])):  # one stretch (a band, every major)
        first, last = int(starts[0]), int(ends[-1])
        values = np.asarray(await array.getitem(slice(first, last)))
        return values, (last - 1) // size - first // size + 1
    # the chunks touched, as runs of consecutive chunks
    n_chunks = -(-array.shape[0] // size)
    edges = np.bincount(starts // size, minlength=n_chunks + 1) - np.bincount(
        (ends - 1) // size + 1, minlength=n_chunks + 1
    )
    touched = np.cumsum(edges)[:n_chunks] > 0
    steps = np.diff(np.concatenate(([0], touched.astype(np.int8), [0])))
    run_starts = np.flatnonzero(steps == 1) * size
    run_ends = np.minimum(np.flatnonzero(steps == -1) * size, array.shape[0])
    lengths = ends - starts
    total_ends = np.cumsum(lengths)
    positions = np.arange(int(total_ends[-1]), dtype=np.int64) + np.repeat(
        starts - (total_ends - lengths), lengths
    )
    if len(positions) < SLICE_SHARE * int((run_ends - run_starts).sum()):
        values = np.asarray(await array.get_orthogonal_selection((positions,)))
        return values, int(touched.sum())
    runs = await gather_all(
        *(array.getitem(slice(int(a), int(b))) for a, b in zip(run_starts, run_ends, strict=True))
    )
    if len(runs) == 1:  # often every chunk is touched: no copy into one buffer
        return np.asarray(runs[0])[positions - int(run_starts[0])], int(touched.sum())
    buffer = np.concatenate([np.asarray(run) for run in runs])
    offsets = np.cumsum(run_ends - run_starts) - (run_ends - run_starts)
    run = np.searchsorted(run_starts, positions, side="right") - 1
    return buffer[positions - run_starts[run] + offsets[run]], int(touched.sum())
