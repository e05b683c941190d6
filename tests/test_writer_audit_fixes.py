"""Defects an outside audit found in the writers, each pinned by its repro.

- overwrite=True replaced files of the user's inside an array's chunk
  directory (``c/notes.txt``): only keys the array's chunk key encoding
  names are its chunks;
- refusals without overwrite suggested ``overwrite=True`` where it would
  then be refused (a mount target, a prepared store, a composite);
- a float32 column with NaN became float64 in a composite over AnnData, but
  stayed float32 through ``write_counts``;
- per-cell totals (``countSummaries/rowSums``) of uint64 counts wrapped,
  and ``cytearc-vfs verify`` said OK;
- ``repack(data_only=True)`` refused a budget its normal path fits, naming a
  ``layout=`` that ``repack`` does not take.

Crash safety throughout: a refusal leaves nothing that opens as valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.format.chunk_keys import ChunkKeys
from cytearc_vfs.format.layout import LayoutTooLargeError


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


# --- overwrite never deletes a user's file inside an array ------------------------------


@pytest.mark.parametrize(
    "planted",
    [
        "RNA/counts/c/notes.txt",  # a file in the chunk directory
        "cellData/ids/c/README.md",
        "RNA/counts/c/1/0/0",  # a chunk of a 3-d array, not of the 2-d counts
        "RNA/counts/c/00/0",  # leading zero: zarr never names a chunk so
        "RNA/counts/c/0/x",
        "RNA/counts/c.0.0",  # another separator than the array's
        "RNA/counts/0.0",  # the v2 encoding, which this array does not use
        "cellData/ids/c/1/zarr.json",  # a document inside an array is not its metadata
        "RNA/counts/c/\u0660/0",  # a non-ASCII digit (ARABIC-INDIC ZERO)
    ],
)
def test_overwrite_refuses_keys_that_are_not_chunks(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree, planted: str
) -> None:
    store = tmp_path / "s.zarr"
    cv.write_counts(store, counts)
    (store / planted).parent.mkdir(parents=True, exist_ok=True)
    (store / planted).write_text("mine")
    before = snapshot_tree(store)
    for overwrite in (False, True):
        with pytest.raises(FileExistsError) as refused:
            cv.write_counts(store, counts * 2, overwrite=overwrite)
        message = str(refused.value)
        assert repr(planted) in message and "nothing was deleted" in message
        assert "pass overwrite=True" not in message  # overwrite would be refused too
    assert snapshot_tree(store) == before


def test_overwrite_replaces_a_store_of_chunks_and_metadata(
    tmp_path: Path, counts: sp.csr_array
) -> None:
    """Every key a writer stores is a chunk or a document: overwrite still replaces."""
    store = tmp_path / "s.zarr"
    cv.write_counts(store, counts)
    # a store of a v2-encoded array of the right rank is also this layer's to replace
    zarr.open_group(store, mode="a").create_array(
        "artifacts/x", data=np.arange(6).reshape(2, 3), chunk_key_encoding={"name": "v2"}
    )
    assert (store / "artifacts" / "x" / "0.0").exists()
    cv.write_counts(store, counts * 2, overwrite=True)
    assert not (store / "artifacts").exists()
    np.testing.assert_array_equal(
        zarr.open_array(cv.open_store(store), path="RNA/counts", mode="r")[:],
        (counts * 2).toarray(),
    )


@pytest.mark.parametrize(
    ("document", "key", "rank", "chunk"),
    [
        ({"chunk_key_encoding": {"name": "default"}}, "c/1/2", 2, True),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}},
            "c.1.2",
            2,
            True,
        ),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}},
            "c/1/2",
            2,
            False,
        ),
        ({"chunk_key_encoding": {"name": "v2"}}, "1.2", 2, True),
        (
            {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}}},
            "1/2",
            2,
            True,
        ),
        ({"chunk_key_encoding": {"name": "default"}}, "c", 0, True),
        ({"zarr_format": 2, "dimension_separator": "/"}, "1/2", 2, True),
        ({"zarr_format": 2}, "1.2", 2, True),
        ({"zarr_format": 2}, "1/2", 2, False),
        ({"zarr_format": 2}, "0", 0, True),
    ],
)
def test_chunk_keys_of_either_format(
    document: dict[str, object], key: str, rank: int, chunk: bool
) -> None:
    encoding = ChunkKeys.of_array(document, where="a")
    assert (encoding.decode(key, rank) is not None) is chunk


# --- no refusal suggests an overwrite that would be refused ------------------------------


def _prepared(tmp_path: Path, counts: sp.csr_array) -> Path:
    store = tmp_path / "prepared.zarr"
    cv.write_counts(store, counts)
    root = zarr.open_group(store, mode="a")
    root["cellData"].create_array("RNA_nCounts", shape=(counts.shape[0],), dtype="float64")
    return store


def test_refusals_without_overwrite_name_the_real_remedy(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    source = tmp_path / "src.zarr"
    cv.write_counts(source, counts)
    mount = tmp_path / "mount.zarr"
    cv.mount_datastore(source, mount)
    composite = tmp_path / "composite.zarr"
    cv.create_composite(composite, {"s": source})
    prepared = _prepared(tmp_path, counts)
    for destination, words in (
        (mount, "mounted target"),
        (prepared, "prepared assay"),
        (composite, "is a composite"),
    ):
        before = snapshot_tree(destination)
        for overwrite in (False, True):
            with pytest.raises(FileExistsError) as refused:
                cv.write_counts(destination, counts, overwrite=overwrite)
            assert words in str(refused.value)
            assert "pass overwrite=True" not in str(refused.value)
        with pytest.raises(FileExistsError, match=words):
            cv.mount_datastore(source, destination)
        assert snapshot_tree(destination) == before
    # a store that overwrite replaces: the suggestion is made, and holds
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        cv.write_counts(source, counts)


def test_cli_refusals_name_the_real_remedy(
    tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str], snapshot_tree
) -> None:
    source = tmp_path / "src.zarr"
    cv.write_counts(source, counts)
    mount = tmp_path / "mount.zarr"
    cv.mount_datastore(source, mount)
    prepared = _prepared(tmp_path, counts)
    other = tmp_path / "other.zarr"
    cv.write_counts(other, counts)
    for argv, words in (
        (["mount", str(source), str(mount)], "analyses depend on it"),
        (["mount", str(source), str(prepared)], "prepared assay"),
        (["repack", str(source), str(prepared)], "prepared assay"),
        (["composite", str(prepared), str(source)], "prepared assay"),
    ):
        before = snapshot_tree(Path(argv[2]))
        assert _run(argv) == 2
        err = capsys.readouterr().err
        assert words in err and "give --overwrite" not in err, err
        assert snapshot_tree(Path(argv[2])) == before
    # where --overwrite does replace, it is what the message suggests
    assert _run(["mount", str(source), str(other)]) == 2
    assert "give --overwrite" in capsys.readouterr().err


# --- a float column keeps its width in a composite over AnnData --------------------------


def test_float32_column_with_nan_keeps_its_dtype(tmp_path: Path) -> None:
    anndata = pytest.importorskip("anndata")
    obs = pd.DataFrame(
        {
            "f32": np.array([0.5, np.nan, 2.0], dtype=np.float32),
            "f64": np.array([0.5, np.nan, 2.0]),
            "f16": np.array([0.5, np.nan, 2.0], dtype=np.float16),
        },
        index=["a", "b", "c"],
    )
    adata = anndata.AnnData(sp.csr_matrix(np.arange(6, dtype=np.float32).reshape(3, 2)), obs=obs)
    adata.write_zarr(tmp_path / "a.zarr")
    cv.create_composite(tmp_path / "over_anndata.zarr", {"s": tmp_path / "a.zarr"})
    cv.write_counts(tmp_path / "written.zarr", adata)
    cv.create_composite(tmp_path / "over_written.zarr", {"s": tmp_path / "written.zarr"})
    tables = {
        name: zarr.open_group(tmp_path / name / "cellData", mode="r")
        for name in ("over_anndata.zarr", "written.zarr", "over_written.zarr")
    }
    for column in ("f32", "f64", "f16"):
        dtypes = {name: group[column].dtype for name, group in tables.items()}
        assert set(dtypes.values()) == {obs[column].dtype}, (column, dtypes)
        for group in tables.values():
            np.testing.assert_array_equal(group[column][:], obs[column].to_numpy())


def test_fill_missing_keeps_nullable_float_width() -> None:
    from cytearc_vfs.format.table_names import CELL_DATA
    from cytearc_vfs.format.tables import column_values, fill_missing

    nullable = pd.Series([0.5, None], dtype="Float32", name="x")
    assert fill_missing(nullable).dtype == np.float32
    values, _ = column_values(nullable, table=CELL_DATA)
    assert values.dtype == np.float32 and np.isnan(values[1])
    # integers and booleans with missing values still need a float: float64
    assert fill_missing(pd.Series([1, None], dtype="Int32")).dtype == np.float64
    assert fill_missing(pd.Series([True, None], dtype="boolean")).dtype == np.float64


def _json(path: Path) -> dict[str, object]:
    value = json.loads(path.read_text())
    assert isinstance(value, dict)
    return value


# --- per-cell totals are exact or refused -------------------------------------------------


@pytest.mark.parametrize(
    ("matrix", "row", "total"),
    [
        (np.array([[2**64 - 1, 1], [1, 2]], dtype=np.uint64), 0, 2**64),
        (sp.csr_array(np.array([[0, 1], [2**64 - 1, 1]], dtype=np.uint64)), 1, 2**64),
        (sp.coo_array(np.array([[2**63, 2**63], [1, 2]], dtype=np.uint64)), 0, 2**64),
        (np.array([[2**62, 2**62], [1, -2]], dtype=np.int64), 0, 2**63),
        (np.array([[1, 2], [-(2**62), -(2**62) - 2**62]], dtype=np.int64), 1, -(3 * 2**62)),
        (np.array([[1e308, 1e308], [1.5, 2.0]]), 0, float("inf")),
    ],
    ids=["uint64-dense", "uint64-csr", "uint64-coo", "int64-positive", "int64-negative", "float64"],
)
def test_row_total_the_summaries_cannot_hold_is_refused_before_the_destination(
    tmp_path: Path, matrix: object, row: int, total: float
) -> None:
    store = tmp_path / "s.zarr"
    with pytest.raises(cv.errors.VfsError) as refused:  # also an OverflowError
        cv.write_counts(store, matrix, cells=["a", "b"])
    assert isinstance(refused.value, OverflowError)
    message = str(refused.value)
    assert f"cell {'ab'[row]!r} (row {row})" in message, message
    assert "rowSums" in message and "Nothing was written" in message
    assert str(total) in message
    assert not store.exists()


def test_row_totals_at_the_limit_are_stored_exactly(tmp_path: Path) -> None:
    matrix = np.array([[2**63, 2**63 - 1], [0, 0], [1, 2]], dtype=np.uint64)
    cv.write_counts(tmp_path / "s.zarr", matrix)
    sums = zarr.open_array(cv.open_store(tmp_path / "s.zarr"), path="RNA/countSummaries/rowSums")
    assert sums.dtype == np.uint64
    assert sums[:].tolist() == [2**64 - 1, 0, 3]
    signed = np.array([[-(2**62), -(2**62)], [2**62, 2**62 - 1]], np.int64)
    cv.write_counts(tmp_path / "i.zarr", signed)
    sums = zarr.open_array(cv.open_store(tmp_path / "i.zarr"), path="RNA/countSummaries/rowSums")
    assert sums[:].tolist() == [-(2**63), 2**63 - 1]


def test_composite_over_anndata_refuses_a_total_it_cannot_hold(tmp_path: Path) -> None:
    anndata = pytest.importorskip("anndata")
    matrix = np.array([[1, 2], [2**64 - 1, 1]], dtype=np.uint64)
    for encoding, stored in (
        ("csr", sp.csr_matrix(matrix)),
        ("csc", sp.csc_matrix(matrix)),
        ("dense", matrix),
    ):
        source = tmp_path / f"{encoding}.zarr"
        anndata.AnnData(stored, obs=pd.DataFrame(index=["a", "b"])).write_zarr(source)
        destination = tmp_path / f"c_{encoding}.zarr"
        with pytest.raises(OverflowError, match=r"cell 'b' \(row 1\) total 18446744073709551616"):
            cv.create_composite(destination, {"s": source})
        assert not destination.exists()


def test_add_totals_refuses_a_wrapped_sum() -> None:
    from cytearc_vfs.format.count_totals import RowTotalOverflowError, add_totals

    into = np.array([2**63, 5], dtype=np.uint64)
    add_totals(into, np.array([2**63 - 1, 1], dtype=np.uint64))
    assert into.tolist() == [2**64 - 1, 6]
    with pytest.raises(RowTotalOverflowError, match="row 0") as refused:
        add_totals(into, np.array([1, 0], dtype=np.uint64))
    assert refused.value.total == 2**64 and into.tolist() == [2**64 - 1, 6]
    signed = np.array([3, -(2**63) + 5], dtype=np.int64)
    with pytest.raises(RowTotalOverflowError, match="row 1") as refused:
        add_totals(signed, np.array([-4, -6], dtype=np.int64))
    assert refused.value.total == -(2**63) - 1


def test_verify_finds_wrapped_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store whose writer wrapped a total (as writers before the check did) fails verify."""
    from cytearc_vfs.write import count_source, writer

    def wrapping(values, dtype, *, row_offset=0):  # numpy's own sum: wraps
        return np.asarray(values.sum(axis=1, dtype=dtype)).ravel()

    monkeypatch.setattr(count_source, "row_totals", wrapping)
    monkeypatch.setattr(writer, "row_totals", wrapping)
    store = tmp_path / "old.zarr"
    cv.write_counts(store, np.array([[2**64 - 1, 1], [1, 2]], dtype=np.uint64))
    monkeypatch.undo()
    sums = zarr.open_array(store / "RNA" / "countSummaries" / "rowSums")[:]
    assert sums.tolist() == [0, 3]  # the wrapped total, as the audit found it
    assert _run(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert "row 0 totals 18446744073709551616" in out and "re-import" in out, out


# --- repack --data-only fits the layout, and no refusal names an option not taken --------


def test_data_only_repack_fits_the_budget_like_repack(tmp_path: Path) -> None:
    matrix = sp.random(3000, 600, density=0.05, random_state=3, format="csr")
    matrix.data = np.ceil(matrix.data * 9)
    source = tmp_path / "big.zarr"
    cv.write_counts(source, matrix)
    budget = "8M"
    with pytest.raises(LayoutTooLargeError):  # an import uses its policy exactly
        cv.write_counts(tmp_path / "import.zarr", matrix, mem_budget=budget)
    fitted = tmp_path / "fitted.zarr"
    cv.repack(source, fitted, mem_budget=budget)
    data_only = tmp_path / "data_only.zarr"
    cv.repack(source, data_only, data_only=True, mem_budget=budget)
    attributes = _json(data_only / "RNA" / "zarr.json")["attributes"]
    assert isinstance(attributes, dict)
    assert attributes["cytearc:countMatrixLayout"]["unitBytes"] < 64 << 20  # halved to fit
    for store in (fitted, data_only):
        opened = cv.open_store(store)
        np.testing.assert_array_equal(
            zarr.open_array(opened, path="RNA/counts", mode="r")[:], matrix.toarray()
        )
    assert cv.dataset_fingerprint(data_only) == cv.dataset_fingerprint(source)


def test_data_only_repack_too_small_names_only_the_budget(tmp_path: Path) -> None:
    source = tmp_path / "s.zarr"
    cv.write_counts(source, sp.random(2000, 4000, density=0.1, random_state=1, format="csr"))
    with pytest.raises(LayoutTooLargeError) as refused:
        cv.repack(source, tmp_path / "out.zarr", data_only=True, mem_budget="1M")
    message = str(refused.value)
    assert "raise mem_budget to at least" in message and "layout" not in message, message
    assert not (tmp_path / "out.zarr").exists()


def test_fit_layout_refuses_shards_below_the_minimum_naming_a_budget_that_works() -> None:
    from cytearc_vfs.format.layout import DEFAULT_POLICY, fit_layout

    shape = (100_000, 30_000)
    with pytest.raises(LayoutTooLargeError) as refused:
        fit_layout(
            DEFAULT_POLICY, shape, "uint16", 2, 10**6, 1 << 20, transpose=True, min_shard_rows=8
        )
    message = str(refused.value)
    assert "shards of at least 8 row(s)" in message and "layout=" not in message
    least = int(message.split("(")[-1].split(" bytes")[0])
    fitted = fit_layout(
        DEFAULT_POLICY, shape, "uint16", 2, 10**6, least, transpose=True, min_shard_rows=8
    )
    assert fitted.counts.shards[0] >= 8


def test_cli_write_refusal_names_no_layout_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    anndata = pytest.importorskip("anndata")
    matrix = sp.random(3000, 600, density=0.05, random_state=3, format="csr")
    matrix.data = np.ceil(matrix.data * 9)
    anndata.AnnData(matrix).write_h5ad(tmp_path / "x.h5ad")
    status = _run(
        ["write", str(tmp_path / "x.h5ad"), str(tmp_path / "o.zarr"), "--mem-budget", "8M"]
    )
    err = capsys.readouterr().err
    assert status == 2 and "raise --mem-budget to at least" in err, err
    # the layout is named as `cytearc-vfs info` shows it: a Python expression
    # (LayoutPolicy(unit_bytes=...)) means nothing where no option takes one
    assert "LayoutPolicy" not in err and "layout=" not in err, err
    assert "the count layout unitBytes=67108864 chunkBytes=2097152 needs" in err, err
    assert not (tmp_path / "o.zarr").exists()
    # a budget below the tables' own need: the remedy (the counts' larger need) was
    # given as "the smallest that works with this layout", naming neither
    status = _run(
        ["write", str(tmp_path / "x.h5ad"), str(tmp_path / "o.zarr"), "--mem-budget", "100K"]
    )
    err = capsys.readouterr().err
    assert status == 2 and "preparing the cell and feature tables needs" in err, err
    assert "and writing the counts" in err and "with the count layout unitBytes=" in err, err
    assert "this layout" not in err and "LayoutPolicy" not in err, err
    least = err.split("raise --mem-budget to at least ")[1].split("(")[1].split(" bytes")[0]
    assert not (tmp_path / "o.zarr").exists()
    ok = ["write", str(tmp_path / "x.h5ad"), str(tmp_path / "o2.zarr"), "--mem-budget", least]
    assert _run(ok) == 0, capsys.readouterr().err
    # from Python, where layout= exists, the halving that fits is named
    with pytest.raises(LayoutTooLargeError, match=r"largest halving that fits is layout="):
        cv.write_counts(tmp_path / "o.zarr", matrix, mem_budget="8M")
