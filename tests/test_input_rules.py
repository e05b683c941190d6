"""What write_counts accepts: duplicate sums that never wrap, ids it can store
faithfully, unique column names, and long text without giant arrays. Every
refusal happens before the destination exists."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from hypothesis import given
from hypothesis import strategies as st

import cytearc_vfs as cv
from cytearc_vfs.format.tables import MAX_ID_LENGTH, read_table
from cytearc_vfs.write.count_source import DuplicateSumOverflowError, canonical_csr

I64 = np.iinfo(np.int64)
U64 = np.iinfo(np.uint64)


def _duplicates(values: list[int], dtype: Any, *, row: int = 2, column: int = 1) -> sp.coo_array:
    """A 4 x 3 COO matrix whose entries ``values`` all sit at (row, column)."""
    n = len(values)
    return sp.coo_array((np.array(values, dtype=dtype), ([row] * n, [column] * n)), shape=(4, 3))


def _stored(path: Path, name: str = "RNA/counts") -> np.ndarray:
    return np.asarray(zarr.open_array(cv.open_store(path), path=name, mode="r")[:])


# ---------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    ("values", "dtype", "total", "limit"),
    [
        ([1 << 62, 1 << 62], np.int64, 1 << 63, "int64"),
        ([-(1 << 62), -(1 << 62), -1], np.int64, -(1 << 63) - 1, "int64"),
        ([int(U64.max), 1], np.uint64, 1 << 64, "uint64"),
    ],
)
def test_duplicates_that_overflow_are_refused_naming_cell_and_feature(
    tmp_path: Path, values: list[int], dtype: Any, total: int, limit: str
) -> None:
    cells = [f"c{i}" for i in range(4)]
    features = ["g0", "g1", "g2"]
    with pytest.raises(OverflowError) as caught:
        cv.write_counts(
            tmp_path / "s.zarr", _duplicates(values, dtype), cells=cells, features=features
        )
    error = caught.value
    assert isinstance(error, DuplicateSumOverflowError) and isinstance(error, cv.VfsError)
    message = str(error)
    assert "cell 'c2' (row 2)" in message and "feature 'g1' (column 1)" in message
    assert str(total) in message and limit in message
    assert "sum the duplicates yourself" in message and "Nothing was written" in message
    assert (error.row, error.column, error.total) == (2, 1, total)
    assert not (tmp_path / "s.zarr").exists()


def test_duplicates_in_a_csr_input_are_summed_exactly_too(tmp_path: Path) -> None:
    # a CSR with repeated column indices in one row (not canonical)
    matrix = sp.csr_array(
        (np.array([1 << 62, 1 << 62], dtype=np.int64), np.array([0, 0]), np.array([0, 0, 2])),
        shape=(2, 1),
    )
    with pytest.raises(OverflowError, match=r"cell 'cell_1' \(row 1\).*feature_0"):
        cv.write_counts(tmp_path / "s.zarr", matrix)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("form", ["coo", "csr"])
def test_finite_float_duplicates_whose_sum_overflows_are_named(
    tmp_path: Path, dtype: Any, form: str
) -> None:
    """Two finite duplicates summed past the float range were refused as
    "counts hold a non-finite value (inf) ... Replace NaN/inf", which the
    input does not hold; the refusal now names the position and the sum."""
    big = float(np.finfo(dtype).max)
    matrix: Any = _duplicates([big, big], dtype)
    if form == "csr":  # repeated column indices in one row
        values = np.array([big, big], dtype=dtype)
        matrix = sp.csr_array((values, np.array([1, 1]), np.array([0, 0, 0, 2, 2])), shape=(4, 3))
    with pytest.raises(DuplicateSumOverflowError) as raised:
        cv.write_counts(tmp_path / "s.zarr", matrix, cells=list("abcd"), features=list("xyz"))
    message = str(raised.value)
    assert "cell 'c' (row 2) and feature 'y' (column 1) sum to inf" in message, message
    assert "each entry is finite" in message and "NaN" not in message
    assert (raised.value.row, raised.value.column) == (2, 1)
    assert not (tmp_path / "s.zarr").exists()


class _RowBands:
    """A matrix readable only in row bands (as a backed AnnData's X)."""

    def __init__(self, matrix: sp.csr_array) -> None:
        self._matrix = matrix
        self.shape = matrix.shape
        self.dtype = matrix.dtype
        self.nnz = matrix.nnz

    def __getitem__(self, rows: slice) -> sp.csr_array:
        part = self._matrix[rows]
        # keep the duplicates a file could hold (slicing would sum them)
        return sp.csr_array((part.data, part.indices, part.indptr), shape=part.shape)


def test_a_banded_source_names_the_row_of_the_whole_matrix(tmp_path: Path) -> None:
    n = 5000  # several bands of rows
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[4321 + 1 :] = 2
    matrix = sp.csr_array(
        (np.array([I64.max, 1], dtype=np.int64), np.array([2, 2]), indptr), shape=(n, 3)
    )
    with pytest.raises(OverflowError, match=r"cell 'cell_4321' \(row 4321\)"):
        cv.write_counts(
            tmp_path / "s.zarr", _RowBands(matrix), layout=cv.LayoutPolicy(16 * 1024, 1024)
        )
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize(
    ("values", "dtype", "expected", "stored_dtype"),
    [
        ([I64.max, -5, 3], np.int64, I64.max - 2, "uint64"),  # wraps midway, fits at the end
        ([int(U64.max) - 1, 1], np.uint64, int(U64.max), "uint64"),
        ([I64.min + 1, -1], np.int64, I64.min, "int64"),
        ([200, 100], np.uint8, 300, "uint16"),
    ],
)
def test_sums_at_the_edge_of_64_bits_are_stored_exactly(
    tmp_path: Path, values: list[int], dtype: Any, expected: int, stored_dtype: str
) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", _duplicates(values, dtype))
    assert info.dtype == np.dtype(stored_dtype)
    stored = _stored(tmp_path / "s.zarr")
    assert int(stored[2, 1]) == expected
    assert np.count_nonzero(stored) == 1


_EDGES = st.sampled_from([0, 1, -1, 1 << 31, 1 << 32, 1 << 62, I64.max, I64.min, I64.min + 1])


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 2), st.one_of(_EDGES, st.integers())),
        min_size=1,
        max_size=30,
    ),
)
def test_exact_sums_match_python_integers(entries: list[tuple[int, int, int]]) -> None:
    values = [max(I64.min, min(I64.max, v)) for _, _, v in entries]
    rows = [r for r, _, _ in entries]
    columns = [c for _, c, _ in entries]
    matrix = sp.coo_array((np.array(values, dtype=np.int64), (rows, columns)), shape=(3, 3))
    totals: dict[tuple[int, int], int] = {}
    for r, c, v in zip(rows, columns, values, strict=True):
        totals[(r, c)] = totals.get((r, c), 0) + v
    overflowing = [key for key, v in sorted(totals.items()) if not I64.min <= v <= I64.max]
    if overflowing:
        with pytest.raises(DuplicateSumOverflowError) as caught:
            canonical_csr(matrix)
        assert (caught.value.row, caught.value.column) == overflowing[0]
        assert caught.value.total == totals[overflowing[0]]
        return
    canonical = canonical_csr(matrix)
    assert canonical.has_canonical_format and canonical.data.dtype == np.int64
    dense = canonical.toarray()
    for (r, c), v in totals.items():
        assert int(dense[r, c]) == v


