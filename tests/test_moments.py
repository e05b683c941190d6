"""ColumnMoments against numpy (spec, "Normalized feature statistics")."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cytearc_vfs.artifacts.moments import ColumnMoments


def split_rows(values: npt.NDArray[np.float64], cuts: list[int]) -> list[npt.NDArray[np.float64]]:
    """Row bands of ``values`` cut at ``cuts`` (any order, repeats give empty bands)."""
    edges = [0, *sorted(cut % (len(values) + 1) for cut in cuts), len(values)]
    return [values[start:stop] for start, stop in itertools.pairwise(edges)]


def streamed(values: npt.NDArray[np.float64], cuts: list[int]) -> ColumnMoments:
    moments = ColumnMoments(values.shape[1])
    for band in split_rows(values, cuts):
        moments.update(band)
    return moments


finite_matrices = st.tuples(st.integers(1, 60), st.integers(1, 4)).flatmap(
    lambda shape: hnp.arrays(
        np.float64,
        shape,
        elements=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    )
)
cut_lists = st.lists(st.integers(0, 1000), max_size=8)


@settings(max_examples=200, deadline=None)
@given(values=finite_matrices, cuts=cut_lists)
def test_streamed_moments_match_numpy(values: npt.NDArray[np.float64], cuts: list[int]) -> None:
    moments = streamed(values, cuts)
    n = len(values)
    assert moments.n == n
    # Errors of either computation scale with the magnitude of the values squared.
    magnitude = float(np.abs(values).max()) + 1.0
    m2 = moments.feature_m2
    assert (m2 >= 0).all()
    np.testing.assert_allclose(
        m2, np.var(values, axis=0) * n, rtol=1e-9, atol=1e-12 * n * magnitude**2
    )
    np.testing.assert_allclose(
        moments.feature_sum, values.sum(axis=0), rtol=1e-12, atol=1e-12 * n * magnitude
    )
    np.testing.assert_allclose(
        moments.mean, values.mean(axis=0), rtol=1e-12, atol=1e-12 * magnitude
    )
    np.testing.assert_allclose(
        moments.std, np.std(values, axis=0), rtol=1e-6, atol=1e-6 * magnitude
    )


@settings(max_examples=100, deadline=None)
@given(values=finite_matrices, cuts=cut_lists, at=st.integers(0, 1000))
def test_merge_equals_streaming_everything(
    values: npt.NDArray[np.float64], cuts: list[int], at: int
) -> None:
    split = at % (len(values) + 1)
    left = streamed(values[:split], cuts)
    right = streamed(values[split:], cuts)
    left.merge(right)
    whole = streamed(values, cuts)
    magnitude = float(np.abs(values).max()) + 1.0
    assert left.n == whole.n
    np.testing.assert_allclose(
        left.feature_m2, whole.feature_m2, rtol=1e-9, atol=1e-12 * len(values) * magnitude**2
    )
    np.testing.assert_allclose(
        left.feature_sum, whole.feature_sum, rtol=1e-12, atol=1e-12 * len(values) * magnitude
    )


@settings(max_examples=200, deadline=None)
@given(
    value=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
    rows=st.integers(1, 80),
    cuts=cut_lists,
)
def test_equal_values_have_m2_exactly_zero(value: float, rows: int, cuts: list[int]) -> None:
    values = np.full((rows, 1), value)
    moments = streamed(values, cuts)
    assert moments.feature_m2[0] == 0.0
    assert moments.mean[0] == value
    assert moments.std[0] == 0.0
    assert moments.scale[0] == 1.0


def test_a_constant_column_beside_varying_ones() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(size=(1000, 3))
    # 0.1 has no exact binary form: a sum of squares minus a squared mean would not cancel.
    values[:, 1] = 0.1
    moments = ColumnMoments(3)
    for start in range(0, 1000, 7):
        moments.update(values[start : start + 7])
    assert moments.feature_m2[1] == 0.0
    assert moments.mean[1] == 0.1
    np.testing.assert_array_equal(moments.scale[1], 1.0)
    assert (moments.scale[[0, 2]] != 1.0).all()


def test_large_offsets_stay_accurate() -> None:
    rng = np.random.default_rng(11)
    noise = rng.normal(scale=0.5, size=(100_000, 3))
    values = 1e9 + noise
    moments = ColumnMoments(3)
    for start in range(0, len(values), 997):
        moments.update(values[start : start + 997])
    # ``values - 1e9`` is exact, so this reference carries no cancellation.
    reference = np.var(values - 1e9, axis=0)
    np.testing.assert_allclose(moments.feature_m2 / moments.n, reference, rtol=1e-6)
    naive = (values**2).mean(axis=0) - values.mean(axis=0) ** 2
    # What the rule forbids: the naive variance is off by orders of magnitude here.
    assert np.abs(naive - reference).max() > 1.0


def test_float32_bands_accumulate_in_float64() -> None:
    values = np.array([[16777216.0], [16777217.0]])  # 2**24 and 2**24 + 1
    moments = ColumnMoments(1)
    moments.update(values[:1].astype(np.float32))
    moments.update(values[1:])
    assert moments.feature_sum.dtype == np.float64
    assert moments.feature_sum[0] == 33554433.0
    assert moments.feature_m2[0] == 0.5


def test_empty_state_and_empty_bands() -> None:
    moments = ColumnMoments(2)
    moments.update(np.empty((0, 2)))
    assert moments.n == 0
    np.testing.assert_array_equal(moments.feature_sum, [0.0, 0.0])
    np.testing.assert_array_equal(moments.feature_m2, [0.0, 0.0])
    with pytest.raises(ValueError, match="no rows"):
        _ = moments.mean
    with pytest.raises(ValueError, match="no rows"):
        _ = moments.scale
    other = ColumnMoments.from_band([[1.0, 2.0], [3.0, 2.0]])
    moments.merge(other)
    np.testing.assert_array_equal(moments.feature_m2, [2.0, 0.0])
    other.merge(ColumnMoments(2))
    assert other.n == 2


def test_returned_arrays_are_copies() -> None:
    moments = ColumnMoments.from_band([[1.0], [3.0]])
    moments.feature_m2[0] = -1.0
    moments.feature_sum[0] = 0.0
    assert moments.feature_m2[0] == 2.0
    assert moments.feature_sum[0] == 4.0


@pytest.mark.parametrize(
    ("band", "match"),
    [
        (np.ones(3), r"shape \(rows, 3\)"),
        (np.ones((2, 2)), r"shape \(rows, 3\)"),
        (np.ones((2, 3, 1)), r"shape \(rows, 3\)"),
    ],
)
def test_band_shape_is_checked(band: npt.NDArray[np.float64], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ColumnMoments(3).update(band)


def test_merge_checks_columns_and_constructor_checks_count() -> None:
    with pytest.raises(ValueError, match="merge moments of 2 columns into 3"):
        ColumnMoments(3).merge(ColumnMoments(2))
    with pytest.raises(ValueError, match="non-negative integer"):
        ColumnMoments(-1)


# Sparse bands: the moments of their dense equivalents, from the stored entries alone.

SPARSE_FORMATS = [
    sp.csr_array,
    sp.csc_array,
    sp.coo_array,
    sp.csr_matrix,
    sp.csc_matrix,
    sp.coo_matrix,
]

#: Mostly zeros, as counts are: a third of the drawn values are replaced by zero.
sparse_matrices = st.tuples(st.integers(1, 60), st.integers(1, 5)).flatmap(
    lambda shape: hnp.arrays(
        np.float64,
        shape,
        elements=st.one_of(
            st.just(0.0), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
        ),
    )
)


def assert_same_moments(got: ColumnMoments, want: ColumnMoments, values: npt.NDArray[Any]) -> None:
    magnitude = float(np.abs(values).max(initial=0.0)) + 1.0
    n = max(1, len(values))
    assert got.n == want.n
    np.testing.assert_allclose(
        got.feature_m2, want.feature_m2, rtol=1e-9, atol=1e-12 * n * magnitude**2
    )
    np.testing.assert_allclose(
        got.feature_sum, want.feature_sum, rtol=1e-12, atol=1e-12 * n * magnitude
    )
    if got.n:
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=1e-12 * magnitude)
    assert (got.feature_m2 >= 0).all()


@settings(max_examples=200, deadline=None)
@given(values=sparse_matrices, cuts=cut_lists, kind=st.sampled_from(SPARSE_FORMATS))
def test_sparse_bands_match_their_dense_equivalents(
    values: npt.NDArray[np.float64], cuts: list[int], kind: Callable[[Any], Any]
) -> None:
    sparse = ColumnMoments(values.shape[1])
    for band in split_rows(values, cuts):
        sparse.update(kind(band))
    assert_same_moments(sparse, streamed(values, cuts), values)
    np.testing.assert_allclose(
        sparse.feature_m2,
        np.var(values, axis=0) * len(values),
        rtol=1e-9,
        atol=1e-12 * len(values) * (float(np.abs(values).max()) + 1.0) ** 2,
    )


@pytest.mark.parametrize("kind", [sp.coo_array, sp.coo_matrix])
def test_coo_duplicates_sum_and_explicit_zeros_count_as_zeros(kind: Callable[..., Any]) -> None:
    rows = np.array([0, 0, 0, 1, 2, 2, 3, 3, 1])
    cols = np.array([0, 0, 1, 1, 2, 2, 0, 2, 0])
    data = np.array([1.0, 2.0, 0.0, 4.0, 0.0, 0.0, 5.0, -1.5, 0.0])  # explicit zeros too
    band = kind((data, (rows, cols)), shape=(5, 3))
    kept = (data.copy(), rows.copy(), cols.copy())
    moments = ColumnMoments(3)
    moments.update(band)
    dense = ColumnMoments(3)
    dense.update(band.toarray())  # toarray sums the duplicates
    assert_same_moments(moments, dense, band.toarray())
    np.testing.assert_array_equal(moments.feature_sum, [8.0, 4.0, -1.5])
    # the caller's band is left as it was: not summed in place, not sorted
    np.testing.assert_array_equal(band.data, kept[0])
    np.testing.assert_array_equal(band.row, kept[1])
    np.testing.assert_array_equal(band.col, kept[2])
    assert band.nnz == len(data)


def test_non_canonical_csr_duplicates_sum() -> None:
    # a CSR band with a repeated, unsorted column in its first row
    band = sp.csr_array(
        (np.array([2.0, 1.0, 3.0]), np.array([1, 0, 1]), np.array([0, 3, 3])), shape=(2, 2)
    )
    assert not band.has_canonical_format
    moments = ColumnMoments.from_band(band)
    np.testing.assert_array_equal(moments.feature_sum, [1.0, 5.0])
    np.testing.assert_array_equal(moments.feature_m2, [0.5, 12.5])


@pytest.mark.parametrize("kind", SPARSE_FORMATS)
def test_sparse_equal_values_have_m2_exactly_zero(kind: Callable[[Any], Any]) -> None:
    values = np.zeros((9, 4))
    values[:, 1] = 0.1  # every row stored, one value
    values[:, 3] = 1e300
    band = sp.coo_array(values)
    band.data[band.col == 2] = 0.0  # column 2 is not stored at all, column 0 ...
    explicit = sp.coo_array(
        (
            np.concatenate([band.data, np.zeros(9)]),
            (
                np.concatenate([band.row, np.arange(9)]),
                np.concatenate([band.col, np.zeros(9, dtype=np.int64)]),
            ),
        ),
        shape=(9, 4),
    )  # ... holds explicit zeros in every row
    moments = ColumnMoments(4)
    moments.update(kind(explicit))
    moments.update(kind(explicit[:4]))
    np.testing.assert_array_equal(moments.feature_m2, [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(moments.mean, [0.0, 0.1, 0.0, 1e300])
    np.testing.assert_array_equal(moments.scale, [1.0, 1.0, 1.0, 1.0])


def test_a_sparse_band_is_not_densified() -> None:
    # 20,000 x 500 float64 is 80 MB dense; its 10,000 stored entries are 160 kB
    band = sp.random_array(
        (20_000, 500), density=0.001, format="csr", dtype=np.float64, rng=np.random.default_rng(3)
    )
    moments = ColumnMoments(500)
    tracemalloc.start()
    try:
        moments.update(band)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"updating with a sparse band allocated {peak:,} bytes"
    np.testing.assert_allclose(moments.feature_sum, band.sum(axis=0), rtol=1e-12)


def test_empty_sparse_bands_and_bool_values() -> None:
    moments = ColumnMoments(2)
    moments.update(sp.csr_array((0, 2)))
    assert moments.n == 0
    moments.update(sp.csr_array(np.array([[True, False], [True, True]])))
    np.testing.assert_array_equal(moments.feature_sum, [2.0, 1.0])
    np.testing.assert_array_equal(moments.feature_m2, [0.0, 0.5])


@pytest.mark.parametrize(
    ("band", "match"),
    [
        ([[1.0, 2.0, 3.0], [4.0]], r"shape \(rows, 3\); list is not one"),
        ("abc", r"not str \(read as <U3"),
        ({"a": 1}, r"not dict"),
        (None, r"not NoneType"),
        (np.ones((2, 3), dtype=complex), r"ndarray of complex128"),
        (np.array([[1, None, 2]], dtype=object), r"ndarray of object"),
        (sp.csr_array(np.ones((2, 3), dtype=complex)), r"real numbers, not complex128"),
        (
            sp.csr_array(np.ones((2, 4))),
            r"shape \(rows, 3\), not \(2, 4\) \(csr_array of float64\)",
        ),
        (sp.coo_array(np.ones(3)), r"not \(3,\) \(coo_array of float64\)"),
        (sp.csc_matrix(np.ones((2, 2))), r"not \(2, 2\) \(csc_matrix of float64\)"),
    ],
)
def test_a_band_that_is_not_one_is_refused_naming_it(band: object, match: str) -> None:
    moments = ColumnMoments(3)
    with pytest.raises(ValueError, match=match):
        moments.update(band)  # type: ignore[arg-type]
    assert moments.n == 0
    np.testing.assert_array_equal(moments.feature_sum, [0.0, 0.0, 0.0])


def test_from_band_takes_sparse_bands_and_names_bad_ones() -> None:
    moments = ColumnMoments.from_band(sp.csc_array(np.array([[1.0, 0.0], [3.0, 0.0]])))
    assert moments.n_columns == 2
    np.testing.assert_array_equal(moments.feature_m2, [2.0, 0.0])
    with pytest.raises(ValueError, match=r"2-D \(rows, columns\), not coo_array"):
        ColumnMoments.from_band(sp.coo_array(np.ones(3)))
    with pytest.raises(ValueError, match=r"shape \(rows, columns\); list is not one"):
        ColumnMoments.from_band([[1.0], [1.0, 2.0]])
