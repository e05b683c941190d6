"""Two ways to read rows of a composite or mount: the gather reader and plain zarr.

Tests of sources replaced under an open store run each case through both:
the gather reader keeps the shard indexes it read, zarr reads the computed
chunks (a chunk may span several sources).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

Read = Callable[[npt.NDArray[np.int64]], Any]


def gather(store: Any) -> Read:
    """Rows read by one gather reader of ``store`` (it keeps the indexes it read)."""
    reader = store.reader()
    return lambda rows: reader.read(cells=rows)


def plain_zarr(store: Any) -> Read:
    """Rows read through zarr from ``store``'s computed chunks (one open array)."""
    array = zarr.open_array(store, path="RNA/counts", mode="r")
    return lambda rows: np.asarray(array[int(rows[0]) : int(rows[-1]) + 1])


PATHS = {"gather reader": gather, "plain zarr": plain_zarr}
