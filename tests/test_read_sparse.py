"""``VirtualArrayReader.read_sparse``: the selected block as a canonical CSR matrix.

Every read equals ``scipy.sparse.csr_matrix(reader.read(...))`` for the same
selection (slices, positions in any order with repeats and negatives, masks,
ids, empty selections), on an ordinary store, a mount, and composites over
CyteArc stores and AnnData stores (CSR, CSC, dense; Zarr v2 and v3). The
result is canonical (sorted column indices, no stored zeros) in the reader's
dtype; AnnData CSR and CSC sources are read without a dense block, other
sources in bounded bands; errors are those of ``read``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from test_anndata_sources import adata, write

import cytearc_vfs as cv
from cytearc_vfs.read import anndata_reads, sparse_reads, sparse_rows
from cytearc_vfs.read.anndata_sources import AnnDataCounts
from cytearc_vfs.read.reader import UnknownIdError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

GENES = [f"g{i:03d}" for i in range(60)]


def assert_canonical_equal(matrix: Any, dense: np.ndarray, dtype: np.dtype) -> None:
    """``matrix`` is a canonical CSR of ``dtype`` holding ``dense``."""
    assert isinstance(matrix, sp.csr_matrix)
    assert matrix.dtype == dtype
    assert matrix.shape == dense.shape
    assert matrix.has_canonical_format
    assert bool(np.all(matrix.data != 0)), "stored zeros"
    for row in range(matrix.shape[0]):  # really sorted, whatever the flag says
        cols = matrix.indices[matrix.indptr[row] : matrix.indptr[row + 1]]
        assert bool(np.all(cols[1:] > cols[:-1]))
    np.testing.assert_array_equal(matrix.toarray(), dense)


def selections(n_cells: int, n_features: int, cell_ids: Any, feature_ids: Any) -> list[Any]:
    """(cells, features) pairs of every form ``read`` takes."""
    rng = np.random.default_rng(5)
    mask = rng.random(n_cells) < 0.3
    return [
        (None, None),
        (slice(3, n_cells - 2), slice(1, n_features, 3)),
        (slice(None, None, -2), slice(n_features - 1, 2, -1)),
        (rng.choice(n_cells, 40, replace=True), None),  # any order, repeats
        ([-1, 0, -1, 5], rng.choice(n_features, 9, replace=True)),
        (np.sort(rng.choice(n_cells, 25, replace=False)), np.arange(n_features)[::-1]),
        (mask, None),
        (pd.Series(mask), np.arange(n_features) % 2 == 0),
        (list(cell_ids[[7, 2, 7]]), list(feature_ids[[4, 0]])),
        (pd.Index(cell_ids[:5]), pd.Index(feature_ids[3:6])),
        (str(cell_ids[1]), None),
        ([], None),
        (None, []),
        (slice(4, 4), None),
        (np.zeros(n_cells, dtype=bool), None),
    ]


def check_every_selection(reader: cv.VirtualArrayReader) -> None:
    n_cells, n_features = reader.shape
    for cells, features in selections(n_cells, n_features, reader.cell_ids, reader.feature_ids):
        dense = reader.read(cells, features)
        assert_canonical_equal(reader.read_sparse(cells, features), dense, reader.dtype)


def test_an_ordinary_store(tmp_path: Path) -> None:
    data = adata(120, GENES, "c", seed=1)
    cv.write_counts(tmp_path / "s.zarr", data)
    reader = cv.VirtualArrayReader(tmp_path / "s.zarr")
    check_every_selection(reader)
    assert_canonical_equal(
        reader.read_sparse(), data.X.toarray().astype(reader.dtype), reader.dtype
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A composite over CSR v3, CSC v2, dense v3, CSR v2 and dense v2 AnnData stores and a
    CyteArc store, with overlapping gene sets in different orders. Built once for the
    module: each test opens it afresh and only reads it."""
    tmp_path = tmp_path_factory.mktemp("mixed")
    shuffled = list(np.random.default_rng(2).permutation(GENES[10:55]))
    sources: dict[str, Any] = {
        "csr3": write(adata(90, GENES[:40], "a", seed=1), tmp_path / "csr3.zarr", 3),
        "csc2": write(
            adata(70, GENES[20:], "b", seed=2, encoding="csc"), tmp_path / "csc2.zarr", 2
        ),
        "csc3": write(adata(40, shuffled, "f", seed=6, encoding="csc"), tmp_path / "csc3.zarr", 3),
        "dense3": write(
            adata(50, GENES[10:50], "c", seed=3, encoding="dense"), tmp_path / "d3.zarr", 3
        ),
        "csr2": write(adata(60, shuffled, "d", seed=4), tmp_path / "csr2.zarr", 2),
        "dense2": write(
            adata(30, GENES[::3], "g", seed=7, encoding="dense"), tmp_path / "d2.zarr", 2
        ),
    }
    cv.write_counts(tmp_path / "cytearc.zarr", adata(45, GENES[::2], "e", seed=5))
    sources["cytearc"] = tmp_path / "cytearc.zarr"
    cv.create_composite(tmp_path / "comp.zarr", sources).close()
    return tmp_path / "comp.zarr"


