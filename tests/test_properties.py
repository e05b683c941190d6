"""Property tests: any shape, sparsity, dtype, duplicates, layout and budget round-trip exactly."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.storage import MemoryStore

import cytearc_vfs as cv
from cytearc_vfs.format.count_dtype import resolve_count_dtype, scan_values, summary_dtype

KINDS = ["counts_float32", "counts_int64", "uint8", "float64_fraction", "int32_negative", "bool"]


@st.composite
def matrices(draw: st.DrawFn) -> tuple[np.ndarray, str]:
    n_cells = draw(st.integers(0, 40))
    n_features = draw(st.integers(1, 30))
    kind = draw(st.sampled_from(KINDS))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    rng = np.random.default_rng(seed)
    mask = rng.random((n_cells, n_features)) < density
    big = draw(st.sampled_from([3, 300, 70_000]))
    if kind == "counts_float32":
        values = rng.integers(1, big + 1, mask.shape).astype(np.float32)
    elif kind == "counts_int64":
        values = rng.integers(1, big + 1, mask.shape).astype(np.int64)
    elif kind == "uint8":
        values = rng.integers(1, 256, mask.shape).astype(np.uint8)
    elif kind == "float64_fraction":
        values = rng.random(mask.shape) * big
    elif kind == "int32_negative":
        values = rng.integers(-big, big + 1, mask.shape).astype(np.int32)
    else:
        values = np.ones(mask.shape, dtype=bool)
    return np.where(mask, values, values.dtype.type(0)), kind


def split_duplicates(dense: np.ndarray, rng: np.random.Generator) -> sp.coo_array:
    """A COO holding each value as two shuffled duplicates that sum to it exactly."""
    coo = sp.coo_array(dense)
    if dense.dtype == np.bool_ or (
        dense.dtype.kind == "f" and not np.all(np.floor(coo.data) == coo.data)
    ):
        return coo  # float fractions do not split exactly; bools do not add
    first = (coo.data // 2).astype(coo.data.dtype)
    data = np.concatenate([first, coo.data - first])
    rows, cols = np.tile(coo.row, 2), np.tile(coo.col, 2)
    order = rng.permutation(len(data))
    return sp.coo_array((data[order], (rows[order], cols[order])), shape=dense.shape)


policies = st.builds(
    lambda unit_exp, ratio_exp: cv.LayoutPolicy(2**unit_exp, 2 ** max(1, unit_exp - ratio_exp)),
    st.integers(6, 16),
    st.integers(0, 6),
)


@given(matrices(), policies, policies, st.integers(0, 2**32 - 1))
def test_round_trip_and_identity_across_forms_and_layouts(case, policy_a, policy_b, seed) -> None:
    dense, _ = case
    rng = np.random.default_rng(seed)
    expected_dtype = resolve_count_dtype(scan_values(dense.ravel(), where="test"))
    forms = [
        dense,
        sp.csr_array(dense) if dense.dtype != np.bool_ else dense,
        split_duplicates(dense, rng),
    ]
    fingerprints = set()
    for index, form in enumerate(forms):
        store = MemoryStore()
        info = cv.write_counts(
            store, form, layout=policy_a if index % 2 else policy_b, mem_budget="1G"
        )
        assert info.dtype == expected_dtype
        opened = cv.open_store(store)
        counts = zarr.open_array(opened, path="RNA/counts", mode="r")
        counts_t = zarr.open_array(opened, path="RNA/countsT", mode="r")
        np.testing.assert_array_equal(counts[:], dense.astype(expected_dtype))
        np.testing.assert_array_equal(counts_t[:], dense.astype(expected_dtype).T)
        summaries = zarr.open_group(opened, path="RNA/countSummaries", mode="r")
        stored = dense.astype(expected_dtype)
        sums = stored.sum(axis=1, dtype=summary_dtype(expected_dtype))
        if expected_dtype.kind == "f":  # float sums depend on summation order
            np.testing.assert_allclose(summaries["rowSums"][:], sums, rtol=1e-12)
        else:
            np.testing.assert_array_equal(summaries["rowSums"][:], sums)
        np.testing.assert_array_equal(summaries["rowPositive"][:], (stored > 0).sum(axis=1))
        np.testing.assert_array_equal(summaries["columnPositive"][:], (stored > 0).sum(axis=0))
        fingerprints.add((info.content_fingerprint, info.dataset_fingerprint))
    assert len(fingerprints) == 1


@given(matrices(), st.sampled_from(["64K", "256K", "4M"]))
def test_small_budgets_bound_the_transpose_groups(case, budget) -> None:
    dense, _ = case
    store = MemoryStore()
    policy = cv.LayoutPolicy(4096, 256)
    info = cv.write_counts(
        store,
        sp.csr_array(dense) if dense.dtype != np.bool_ else dense,
        layout=policy,
        mem_budget=budget,
    )
    opened = cv.open_store(store)
    np.testing.assert_array_equal(
        zarr.open_array(opened, path="RNA/countsT", mode="r")[:], dense.astype(info.dtype).T
    )