# --------------------------------------------------------------------- ids


BAD_IDS = [
    (None, "None"),
    (np.nan, "nan"),
    (b"a", "b'a'"),
    (1.5, "1.5"),
    (True, "True"),
    (object(), "object"),
]


@pytest.mark.parametrize(("bad", "shown"), BAD_IDS, ids=[s for _, s in BAD_IDS])
@pytest.mark.parametrize("axis", ["cells", "features"])
def test_ids_that_are_not_strings_or_integers_are_refused(
    tmp_path: Path, bad: object, shown: str, axis: str
) -> None:
    ids: list[object] = ["a", "b", bad]
    table = "cellData" if axis == "cells" else "featureData"
    with pytest.raises(ValueError, match=rf"{table} ids must be strings.*position 2") as caught:
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 3), dtype=np.uint8), **{axis: ids})
    assert shown in str(caught.value) and "convert the ids yourself" in str(caught.value)
    assert not (tmp_path / "s.zarr").exists()


def test_a_dataframe_index_is_checked_like_a_sequence(tmp_path: Path) -> None:
    frame = pd.DataFrame({"n": [1, 2, 3]}, index=pd.Index(["x", None, "z"], dtype=object))
    with pytest.raises(ValueError, match=r"cellData ids must be strings.*position 1 holds None"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells=frame)
    floats = pd.DataFrame(index=pd.Index([0.5, 1.5]))
    with pytest.raises(ValueError, match=r"featureData ids must be strings.*position 0 holds 0.5"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), features=floats)
    assert not (tmp_path / "s.zarr").exists()