def test_a_composite_over_anndata_and_cytearc_sources(mixed: Path) -> None:
    store = cv.open_store(mixed)
    reader = store.reader()
    check_every_selection(reader)
    store.close()


def test_anndata_sparse_sources_are_read_without_a_dense_block(mixed: Path) -> None:
    store = cv.open_store(mixed)
    reader = store.reader()
    sparse_sources = [
        s.name
        for s in reader._mapping.sources
        if s.anndata is not None and s.anndata.element.encoding != "array"
    ]
    assert sorted(sparse_sources) == ["csc2", "csc3", "csr2", "csr3"]
    calls: list[str] = []
    original = AnnDataCounts.read_into

    async def counting(self: AnnDataCounts, *args: Any) -> int:
        calls.append(self.element.encoding)
        return await original(self, *args)

    with mock.patch.object(AnnDataCounts, "read_into", counting):
        matrix = reader.read_sparse()
    # only the dense arrays were read densely (in bands)
    assert sorted(set(calls)) == ["array"]
    np.testing.assert_array_equal(matrix.toarray(), reader.read())
    store.close()


def test_reads_in_many_batches_equal_one(mixed: Path) -> None:
    """Batches of a few entries (sorted on the decoding threads where a source's
    features sit in the union in another order) give the same matrix."""
    reader = cv.open_store(mixed).reader()
    whole = reader.read_sparse()
    cells = np.random.default_rng(8).choice(reader.shape[0], 150, replace=True)
    picked = reader.read_sparse(cells)
    with mock.patch.object(anndata_reads, "ENTRY_BATCH", 37):
        batched = cv.open_store(mixed).reader()
        assert_canonical_equal(batched.read_sparse(), whole.toarray(), reader.dtype)
        assert_canonical_equal(batched.read_sparse(cells), picked.toarray(), reader.dtype)


def test_dense_anndata_sources_are_read_in_bounded_bands(tmp_path: Path) -> None:
    data = adata(400, GENES, "c", seed=3, encoding="dense")
    write(data, tmp_path / "d.zarr", 3)
    cv.create_composite(tmp_path / "comp.zarr", {"d": tmp_path / "d.zarr"}).close()
    reader = cv.VirtualArrayReader(tmp_path / "comp.zarr")
    shapes: list[tuple[int, ...]] = []
    original = sparse_reads.dense_rows

    def recording(block: np.ndarray, *args: Any) -> Any:
        shapes.append(block.shape)
        return original(block, *args)

    budget = 50 * len(GENES) * reader.dtype.itemsize  # 50 rows of every gene
    with (
        mock.patch.object(sparse_reads, "SPARSE_BAND_BYTES", budget),
        mock.patch.object(sparse_reads, "dense_rows", recording),
    ):
        matrix = reader.read_sparse()
    assert len(shapes) >= 400 // 50
    # a band is cut back to a chunk start, so it never exceeds the budget
    assert max(rows for rows, _ in shapes) <= 50
    assert_canonical_equal(matrix, data.X.astype(reader.dtype), reader.dtype)


