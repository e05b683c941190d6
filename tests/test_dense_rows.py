"""``dense_rows``: a dense band's non-zero entries as CSR rows, for sparse reads.

The compiled kernel (``nonzero_rows``) and numpy's fallback give the same
entries for every item type the readers hold (unsigned and signed integers
of 1-8 bytes, booleans, 4- and 8-byte floats with ``-0.0`` a zero and NaN
not), any width (spans of 32 bytes and the items after the last), any
density (blocks denser than the first guess of the output's size grow it),
and both index types. The kernel refuses arguments that do not fit.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp

from cytearc_vfs.read import sparse_rows
from cytearc_vfs.read.sparse_rows import SourceRows, dense_rows

kernels = pytest.importorskip("cytearc_vfs.encoding._kernels")

DTYPES = ["u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "?", "f4", "f8"]


def block_of(dtype: str, rows: int, width: int, density: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 100, (rows, width)) * (rng.random((rows, width)) < density)
    block = values.astype(dtype)
    if block.dtype.kind == "i":
        block[rng.random((rows, width)) < density / 2] *= -1
    if block.dtype.kind == "f" and block.size > 2:
        flat = block.reshape(-1)
        flat[0] = -0.0  # a zero
        flat[1] = np.nan  # not a zero
    return block


def as_dense(rows: SourceRows, shape: tuple[int, int], out_cols: np.ndarray) -> np.ndarray:
    """The block ``rows`` describes, columns mapped back through ``out_cols``."""
    indices, data = rows.joined()
    back = np.searchsorted(out_cols, indices)
    matrix = sp.csr_matrix((data, back, rows.indptr), shape=shape)
    return matrix.toarray()


def expected_nnz(block: np.ndarray) -> int:
    return int(np.count_nonzero(block))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 3, 16, 17, 33, 250])
@pytest.mark.parametrize("density", [0.0, 0.02, 0.5, 1.0])
def test_entries_equal_the_block(dtype: str, width: int, density: float) -> None:
    block = block_of(dtype, 23, width, density)
    out_cols = np.arange(width, dtype=np.int64) * 3 + 5  # ascending output columns
    for idx in (np.dtype(np.int32), np.dtype(np.int64)):
        rows = dense_rows(block, out_cols, idx)
        indices, data = rows.joined()
        assert indices.dtype == idx and data.dtype == block.dtype
        assert rows.indptr.dtype == np.int64 and len(rows.indptr) == len(block) + 1
        assert rows.nnz == len(indices) == len(data) == expected_nnz(block)
        np.testing.assert_array_equal(as_dense(rows, block.shape, out_cols), block)
        # within a row, columns ascend (the order of out_cols)
        for i in range(len(block)):
            row_cols = indices[rows.indptr[i] : rows.indptr[i + 1]]
            assert bool(np.all(np.diff(row_cols) > 0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_kernel_and_numpy_agree(dtype: str) -> None:
    block = block_of(dtype, 40, 101, 0.1, seed=7)
    out_cols = np.arange(101, dtype=np.int64)
    compiled = dense_rows(block, out_cols, np.dtype(np.int32))
    with mock.patch.object(sparse_rows, "nonzero_rows", None):
        fallback = dense_rows(block, out_cols, np.dtype(np.int32))
    np.testing.assert_array_equal(compiled.indptr, fallback.indptr)
    for a, b in zip(compiled.joined(), fallback.joined(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_minus_zero_is_a_zero_and_nan_is_not() -> None:
    block = np.array([[-0.0, np.nan, 0.0, 1.5]], dtype=np.float32)
    rows = dense_rows(block, np.arange(4, dtype=np.int64), np.dtype(np.int32))
    indices, data = rows.joined()
    assert indices.tolist() == [1, 3]
    assert np.isnan(data[0]) and data[1] == 1.5


def test_a_block_denser_than_the_first_guess_grows_the_output() -> None:
    # the first guess is a 32nd of the items (at least 4,096): all non-zero
    # needs several growths, each keeping what was written
    block = np.arange(1, 300 * 700 + 1, dtype=np.uint32).reshape(300, 700)
    rows = dense_rows(block, np.arange(700, dtype=np.int64), np.dtype(np.int64))
    assert rows.nnz == block.size
    np.testing.assert_array_equal(rows.joined()[1], block.reshape(-1))


def test_a_block_that_is_not_contiguous_takes_numpys_way() -> None:
    block = block_of("u2", 30, 80, 0.1)[:, ::2]
    rows = dense_rows(block, np.arange(40, dtype=np.int64), np.dtype(np.int32))
    np.testing.assert_array_equal(as_dense(rows, block.shape, np.arange(40)), block)


def test_the_kernel_refuses_arguments_that_do_not_fit() -> None:
    block = np.ones((4, 8), dtype=np.uint16)
    cols = np.arange(8, dtype=np.int64)
    indptr = np.zeros(5, dtype=np.int64)
    indices = np.empty(64, dtype=np.int32)
    data = np.empty(64, dtype=np.uint16)
    run = kernels.nonzero_rows
    with pytest.raises(ValueError, match="itemsize"):
        run(block, 8, 3, False, cols, 0, 0, indptr, indices, data)
    with pytest.raises(ValueError, match="itemsize"):
        run(block, 7, 2, False, cols, 0, 0, indptr, indices, data)  # rows x width
    with pytest.raises(ValueError, match="out_cols"):
        run(block, 8, 2, False, cols[:5], 0, 0, indptr, indices, data)
    with pytest.raises(ValueError, match="indptr"):
        run(block, 8, 2, False, cols, 0, 0, indptr[:3], indices, data)
    with pytest.raises(ValueError, match="one length"):
        run(block, 8, 2, False, cols, 0, 0, indptr, indices[:10], data)
    with pytest.raises(ValueError, match="within"):
        run(block, 8, 2, False, cols, 9, 0, indptr, indices, data)
    # a full output stops before the row that does not fit, and says where
    assert run(block, 8, 2, False, cols, 0, 0, indptr, indices[:20], data[:20]) == (2, 16)
    assert indptr[:3].tolist() == [0, 8, 16]
