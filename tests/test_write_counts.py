"""write_counts: round trips, input forms, identities, tables."""

from __future__ import annotations

from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.encoding.blosc_blocks import chunk_block_bytes
from cytearc_vfs.format.layout import (
    DEFAULT_POLICY,
    count_layout,
    single_frame_geometry,
)
from cytearc_vfs.format.records import COUNT_LAYOUT_ATTR
from cytearc_vfs.format.tables import read_table

SMALL = cv.LayoutPolicy(unit_bytes=16 * 1024, chunk_bytes=2 * 1024)


def read_counts(location: Path | str, assay: str = "RNA", workspace: str | None = None):
    store = cv.open_store(location)
    base = f"matrices/{assay}" if workspace else assay
    counts = zarr.open_array(store, path=f"{base}/counts", mode="r")
    counts_t = (
        zarr.open_array(store, path=f"{base}/countsT", mode="r")
        if "countsT" in zarr.open_group(store, path=base, mode="r")
        else None
    )
    return store, counts, counts_t


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (np.array([[0, 1], [255, 0]], dtype=np.float32), "uint8"),
        (np.array([[0, 256], [3, 0]], dtype=np.int64), "uint16"),
        (np.array([[0, 70000], [3, 0]], dtype=np.float64), "uint32"),
        (np.array([[0, 2**40], [3, 0]], dtype=np.int64), "uint64"),
        (np.array([[0, 1.5], [3, 0]], dtype=np.float32), "float32"),
        (np.array([[0, 1.5], [3, 0]], dtype=np.float16), "float32"),
        (np.array([[0, 1.5], [3, 0]], dtype=np.float64), "float64"),
        (np.array([[0, -2], [3, 0]], dtype=np.int32), "int32"),
        (np.array([[0, -2], [3, 0]], dtype=np.float32), "float32"),
        (np.array([[True, False], [True, True]]), "uint8"),
    ],
)
def test_dtype_rule_and_exact_round_trip(tmp_path: Path, values: np.ndarray, expected: str) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", values, assay_type="RNA")
    assert info.dtype == np.dtype(expected)
    _, counts, counts_t = read_counts(tmp_path / "s.zarr")
    assert counts.dtype == np.dtype(expected)
    np.testing.assert_array_equal(counts[:], values.astype(expected))
    np.testing.assert_array_equal(counts_t[:], values.astype(expected).T)