def test_anndata_names_are_checked(tmp_path: Path) -> None:
    adata = anndata.AnnData(np.ones((3, 2), dtype=np.float32))
    adata.obs_names = pd.Index(["a", "b", "c"])
    adata.var_names = pd.Index(["g", ""])
    # named as anndata names them: the AnnData's user never saw cellData or featureData
    with pytest.raises(ValueError, match=r"^var index value at position 1 is the empty string"):
        cv.write_counts(tmp_path / "s.zarr", adata)
    # a missing obs name reaches us as NaN
    adata = anndata.AnnData(np.ones((2, 2), dtype=np.float32), obs=pd.DataFrame(index=[None, "b"]))
    with pytest.raises(
        ValueError, match=r"^obs index values must be strings.*position 0 holds nan"
    ):
        cv.write_counts(tmp_path / "s.zarr", adata)
    assert not (tmp_path / "s.zarr").exists()


def test_integer_ids_are_converted_with_str(tmp_path: Path) -> None:
    cells = pd.DataFrame(index=pd.Index(np.array([7, 10, -3], dtype=np.int64)))
    cv.write_counts(
        tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells=cells, features=[5, "g"]
    )
    store = cv.open_store(tmp_path / "s.zarr")
    root = zarr.open_group(store, mode="r")
    assert read_table(root["cellData"]).index.tolist() == ["7", "10", "-3"]
    assert read_table(root["RNA/featureData"]).index.tolist() == ["5", "g"]


def test_integer_and_string_ids_that_collide_are_duplicates(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cellData ids must be unique; \['1'\] repeat"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), cells=[1, "1"])
    assert not (tmp_path / "s.zarr").exists()
    # the remedy names the AnnData axis of the table
    with pytest.raises(ValueError, match=r"featureData ids .*make_index_unique\(frame.index\)"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), features=["g", "g"])


def test_ids_longer_than_the_maximum_are_refused(tmp_path: Path) -> None:
    assert MAX_ID_LENGTH == 1024
    longest = "x" * MAX_ID_LENGTH
    cv.write_counts(tmp_path / "ok.zarr", np.ones((2, 2), dtype=np.uint8), cells=[longest, "b"])
    ids = zarr.open_array(cv.open_store(tmp_path / "ok.zarr"), path="cellData/ids", mode="r")
    assert ids.dtype == np.dtype(f"<U{MAX_ID_LENGTH}") and ids[0] == longest
    features = ["g0", "g" * 50_000]
    with pytest.raises(
        ValueError, match=r"featureData id at position 1 is 50,000 characters long.*at most 1,024"
    ):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), features=features)
    assert not (tmp_path / "s.zarr").exists()


