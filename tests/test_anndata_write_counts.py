"""``write_counts`` from an AnnData container on disk, streamed band by band.

An AnnData Zarr store (v2 or v3; X or a layer; CSR, CSC or dense) or an h5ad
file, given by its location, writes the same store as the same AnnData
loaded in memory (equal dataset fingerprints), while the writer reads it in
row bands: the largest band read is counted, never the whole matrix.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata import AnnDataContainer, SparseMatrixElement

import cytearc_vfs as cv
from cytearc_vfs import realdata
from cytearc_vfs.format.tables import read_table

FORMATS = [2, 3]


def adata_of(x: sp.csr_array, *, seed: int = 0) -> ad.AnnData:
    """``x`` as X, a CSC layer and a dense layer, with obs and var tables."""
    rng = np.random.default_rng(seed)
    n, m = x.shape
    obs = pd.DataFrame(
        {"batch": pd.Categorical(rng.choice(["a", "b"], n)), "depth": rng.random(n)},
        index=[f"cell{i}" for i in range(n)],
    )
    var = pd.DataFrame(
        {"symbol": [f"S{i}" for i in range(m)]}, index=[f"gene{i}" for i in range(m)]
    )
    adata = ad.AnnData(X=sp.csr_matrix(x), obs=obs, var=var)
    adata.layers["csc"] = sp.csc_matrix(x)
    adata.layers["dense"] = x.toarray()
    return adata


def write_zarr(adata: ad.AnnData, path: Path, zarr_format: int) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # choosing v2 is deprecated
        with ad.settings.override(zarr_write_format=zarr_format):
            adata.write_zarr(path)
    return path


@pytest.mark.parametrize("zarr_format", FORMATS)
@pytest.mark.parametrize("layer", [None, "csc", "dense"])
def test_a_zarr_store_writes_what_the_loaded_anndata_writes(
    tmp_path: Path, zarr_format: int, layer: str | None
) -> None:
    adata = adata_of(realistic_counts(500, 40, density=0.1, seed=1))
    source = write_zarr(adata, tmp_path / "in.zarr", zarr_format)
    streamed = cv.write_counts(tmp_path / "streamed.zarr", source, layer=layer)
    loaded = cv.write_counts(tmp_path / "loaded.zarr", adata, layer=layer)
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint
    assert streamed.shape == (500, 40) and streamed.dtype == loaded.dtype
    reader = cv.VirtualArrayReader(streamed.location)
    expected = adata.X if layer is None else adata.layers[layer]
    np.testing.assert_array_equal(reader.read(), sp.csr_matrix(expected).toarray())
    assert list(reader.cell_ids) == list(adata.obs_names)
    store = cv.open_store(streamed.location)
    import zarr

    batch = zarr.open_group(store, mode="r")["cellData/batch"]
    assert batch.shape == (500,)


def test_an_h5ad_file_writes_what_the_loaded_anndata_writes(tmp_path: Path) -> None:
    adata = adata_of(realistic_counts(300, 30, density=0.1, seed=2))
    adata.write_h5ad(tmp_path / "in.h5ad")
    for layer in (None, "csc", "dense"):
        streamed = cv.write_counts(tmp_path / f"s{layer}.zarr", tmp_path / "in.h5ad", layer=layer)
        loaded = cv.write_counts(tmp_path / f"l{layer}.zarr", adata, layer=layer)
        assert streamed.dataset_fingerprint == loaded.dataset_fingerprint, layer


def test_a_location_that_is_not_anndata_is_refused_and_nothing_written(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "cytearc.zarr", sp.csr_array(np.eye(3, dtype=np.int32)))
    with pytest.raises(ValueError, match=r"cytearc.zarr is not an AnnData container"):
        cv.write_counts(tmp_path / "out.zarr", tmp_path / "cytearc.zarr")
    assert not (tmp_path / "out.zarr").exists()
    source = write_zarr(adata_of(sp.csr_array(np.eye(4))), tmp_path / "in.zarr", 3)
    with pytest.raises(KeyError, match=r"no layer 'spliced'"):
        cv.write_counts(tmp_path / "out.zarr", source, layer="spliced")
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("layer", ["", "..", "../X", "csc/data"])
def test_a_layer_name_that_is_not_one_layer_is_refused_naming_the_layers(
    tmp_path: Path, layer: str
) -> None:
    """'' opened the layers mapping, 'csc/data' an array inside a layer, '../X' failed
    in zarr's path check: each must be the missing layer's refusal, naming the layers."""
    data = adata_of(sp.csr_array(np.eye(4)))
    data.write_h5ad(tmp_path / "in.h5ad")
    for source in (write_zarr(data, tmp_path / "in.zarr", 3), tmp_path / "in.h5ad"):
        with pytest.raises(
            KeyError, match=rf"has no layer {re.escape(repr(layer))}; its layers are \["
        ):
            cv.write_counts(tmp_path / "out.zarr", source, layer=layer)
        assert not (tmp_path / "out.zarr").exists()


def test_repeated_var_names_name_the_features_remedy_that_works_on_a_path(
    tmp_path: Path,
) -> None:
    """scanpy's 10x-10k-subset repeats var names ('Rp1'): the refusals told a user holding
    only a path to edit the AnnData, and the composite's sent them to write_counts, which
    refused too; ``features=`` with unique ids imports it."""
    data = adata_of(sp.csr_array(np.eye(4)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anndata: var_names are not unique
        data.var_names = ["g0", "g1", "g1", "g2"]
        source = write_zarr(data, tmp_path / "in.zarr", 3)
    with pytest.raises(ValueError, match=r"Pass make_unique=True to rename repeats as anndata"):
        cv.write_counts(tmp_path / "out.zarr", source)
    with pytest.raises(ValueError, match=r"or give features= a table whose index holds unique"):
        cv.write_counts(tmp_path / "out.zarr", source)
    with pytest.raises(ValueError, match=r"cv\.write_counts\(DEST, PATH, make_unique=True\)"):
        cv.create_composite(tmp_path / "c.zarr", {"s": source})
    with AnnDataContainer.open(source) as container:
        var = container.var()
    var.index = ad.utils.make_index_unique(var.index.astype(str))
    cv.write_counts(tmp_path / "out.zarr", source, features=var)
    assert list(cv.to_anndata(tmp_path / "out.zarr").var_names) == ["g0", "g1", "g1-1", "g2"]
    # or in one step, from the path alone: the names anndata gives
    cv.write_counts(tmp_path / "unique.zarr", source, make_unique=True)
    assert list(cv.to_anndata(tmp_path / "unique.zarr").var_names) == ["g0", "g1", "g1-1", "g2"]


@pytest.mark.parametrize(
    "ids",
    [
        ["A", "B", "A", "A-1", "A", "B"],
        ["x", "x", "x-1", "x-1", "x", "x-2"],
        ["g"] * 5,
        ["a", "b"],
    ],
)
def test_make_unique_gives_the_names_anndata_gives(tmp_path: Path, ids: list[str]) -> None:
    from cytearc_vfs.write.input_tables import unique_ids

    found, renamed = unique_ids(pd.Index(ids))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anndata: suffixes collide ("A-1")
        expected = ad.utils.make_index_unique(pd.Index(ids)).tolist()
    assert found.tolist() == expected
    assert renamed == len(ids) - len(set(ids))
    counts = np.ones((len(ids), 2), dtype=np.uint8)
    written = cv.write_counts(tmp_path / "s.zarr", counts, cells=ids, make_unique=True)
    reader = cv.VirtualArrayReader(cv.open_store(written.location), assay="RNA")
    assert reader.cell_ids.tolist() == found.tolist()


def test_write_make_unique_at_a_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cytearc_vfs.cli import main

    data = adata_of(sp.csr_array(np.eye(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anndata: var_names are not unique
        data.var_names = ["g0", "g0", "g1"]
        source = write_zarr(data, tmp_path / "in.zarr", 3)
    assert main(["write", str(source), str(tmp_path / "a.zarr")]) == 2
    refusal = capsys.readouterr().err
    assert "Pass --make-unique to rename repeats" in refusal and "=True" not in refusal
    assert main(["write", str(source), str(tmp_path / "a.zarr"), "--make-unique"]) == 0
    assert list(cv.to_anndata(tmp_path / "a.zarr").var_names) == ["g0", "g0-1", "g1"]


def _largest_band(x: sp.csr_array, rows: int) -> int:
    return max(x[start : start + rows].nnz for start in range(0, x.shape[0], rows))


MEM_BUDGET = 8 << 20
# the writer's first pass (the value range) reads bands whose dense form holds at
# most a quarter of the budget (at least 1 MiB), the write pass bands of one shard
SCAN_BYTES = max(1 << 20, MEM_BUDGET // 4)


def _band_rows(info: cv.WriteInfo, n_features: int) -> tuple[int, int]:
    """Rows per band of the writer's scan pass and of its write pass."""
    return SCAN_BYTES // (8 * n_features), info.layout.counts.shards[0]


