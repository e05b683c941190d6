"""The compiled gather loop (``cytearc_vfs.encoding._kernels``) and numpy's fallback for it."""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytearc_vfs.read import placement
from cytearc_vfs.read.placement import ColumnPlacement, RowPlacement, column_map

kernels: ModuleType | None
try:
    from cytearc_vfs.encoding import _kernels as kernels
except ImportError:
    kernels = None
needs_kernels = pytest.mark.skipif(kernels is None, reason="built without a C compiler")


def test_the_compiled_loop_is_built_and_used() -> None:
    # It is optional at install time, so a failed build would pass unnoticed:
    # the reader would silently fall back to the slower np.take.
    if os.environ.get("CYTEARC_VFS_ALLOW_NO_KERNELS") == "1":
        pytest.skip("CYTEARC_VFS_ALLOW_NO_KERNELS=1: an install without a C compiler")
    assert kernels is not None, (
        "cytearc_vfs.encoding._kernels was not built: install a C compiler (e.g. gcc) and run "
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


def union_order_map(rng: np.random.Generator, src_cols: int, width: int) -> npt.NDArray[np.int64]:
    """A column map like a composite's: the source's features in the union's order with
    absent ones (the zero column, ``src_cols``) between them, some of its own features
    moved (a union lists the first source's features first), a few columns repeated."""
    width = max(width, src_cols)
    columns = np.full(width, src_cols, dtype=np.int64)
    columns[np.sort(rng.choice(width, src_cols, replace=False))] = np.arange(src_cols)
    moved = rng.random(width) < 0.05
    columns[moved] = rng.integers(0, src_cols + 1, int(moved.sum()))
    return columns


@needs_kernels
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "float32"])
@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 7),
    src_cols=st.integers(1, 90),
    width=st.integers(0, 160),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_planned_gather_equals_numpy_take(
    dtype: str, rows: int, src_cols: int, width: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 200, size=(rows, src_cols + 1)).astype(dtype)
    src[:, src_cols] = 0  # the zero column
    index = union_order_map(rng, src_cols, width)
    plan = kernels.plan_gather(index, src_cols + 1, src.itemsize, src_cols)
    out = np.full((rows, len(index)), 7, dtype=dtype)
    kernels.gather_columns(src, src_cols + 1, src.itemsize, index, out, src_cols, plan)
    np.testing.assert_array_equal(out, np.take(src, index, axis=1))


@needs_kernels
def test_no_plan_where_shuffles_cannot_help() -> None:
    index = np.arange(40, dtype=np.int64)
    assert kernels.plan_gather(index, 40, 8, -1) is None  # two 8-byte items a block
    assert kernels.plan_gather(index[:7], 7, 2, -1) is None  # narrower than a block
    assert kernels.plan_gather(np.arange(3, dtype=np.int64), 40, 1, -1) is None
    with pytest.raises(IndexError, match="column 40 is outside the 40 source columns"):
        kernels.plan_gather(np.array([0, 40], dtype=np.int64), 40, 1, -1)


@needs_kernels
def test_a_plan_for_other_arguments_is_refused_before_anything_is_written() -> None:
    src = np.arange(2 * 41, dtype=np.uint8).reshape(2, 41)
    src[:, 40] = 0
    index = np.array([*range(20), 40, *range(20, 40)], dtype=np.int64)
    plan = kernels.plan_gather(index, 41, 1, 40)
    assert plan is not None
    out = np.zeros((2, len(index)), dtype=np.uint8)
    for wrong in (
        (src, 41, 1, index[:-1], np.zeros((2, len(index) - 1), np.uint8), 40, plan),  # width
        (src, 41, 1, index, out, 39, plan),  # another zero column
        (src.astype(np.uint16), 41, 2, index, out.astype(np.uint16), 40, plan),  # itemsize
    ):
        with pytest.raises(ValueError, match="the plan is for another"):
            kernels.gather_columns(*wrong)
    # a window that would read past a row: the plan's bytes were changed
    header = 6 * 8
    forged = bytearray(plan)
    forged[header : header + 8] = (10_000).to_bytes(8, "little", signed=True)
    with pytest.raises(ValueError, match="window outside the rows"):
        kernels.gather_columns(src, 41, 1, index, out, 40, bytes(forged))
    with pytest.raises(TypeError, match="plan must come from plan_gather"):
        kernels.gather_columns(src, 41, 1, index, out, 40, bytearray(plan))
    assert not out.any()
    kernels.gather_columns(src, 41, 1, index, out, 40, plan)
    np.testing.assert_array_equal(out, np.take(src, index, axis=1))


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
    strip = np.zeros((30, n_src + 1), dtype=np.uint16)  # + the zero column
    strip[:, :n_src] = rng.integers(1, 9, size=(30, n_src))
    mapping = column_map(columns, n_src)
    assert mapping.indices is not None and mapping.runs is None  # the gather path
    expected = np.zeros((40, width), dtype=np.uint16)
    expected[5:35, present] = strip[:, :n_src]
    # a strip of a few rows, gathered without a plan; then one of more rows
    for rows in (6, 30):
        out = np.zeros((40, width), dtype=np.uint16)
        RowPlacement(out, np.arange(5, 5 + rows, dtype=np.int64), mapping).place(0, strip[:rows])
        np.testing.assert_array_equal(out[: 5 + rows], expected[: 5 + rows])
        if compiled:  # the shuffle plan is made for many rows, once per map and dtype
            plan = mapping.gather_plan(2, make=False)
            assert (plan is None) == (rows < placement.PLAN_ROWS)
    if compiled:
        assert mapping.gather_plan(2) is mapping.gather_plan(2, make=False) is not None


