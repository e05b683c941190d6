"""What ``export_anndata``'s memory budget bounds, and the bands of cells sized to it.

The export's traced peak (``tracemalloc``; docs/writing.md, "Memory budget")
stays within ``mem_budget`` + :data:`~cytearc_vfs.write.budget.BUDGET_ALLOWANCE`.
What grows with the data is counted:

* the ``obs`` and ``var`` tables while they are read, made plain and encoded
  (:data:`_TABLE_COPIES` times what the frames hold), before any band; they
  are dropped before the first band;
* each cell's entry count (the store's ``rowPositive`` summary), held for
  the whole export;
* a band while it is read: each non-zero as an index and a value several
  times over (the sources' parts, grown as they are gathered, and the
  assembled block; :data:`_READ_ENTRY_COPIES`), the dense bands of a source
  read densely (:data:`_READ_DENSE_COPIES` a dense byte of the band), and
  its row pointers;
* a band while it is appended: the block and the write's buffers of its
  values; for a ``.zarr``, the values of ``data``, ``indices`` and ``indptr``
  waiting for a whole chunk (less than a chunk of each, held throughout) and
  the copies of a chunk completed from them (:data:`_ZARR_CHUNK_COPIES` of
  the largest chunk; HDF5 merges partial chunks in untraced C memory).

The entries a band holds come from ``rowPositive``, which is each cell's
non-zero count for unsigned counts (the dtype of every non-negative integer
matrix). Other dtypes may hold negative values, which ``rowPositive`` does
not count, so their bands are sized for every value being non-zero.

A band holds at least :data:`MIN_BAND_BYTES` of cells in dense form (at
least one cell): bands of a cell each would make the smallest budget named
useless (each band is a read of its own: 2,000 bands of one cell took
149 s on a loaded machine). A budget that no banding fits (the tables alone, or the
costliest of those smallest bands, over it) is refused before anything is
written, naming the smallest that works.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import zarr

from cytearc_vfs.format.layout import DEFAULT_MEM_BUDGET
from cytearc_vfs.format.option_names import option_name
from cytearc_vfs.format.paths import join
from cytearc_vfs.format.sizes import format_size
from cytearc_vfs.read.sparse_rows import index_dtype

from .opened import OpenedAssay

__all__ = [
    "EXPORT_BUDGET",
    "MIN_BAND_BYTES",
    "STREAM_CHUNK",
    "BandPlan",
    "entry_counts",
    "plan_bands",
    "shard_aligned",
    "table_bytes",
]

#: The default ``mem_budget`` of an export: every writer's (2 GiB). It was 64 MiB,
#: which the obs and var tables alone outgrow at about 60,000 cells with two text
#: columns (read, made plain and encoded: five copies), so a default export of an
#: ordinary 100,000-cell store was refused.
EXPORT_BUDGET = DEFAULT_MEM_BUDGET
#: Values per chunk of the streamed ``data`` and ``indices`` arrays (and at most of ``indptr``).
STREAM_CHUNK = 1 << 20
#: Dense bytes of cells a band holds at least (one cell at least), as creation's bands.
MIN_BAND_BYTES = 1 << 20

# Measured (benchmarks/bench_export_budget.py, tests/test_export_budget.py)
# with a margin: a sparse read holds each entry (index + value) up to about
# four times at its peak (the parts, over-allocated while they grow, and the
# assembled block); a source read densely holds up to two dense bands and
# the non-zeros grown from them.
_READ_ENTRY_COPIES = 5
_READ_DENSE_COPIES = 2.5
# Appending: the block itself and the write's copies of its values.
_APPEND_ENTRY_COPIES = 3
# A .zarr append writes whole chunks only (export._Column): the values past
# the last one wait, less than a chunk of each array, held throughout; a chunk
# completed from them is joined, then encoded (three copies of it at most).
_ZARR_CHUNK_COPIES = 3
# Row pointers of a band: the sources', the assembled block's, the appended ones.
_BAND_ROW_BYTES = 64
# Held for the whole export: each cell's entry count and the running sum of them.
_HELD_ROW_BYTES = 16
# The tables: the frames, their plain copies and anndata's encoded copies, and
# the stored columns they were read from.
_TABLE_COPIES = 5


@dataclass(frozen=True, slots=True)
class BandPlan:
    """The bands of cells of an export and what they cost."""

    starts: npt.NDArray[np.int64]
    """First cell of each band, then the number of cells."""
    least: int
    """The smallest budget this export works in (bands of :data:`MIN_BAND_BYTES`)."""
    peak: int
    """Bytes the export is expected to hold at its peak, at most the budget."""

    def bands(self) -> list[slice]:
        """The bands, as slices of cells."""
        return [
            slice(int(a), int(b)) for a, b in zip(self.starts[:-1], self.starts[1:], strict=True)
        ]


def shard_aligned(start: int, stop: int, shard: int | None, n_cells: int, fewest: int = 1) -> int:
    """The end of a band of cells from ``start`` to ``stop`` moved back to the last
    boundary of the counts' shards (every ``shard`` cells) where the band keeps at
    least ``fewest`` cells; the last band (``stop == n_cells``), and a band that
    would keep fewer, end where they did.

    Each shard is then read by one band: a band ending inside a shard left the
    next to fetch that shard's index and some of its chunks again.

    >>> shard_aligned(0, 22369, 22368, 60000)
    22368
    >>> shard_aligned(0, 1000, 216, 20000), shard_aligned(864, 1864, 216, 20000)
    (864, 1728)
    >>> shard_aligned(0, 100, 216, 20000)  # no boundary inside the band
    100
    >>> shard_aligned(0, 1000, 216, 20000, fewest=900)  # 864 cells would be too few
    1000
    >>> shard_aligned(19000, 20000, 216, 20000)  # the last band
    20000
    """
    if shard is None or shard < 1 or stop >= n_cells:
        return stop
    aligned = stop // shard * shard
    return aligned if aligned - start >= max(1, fewest) else stop


def table_bytes(*frames: pd.DataFrame) -> int:
    """Bytes the frames hold (their index and text included)."""
    return sum(int(frame.memory_usage(index=True, deep=True).sum()) for frame in frames)


def entry_counts(opened: OpenedAssay) -> npt.NDArray[np.int64] | None:
    """Each cell's non-zero count, or ``None`` where the store cannot say (see above)."""
    if opened.reader.dtype.kind != "u":
        return None
    try:
        summary = zarr.open_array(
            opened.store, path=join(opened.paths.summaries, "rowPositive"), mode="r"
        )
        counts = np.asarray(summary[:], dtype=np.int64)
    except (FileNotFoundError, KeyError, ValueError):  # a store without summaries
        return None
    return counts if counts.shape == (opened.shape[0],) else None


