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
    from cytearc_vfs.format.tables import column_values, fill_missing

    nullable = pd.Series([0.5, None], dtype="Float32", name="x")
    assert fill_missing(nullable).dtype == np.float32
    values, _ = column_values(nullable, table="cellData")
    assert values.dtype == np.float32 and np.isnan(values[1])
    # integers and booleans with missing values still need a float: float64
    assert fill_missing(pd.Series([1, None], dtype="Int32")).dtype == np.float64
    assert fill_missing(pd.Series([True, None], dtype="boolean")).dtype == np.float64


def _json(path: Path) -> dict[str, object]:
    value = json.loads(path.read_text())
    assert isinstance(value, dict)
    return value
