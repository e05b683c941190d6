"""``scatter_entries``: CSR/CSC entries of sorted majors into a dense block.

The compiled kernel and numpy's fallback place the same values for every
output type (integers of 1-8 bytes, floats), minor index type (int32,
int64), with and without a lookup of selected minors (-1: not selected),
cell-major (CSR) and feature-major (CSC). An index outside the block is an
IndexError in both; through a composite it is named as a damaged AnnData
element, for dense and sparse reads alike.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv
from cytearc_vfs.errors import RecordShapeError
from cytearc_vfs.read import anndata_reads, sparse_entries
from cytearc_vfs.read.sparse_entries import scatter_entries

pytest.importorskip("cytearc_vfs.encoding._kernels")


def entries(
    n_majors: int, n_minor: int, seed: int, minor_dtype: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, minor, values) of a random compressed matrix of ``n_majors`` majors."""
    matrix = sp.random(n_majors, n_minor, density=0.2, format="csr", random_state=seed)
    matrix.data = np.rint(matrix.data * 50 + 1)
    return matrix.indptr[:-1].astype(np.int64), matrix.indices.astype(minor_dtype), matrix.data


def place_both(out_dtype: str, cell_major: bool, minor_dtype: str, with_lookup: bool) -> None:
    rows, cols = 30, 45
    n_majors, n_minor = (rows, cols) if cell_major else (cols, rows)
    starts, minor, values = entries(n_majors, n_minor, 3, minor_dtype)
    rng = np.random.default_rng(1)
    majors = np.sort(rng.choice(n_majors, n_majors - 5, replace=False))  # some majors
    kept = np.concatenate([starts, [len(minor)]])
    picked = [np.arange(kept[m], kept[m + 1]) for m in majors]
    bounds = np.cumsum([0, *(len(p) for p in picked[:-1])]).astype(np.int64)
    order = np.concatenate(picked)
    lookup = None
    if with_lookup:  # a selection of minors, placed at other positions
        lookup = np.full(n_minor, -1, dtype=np.int64)
        chosen = rng.choice(n_minor, n_minor // 2, replace=False)
        lookup[chosen] = rng.permutation(n_minor)[: len(chosen)]
    out_majors = rng.permutation(n_majors)[: len(majors)].astype(np.int64)
    results = []
    for kernel in (True, False):
        out = np.zeros((rows, cols), dtype=out_dtype)
        kernel_or_none = sparse_entries.scatter_kernel if kernel else None
        with mock.patch.object(sparse_entries, "scatter_kernel", kernel_or_none):
            scatter_entries(
                out, cell_major, out_majors, bounds, minor[order], values[order], lookup
            )
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    # and what they placed is the matrix's entries
    expected = np.zeros((rows, cols), dtype=out_dtype)
    for i, major in enumerate(majors):
        for e in range(kept[major], kept[major + 1]):
            target = int(minor[e]) if lookup is None else int(lookup[minor[e]])
            if target < 0:
                continue
            where = (out_majors[i], target) if cell_major else (target, out_majors[i])
            expected[where] = values[e]
    np.testing.assert_array_equal(results[0], expected)


@pytest.mark.parametrize("out_dtype", ["u1", "u2", "u4", "u8", "i2", "f4", "f8"])
@pytest.mark.parametrize("cell_major", [True, False])
@pytest.mark.parametrize("minor_dtype", ["i4", "i8"])
@pytest.mark.parametrize("with_lookup", [False, True])
def test_the_kernel_and_numpy_place_the_same(
    out_dtype: str, cell_major: bool, minor_dtype: str, with_lookup: bool
) -> None:
    place_both(out_dtype, cell_major, minor_dtype, with_lookup)


@pytest.mark.parametrize("kernel", [True, False])
def test_an_index_outside_the_block_is_an_index_error(kernel: bool) -> None:
    out = np.zeros((4, 5), dtype=np.uint16)
    kernel_or_none = sparse_entries.scatter_kernel if kernel else None
    cases: list[tuple[Any, ...]] = [
        (np.array([0]), np.array([0]), np.array([5], np.int32), None),  # minor past the row
        (np.array([4]), np.array([0]), np.array([1], np.int32), None),  # major past the block
        (np.array([0]), np.array([0]), np.array([-1], np.int64), None),  # negative
        (np.array([0]), np.array([0]), np.array([3], np.int32), np.zeros(2, np.int64)),
    ]
    with mock.patch.object(sparse_entries, "scatter_kernel", kernel_or_none):
        for out_majors, bounds, minor, lookup in cases:
            with pytest.raises(IndexError):
                scatter_entries(
                    out, True, out_majors, bounds, minor, np.ones(1, np.float32), lookup
                )


def test_the_kernel_refuses_arguments_that_do_not_fit() -> None:
    from cytearc_vfs.encoding._kernels import scatter_entries as kernel

    out = np.zeros((4, 5), dtype=np.uint16)
    majors, bounds = np.array([0], np.int64), np.array([0, 1], np.int64)
    minor, values = np.array([1], np.int32), np.array([7], np.uint16)
    with pytest.raises(ValueError, match="itemsize"):
        kernel(out, 5, 3, True, majors, bounds, minor, 4, values, b"")
    with pytest.raises(ValueError, match="bounds"):
        kernel(out, 5, 2, True, majors, bounds[:1], minor, 4, values, b"")
    with pytest.raises(ValueError, match="ascend"):
        kernel(out, 5, 2, True, majors, np.array([0, 2], np.int64), minor, 4, values, b"")
    with pytest.raises(ValueError, match="int32"):
        kernel(out, 5, 2, True, majors, bounds, minor, 2, values, b"")
    kernel(out, 5, 2, True, majors, bounds, minor, 4, values, b"")
    assert out[0, 1] == 7 and out.sum() == 7


def test_a_damaged_anndata_element_is_named(tmp_path: Path) -> None:
    matrix = sp.random(40, 30, density=0.3, format="csr", random_state=2)
    matrix.data = np.rint(matrix.data * 9 + 1).astype(np.float32)
    data = ad.AnnData(X=matrix)
    data.obs_names = [f"c{i}" for i in range(40)]
    data.var_names = [f"g{i}" for i in range(30)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.write_zarr(tmp_path / "a.zarr")
    cv.create_composite(tmp_path / "healthy.zarr", {"a": tmp_path / "a.zarr"}).close()
    reader = cv.VirtualArrayReader(tmp_path / "healthy.zarr")
    # a damaged batch of entries, as a source changed under its fingerprint would give
    original = anndata_reads.ElementReads._entry_batches

    async def damaged_batches(self: Any, majors: np.ndarray) -> Any:
        async for batch in original(self, majors):
            minor = batch.minor.copy()
            minor[len(minor) // 2] = 31  # past the 30 features
            yield batch._replace(minor=minor)

    with mock.patch.object(anndata_reads.ElementReads, "_entry_batches", damaged_batches):
        for read in (reader.read, reader.read_sparse):
            for features in (None, slice(0, 20)):
                with pytest.raises(RecordShapeError, match=r"'X'.*damaged"):
                    read(None, features)

    # a damaged store is refused when the composite is made (its summaries are read)
    indices = zarr.open_array(tmp_path / "a.zarr", path="X/indices", mode="r+")
    damaged = indices[:]
    damaged[len(damaged) // 2] = 31
    indices[:] = damaged
    with pytest.raises(RecordShapeError, match=r"'X'.*damaged"):
        cv.create_composite(tmp_path / "comp.zarr", {"a": tmp_path / "a.zarr"})
