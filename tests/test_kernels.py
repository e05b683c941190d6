"""The compiled gather loop (``cytearc_vfs._kernels``) and numpy's fallback for it."""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytearc_vfs import placement
from cytearc_vfs.placement import RowPlacement, column_map

kernels: ModuleType | None
try:
    from cytearc_vfs import _kernels as kernels
except ImportError:
    kernels = None
needs_kernels = pytest.mark.skipif(kernels is None, reason="built without a C compiler")


def test_the_compiled_loop_is_built_and_used() -> None:
    # It is optional at install time, so a failed build would pass unnoticed:
    # the reader would silently fall back to the slower np.take.
    if os.environ.get("CYTEARC_VFS_ALLOW_NO_KERNELS") == "1":
        pytest.skip("CYTEARC_VFS_ALLOW_NO_KERNELS=1: an install without a C compiler")
    assert kernels is not None, (
        "cytearc_vfs._kernels was not built: install a C compiler (e.g. gcc) and run "
        "`uv sync --reinstall-package cytearc-vfs`, or set CYTEARC_VFS_ALLOW_NO_KERNELS=1"
    )
    assert placement.gather_columns is kernels.gather_columns


@needs_kernels
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "float32", "float64", "int64"])
@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(0, 9),
    src_cols=st.integers(1, 40),
    width=st.integers(0, 60),
    seed=st.integers(0, 2**32 - 1),
)
def test_gather_columns_equals_numpy_take(
    dtype: str, rows: int, src_cols: int, width: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 200, size=(rows, src_cols)).astype(dtype)
    index = rng.integers(0, src_cols, size=width).astype(np.int64)
    out = np.full((rows, width), 7, dtype=dtype)
    kernels.gather_columns(src, src_cols, src.itemsize, index, out)
    np.testing.assert_array_equal(out, np.take(src, index, axis=1))


@needs_kernels
@pytest.mark.parametrize("bad", [-1, 5])
def test_a_column_outside_the_source_is_refused_before_anything_is_written(bad: int) -> None:
    src = np.arange(10, dtype=np.uint8).reshape(2, 5)
    out = np.zeros((2, 3), dtype=np.uint8)
    with pytest.raises(IndexError, match=f"column {bad} is outside the 5 source columns"):
        kernels.gather_columns(src, 5, 1, np.array([0, bad, 1], dtype=np.int64), out)
    assert not out.any()


@needs_kernels
def test_shapes_and_sizes_that_do_not_agree_are_refused() -> None:
    src = np.zeros((2, 5), dtype=np.uint16)
    index = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="are not the same rows"):
        kernels.gather_columns(src, 5, 2, index, np.zeros((3, 2), dtype=np.uint16))
    with pytest.raises(ValueError, match="itemsize 3"):
        kernels.gather_columns(src, 5, 3, index, np.zeros((2, 2), dtype=np.uint16))
    with pytest.raises(ValueError, match="int64"):
        kernels.gather_columns(src, 5, 2, np.array([0, 1, 2], dtype=np.uint8), src)
    with pytest.raises((BufferError, ValueError)):  # a strided view has no contiguous buffer
        kernels.gather_columns(src[:, ::2], 3, 2, index, np.zeros((2, 2), dtype=np.uint16))


@pytest.mark.parametrize("compiled", [True, False])
def test_row_placement_through_a_column_map_is_the_same_either_way(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled and kernels is None:
        pytest.skip("built without a C compiler")
    if not compiled:
        monkeypatch.setattr(placement, "gather_columns", None)
    rng = np.random.default_rng(3)
    n_src, width = 300, 400
    # a source column per output column (-1: absent), in many short stretches
    columns = np.full(width, -1, dtype=np.int64)
    present = np.sort(rng.choice(width, n_src, replace=False))
    columns[present] = np.arange(n_src)
    strip = np.zeros((6, n_src + 1), dtype=np.uint16)  # + the zero column
    strip[:, :n_src] = rng.integers(1, 9, size=(6, n_src))
    out = np.zeros((10, width), dtype=np.uint16)
    mapping = column_map(columns, n_src)
    assert mapping.indices is not None and mapping.runs is None  # the gather path
    RowPlacement(out, np.arange(2, 8, dtype=np.int64), mapping).place(0, strip)
    expected = np.zeros_like(out)
    expected[2:8, present] = strip[:, :n_src]
    np.testing.assert_array_equal(out, expected)