def test_a_nul_in_an_id_is_refused(tmp_path: Path) -> None:
    # fixed-width text would drop the trailing NUL: "a\0" would be stored as "a"
    with pytest.raises(ValueError, match=r"cellData id at position 0 .* NUL character"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), cells=["a\0", "a"])
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("table", ["cells", "features"])
def test_a_lone_surrogate_in_an_id_is_refused(tmp_path: Path, table: str) -> None:
    """Ids are fingerprinted as UTF-8: a lone surrogate (bytes decoded with
    surrogateescape) raised a bare UnicodeEncodeError from the fingerprint."""
    ids = {"cells": ["a", "b\udcff"], "features": ["g\ud800", "h"]}[table]
    position = {"cells": 1, "features": 0}[table]
    what = {"cells": "cellData", "features": "featureData"}[table]
    with pytest.raises(ValueError, match=rf"{what} id at position {position} .* lone surrogate"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), **{table: ids})
    assert not (tmp_path / "s.zarr").exists()


def test_one_string_is_not_a_sequence_of_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cells= is one string"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells="abc")
    assert not (tmp_path / "s.zarr").exists()


# ----------------------------------------------------------------- columns


def test_duplicate_column_names_are_refused(tmp_path: Path) -> None:
    cells = pd.DataFrame([[1, 2, 3], [4, 5, 6]], index=["a", "b"], columns=["n", "batch", "n"])
    with pytest.raises(ValueError, match=r"cellData has more than one column named \['n'\]"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), cells=cells)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("zarr.json", "metadata document of the table itself"),
        ("ZARR.JSON", "metadata document of the table itself"),
        ("n\udcff", "lone surrogate"),
    ],
)
@pytest.mark.parametrize("destination", ["local", "memory"])
def test_a_column_name_no_store_keeps_is_refused_before_writing(
    tmp_path: Path, name: str, reason: str, destination: str
) -> None:
    """A column named ``zarr.json`` sits where its table's own document is: a
    local write failed half-way (a directory over the file), and an object
    store kept both keys and never listed the column, so the store opened
    without it. A lone surrogate cannot be a key (not UTF-8) and failed
    half-way too. Both are refused before anything is written."""
    from zarr.storage import MemoryStore

    cells = pd.DataFrame({name: [1, 2], "b": [3, 4]}, index=["c0", "c1"])
    target: Any = tmp_path / "s.zarr" if destination == "local" else MemoryStore()
    with pytest.raises(
        ValueError, match=rf"cellData column .* cannot be a Zarr array name .*{reason}"
    ):
        cv.write_counts(target, np.ones((2, 2), dtype=np.uint8), cells=cells)
    if destination == "local":
        assert not (tmp_path / "s.zarr").exists()
    else:
        assert not target._store_dict


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        (pd.to_datetime(["2020-01-01", "2021-06-01"]).tz_localize("UTC"), "datetime64"),
        (pd.to_timedelta([1, 2], unit="s"), "timedelta64"),
        (np.array([1 + 1j, 2]), "complex128"),
    ],
)
def test_a_column_of_a_type_no_column_stores_is_named_by_its_type(
    tmp_path: Path, values: Any, dtype: str
) -> None:
    """A column of time-zone-aware datetimes, timedeltas or complex numbers was
    refused as holding "non-string values ... among strings" (it holds no
    string at all), with a remedy about missing text."""
    cells = pd.DataFrame({"when": values}, index=["a", "b"])
    with pytest.raises(
        ValueError, match=rf"cellData column 'when' holds {dtype}.* cannot store"
    ) as raised:
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2), dtype=np.uint8), cells=cells)
    assert "among strings" not in str(raised.value) and "fill_missing" not in str(raised.value)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("fill", [False, True])