@needs_kernels
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32", "float64"])
@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(0, 5),
    src_cols=st.integers(1, 60),
    n=st.integers(0, 40),
    out_cols=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_scatter_columns_equals_numpy(
    dtype: str, k: int, src_cols: int, n: int, out_cols: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 200, size=(k, src_cols)).astype(dtype)
    cells = rng.integers(0, src_cols, size=n).astype(np.int64)
    rows = rng.choice(n + 5, size=n, replace=False).astype(np.int64)
    targets = rng.choice(out_cols, size=min(k, out_cols), replace=False).astype(np.int64)
    src = np.ascontiguousarray(src[: len(targets)])
    out = np.zeros((n + 5, out_cols), dtype=dtype)
    kernels.scatter_columns(src, src_cols, src.itemsize, cells, out, out_cols, rows, targets)
    expected = np.zeros_like(out)
    expected[np.ix_(rows, targets)] = src[:, cells].T
    np.testing.assert_array_equal(out, expected)


@needs_kernels
def test_scatter_positions_outside_the_arrays_are_refused_before_anything_is_written() -> None:
    src = np.ones((2, 5), dtype=np.uint8)
    out = np.zeros((4, 3), dtype=np.uint8)
    cells, rows, targets = (np.array(v, dtype=np.int64) for v in ([0, 4], [0, 3], [0, 2]))
    for bad_cells, bad_rows, bad_targets, message in (
        ([0, 5], rows, targets, "cell 5 or row 3 is outside the 5 source columns or 4"),
        (cells, [0, 4], targets, "cell 4 or row 4 is outside"),
        (cells, rows, [0, 3], "target 3 is outside the 3 output columns"),
        (cells, rows, [-1, 0], "target -1 is outside"),
    ):
        with pytest.raises(IndexError, match=message):
            kernels.scatter_columns(
                src,
                5,
                1,
                np.asarray(bad_cells, dtype=np.int64),
                out,
                3,
                np.asarray(bad_rows, dtype=np.int64),
                np.asarray(bad_targets, dtype=np.int64),
            )
    with pytest.raises(ValueError, match="of one length"):
        kernels.scatter_columns(src, 5, 1, cells, out, 3, rows[:1], targets)
    with pytest.raises(ValueError, match="of one length"):
        kernels.scatter_columns(src, 5, 1, cells, out, 3, rows, targets[:1])  # 2 src rows
    assert not out.any()


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("as_slices", [True, False])
def test_column_placement_is_the_same_either_way(
    compiled: bool, as_slices: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled and kernels is None:
        pytest.skip("built without a C compiler")
    if not compiled:
        monkeypatch.setattr(placement, "scatter_columns", None)
    rng = np.random.default_rng(4)
    strip = rng.integers(1, 9, size=(3, 21)).astype(np.uint16)  # 3 features x 20 cells + zero
    out_cols = np.array([5, 0, 2, 7], dtype=np.int64)  # output column of each strip row
    cells: slice | npt.NDArray[np.int64] = slice(4, 14) if as_slices else np.arange(4, 14)
    rows: slice | npt.NDArray[np.int64] = slice(1, 11) if as_slices else np.arange(1, 11)
    out = np.zeros((12, 8), dtype=np.uint16)
    ColumnPlacement(out, out_cols, cells, rows).place(1, strip)
    expected = np.zeros_like(out)
    expected[1:11][:, [0, 2, 7]] = strip[:, 4:14].T
    np.testing.assert_array_equal(out, expected)
