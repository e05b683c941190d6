"""Malformed and unusual scipy.sparse counts given to write_counts.

A matrix whose index arrays point outside its shape is refused before the
destination exists, naming the problem (it failed mid-write inside numpy and
left a pending store behind); formats without a canonical form (DIA, LIL,
DOK) are written like any other, and read back exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv


def _csr(
    data: list[float],
    indices: list[int],
    indptr: list[int],
    shape: tuple[int, int],
    kind: Any = sp.csr_matrix,
) -> Any:
    """A CSR (or CSC) matrix holding exactly these arrays (set after construction, unchecked)."""
    matrix = kind(shape, dtype=np.float64)
    matrix.data = np.asarray(data, dtype=np.float64)
    matrix.indices = np.asarray(indices, dtype=np.int32)
    matrix.indptr = np.asarray(indptr, dtype=np.int32)
    return matrix


def _coo(rows: list[int], columns: list[int], shape: tuple[int, int]) -> Any:
    matrix = sp.coo_matrix(shape, dtype=np.float64)
    matrix.data = np.ones(len(rows))
    matrix.coords = (np.asarray(rows, dtype=np.int32), np.asarray(columns, dtype=np.int32))
    return matrix


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        # "operands could not be broadcast together", after the destination existed
        (_csr([1, 2], [0, 5], [0, 2, 2], (2, 3)), r"column index 5, outside 0\.\.2"),
        # "'list' argument must have no negative elements", after the destination existed
        (_csr([1, 2], [0, -1], [0, 2, 2], (2, 3)), r"column index -1, outside 0\.\.2"),
        (_csr([1, 2], [0, 1], [0, 2, 1], (2, 3)), r"indptr must start at 0 and never decrease"),
        (_csr([1, 2], [0, 1], [0, 2], (2, 3)), r"indptr has 2 entries, not one per row plus one"),
        (_csr([1, 2, 3], [0, 1], [0, 2, 2], (2, 3)), r"it has 2 indices but 3 values"),
        (_csr([1, 2], [0, 1], [0, 2, 5], (2, 3)), r"indptr ends at 5, past its 2 entries"),
        (_csr([1, 2], [0, 2], [0, 2, 2, 2], (2, 3), sp.csc_array), r"row index 2, outside 0\.\.1"),
        (_coo([0, 4], [0, 1], (2, 3)), r"row index 4, outside 0\.\.1"),
    ],
    ids=["past", "negative", "decreasing", "short", "lengths", "indptr-end", "csc", "coo"],
)
def test_a_malformed_sparse_matrix_is_refused_before_the_destination_exists(
    tmp_path: Path, matrix: Any, message: str
) -> None:
    with pytest.raises(
        ValueError, match=rf"malformed scipy\.sparse .*{message}.*Nothing was written"
    ):
        cv.write_counts(tmp_path / "s.zarr", matrix)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("kind", ["dia", "lil", "dok", "bsr"])
def test_every_sparse_format_is_written_exactly(tmp_path: Path, kind: str) -> None:
    dense = np.array([[0, 3, 0, 1], [2, 0, 0, 0], [0, 0, 7, 5]], dtype=np.int64)
    # AttributeError: 'dia_matrix' object has no attribute 'has_canonical_format'
    matrix = sp.csr_matrix(dense).asformat(kind)
    info = cv.write_counts(tmp_path / "s.zarr", matrix)
    assert info.dtype == np.uint8
    assert np.array_equal(cv.VirtualArrayReader(info.location).read(), dense)
    assert np.array_equal(matrix.toarray(), dense)  # the caller's matrix is as it was


@pytest.mark.parametrize(
    ("counts", "remedy"),
    [
        (pd.DataFrame(np.ones((2, 2))), r"not DataFrame; pass frame\.to_numpy\(\) with cells="),
        ([[1, 2], [3, 4]], r"not list; pass numpy\.asarray\(counts\)"),
    ],
    ids=["DataFrame", "list"],
)
def test_counts_in_a_table_or_lists_are_refused_with_the_conversion(
    tmp_path: Path, counts: Any, remedy: str
) -> None:
    with pytest.raises(TypeError, match=rf"a numpy array or an AnnData, {remedy}"):
        cv.write_counts(tmp_path / "s.zarr", counts)
    assert not (tmp_path / "s.zarr").exists()


def test_a_cell_column_named_for_a_preparation_metric_is_carried_as_orig(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dense = np.array([[1, 0, 2], [0, 0, 5], [3, 3, 3]], dtype=np.int64)
    cells = pd.DataFrame(
        {
            "RNA_nCounts": [0.0, 0.0, 0.0],  # totals of other counts: not these
            "orig_RNA_nCounts": [7.0, 8.0, 9.0],
            "RNA_nFeatures": [1, 1, 1],
            "ADT_nCounts": [4.0, 5.0, 6.0],  # another assay's: an ordinary column
        },
        index=["c0", "c1", "c2"],
    )
    with caplog.at_level("WARNING", logger="cytearc_vfs"):
        info = cv.write_counts(tmp_path / "s.zarr", dense, cells=cells)
    assert "preparation metrics of assay 'RNA'" in caplog.text
    stored = zarr.open_group(info.location, mode="r")["cellData"]
    # RNA_nCounts of zeros made the store a prepared assay with wrong totals
    assert "RNA_nCounts" not in stored and "RNA_nFeatures" not in stored
    assert stored["orig_orig_RNA_nCounts"][:].tolist() == [0.0, 0.0, 0.0]
    assert stored["orig_RNA_nCounts"][:].tolist() == [7.0, 8.0, 9.0]
    assert stored["orig_RNA_nFeatures"][:].tolist() == [1, 1, 1]
    assert stored["ADT_nCounts"][:].tolist() == [4.0, 5.0, 6.0]
    # not a prepared assay: the writer may replace the store
    again = cv.write_counts(tmp_path / "s.zarr", dense * 2, overwrite=True)
    assert np.array_equal(cv.VirtualArrayReader(again.location).read(), dense * 2)


def test_a_masked_array_is_refused_while_it_hides_values(tmp_path: Path) -> None:
    counts = np.ma.masked_array([[1, 99], [2, 3]], mask=[[False, True], [False, False]])
    # the masked 99 was stored as a count
    with pytest.raises(TypeError, match=r"masked array with 1 masked cell.*counts\.filled\(0\)"):
        cv.write_counts(tmp_path / "s.zarr", counts)
    assert not (tmp_path / "s.zarr").exists()
    info = cv.write_counts(tmp_path / "s.zarr", counts.filled(0))
    assert cv.VirtualArrayReader(info.location).read().tolist() == [[1, 0], [2, 3]]
    unmasked = np.ma.masked_array([[4, 5]], mask=False)  # nothing hidden: its values
    info = cv.write_counts(tmp_path / "u.zarr", unmasked)
    assert cv.VirtualArrayReader(info.location).read().tolist() == [[4, 5]]


def test_a_reader_as_counts_needs_its_tables(tmp_path: Path) -> None:
    """A VirtualArrayReader read as a plain matrix: its cells were written as
    cell_0 ... and a composite's source column was dropped, without a word."""
    counts = np.arange(12, dtype=np.uint16).reshape(4, 3)
    cv.write_counts(tmp_path / "a.zarr", counts, cells=pd.DataFrame(index=list("wxyz")))
    reader = cv.create_composite(tmp_path / "c.zarr", {"s": tmp_path / "a.zarr"}).reader()
    with pytest.raises(TypeError, match=r"^counts are a VirtualArrayReader.*cv\.to_anndata"):
        cv.write_counts(tmp_path / "copy.zarr", reader)
    assert not (tmp_path / "copy.zarr").exists()
    # with the ids given, as the refusal says, and through to_anndata with the tables
    cv.write_counts(
        tmp_path / "ids.zarr",
        reader,
        cells=pd.DataFrame(index=reader.cell_ids),
        features=pd.DataFrame(index=reader.feature_ids),
    )
    assert list(cv.VirtualArrayReader(tmp_path / "ids.zarr").cell_ids) == list(reader.cell_ids)
    cv.write_counts(tmp_path / "full.zarr", cv.to_anndata(tmp_path / "c.zarr"))
    copied = cv.VirtualArrayReader(tmp_path / "full.zarr")
    assert list(copied.cell_ids) == list(reader.cell_ids) == list("wxyz")
    np.testing.assert_array_equal(copied.read(), counts)