@pytest.mark.parametrize(
    ("values", "kind"),
    [([True, None, False], "boolean"), ([1, np.nan, 3], "numbers"), ([0.5, None, 2.5], "numbers")],
)
def test_an_object_column_of_values_with_missing_ones_names_a_type_that_marks_them(
    tmp_path: Path, values: list[Any], kind: str, fill: bool
) -> None:
    """An object column of booleans or numbers with None/NaN was refused as holding
    "non-string values ... among strings" with the remedy fill_missing=True, which
    gave the same refusal (its "" were the strings): the remedy went round in a
    circle. It names what it holds and a type that marks missing values."""
    column = pd.Series(values, dtype=object, index=["a", "b", "c"])
    cells = pd.DataFrame({"c": column})
    with pytest.raises(
        ValueError, match=rf"cellData column 'c' holds {kind} with missing"
    ) as raised:
        cv.write_counts(
            tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells=cells, fill_missing=fill
        )
    assert "among strings" not in str(raised.value)
    assert "'boolean'" in str(raised.value) and "Int64" in str(raised.value)
    assert not (tmp_path / "s.zarr").exists()
    # the remedy works: a nullable type, filled
    typed = column.astype("boolean" if kind == "boolean" else "Float64")
    cv.write_counts(
        tmp_path / "s.zarr",
        np.ones((3, 2), dtype=np.uint8),
        cells=pd.DataFrame({"c": typed}),
        fill_missing=True,
    )


def test_a_column_of_long_text_is_written_without_a_giant_array(tmp_path: Path) -> None:
    n = 2000
    notes = ["short"] * n
    notes[17] = "n" * 20_000  # at <U20000 for every row, 160 MB
    cells = pd.DataFrame({"notes": notes}, index=[f"c{i}" for i in range(n)])
    tracemalloc.start()
    try:
        cv.write_counts(tmp_path / "s.zarr", sp.csr_array((n, 3), dtype=np.uint8), cells=cells)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MiB"
    column = zarr.open_array(cv.open_store(tmp_path / "s.zarr"), path="cellData/notes", mode="r")
    assert column.dtype == np.dtype("<U20000")
    assert column.chunks[0] * column.dtype.itemsize <= 4 << 20  # chunks bounded too
    assert column[17] == notes[17] and column[18] == "short"


def _table_with_missing() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kind": pd.Categorical(["a", None, "b"]),
            "already": pd.Categorical(["", None, "x"]),
            "stage": pd.Categorical([1, None, 2]),
            "count": pd.array([1, None, 3], dtype="Int64"),
            "flag": pd.array([True, None, False], dtype="boolean"),
            "label": ["x", None, "z"],
            "whole": [1, 2, 3],
        },
        index=["c0", "c1", "c2"],
    )


@pytest.mark.parametrize("column", ["kind", "already", "stage", "count", "flag", "label"])
def test_missing_values_are_refused_naming_fill_missing(tmp_path: Path, column: str) -> None:
    cells = _table_with_missing()[[column, "whole"]]
    with pytest.raises(ValueError, match=f"{column}.*fill_missing=True") as caught:
        cv.write_counts(tmp_path / "s.zarr", sp.csr_array(np.ones((3, 2))), cells=cells)
    # in Python the keyword; a shell reads the flag (test_cli_refusals)
    assert "--fill-missing" not in str(caught.value)
    assert not (tmp_path / "s.zarr").exists()


def test_fill_missing_stores_missing_values_as_a_composite_does(tmp_path: Path) -> None:
    cells = _table_with_missing()
    cv.write_counts(
        tmp_path / "s.zarr", sp.csr_array(np.ones((3, 2))), cells=cells, fill_missing=True
    )
    stored = read_table(zarr.open_group(tmp_path / "s.zarr", mode="r")["cellData"])
    assert stored["kind"].tolist() == ["a", "", "b"]
    assert stored["kind"].cat.categories.tolist() == ["a", "b", ""]
    # "" was a category already: not added twice
    assert stored["already"].cat.categories.tolist() == ["", "x"]
    assert stored["already"].tolist() == ["", "", "x"]
    np.testing.assert_array_equal(stored["stage"], [1.0, np.nan, 2.0])
    np.testing.assert_array_equal(stored["count"], [1.0, np.nan, 3.0])
    np.testing.assert_array_equal(stored["flag"], [1.0, np.nan, 0.0])
    assert stored["label"].tolist() == ["x", "", "z"]
    assert stored["whole"].tolist() == [1, 2, 3] and stored["whole"].dtype == np.int64


# A table's own names column is text, as the DataStore reads names (API.md, "Table
# and group conventions"): integers are converted with str() as ids are.

