"""A process keeps the readers of the dask arrays it ran blocks of, so later
blocks skip the open; it keeps a bounded number (a long-lived worker reading
many stores would otherwise hold every store it ever opened, with its open
files and source cache, until it exits)."""

from __future__ import annotations

import gc
import pickle
import weakref
from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv


def test_a_process_keeps_a_bounded_number_of_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("anndata")
    from cytearc_vfs_adapters.anndata_output import conversion

    from cytearc_vfs.read import blockwise

    monkeypatch.setattr(blockwise, "_PROCESS_READERS", {})
    monkeypatch.setattr(conversion, "_PROCESS_READERS", {})
    counts = realistic_counts(20, 6, density=0.5, seed=1)
    arrays, xs = [], []
    for index in range(blockwise.KEPT_READERS + 4):
        cv.write_counts(tmp_path / f"s{index}.zarr", counts)
        arrays.append(cv.VirtualArrayReader(tmp_path / f"s{index}.zarr").to_dask())
        x = cv.to_anndata(tmp_path / f"s{index}.zarr").X
        xs.append(pickle.loads(pickle.dumps(x)))  # as a worker's
    first = None
    for lazy, x in zip(arrays, xs, strict=True):
        np.testing.assert_array_equal(lazy.compute(scheduler="sync"), counts.toarray())
        np.testing.assert_array_equal(x.compute(scheduler="sync").toarray(), counts.toarray())
        if first is None:
            first = weakref.ref(next(iter(blockwise._PROCESS_READERS.values())))
    assert len(blockwise._PROCESS_READERS) == blockwise.KEPT_READERS
    assert len(conversion._PROCESS_READERS) == blockwise.KEPT_READERS
    gc.collect()
    assert first is not None and first() is None, "a reader dropped is still held"
    # the most recent are kept, and reused
    kept = dict(blockwise._PROCESS_READERS)
    arrays[-1].compute(scheduler="sync")
    assert kept == blockwise._PROCESS_READERS
