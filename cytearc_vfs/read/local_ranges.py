"""Byte ranges of local shard files, read with ``pread`` (no zarr, no event loop).

The gather reader (:mod:`cytearc_vfs.read.shard_reader`, through
:mod:`cytearc_vfs.read.local_shards`) reads a local store's shard files itself, only the touched chunks, on the thread that
decodes them; ranges that follow each other in the file are read in one
call. The compiled ``read_ranges`` of ``encoding/_kernels.c`` does the same
without the GIL; :func:`pread_ranges` is its fallback.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .opened_files import ShardFiles, open_checked

__all__ = ["pread_ranges", "read_local_ranges"]


def read_local_ranges(
    path: str, offsets: Sequence[int], sizes: Sequence[int], files: ShardFiles | None = None
) -> list[Any]:
    """The byte ranges of one file; ranges that follow each other are read as one.

    ``files`` (when given) refuses a shard file replaced since its index was read.
    """
    blobs: list[Any] = []
    # a raw descriptor: a Python file object costs more than the reads of a
    # few chunks
    descriptor = open_checked(path, files)
    try:
        i = 0
        while i < len(offsets):
            j = i + 1
            while j < len(offsets) and offsets[j] == offsets[j - 1] + sizes[j - 1]:
                j += 1
            start, length = offsets[i], offsets[j - 1] + sizes[j - 1] - offsets[i]
            data = memoryview(os.pread(descriptor, length, start))
            if len(data) != length:
                raise OSError(f"{path} ends before byte {start + length}; the shard is truncated")
            for k in range(i, j):
                blobs.append(data[offsets[k] - start : offsets[k] - start + sizes[k]])
            i = j
    finally:
        os.close(descriptor)
    return blobs


def pread_ranges(
    descriptor: int,
    offsets: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
) -> None:
    """``read_ranges`` in Python: the ranges one after another into ``out``."""
    view = memoryview(out)
    starts, lengths = offsets.tolist(), sizes.tolist()
    written = i = 0
    while i < len(starts):
        j = i + 1
        while j < len(starts) and starts[j] == starts[j - 1] + lengths[j - 1]:
            j += 1
        length = starts[j - 1] + lengths[j - 1] - starts[i]
        if os.preadv(descriptor, [view[written : written + length]], starts[i]) != length:
            raise EOFError(f"the file ends before byte {starts[i] + length}")
        written += length
        i = j