def test_round_trip_all_orientations_and_summaries(tmp_path: Path, counts: sp.csr_array) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", counts, layout=SMALL)
    store, stored, stored_t = read_counts(tmp_path / "s.zarr")
    dense = counts.toarray()
    np.testing.assert_array_equal(stored[:], dense)
    np.testing.assert_array_equal(stored_t[:], dense.T)
    # shards really are bands: more than one of them at this policy
    assert info.layout.counts.shards[0] < dense.shape[0]
    summaries = zarr.open_group(store, path="RNA/countSummaries", mode="r")
    np.testing.assert_array_equal(summaries["rowSums"][:], dense.sum(axis=1))
    np.testing.assert_array_equal(summaries["rowPositive"][:], (dense > 0).sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"][:], (dense > 0).sum(axis=0))
    assert summaries.attrs["source_fingerprint"] == info.content_fingerprint


def test_layout_records_on_group_counts_and_countsT(tmp_path: Path, counts: sp.csr_array) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", counts, layout=SMALL)
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    records = [
        root["RNA"].attrs[COUNT_LAYOUT_ATTR],
        root["RNA/counts"].attrs[COUNT_LAYOUT_ATTR],
        root["RNA/countsT"].attrs[COUNT_LAYOUT_ATTR],
    ]
    assert records[0] == records[1] == records[2] == info.layout.to_json()
    assert root["RNA/countsT"].attrs["complete"] is True
    assert root["RNA"].attrs["is_assay"] is True
    assert root.attrs["assayTypes"] == {"RNA": "RNA"}
    assert root.attrs["defaultAssay"] == "RNA"
    assert root["RNA/counts"].shards == info.layout.counts.shards


def test_same_values_same_identity_whatever_the_form(tmp_path: Path) -> None:
    base = realistic_counts(120, 50, density=0.1, seed=3)
    dense = base.toarray()
    coo = sp.coo_array(base)
    # split every value in two duplicates, shuffled: sums to the same values
    half = np.floor(coo.data / 2)
    dup = sp.coo_array(
        (np.concatenate([half, coo.data - half]), (np.tile(coo.row, 2), np.tile(coo.col, 2))),
        shape=coo.shape,
    )
    order = np.random.default_rng(0).permutation(dup.nnz)
    dup = sp.coo_array((dup.data[order], (dup.row[order], dup.col[order])), shape=dup.shape)
    forms = {
        "csr": base,
        "csc": sp.csc_array(base),
        "coo_dup": dup,
        "dense": dense,
        "dense_int": dense.astype(np.int64),
        "csr_matrix": sp.csr_matrix(base),
        "anndata": anndata.AnnData(base),
    }
    layouts = [None, SMALL, cv.LayoutPolicy(4096, 256)]
    seen = set()
    for i, (name, value) in enumerate(forms.items()):
        info = cv.write_counts(
            tmp_path / f"{name}.zarr",
            value,
            layout=layouts[i % 3],
            cells=[f"c{i}" for i in range(120)],
            features=[f"g{j}" for j in range(50)],
        )
        seen.add((info.content_fingerprint, info.dataset_fingerprint, str(info.dtype)))
        _, stored, _ = read_counts(tmp_path / f"{name}.zarr")
        np.testing.assert_array_equal(stored[:], dense)
    assert len(seen) == 1


def test_dataset_identity_depends_on_axis_order(tmp_path: Path, counts: sp.csr_array) -> None:
    a = cv.write_counts(tmp_path / "a.zarr", counts)
    cells = [f"cell_{i}" for i in range(counts.shape[0])][::-1]
    b = cv.write_counts(tmp_path / "b.zarr", counts, cells=cells)
    assert a.content_fingerprint == b.content_fingerprint
    assert a.dataset_fingerprint != b.dataset_fingerprint
    assert cv.dataset_fingerprint(tmp_path / "a.zarr") == a.dataset_fingerprint
    assert cv.counts_fingerprint(tmp_path / "b.zarr") == b.counts_fingerprint


def test_integer_duplicates_summed_exactly_in_64_bits(tmp_path: Path) -> None:
    big = 2**40
    coo = sp.coo_array(
        (np.array([big, 1, 7], dtype=np.int64), (np.array([0, 0, 1]), np.array([0, 0, 1]))),
        shape=(2, 2),
    )
    info = cv.write_counts(tmp_path / "s.zarr", coo)
    _, stored, _ = read_counts(tmp_path / "s.zarr")
    assert info.dtype == np.uint64
    assert stored[0, 0] == big + 1


def test_uint8_duplicates_do_not_wrap(tmp_path: Path) -> None:
    coo = sp.coo_array(
        (np.array([200, 100], dtype=np.uint8), (np.array([0, 0]), np.array([0, 0]))), shape=(1, 1)
    )
    info = cv.write_counts(tmp_path / "s.zarr", coo)
    _, stored, _ = read_counts(tmp_path / "s.zarr")
    assert info.dtype == np.uint16 and stored[0, 0] == 300


def test_input_is_not_modified(tmp_path: Path) -> None:
    matrix = sp.csr_array(
        (np.array([3.0, 0.0, 2.0], dtype=np.float32), np.array([1, 0, 0]), np.array([0, 2, 3])),
        shape=(2, 2),
    )
    before = (matrix.data.copy(), matrix.indices.copy(), matrix.indptr.copy())
    cv.write_counts(tmp_path / "s.zarr", matrix)
    for old, new in zip(before, (matrix.data, matrix.indices, matrix.indptr), strict=True):
        np.testing.assert_array_equal(old, new)


def test_workspace_layout(tmp_path: Path, counts: sp.csr_array) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", counts, workspace="ws", layout=SMALL)
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert root["ws"].attrs["assayTypes"] == {"RNA": "RNA"}
    assert root["ws/RNA"].attrs["is_assay"] is True
    assert "ws/RNA/featureData/ids" in root and "ws/cellData/ids" in root
    np.testing.assert_array_equal(root["matrices/RNA/counts"][:], counts.toarray())
    np.testing.assert_array_equal(root["matrices/RNA/countsT"][:], counts.toarray().T)
    assert cv.dataset_fingerprint(tmp_path / "s.zarr", workspace="ws") == info.dataset_fingerprint


def test_non_rna_assay_has_no_countsT(tmp_path: Path, counts: sp.csr_array) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", counts, assay="ADT")
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert info.layout.counts_t is None and "countsT" not in root["ADT"]
    cv.open_store(tmp_path / "s.zarr")


def test_tables_from_anndata_keep_columns_and_categoricals(tmp_path: Path) -> None:
    matrix = realistic_counts(40, 12, density=0.3, seed=5)
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(["b", "a"] * 20, categories=["b", "a"]),
            "score": np.linspace(0, 1, 40),
            "n": np.arange(40, dtype=np.int32),
            "flag": np.arange(40) % 3 == 0,
            "label": [f"x{i}" for i in range(40)],
        },
        index=[f"AAAC-{i}" for i in range(40)],
    )
    var = pd.DataFrame(
        {"names": [f"GENE{i}" for i in range(12)]}, index=[f"ENSG{i:05d}" for i in range(12)]
    )
    cv.write_counts(tmp_path / "s.zarr", anndata.AnnData(matrix, obs=obs, var=var))
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    cells = read_table(root["cellData"])
    assert list(cells.index) == list(obs.index)
    for column in obs.columns:
        pd.testing.assert_series_equal(
            cells[column], obs[column], check_names=False, check_index=False
        )
    assert root["cellData/ids"].dtype.kind == "U"  # fixed width: the DataStore fingerprints need it
    assert root["cellData/I"][:].all()
    features = read_table(root["RNA/featureData"])
    assert list(features["names"]) == list(var["names"])


