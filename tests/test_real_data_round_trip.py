"""Real single-cell data round-trips exactly through write_counts and plain zarr."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs import realdata

DATASETS = ["wu2020", "celltypist_sample", "pbmc68k_reduced", "mouse_10k_subset", "chr21_10x"]


@pytest.mark.parametrize("name", DATASETS)
def test_real_dataset_round_trip(tmp_path: Path, name: str) -> None:
    adata = realdata.DATASETS[name]()
    matrix = sp.csr_array(adata.X)
    # a small policy, so every dataset spans several shards in both orientations
    info = cv.write_counts(
        tmp_path / "s.zarr", adata, layout=cv.LayoutPolicy(256 * 1024, 16 * 1024)
    )
    assert info.dtype.kind == "u"  # whole non-negative counts are stored unsigned
    assert info.dtype.itemsize == min(
        d.itemsize
        for d in map(np.dtype, ("uint8", "uint16", "uint32"))
        if matrix.max() <= np.iinfo(d).max
    )
    store = cv.open_store(tmp_path / "s.zarr")
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    counts_t = zarr.open_array(store, path="RNA/countsT", mode="r")
    dense = matrix.toarray()
    np.testing.assert_array_equal(counts[:], dense)
    np.testing.assert_array_equal(counts_t[:], dense.T)
    summaries = zarr.open_group(store, path="RNA/countSummaries", mode="r")
    np.testing.assert_array_equal(summaries["rowSums"][:], dense.sum(axis=1, dtype=np.uint64))
    np.testing.assert_array_equal(summaries["rowPositive"][:], (dense > 0).sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"][:], (dense > 0).sum(axis=0))
    cell_ids = zarr.open_array(store, path="cellData/ids", mode="r")[:]
    assert list(cell_ids) == [str(i) for i in adata.obs_names]
    # the identity of the same values does not depend on the input form or layout
    again = cv.write_counts(
        tmp_path / "dense.zarr", dense, cells=adata.obs_names, features=adata.var_names
    )
    assert again.dataset_fingerprint == info.dataset_fingerprint


def test_writer_working_memory_stays_inside_the_budget(tmp_path: Path) -> None:
    matrix = realistic_counts(20_000, 2_000, density=0.05, seed=11)
    budget = 24 * 1024**2
    # a first, tiny write imports what the writer imports lazily (the input
    # adapters found through entry points, the compiled kernels): module code
    # is the process's memory, not the write's working memory
    cv.write_counts(tmp_path / "warm.zarr", realistic_counts(20, 10, density=0.5, seed=1))
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        cv.write_counts(
            tmp_path / "s.zarr",
            matrix,
            layout=cv.LayoutPolicy(2 * 1024**2, 64 * 1024),
            mem_budget=budget,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the input (already canonical CSR) is the caller's memory, not the writer's
    assert peak - baseline < budget, (peak - baseline) / 2**20