def test_cytearc_sources_make_each_strip_csr_without_a_dense_block(tmp_path: Path) -> None:
    """Cell-major reads of CyteArc sources turn each decoded strip into CSR rows on
    the decoding thread: no dense band is read, every row is placed once."""
    genes = [f"g{i:04d}" for i in range(600)]  # wide rows: cells read cell-major
    data, other = adata(900, genes, "c", seed=8), adata(300, genes[::2], "t", seed=9)
    cv.write_counts(tmp_path / "s.zarr", data, layout=("64K", "4K"))  # many strips
    cv.write_counts(tmp_path / "t.zarr", other)
    cv.create_composite(
        tmp_path / "comp.zarr", {"s": tmp_path / "s.zarr", "t": tmp_path / "t.zarr"}
    ).close()
    expected = np.zeros((1200, len(genes)), dtype=np.float32)
    expected[:900] = data.X.toarray()
    expected[900:, ::2] = other.X.toarray()
    strips: list[tuple[int, int]] = []
    original = sparse_rows.SparseRowPlacement.place

    def recording(self: Any, start: int, strip: np.ndarray) -> None:
        strips.append((start, len(strip)))
        original(self, start, strip)

    rng = np.random.default_rng(4)
    for path, dense in ((tmp_path / "s.zarr", expected[:900]), (tmp_path / "comp.zarr", expected)):
        reader = cv.VirtualArrayReader(path)
        for cells in (
            slice(100, 300),  # (a share of the cells: cell-major decodes less)
            np.sort(rng.choice(len(dense), 100, replace=False)),
            rng.choice(len(dense), 50),  # any order, repeats
        ):
            strips.clear()
            with (
                mock.patch.object(sparse_rows.SparseRowPlacement, "place", recording),
                mock.patch.object(sparse_reads, "row_bands", side_effect=AssertionError),
            ):
                matrix = reader.read_sparse(cells, slice(0, 590))
            want = dense[cells][:, :590]
            assert_canonical_equal(matrix, want.astype(reader.dtype), reader.dtype)
            assert len(strips) > 1
    # strips cover the rows read, each once
    reader = cv.VirtualArrayReader(tmp_path / "s.zarr")
    strips.clear()
    with mock.patch.object(sparse_rows.SparseRowPlacement, "place", recording):
        reader.read_sparse(slice(1, 400))
    assert sum(n for _, n in strips) == 399
    assert len({start for start, _ in strips}) == len(strips)


def test_stored_zeros_are_dropped(tmp_path: Path) -> None:
    data = adata(30, GENES[:10], "z", seed=8)
    x = data.X.tocsr()
    x.data[::3] = 0  # explicit zeros stay stored: anndata writes them as they are
    data.X = x
    assert (x.data == 0).any()
    write(data, tmp_path / "z.zarr", 3)
    cv.create_composite(tmp_path / "c.zarr", {"z": tmp_path / "z.zarr"}).close()
    reader = cv.open_store(tmp_path / "c.zarr").reader()
    matrix = reader.read_sparse()
    assert_canonical_equal(matrix, x.toarray().astype(reader.dtype), reader.dtype)
    assert matrix.nnz == int((x.data != 0).sum())


def test_a_mount(tmp_path: Path) -> None:
    data = adata(80, GENES, "m", seed=9)
    cv.write_counts(tmp_path / "src.zarr", data)
    cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "tgt.zarr")
    reader = cv.VirtualArrayReader(tmp_path / "tgt.zarr")
    check_every_selection(reader)


def test_errors_are_those_of_read(mixed: Path) -> None:
    reader = cv.open_store(mixed).reader()
    n_cells, n_features = reader.shape
    for cells, features, error in [
        (["nope", "a1"], None, UnknownIdError),
        (None, ["g001", "missing"], UnknownIdError),
        ([n_cells], None, IndexError),
        (None, [-n_features - 1], IndexError),
        (np.ones(n_cells + 1, dtype=bool), None, IndexError),
        ([0, "a1"], None, IndexError),
        (1.5, None, IndexError),
    ]:
        with pytest.raises(error) as dense_error:
            reader.read(cells, features)
        with pytest.raises(error) as sparse_error:
            reader.read_sparse(cells, features)
        assert str(sparse_error.value) == str(dense_error.value)


def test_to_anndata_lazy_blocks_are_read_sparse(mixed: Path) -> None:
    calls: list[Any] = []
    original = cv.VirtualArrayReader.read_sparse

    def counting(self: cv.VirtualArrayReader, *args: Any) -> Any:
        calls.append(args)
        return original(self, *args)

    lazy = cv.to_anndata(mixed, assay="RNA", lazy=True)
    truth = cv.open_store(mixed).reader().read()
    with mock.patch.object(cv.VirtualArrayReader, "read_sparse", counting):
        x = lazy.X.compute()
    assert calls
    assert sp.issparse(x)
    np.testing.assert_array_equal(x.toarray(), truth)