def test_anndata_layer(tmp_path: Path) -> None:
    matrix = realistic_counts(30, 10, density=0.3, seed=6)
    adata = anndata.AnnData(np.zeros((30, 10), dtype=np.float32), layers={"counts": matrix})
    cv.write_counts(tmp_path / "s.zarr", adata, layer="counts")
    _, stored, _ = read_counts(tmp_path / "s.zarr")
    np.testing.assert_array_equal(stored[:], matrix.toarray())


def test_backed_anndata_is_read_in_bands(tmp_path: Path) -> None:
    matrix = realistic_counts(200, 30, density=0.2, seed=7)
    adata = anndata.AnnData(sp.csr_matrix(matrix))
    adata.write_h5ad(tmp_path / "in.h5ad")
    backed = anndata.read_h5ad(tmp_path / "in.h5ad", backed="r")
    try:
        cv.write_counts(tmp_path / "s.zarr", backed, layout=SMALL)
    finally:
        backed.file.close()
    _, stored, _ = read_counts(tmp_path / "s.zarr")
    np.testing.assert_array_equal(stored[:], matrix.toarray())


def test_local_path_with_url_characters(tmp_path: Path, counts: sp.csr_array) -> None:
    target = tmp_path / "a#b;c?"
    cv.write_counts(str(target), counts)
    assert (target / "zarr.json").is_file()
    assert not (tmp_path / "a").exists()
    cv.open_store(str(target))


def test_empty_axes(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", sp.csr_array((0, 5), dtype=np.float32))
    _, stored, stored_t = read_counts(tmp_path / "s.zarr")
    assert stored.shape == (0, 5) and stored_t.shape == (5, 0)


def test_all_zero_matrix(tmp_path: Path) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", np.zeros((4, 3), dtype=np.float32))
    assert info.dtype == np.uint8
    _, stored, _ = read_counts(tmp_path / "s.zarr")
    assert not stored[:].any()


@pytest.mark.parametrize(
    ("n_cells", "itemsize", "rows", "block_rows"),
    [
        (1_000, 1, 2_097, 9),  # chunks fill 2 MiB; blocks: the fewest rows making 8 KiB
        (759, 2, 1_381, 6),
        (10_000, 1, 209, 1),
        (100_000, 1, 20, 1),
    ],
)
def test_countsT_chunks_fill_chunkBytes_in_blocks_of_the_fewest_rows_making_8_KiB(
    tmp_path: Path, n_cells: int, itemsize: int, rows: int, block_rows: int
) -> None:
    # large chunks keep plain zarr's per-chunk cost low; 8 KiB Blosc blocks keep
    # a single feature's read to one block's decode
    layout = count_layout((n_cells, 20_000), "uint8", itemsize, DEFAULT_POLICY, transpose=True)
    assert layout.counts_t is not None
    assert layout.counts_t.chunks == (rows, n_cells)
    assert layout.counts_t.shards[0] % rows == 0
    assert chunk_block_bytes(layout.counts_t.chunks, itemsize) == (block_rows * n_cells * itemsize)
    # the stores of early issue 14 had chunks of one block
    single = count_layout(
        (n_cells, 20_000),
        "uint8",
        itemsize,
        DEFAULT_POLICY,
        transpose=True,
        rule=single_frame_geometry,
    )
    assert single.counts_t is not None and single.counts_t.chunks == (block_rows, n_cells)