_NAMED_AS_INTEGERS = {
    "int64": [1, 2, 3],
    "nullable Int64": pd.array([1, 2, 3], dtype="Int64"),
    "uint8": np.array([1, 2, 3], dtype=np.uint8),
    "categorical of integers": pd.Categorical([1, 2, 3]),
    "integers among text": ["1", 2, "3"],
}


@pytest.mark.parametrize("given", sorted(_NAMED_AS_INTEGERS))
@pytest.mark.parametrize("table", ["cells", "features"])
def test_integer_names_are_stored_as_text(tmp_path: Path, given: str, table: str) -> None:
    frame = pd.DataFrame({"names": _NAMED_AS_INTEGERS[given]}, index=["a", "b", "c"])
    cv.write_counts(tmp_path / "s.zarr", np.ones((3, 3), dtype=np.uint8), **{table: frame})
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    path = "cellData" if table == "cells" else "RNA/featureData"
    names = root[f"{path}/names"]
    assert isinstance(names, zarr.Array) and names.dtype.kind == "U"
    assert names[:].tolist() == ["1", "2", "3"]
    assert read_table(root[path])["names"].astype(str).tolist() == ["1", "2", "3"]
    # the other table keeps its ids as its names
    other = root["RNA/featureData/names" if table == "cells" else "cellData/names"]
    assert isinstance(other, zarr.Array) and other.dtype.kind == "U"


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([1.0, 2.0, 3.0], r"1\.0 \(float\) at row 0"),
        (["a", True, "c"], r"True \(bool\) at row 1"),
        ([b"a", b"b", b"c"], r"b'a' \(bytes\) at row 0"),
        (pd.to_datetime(["2024-01-01"] * 3), r"Timestamp\('2024-01-01 00:00:00'\) \(Timestamp\)"),
        (pd.Categorical([0.5, 1.5, 0.5]), r"0\.5 \(float\) at category 0"),
    ],
)
@pytest.mark.parametrize("table", ["cells", "features"])
def test_names_that_are_not_text_or_integers_are_refused(
    tmp_path: Path, values: Any, shown: str, table: str
) -> None:
    frame = pd.DataFrame({"names": values}, index=["a", "b", "c"])
    which = "cellData" if table == "cells" else "featureData"
    with pytest.raises(ValueError, match=rf"{which} column 'names' holds {shown}") as caught:
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 3), dtype=np.uint8), **{table: frame})
    assert ".astype(str)" in str(caught.value) and "Nothing was written" in str(caught.value)
    assert not (tmp_path / "s.zarr").exists()


def test_missing_names_follow_the_missing_value_rule(tmp_path: Path) -> None:
    frame = pd.DataFrame({"names": pd.array([1, None, 3], dtype="Int64")}, index=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"'names' holds non-string values.*fill_missing=True"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells=frame)
    assert not (tmp_path / "s.zarr").exists()
    cv.write_counts(
        tmp_path / "s.zarr", np.ones((3, 2), dtype=np.uint8), cells=frame, fill_missing=True
    )
    names = zarr.open_array(tmp_path / "s.zarr" / "cellData" / "names", mode="r")
    assert names[:].tolist() == ["1", "", "3"]


def test_anndata_names_columns_are_text_too(tmp_path: Path) -> None:
    obs = pd.DataFrame({"names": np.arange(3)}, index=["c0", "c1", "c2"])
    var = pd.DataFrame({"names": [0.5, 1.5]}, index=["g0", "g1"])
    adata = anndata.AnnData(X=sp.csr_matrix(np.ones((3, 2))), obs=obs, var=var)
    with pytest.raises(
        ValueError,
        match=r"^var column 'names' \(stored as featureData/names\) holds 0\.5.*adata\.var\['names'\]",
    ):
        cv.write_counts(tmp_path / "s.zarr", adata)
    adata.var["names"] = ["G0", "G1"]
    cv.write_counts(tmp_path / "s.zarr", adata)
    names = zarr.open_array(tmp_path / "s.zarr" / "cellData" / "names", mode="r")
    assert names[:].tolist() == ["0", "1", "2"]
