"""``to_anndata(lazy=False)``: ``X`` loaded as one CSR matrix, refused when it cannot fit.

A loaded ``X`` is the whole count matrix in memory, so its size is known
before the first band is read: for unsigned counts (every non-negative
integer matrix) each cell's entry count is the store's ``rowPositive``
summary. The load is refused up front, naming the size and what to do
instead, when the matrix would not fit in the memory this process can still
get (:func:`available_memory`); otherwise its arrays are made once at their
final size and filled band by band, so the peak is the matrix and one band,
not the bands and a stacked copy of them. Stores whose counts may hold
negative values (signed or float dtypes), whose ``rowPositive`` does not
count every entry, are read band by band with the same check made as the
bands arrive.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from cytearc_vfs.errors import VfsError
from cytearc_vfs.format.sizes import format_size
from cytearc_vfs.read.sparse_rows import index_dtype

from .export_budget import entry_counts
from .opened import OpenedAssay

__all__ = ["LoadTooLargeError", "available_memory", "loaded_counts"]

_MEMINFO = "/proc/meminfo"
# cgroup v2: a container's limit and use, which /proc/meminfo does not show
_CGROUP_LIMIT = "/sys/fs/cgroup/memory.max"
_CGROUP_USE = "/sys/fs/cgroup/memory.current"


class LoadTooLargeError(VfsError, MemoryError):
    """``to_anndata(lazy=False)`` was asked for an ``X`` larger than the memory available."""


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as file:
            text = file.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _meminfo_available(path: str = _MEMINFO) -> int | None:
    try:
        with open(path, encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_memory() -> int | None:
    """Bytes this process can still allocate without the system swapping or killing it:
    the kernel's ``MemAvailable``, lowered to what the cgroup (container) limit leaves;
    ``None`` where the system says neither."""
    candidates = [_meminfo_available()]
    limit, used = _read_int(_CGROUP_LIMIT), _read_int(_CGROUP_USE)
    if limit is not None and used is not None:
        candidates.append(max(0, limit - used))
    if candidates[0] is None and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    known = [value for value in candidates if value is not None]
    return min(known) if known else None


def _check_fits(opened: OpenedAssay, needed: int, what: str, *, reading: bool) -> None:
    """Refuse ``needed`` more bytes where fewer are available (see the module's doc)."""
    available = available_memory()
    if available is None or needed <= available:
        return
    n_cells, n_features = opened.shape
    raise LoadTooLargeError(
        f"to_anndata(lazy=False) of {opened.where}: X ({n_cells:,} x {n_features:,}, "
        f"{what}) needs about {format_size(needed)} more memory and "
        f"{format_size(available)} is available. Use lazy=True (the default: X is read "
        "when computed, e.g. adata[cells].X.compute()), or write it as an AnnData file "
        "with `cytearc-vfs export` (streamed). "
        + ("The bands read so far were let go" if reading else "Nothing was read")
    )


def loaded_counts(
    opened: OpenedAssay, bands: Iterator[tuple[slice, sp.csr_matrix]]
) -> sp.csr_matrix:
    """``X`` of ``opened`` as one canonical CSR matrix, read from ``bands`` (consecutive
    bands of cells, in order).

    Raises
    ------
    LoadTooLargeError
        Before a band is read where the entry counts are known, or as soon as the
        bands read so far show the matrix would not fit, naming the remedy.
    """
    counts = entry_counts(opened)
    if counts is None:
        return _grown(opened, bands)
    return _filled(opened, counts, bands)


def _filled(
    opened: OpenedAssay,
    counts: npt.NDArray[np.int64],
    bands: Iterator[tuple[slice, sp.csr_matrix]],
) -> sp.csr_matrix:
    """The matrix made at its final size from the entry counts, then filled band by band."""
    n_cells, n_features = opened.shape
    dtype = opened.reader.dtype
    entries = int(counts.sum())
    index = index_dtype(entries, n_features)
    needed = entries * (dtype.itemsize + index.itemsize) + (n_cells + 1) * index.itemsize
    _check_fits(opened, needed, f"{entries:,} stored values", reading=False)
    indptr = np.zeros(n_cells + 1, dtype=index)
    np.cumsum(counts, out=indptr[1:])
    data = np.empty(entries, dtype=dtype)
    indices = np.empty(entries, dtype=index)
    for cells, block in bands:
        start, stop = int(indptr[cells.start]), int(indptr[cells.stop])
        if block.nnz != stop - start:
            raise VfsError(
                f"{opened.where}: cells {cells.start:,}-{cells.stop - 1:,} hold {block.nnz:,} "
                f"stored values where the store's rowPositive summary counts {stop - start:,}; "
                "the summaries disagree with the counts. Run `cytearc-vfs verify` on the "
                "store"
            )
        data[start:stop] = block.data
        indices[start:stop] = block.indices
    return sp.csr_matrix((data, indices, indptr), shape=opened.shape, copy=False)


def _grown(opened: OpenedAssay, bands: Iterator[tuple[slice, sp.csr_matrix]]) -> sp.csr_matrix:
    """The bands kept as read (each checked against the memory left), then joined."""
    n_cells = opened.shape[0]
    blocks: list[sp.csr_matrix] = []
    held = 0
    for cells, block in bands:
        blocks.append(block)
        held += block.data.nbytes + block.indices.nbytes + block.indptr.nbytes
        # joining copies what the bands hold once more; the cells not read yet
        # are assumed to be as dense as those read so far
        expected = held * n_cells // max(1, cells.stop)
        _check_fits(
            opened,
            2 * expected - held,
            "its stored values estimated from the bands read",
            reading=True,
        )
    if not blocks:
        return sp.csr_matrix(opened.shape, dtype=opened.reader.dtype)
    return sp.csr_matrix(sp.vstack(blocks, format="csr"))