def _fixed_bytes(opened: OpenedAssay, kind: str) -> tuple[int, int]:
    """(bytes held through the bands, bytes of an append beside its band's entries)."""
    n_cells, n_features = opened.shape
    held = (n_cells + 1) * _HELD_ROW_BYTES
    if kind != "zarr":
        return held, 0
    value = opened.reader.dtype.itemsize
    index = index_dtype(n_features).itemsize
    chunks = [STREAM_CHUNK * value, STREAM_CHUNK * index, min(STREAM_CHUNK, n_cells + 1) * 8]
    return held + sum(chunks), _ZARR_CHUNK_COPIES * max(chunks)


def plan_bands(
    opened: OpenedAssay,
    budget: int,
    kind: str,
    tables: int,
    band_bytes: int | None = None,
) -> BandPlan:
    """Bands of cells whose export keeps to ``budget``; ``ValueError`` if none can.

    ``kind`` is the output (``zarr`` or ``h5ad``), ``tables`` what the read
    ``obs`` and ``var`` hold (:func:`table_bytes`), and ``band_bytes`` an
    optional bound of a band's dense bytes.
    """
    n_cells, n_features = opened.shape
    value = opened.reader.dtype.itemsize
    entry = value + index_dtype(n_features).itemsize
    dense_row = n_features * value
    counts = entry_counts(opened)
    entries = np.full(n_cells, n_features, np.int64) if counts is None else counts
    # bytes each cell adds to a band, read and appended
    read = entries * (_READ_ENTRY_COPIES * entry) + (
        int(_READ_DENSE_COPIES * dense_row) + _BAND_ROW_BYTES
    )
    append = entries * (_APPEND_ENTRY_COPIES * entry) + _BAND_ROW_BYTES
    held, chunk_bytes = _fixed_bytes(opened, kind)
    preparation = _TABLE_COPIES * tables
    cap = n_cells if band_bytes is None else max(1, band_bytes // max(1, dense_row))
    # the fewest cells of a band, and what the costliest band of that many holds
    fewest = max(1, min(cap, n_cells, -(-MIN_BAND_BYTES // max(1, dense_row))))
    cumulative_read = np.concatenate([[0], np.cumsum(read)])
    cumulative_append = np.concatenate([[0], np.cumsum(append)])
    smallest_band = held + max(
        int(np.max(cumulative_read[fewest:] - cumulative_read[:-fewest], initial=0)),
        int(np.max(cumulative_append[fewest:] - cumulative_append[:-fewest], initial=0))
        + chunk_bytes,
    )
    least = max(preparation, smallest_band)
    if least > budget:
        what = (
            f"reading and encoding the obs and var tables needs {format_size(preparation)}"
            if preparation >= smallest_band
            else f"streaming X needs {format_size(smallest_band)} in its smallest bands "
            f"({fewest:,} cells)"
        )
        raise ValueError(
            f"{option_name('mem_budget')} {format_size(budget)} is too small for exporting "
            f"{opened.assay}'s {n_cells:,} x {n_features:,} counts: {what}; raise "
            f"{option_name('mem_budget')} to at least {format_size(least)} ({least} bytes). "
            "Nothing was written"
        )
    # more room than the whole export needs changes nothing, and a budget past 64 bits
    # ("no limit", 1e30 bytes) would overflow the int64 searches below
    room = min(budget - held, int(cumulative_read[-1]) + int(cumulative_append[-1]) + chunk_bytes)
    starts, start, peak = [0], 0, preparation
    shard = -1  # read once a band ends before the last cell (one band needs no shards)
    while start < n_cells:
        # the most cells from ``start`` whose read and append both fit the room
        stop = min(
            int(np.searchsorted(cumulative_read, cumulative_read[start] + room, "right")) - 1,
            int(
                np.searchsorted(
                    cumulative_append, cumulative_append[start] + room - chunk_bytes, "right"
                )
            )
            - 1,
            start + cap,
            n_cells,
        )
        stop = max(stop, min(start + fewest, n_cells))
        if stop < n_cells and shard < 0:
            shard = opened.shard_cells() or 0
        stop = shard_aligned(start, stop, shard, n_cells, fewest)
        cost = max(
            int(cumulative_read[stop] - cumulative_read[start]),
            int(cumulative_append[stop] - cumulative_append[start]) + chunk_bytes,
        )
        peak = max(peak, held + cost)
        starts.append(stop)
        start = stop
    return BandPlan(np.asarray(starts, dtype=np.int64), least, peak)