@pytest.mark.parametrize("layer", [None, "dense"])
def test_the_write_reads_row_bands_never_the_matrix(tmp_path: Path, layer: str | None) -> None:
    x = realistic_counts(20_000, 50, density=0.05, seed=3)
    source = write_zarr(adata_of(x), tmp_path / "in.zarr", 3)
    container = AnnDataContainer.open(source)
    info = cv.write_counts(
        tmp_path / "out.zarr",
        container,
        layer=layer,
        layout=(256 * 1024, 32 * 1024),
        mem_budget=MEM_BUDGET,
    )
    bands = _band_rows(info, x.shape[1])
    assert max(bands) * 3 <= x.shape[0], "the matrix must be read in several bands"
    stats = container.matrix(layer).stats
    largest = (
        max(_largest_band(x, rows) for rows in bands) if layer is None else max(bands) * x.shape[1]
    )
    if layer is None:
        assert stats.largest_band_entries == largest
    else:  # a dense band is read a few whole chunks at a time, within the budget
        assert 0 < stats.largest_band_entries <= largest
    assert stats.largest_band_entries * 3 <= (x.nnz if layer is None else x.shape[0] * x.shape[1])
    np.testing.assert_array_equal(cv.VirtualArrayReader(info.location).read(), x.toarray())


def test_a_csc_matrix_is_written_through_a_bounded_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = realistic_counts(20_000, 50, density=0.05, seed=4)
    source = write_zarr(adata_of(x), tmp_path / "in.zarr", 2)
    monkeypatch.setenv("CYTEARC_ANNDATA_PIECE_ENTRIES", "5000")
    container = AnnDataContainer.open(source)
    info = cv.write_counts(
        tmp_path / "out.zarr",
        container,
        layer="csc",
        layout=(256 * 1024, 32 * 1024),
        mem_budget=MEM_BUDGET,
    )
    matrix = container.matrix("csc")
    assert isinstance(matrix, SparseMatrixElement) and matrix.format == "csc"
    largest_row_band = max(_largest_band(x, rows) for rows in _band_rows(info, x.shape[1]))
    # pieces of the transpose hold ~5,000 entries (a column is ~1,000); row bands their rows
    assert matrix.stats.largest_band_entries <= max(5000 + 1100, largest_row_band)
    assert matrix.stats.largest_band_entries * 3 <= x.nnz
    np.testing.assert_array_equal(cv.VirtualArrayReader(info.location).read(), x.toarray())
    loaded = cv.write_counts(tmp_path / "loaded.zarr", adata_of(x), layer="csc")
    assert info.counts_fingerprint == loaded.counts_fingerprint


def test_real_h5ad_streams_to_the_same_store_as_loading_it(tmp_path: Path) -> None:
    """Wu 2020 (scirpy's h5ad): the file's X, streamed, equals the loader's counts."""
    path = realdata.fetch("wu2020")
    adata = realdata.wu2020()
    # the h5ad's own obs has categorical columns with missing values, which the
    # table writer refuses; the loader keeps the batch columns only
    streamed = cv.write_counts(tmp_path / "s.zarr", path, cells=list(adata.obs_names))
    loaded = cv.write_counts(tmp_path / "l.zarr", adata)
    assert streamed.counts_fingerprint == loaded.counts_fingerprint
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint


def test_real_old_anndata_zarr_store_streams(tmp_path: Path) -> None:
    """scanpy's 10x mouse subset: a Zarr v2 store of a very old anndata (obs and var as
    record arrays, dense X), read band by band."""
    path = realdata.fetch("mouse_10k_subset")
    adata = realdata.mouse_10k_subset()
    container = AnnDataContainer.open(path)
    assert container.encoding.legacy and container.zarr_format == 2
    assert list(container.obs().index) == list(adata.obs_names)
    # its gene symbols repeat, so the features are named by Ensembl id as the loader does
    streamed = cv.write_counts(
        tmp_path / "s.zarr",
        container,
        features=list(adata.var_names),
        layout=(8 * 1024 * 1024, 32 * 1024),
    )
    loaded = cv.write_counts(tmp_path / "l.zarr", adata)
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint
    stats = container.matrix().stats
    assert stats.largest_band_entries < adata.shape[0] * adata.shape[1]


def test_a_remote_zarr_store_is_read_with_the_source_storage_options(
    tmp_path: Path, s3_server: Any
) -> None:
    """An AnnData Zarr store on the loopback S3 server, given by its URL: the
    endpoint and credentials come from ``source_storage_options``."""
    import obstore
    from obstore.store import S3Store

    adata = adata_of(realistic_counts(300, 30, density=0.1, seed=3))
    local = write_zarr(adata, tmp_path / "in.zarr", 3)
    bucket = s3_server.new_bucket()
    remote = S3Store(bucket, **s3_server.storage_options())
    for path in local.rglob("*"):
        if path.is_file():
            obstore.put(remote, f"in.zarr/{path.relative_to(local).as_posix()}", path.read_bytes())
    url = f"s3://{bucket}/in.zarr"
    streamed = cv.write_counts(
        tmp_path / "streamed.zarr", url, source_storage_options=s3_server.storage_options()
    )
    loaded = cv.write_counts(tmp_path / "loaded.zarr", adata)
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint
    with pytest.raises(ValueError, match="source_storage_options= applies only"):
        cv.write_counts(
            tmp_path / "x.zarr", sp.csr_array(np.ones((2, 2))), source_storage_options={"a": 1}
        )
    assert not (tmp_path / "x.zarr").exists()


@pytest.mark.parametrize("column", ["category", "text"])
def test_text_ending_in_nul_is_refused_naming_the_column(
    tmp_path: Path, column: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Fixed-width text drops trailing NULs: such a value would read back changed (a
    categorical's would leave its categories, and its readers refuse the store), so
    it is refused before anything is written; a NUL inside the text is kept."""
    values = {"category": pd.Categorical(["x\0", "y"]), "text": ["p\0", "q"]}[column]
    data = ad.AnnData(
        X=sp.csr_matrix(np.ones((2, 1), np.float32)),
        obs=pd.DataFrame({column: values, "inner": ["a\0b", "c"]}, index=["a", "b"]),
        var=pd.DataFrame(index=["g"]),
    )
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    message = rf"^obs column '{column}' holds text ending in a NUL character at row 0 .*rstrip"
    for given in (data, source):
        with pytest.raises(ValueError, match=message):
            cv.write_counts(tmp_path / "w.zarr", given)
        assert not (tmp_path / "w.zarr").exists()
    data.obs[column] = data.obs[column].astype(str).str.rstrip("\0")  # the remedy
    cv.write_counts(tmp_path / "w.zarr", data)
    obs = cv.to_anndata(tmp_path / "w.zarr").obs
    assert obs[column].tolist() == [
        "x" if column == "category" else "p",
        "y" if column == "category" else "q",
    ]
    assert obs["inner"].tolist() == ["a\0b", "c"]
    # a composite over the AnnData does not carry the column, and says why
    with caplog.at_level("WARNING", logger="cytearc_vfs"):
        store = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    cells = read_table(zarr.open_group(store, mode="r")["cellData"])
    assert column not in cells.columns and cells["inner"].tolist() == ["a\0b", "c"]
    store.close()
    warned = [r.getMessage() for r in caplog.records if "ending in a NUL" in r.getMessage()]
    assert warned and warned[0].startswith(f"source 's': obs column '{column}' holds")
    cv.to_anndata(tmp_path / "c.zarr")  # its own readers read what it wrote


def test_an_anndata_ids_column_is_stored_as_orig_ids_as_a_composite_carries_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CyteArc table keeps its ids under the name ``ids``. An AnnData's own ``obs``
    or ``var`` column of that name was refused ("rename the column"), which
    ``cytearc-vfs write`` of a file gave no way to do, while a composite over the
    same AnnData carried it as ``orig_ids``; the import now carries it the same way."""
    data = ad.AnnData(
        X=sp.csr_matrix(np.arange(6, dtype=np.float32).reshape(3, 2)),
        obs=pd.DataFrame({"ids": ["x", "y", "z"], "orig_ids": [1, 2, 3]}, index=["a", "b", "c"]),
        var=pd.DataFrame({"ids": ["p", "q"]}, index=["g1", "g2"]),
    )
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    data.write_h5ad(tmp_path / "s.h5ad")
    composite = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    composed = {
        table: read_table(zarr.open_group(composite, mode="r")[table])
        for table in ("cellData", "RNA/featureData")
    }
    composite.close()
    for number, given in enumerate((data, source, tmp_path / "s.h5ad")):
        caplog.clear()
        with caplog.at_level("WARNING", logger="cytearc_vfs"):
            info = cv.write_counts(tmp_path / f"w{number}.zarr", given)
        warned = [
            r.getMessage() for r in caplog.records if "column 'ids' is stored as" in r.getMessage()
        ]
        assert len(warned) == 2, warned  # obs and var
        group = zarr.open_group(cv.open_store(info.location), mode="r")
        cells, features = read_table(group["cellData"]), read_table(group["RNA/featureData"])
        assert cells["orig_orig_ids"].tolist() == ["x", "y", "z"]
        assert cells["orig_ids"].tolist() == [1, 2, 3]
        assert features["orig_ids"].tolist() == ["p", "q"]
        # the same columns, under the same names, as the composite over the AnnData
        assert cells["orig_orig_ids"].tolist() == composed["cellData"]["orig_orig_ids"].tolist()
        assert features["orig_ids"].tolist() == composed["RNA/featureData"]["orig_ids"].tolist()
    # a table passed by the caller can be renamed by the caller: refused, nothing written
    # (named as a given table is, by where it is stored: it is no longer the AnnData's obs)
    with pytest.raises(ValueError, match=r"^cellData column 'ids' is reserved .*rename"):
        cv.write_counts(tmp_path / "given.zarr", data, cells=data.obs)
    assert not (tmp_path / "given.zarr").exists()


@pytest.mark.parametrize("value", ["abc", "4e6", "0", "-5", "1.5"])
def test_a_piece_size_that_is_no_count_is_refused_naming_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CYTEARC_ANNDATA_PIECE_ENTRIES=abc stopped a CSC write with int()'s "invalid
    literal for int() with base 10: 'abc'", naming no variable; 0 and -5 were taken
    as 1 entry a piece (the slowest spill there is), silently."""
    from cytearc_vfs.cli import main

    x = realistic_counts(200, 30, density=0.1, seed=4)
    source = write_zarr(adata_of(x), tmp_path / "in.zarr", 2)
    monkeypatch.setenv("CYTEARC_ANNDATA_PIECE_ENTRIES", value)
    destination = tmp_path / "out.zarr"
    assert main(["write", str(source), str(destination), "--layer", "csc"]) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1, line
    assert f"CYTEARC_ANNDATA_PIECE_ENTRIES={value!r} is not a positive whole number" in line
    assert not destination.exists()


@pytest.mark.remote
def test_a_remote_container_s_tables_are_read_in_a_few_rounds(
    tmp_path: Path, s3_server: Any, s3_proxy: Any
) -> None:
    """``cytearc-vfs write s3://lab/wu2020.zarr OUT`` read each ``obs`` column's documents
    and chunks through the element layer one request after another: 271 round trips for
    Wu 2020's 45 columns, 11 s at 25 ms a request, where a composite over the same store
    reads its tables in a few. The tables' objects are fetched concurrently now (as a
    composite's creation fetches them); the store is the one loading the AnnData writes."""
    from loopback_proxy import sequential_rounds
    from obstore.store import from_url
    from test_anndata_sources import upload

    adata = adata_of(realistic_counts(300, 30, density=0.1, seed=3))
    rng = np.random.default_rng(4)
    for number in range(30):  # many columns: their reads are what took the rounds
        adata.obs[f"c{number}"] = pd.Categorical(rng.choice(["a", "b", "c"], adata.n_obs))
    adata.var["symbol"] = [f"S{i}" for i in range(adata.n_vars)]
    local = write_zarr(adata, tmp_path / "in.zarr", 3)
    bucket = s3_server.new_bucket()
    upload(from_url(f"s3://{bucket}", **s3_server.storage_options()), local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    s3_proxy.delay = 0.02  # requests sent together overlap, as on a network
    s3_proxy.take()
    streamed = cv.write_counts(
        tmp_path / "streamed.zarr", f"s3://{bucket}/in.zarr", source_storage_options=options
    )
    rounds = sequential_rounds(s3_proxy.take())
    loaded = cv.write_counts(tmp_path / "loaded.zarr", adata)
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint
    assert rounds <= 30, rounds  # the 30 columns took three requests each, in turn
