"""Any CyteArc store as an AnnData: ``to_anndata``, ``anndata_view`` and ``export``.

Real stores on disk (ordinary, composite, mount) built from AnnData objects;
every comparison is against what anndata itself gives: the original
AnnData, ``anndata.concat(join="outer")`` of the sources, and anndata's
readers of the view and of the exported files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from unittest import mock

import anndata as ad
import dask.array as da
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata_output import export_anndata
from cytearc_vfs_adapters.anndata_output.conversion import band_rows
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv

PROTO = default_buffer_prototype()

# anndata 0.13 reads a pandas option that pandas 3 deprecates whenever it
# subsets categoricals (anndata's own code, as pyproject's filter for
# future.infer_string says)
pytestmark = pytest.mark.filterwarnings("ignore:The 'mode.chained_assignment' option is deprecated")


def _adata(n_cells: int, genes: list[str], seed: int, prefix: str) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    counts = realistic_counts(n_cells, len(genes), density=0.1, seed=seed)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["T", "B", "NK"], n_cells)),
            "stage": pd.Categorical(
                rng.choice(["early", "late"], n_cells), categories=["early", "late"], ordered=True
            ),
            "score": rng.normal(size=n_cells),
            "n_genes": rng.integers(0, 500, n_cells),
            "doublet": rng.random(n_cells) < 0.1,
            "barcode": [f"{prefix}-bc{i:05d}-é" for i in range(n_cells)],
        },
        index=[f"{prefix}{i}" for i in range(n_cells)],
    )
    var = pd.DataFrame(
        {"symbol": [f"SYM-{g}" for g in genes], "highly_variable": rng.random(len(genes)) < 0.3},
        index=genes,
    )
    return ad.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("anndata_out")
    genes = [f"G{i:03d}" for i in range(60)]
    first = _adata(700, genes[:50], 1, "a")
    second = _adata(450, genes[10:], 2, "b")
    cv.write_counts(root / "a.zarr", first)
    cv.write_counts(root / "b.zarr", second)
    cv.create_composite(root / "c.zarr", {"a": root / "a.zarr", "b": root / "b.zarr"})
    cv.mount_datastore(root / "a.zarr", root / "m.zarr")
    return {"root": root, "a": first, "b": second}


def _dense(matrix: Any) -> np.ndarray:
    if isinstance(matrix, da.Array):
        matrix = matrix.compute()
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def _text_as_str(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns as pandas ``str`` (anndata gives object for a string-array)."""
    out = frame.copy()
    for name in out.columns:
        if out[name].dtype == object:
            out[name] = out[name].astype("str")
    out.index = out.index.astype("str")
    return out


def _assert_same(left: ad.AnnData, right: ad.AnnData) -> None:
    """Every element equal: X values, obs and var (text dtypes aside), uns."""
    assert left.shape == right.shape
    np.testing.assert_array_equal(_dense(left.X), _dense(right.X))
    pd.testing.assert_frame_equal(_text_as_str(left.obs), _text_as_str(right.obs))
    pd.testing.assert_frame_equal(_text_as_str(left.var), _text_as_str(right.var))
    assert _plain(left.uns) == _plain(right.uns)
    for name in ("obsm", "varm", "obsp", "varp"):
        assert len(getattr(left, name)) == len(getattr(right, name)) == 0


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {key: _plain(item) for key, item in value.items()}
    return str(value)


# ------------------------------------------------------------------ to_anndata


@pytest.mark.parametrize("lazy", [True, False])
def test_round_trip_equals_the_original(built: dict[str, Any], lazy: bool) -> None:
    original: ad.AnnData = built["a"]
    result = cv.to_anndata(built["root"] / "a.zarr", lazy=lazy)
    assert isinstance(result.X, da.Array if lazy else sp.csr_matrix)
    np.testing.assert_array_equal(_dense(result.X), original.X.toarray())
    # the defaults write_counts adds (names = ids, I all True) are left out
    assert sorted(result.obs.columns) == sorted(original.obs.columns)
    pd.testing.assert_frame_equal(result.obs[original.obs.columns], original.obs)
    pd.testing.assert_frame_equal(result.var[original.var.columns], original.var)
    assert result.obs["stage"].cat.ordered and list(result.obs["stage"].cat.categories) == [
        "early",
        "late",
    ]
    assert result.uns == {}


def test_lazy_x_is_dask_of_csr_blocks_and_subsets_like_the_original(
    built: dict[str, Any],
) -> None:
    original: ad.AnnData = built["a"]
    result = cv.to_anndata(built["root"] / "a.zarr")
    assert isinstance(result.X._meta, sp.csr_matrix)
    assert isinstance(result.X.blocks[0, 0].compute(), sp.csr_matrix)
    rng = np.random.default_rng(3)
    cells = np.sort(rng.choice(original.n_obs, 100, replace=False))
    genes = list(rng.choice(original.var_names, 7, replace=False))
    subset = result[cells, genes]
    expected = original[cells, genes]
    np.testing.assert_array_equal(_dense(subset.X), expected.X.toarray())
    pd.testing.assert_frame_equal(subset.obs[original.obs.columns], pd.DataFrame(expected.obs))


def test_a_lazy_subset_reads_only_its_blocks(built: dict[str, Any]) -> None:
    from cytearc_vfs_adapters.anndata_output.conversion import lazy_counts
    from cytearc_vfs_adapters.anndata_output.opened import open_assay

    opened = open_assay(built["root"] / "c.zarr")
    x = lazy_counts(opened)
    x_rows, x_cols = x.chunks
    assert sum(x_rows) == 1150 and sum(x_cols) == 60
    opened.reader.reset_stats()
    expected = cv.to_anndata(built["root"] / "c.zarr", lazy=False).X
    block = x[10:20][:, [1, 2]].compute()
    assert opened.reader.stats.reads == 1  # one block, one gather read
    np.testing.assert_array_equal(block.toarray(), expected[10:20][:, [1, 2]].toarray())
    chunks_one_block = opened.reader.stats.chunks_decoded
    opened.reader.reset_stats()
    x.compute()
    assert opened.reader.stats.reads == len(x_rows) * len(x_cols)
    assert opened.reader.stats.chunks_decoded >= chunks_one_block


def test_lazy_x_pickles_for_worker_processes(built: dict[str, Any]) -> None:
    import pickle

    adata = cv.to_anndata(built["root"] / "c.zarr")
    copy = pickle.loads(pickle.dumps(adata.X))
    np.testing.assert_array_equal(_dense(copy[3:9]), _dense(adata.X[3:9]))


def test_composite_equals_anndata_concat_outer(built: dict[str, Any]) -> None:
    expected = ad.concat([built["a"], built["b"]], join="outer")
    for lazy in (True, False):
        result = cv.to_anndata(built["root"] / "c.zarr", lazy=lazy)
        assert list(result.obs_names) == list(expected.obs_names)
        assert set(result.var_names) == set(expected.var_names)
        aligned = result[:, expected.var_names]
        np.testing.assert_array_equal(_dense(aligned.X), _dense(expected.X))
        for column in ("cell_type", "score", "n_genes", "doublet", "barcode"):
            np.testing.assert_array_equal(
                np.asarray(result.obs[column]), np.asarray(expected.obs[column])
            )
        assert list(result.obs["source"].unique()) == ["a", "b"]


@pytest.mark.parametrize("lazy", [True, False])
def test_a_composite_materializes_through_to_anndata(
    built: dict[str, Any], tmp_path: Path, lazy: bool
) -> None:
    """composite.md's way to a standalone copy: write_counts of to_anndata, lazy
    (the default: X is dask blocks of CSR) or not, with its ids and columns."""
    composite = built["root"] / "c.zarr"
    info = cv.write_counts(tmp_path / "copy.zarr", cv.to_anndata(composite, lazy=lazy))
    copy, original = cv.VirtualArrayReader(info.location), cv.VirtualArrayReader(composite)
    assert list(copy.cell_ids) == list(original.cell_ids)
    assert list(copy.feature_ids) == list(original.feature_ids)
    np.testing.assert_array_equal(copy.read(), original.read())
    assert "source" in zarr.open_group(tmp_path / "copy.zarr", mode="r")["cellData"]


def test_mount_reads_as_its_source(built: dict[str, Any]) -> None:
    mounted = cv.to_anndata(built["root"] / "m.zarr", lazy=False)
    _assert_same(mounted, cv.to_anndata(built["root"] / "a.zarr", lazy=False))


@pytest.mark.parametrize("kind", ["a", "c", "m"])
def test_an_opened_store_is_a_location_too(built: dict[str, Any], kind: str) -> None:
    location = built["root"] / f"{kind}.zarr"
    store = cv.open_store(location)
    expected = cv.to_anndata(location, lazy=False)
    _assert_same(cv.to_anndata(store, lazy=False), expected)
    _assert_same(ad.read_zarr(cv.anndata_view(store)), expected)


def test_unknown_assay_is_named(built: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError), match=r"'ATAC'.*its assays: \['RNA'\]"):
        cv.to_anndata(built["root"] / "a.zarr", assay="ATAC")


# ------------------------------------------------------------------ membership


def _add_column(store: Path, name: str, values: np.ndarray, attrs: dict[str, Any]) -> None:
    group = zarr.open_group(store / "cellData", mode="a", zarr_format=3)
    array = group.create_array(name, shape=values.shape, dtype=values.dtype, attributes=attrs)
    array[:] = values


@pytest.fixture(scope="module")
def partial(built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store whose RNA assay measured only some cells, with another assay's column."""
    path = tmp_path_factory.mktemp("membership") / "p.zarr"
    cv.write_counts(path, built["b"])
    measured = np.arange(built["b"].n_obs) % 3 != 0
    _add_column(path, "RNA_I", measured, {"role": "assay_membership", "assay": "RNA"})
    _add_column(
        path, "ADT_I", np.ones(built["b"].n_obs, bool), {"role": "assay_membership", "assay": "ADT"}
    )
    return {"path": path, "measured": measured}


def test_membership_is_an_ordinary_column_and_declared(partial: dict[str, Any]) -> None:
    result = cv.to_anndata(partial["path"], lazy=False)
    # raw exports keep the unmeasured cells
    assert result.n_obs == len(partial["measured"])
    np.testing.assert_array_equal(result.obs["RNA_I"].to_numpy(), partial["measured"])
    assert result.obs["RNA_I"].dtype == bool
    # another assay's membership column describes an assay the output does not hold
    assert "ADT_I" not in result.obs
    assert result.uns == {"cytearc": {"assayMembership": {"RNA": "RNA_I"}}}


def test_membership_through_the_view_and_the_export(
    partial: dict[str, Any], tmp_path: Path
) -> None:
    expected = cv.to_anndata(partial["path"], lazy=False)
    _assert_same(ad.read_zarr(cv.anndata_view(partial["path"])), expected)
    export_anndata(partial["path"], tmp_path / "p.h5ad")
    exported = ad.read_h5ad(tmp_path / "p.h5ad")
    _assert_same(exported, expected)
    assert exported.uns["cytearc"]["assayMembership"]["RNA"] == "RNA_I"


def _membership_attrs(store: Path) -> dict[str, Any]:
    return dict(zarr.open_group(store / "cellData", mode="r")["RNA_I"].attrs)


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr", "memory"])
def test_an_import_restores_the_declared_membership(
    partial: dict[str, Any], tmp_path: Path, suffix: str
) -> None:
    """Spec: an export, then an import, keeps the unmeasured cells unmeasured."""
    if suffix == "memory":
        source: Any = cv.to_anndata(partial["path"], lazy=False)
    else:
        source = tmp_path / f"p{suffix}"
        export_anndata(partial["path"], source)
    cv.write_counts(tmp_path / "back.zarr", source)
    assert _membership_attrs(tmp_path / "back.zarr") == {
        "role": "assay_membership",
        "assay": "RNA",
    }
    back = cv.to_anndata(tmp_path / "back.zarr", lazy=False)
    np.testing.assert_array_equal(back.obs["RNA_I"].to_numpy(), partial["measured"])
    assert back.uns == {"cytearc": {"assayMembership": {"RNA": "RNA_I"}}}
    # a composite over the import keeps the partial membership (the spec's second merge)
    cv.create_composite(tmp_path / "c.zarr", {"back": tmp_path / "back.zarr"})
    merged = cv.to_anndata(tmp_path / "c.zarr", lazy=False)
    np.testing.assert_array_equal(merged.obs["RNA_I"].to_numpy(), partial["measured"])


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_a_narrowed_selection_exported_imports_again_as_the_selection(
    tmp_path: Path, suffix: str
) -> None:
    """An export keeps a narrowed ``I``; the import took it for a reserved name and refused."""
    counts = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0]], dtype=np.uint8))
    frames = {
        "obs": pd.DataFrame(index=["c1", "c2", "c3"]),
        "var": pd.DataFrame({"names": ["A", "B", "C"]}, index=["g1", "g2", "g3"]),
    }
    cv.write_counts(tmp_path / "s.zarr", ad.AnnData(X=counts, **frames))
    cells, genes = [True, False, True], [True, True, False]
    zarr.open_array(tmp_path / "s.zarr", path="cellData/I", mode="r+")[:] = cells
    zarr.open_array(tmp_path / "s.zarr", path="RNA/featureData/I", mode="r+")[:] = genes
    export_anndata(tmp_path / "s.zarr", tmp_path / f"e{suffix}")
    cv.write_counts(tmp_path / "back.zarr", tmp_path / f"e{suffix}")
    for path, selection in (("cellData/I", cells), ("RNA/featureData/I", genes)):
        assert zarr.open_array(tmp_path / "back.zarr", path=path, mode="r")[:].tolist() == (
            selection
        )
    back = cv.to_anndata(tmp_path / "back.zarr", lazy=False)
    assert back.obs["I"].tolist() == cells and "I" not in back.obs.columns.drop("I")
    np.testing.assert_array_equal(back.X.toarray(), counts.toarray())


@pytest.mark.parametrize("values", [[1, 0, 1], [True, None, True], ["yes", "no", "yes"]])
def test_an_i_column_that_is_no_selection_is_refused(tmp_path: Path, values: list[Any]) -> None:
    obs = pd.DataFrame({"I": pd.array(values)}, index=["c1", "c2", "c3"])
    source = ad.AnnData(X=sp.csr_matrix(np.eye(3, dtype=np.uint8)), obs=obs)
    with pytest.raises(
        ValueError,
        match=r"^obs column 'I' \(stored as cellData/I\) is the live selection, which must be "
        "boolean",
    ):
        cv.write_counts(tmp_path / "s.zarr", source)
    assert not (tmp_path / "s.zarr").exists()


def test_membership_column_rules_of_an_import(
    built: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = built["b"].copy()
    data.obs["RNA_I"] = True  # undeclared: skipped with a warning
    data.obs["ADT_I"] = False  # named for another assay: ordinary metadata
    cv.write_counts(tmp_path / "u.zarr", data)
    columns = zarr.open_group(tmp_path / "u.zarr" / "cellData", mode="r")
    assert "RNA_I" not in columns and "ADT_I" in columns
    assert "reserved for the membership of assay 'RNA'" in caplog.text
    assert cv.to_anndata(tmp_path / "u.zarr", lazy=False).uns == {}
    # a cells= table declares nothing: its RNA_I is skipped the same way
    caplog.clear()
    table = pd.DataFrame({"RNA_I": True, "depth": 1.0}, index=data.obs_names)
    cv.write_counts(tmp_path / "t.zarr", data.X, cells=table, features=data.var_names)
    columns = zarr.open_group(tmp_path / "t.zarr" / "cellData", mode="r")
    assert "RNA_I" not in columns and "depth" in columns
    assert "reserved for the membership of assay 'RNA'" in caplog.text

    data.uns["cytearc"] = {"assayMembership": {"RNA": "RNA_I"}}
    data.obs["RNA_I"] = np.arange(data.n_obs) % 2  # declared, but not boolean
    with pytest.raises(ValueError, match=r"'RNA_I'.*is int64, not boolean.*Nothing was written"):
        cv.write_counts(tmp_path / "n.zarr", data)
    data.obs["RNA_I"] = pd.array([True, None] * (data.n_obs // 2), dtype="boolean")
    with pytest.raises(ValueError, match=r"'RNA_I'.*has missing values"):
        cv.write_counts(tmp_path / "m.zarr", data)
    data.obs = data.obs.drop(columns="RNA_I")
    with pytest.raises(ValueError, match=r"declares 'RNA_I'.*has no such column"):
        cv.write_counts(tmp_path / "d.zarr", data)
    assert not any((tmp_path / name).exists() for name in ("n.zarr", "m.zarr", "d.zarr"))


@pytest.mark.parametrize("declared", ["RNA_I", "measured"])
def test_an_import_keeps_the_membership_column_where_the_frame_had_it(
    tmp_path: Path, declared: str
) -> None:
    """The columns come back in the order of the frame written (anndata-out.md), the
    restored membership column included: it used to be recorded after all the others."""
    data = ad.AnnData(
        X=np.ones((4, 2), dtype=np.float32),
        obs=pd.DataFrame(
            {"depth": [1.0, 2.0, 3.0, 4.0], declared: [True, False, True, True], "ADT_I": True},
            index=[f"c{i}" for i in range(4)],
        ),
    )
    data.uns["cytearc"] = {"assayMembership": {"RNA": declared}}
    cv.write_counts(tmp_path / "m.zarr", data)
    back = cv.to_anndata(tmp_path / "m.zarr", lazy=False)
    assert list(back.obs.columns) == ["depth", "RNA_I", "ADT_I"]
    np.testing.assert_array_equal(back.obs["RNA_I"].to_numpy(), [True, False, True, True])
    export_anndata(tmp_path / "m.zarr", tmp_path / "m.h5ad")
    assert list(ad.read_h5ad(tmp_path / "m.h5ad").obs.columns) == ["depth", "RNA_I", "ADT_I"]


def test_a_column_named_index_is_kept_in_memory_and_refused_on_disk(
    built: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "i.zarr"
    cv.write_counts(path, built["b"])
    _add_column(path, "_index", np.arange(built["b"].n_obs), {})
    assert list(cv.to_anndata(path, lazy=False).obs["_index"][:3]) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"'_index'.*rename the column"):
        cv.anndata_view(path)
    with pytest.raises(ValueError, match=r"'_index'.*rename the column"):
        export_anndata(path, tmp_path / "i.h5ad")
    assert not (tmp_path / "i.h5ad").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.zarr"]


# ------------------------------------------------------------------ the view


@pytest.mark.parametrize("kind", ["a", "c", "m"])
def test_read_zarr_and_read_lazy_of_the_view_equal_to_anndata(
    built: dict[str, Any], kind: str
) -> None:
    location = built["root"] / f"{kind}.zarr"
    expected = cv.to_anndata(location, lazy=False)
    view = cv.anndata_view(location)
    _assert_same(ad.read_zarr(view), expected)
    lazy = ad.experimental.read_lazy(view)
    assert lazy.shape == expected.shape
    _assert_same(lazy.to_memory(), expected)
    # a subset read lazily touches only what it needs, and equals the same subset
    cells, genes = [5, 2, 400], list(expected.var_names[[3, 0, 17]])
    np.testing.assert_array_equal(
        np.asarray(lazy[cells, genes].X.compute()), _dense(expected[cells, genes].X)
    )


def test_view_layout_is_the_current_anndata_encoding(built: dict[str, Any]) -> None:
    view = cv.anndata_view(built["root"] / "a.zarr")
    root = zarr.open_group(view, mode="r", zarr_format=3)
    assert root.attrs["encoding-type"] == "anndata"
    assert root.attrs["encoding-version"] == "0.1.0"
    obs = root["obs"]
    assert obs.attrs["encoding-type"] == "dataframe" and obs.attrs["encoding-version"] == "0.2.0"
    assert obs.attrs["_index"] == "_index"
    # the order the columns were written in (cytearc:columnOrder)
    assert list(obs.attrs["column-order"]) == list(built["a"].obs.columns)
    barcode = root["obs/barcode"]
    assert isinstance(barcode, zarr.Array)
    assert barcode.attrs["encoding-type"] == "string-array"
    assert barcode.metadata.to_dict()["data_type"] == "string"  # variable-length UTF-8
    assert root["obs/cell_type"].attrs["encoding-type"] == "categorical"
    assert root["obs/stage"].attrs["ordered"] is True
    assert root["X"].attrs["encoding-type"] == "array"
    assert sorted(root.group_keys()) == sorted(
        ["obs", "var", "uns", "obsm", "varm", "obsp", "varp", "layers"]
    )


def test_view_x_is_the_stores_counts_rekeyed(built: dict[str, Any]) -> None:
    path = built["root"] / "a.zarr"
    view = cv.anndata_view(path)
    counts = json.loads((path / "RNA/counts/zarr.json").read_text())
    x = json.loads(sync(view.get("X/zarr.json", PROTO)).to_bytes())
    assert x["codecs"] == counts["codecs"] and x["chunk_grid"] == counts["chunk_grid"]
    assert x["attributes"] == {"encoding-type": "array", "encoding-version": "0.2.0"}
    shard = sync(view.get("X/c/0/0", PROTO))
    assert shard is not None and shard.to_bytes() == (path / "RNA/counts/c/0/0").read_bytes()


def test_view_refuses_writes_and_bad_keys(built: dict[str, Any]) -> None:
    view = cv.anndata_view(built["root"] / "c.zarr")
    buffer = PROTO.buffer.from_bytes(b"{}")
    with pytest.raises(ValueError, match=r"read-only mode.*cytearc-vfs export"):
        sync(view.set("obs/zarr.json", buffer))
    with pytest.raises(ValueError, match="read-only"):
        sync(view.delete("X/c/0/0"))
    with pytest.raises(ValueError, match="read-only"):
        view.with_read_only(False)
    assert view.with_read_only(True) is view
    with pytest.raises(ValueError):
        sync(view.get("../a.zarr/zarr.json", PROTO))
    with pytest.raises(ValueError):
        sync(view.exists("obs/../../x"))
    assert not view.supports_writes and view.read_only
    with pytest.raises(ValueError, match="read-only"):
        ad.AnnData(X=np.zeros((1, 1))).write_zarr(view)


def test_view_listing_agrees_with_its_reads(built: dict[str, Any]) -> None:
    view = cv.anndata_view(built["root"] / "c.zarr")

    async def keys(prefix: str) -> list[str]:
        return [key async for key in view.list_prefix(prefix)]

    async def children(prefix: str) -> list[str]:
        return [name async for name in view.list_dir(prefix)]

    every = sync(keys(""))
    assert every == sorted(every) and "zarr.json" in every
    for key in every:
        assert sync(view.exists(key)), key
        assert sync(view.get(key, PROTO)) is not None, key
    assert sync(children("")) == sorted(
        ["X", "layers", "obs", "obsm", "obsp", "uns", "var", "varm", "varp", "zarr.json"]
    )
    assert sync(children("X")) == ["c", "zarr.json"]
    rows = {key.split("/")[2] for key in every if key.startswith("X/c/")}
    assert sync(children("X/c")) == sorted(rows)
    # a path prefix: obs does not match obsm
    assert all(key == "obs" or key.startswith("obs/") for key in sync(keys("obs")))
    assert sync(view.get("obs/barcode/c/999", PROTO)) is None
    assert not sync(view.exists("obs/nothing/zarr.json"))


def test_view_pickles_and_equals_a_fresh_one(built: dict[str, Any]) -> None:
    import pickle

    view = cv.anndata_view(built["root"] / "a.zarr")
    copy = pickle.loads(pickle.dumps(view))
    assert copy == view == cv.anndata_view(built["root"] / "a.zarr")
    assert (
        sync(copy.get("obs/_index/c/0", PROTO)).to_bytes()
        == sync(  # type: ignore[union-attr]
            view.get("obs/_index/c/0", PROTO)
        ).to_bytes()
    )  # type: ignore[union-attr]


def test_an_unpickled_view_opens_its_store_at_its_first_read(built: dict[str, Any]) -> None:
    """dask tokenizes each lazy array of ``read_lazy`` by pickling it: an unpickled
    view must not reopen (and re-verify) the viewed store until it is read."""
    import pickle

    from cytearc_vfs_adapters.anndata_output import view as view_module

    opens: list[str] = []
    original = view_module.open_assay

    def counting(*args: Any, **kwargs: Any) -> Any:
        opens.append(str(args[0]))
        return original(*args, **kwargs)

    location = built["root"] / "c.zarr"  # a composite: verification reads its sources
    expected = cv.to_anndata(location, lazy=False)
    with mock.patch.object(view_module, "open_assay", counting):
        view = cv.anndata_view(location)
        assert len(opens) == 1
        copy = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(view))))
        assert len(opens) == 1 and copy == view
        lazy = ad.experimental.read_lazy(view)
        cells = [5, 2, 400]
        block = np.asarray(lazy[cells].X.compute())
        assert len(opens) == 1  # read_lazy's arrays were tokenized without an open
        np.testing.assert_array_equal(block, _dense(expected[cells].X))
        # the copy opens at its first read, once, and reads the same
        first = sync(copy.get("obs/_index/c/0", PROTO))
        assert len(opens) == 2
        assert sync(copy.get("obs/_index/c/0", PROTO)) is not None and len(opens) == 2
        assert first is not None
        assert first.to_bytes() == sync(view.get("obs/_index/c/0", PROTO)).to_bytes()  # type: ignore[union-attr]


# ------------------------------------------------------------------ export


@pytest.mark.parametrize("suffix", [".zarr", ".h5ad"])
@pytest.mark.parametrize("kind", ["a", "c"])
def test_export_reads_back_equal_to_to_anndata(
    built: dict[str, Any], tmp_path: Path, suffix: str, kind: str
) -> None:
    location = built["root"] / f"{kind}.zarr"
    out = tmp_path / f"out{suffix}"
    n_features = cv.VirtualArrayReader(location).shape[1]
    band_bytes = 100 * n_features  # uint8 counts: bands of 100 cells
    info = export_anndata(location, out, band_bytes=band_bytes)
    expected = cv.to_anndata(location, lazy=False)
    back = ad.read_zarr(out) if suffix == ".zarr" else ad.read_h5ad(out)
    _assert_same(back, expected)
    assert isinstance(back.X, sp.csr_matrix)
    assert info.nnz == expected.X.nnz
    # streamed: never more than one band of cells dense in memory
    rows = band_rows(n_features, 1, band_bytes)
    assert info.band_cells == rows == 100
    assert info.bands == math.ceil(expected.n_obs / rows)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_export_is_conformant_current_anndata(
    built: dict[str, Any], tmp_path: Path, zarr_format: int
) -> None:
    out = tmp_path / "a.zarr"
    export_anndata(built["root"] / "a.zarr", out, zarr_format=zarr_format)
    root = zarr.open_group(out, mode="r")
    assert root.metadata.zarr_format == zarr_format
    assert dict(root.attrs) == {"encoding-type": "anndata", "encoding-version": "0.1.0"}
    assert root["X"].attrs["encoding-type"] == "csr_matrix"
    assert root["X"].attrs["encoding-version"] == "0.1.0"
    assert list(root["X"].attrs["shape"]) == [700, 50]
    assert root["obs"].attrs["encoding-version"] == "0.2.0"
    # text (and the index) as string-array 0.2.0, which every AnnData reader knows, not
    # nullable-string-array (anndata >= 0.12 only), as the view presents it
    for path in ("obs/barcode", "obs/_index", "var/_index", "var/symbol"):
        assert root[path].attrs["encoding-type"] == "string-array", path
        assert root[path].attrs["encoding-version"] == "0.2.0"
    text = root["obs/barcode"]
    if zarr_format == 3:
        assert text.metadata.to_dict()["data_type"] == "string"
    else:  # variable-length UTF-8 in v2
        assert text.metadata.to_dict()["dtype"] in ("|O", "object", "O")
    _assert_same(ad.read_zarr(out), cv.to_anndata(built["root"] / "a.zarr", lazy=False))


def test_export_refuses_what_it_must_not_replace(built: dict[str, Any], tmp_path: Path) -> None:
    source = built["root"] / "a.zarr"
    out = tmp_path / "x.h5ad"
    export_anndata(source, out)
    with pytest.raises(FileExistsError, match=r"give overwrite=True to replace"):
        export_anndata(source, out)
    before = out.stat().st_mtime_ns
    info = export_anndata(built["root"] / "c.zarr", out, overwrite=True)
    assert out.stat().st_mtime_ns != before and info.shape[0] == 1150
    assert ad.read_h5ad(out).n_obs == 1150
    with pytest.raises(FileExistsError, match="not an AnnData"):
        export_anndata(source, built["root"] / "b.zarr", overwrite=True)
    with pytest.raises(ValueError, match=r"\.zarr.*\.h5ad"):
        export_anndata(source, tmp_path / "x.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5ad"]


def test_overwrite_replaces_an_hdf5_file_only_when_it_holds_an_anndata(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """The HDF5 signature alone let --overwrite replace a renamed 10x .h5 named .h5ad."""
    source = built["root"] / "a.zarr"
    tenx = tmp_path / "tenx.h5ad"
    with h5py.File(tenx, "w") as file:
        file.create_group("matrix").create_dataset("data", data=np.arange(3))
    before = tenx.read_bytes()
    with pytest.raises(FileExistsError, match="not an AnnData"):
        export_anndata(source, tenx, overwrite=True)
    assert tenx.read_bytes() == before
    # anndata 0.7 stamped no encoding on the root: obs and var make it an AnnData
    legacy = tmp_path / "legacy.h5ad"
    with h5py.File(legacy, "w") as file:
        file.create_group("obs")
        file.create_group("var")
    export_anndata(source, legacy, overwrite=True)
    assert ad.read_h5ad(legacy).n_obs == cv.to_anndata(source).n_obs


def test_text_with_a_nul_is_refused_for_an_h5ad_naming_where_it_is(tmp_path: Path) -> None:
    """The store and a .zarr keep a NUL inside a value; HDF5 cannot, and h5py stopped the
    export with "VLEN strings do not support embedded NULLs", naming no column."""
    cells = pd.DataFrame(
        {"note": ["a", "b\x00c", "d"], "kind": pd.Categorical(["x", "y", "x"])},
        index=["c1", "c2", "c3"],
    )
    store = tmp_path / "s.zarr"
    cv.write_counts(store, sp.csr_matrix(np.eye(3, dtype=np.uint8)), cells=cells)
    with pytest.raises(
        ValueError, match=r"cellData column 'note' row 1 \(id 'c2'\) holds a NUL.*\.zarr"
    ):
        export_anndata(store, tmp_path / "out.h5ad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]
    export_anndata(store, tmp_path / "out.zarr")
    assert ad.read_zarr(tmp_path / "out.zarr").obs["note"].tolist() == ["a", "b\x00c", "d"]


# ------------------------------------------------------------------ remote


@pytest.mark.remote
def test_remote_store_and_composite_over_remote_sources(
    built: dict[str, Any], s3_server: Any, tmp_path: Path
) -> None:
    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    urls = {name: f"s3://{bucket}/{name}.zarr" for name in ("a", "b")}
    for name, url in urls.items():
        cv.write_counts(url, built[name], storage_options=options)
    remote = cv.to_anndata(urls["a"], storage_options=options)
    _assert_same(remote, cv.to_anndata(built["root"] / "a.zarr", lazy=False))
    sources = {name: dict(options) for name in urls}
    cv.create_composite(tmp_path / "c.zarr", urls, source_storage_options=sources)
    expected = cv.to_anndata(built["root"] / "c.zarr", lazy=False)
    # lazy: the blocks read the remote sources when computed
    composite = cv.to_anndata(tmp_path / "c.zarr", source_storage_options=sources)
    np.testing.assert_array_equal(_dense(composite.X), _dense(expected.X))
    view = cv.anndata_view(tmp_path / "c.zarr", source_storage_options=sources)
    _assert_same(
        ad.read_zarr(view),
        cv.to_anndata(tmp_path / "c.zarr", lazy=False, source_storage_options=sources),
    )
    info = export_anndata(tmp_path / "c.zarr", tmp_path / "c.h5ad", source_storage_options=sources)
    assert info.nnz == expected.X.nnz
    np.testing.assert_array_equal(ad.read_h5ad(tmp_path / "c.h5ad").X.toarray(), _dense(expected.X))


# ------------------------------------------------------------------ real data


@pytest.mark.parametrize("name", ["wu2020", "pbmc68k_reduced", "chr21_10x"])
def test_real_data_round_trips_through_every_output(tmp_path: Path, name: str) -> None:
    from cytearc_vfs import realdata

    original = realdata.DATASETS[name]()
    cv.write_counts(tmp_path / "s.zarr", original)
    result = cv.to_anndata(tmp_path / "s.zarr")
    np.testing.assert_array_equal(_dense(result.X), sp.csr_matrix(original.X).toarray())
    assert list(result.obs_names) == list(original.obs_names)
    assert list(result.var_names) == list(original.var_names)
    for frame, stored in ((original.obs, result.obs), (original.var, result.var)):
        for column in frame.columns:
            expected = frame[column]
            got = stored[column]
            if isinstance(expected.dtype, pd.CategoricalDtype):
                assert list(got.cat.categories) == list(expected.cat.categories), column
                assert got.cat.ordered == expected.cat.ordered
            np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=column)
    loaded = cv.to_anndata(tmp_path / "s.zarr", lazy=False)
    _assert_same(ad.read_zarr(cv.anndata_view(tmp_path / "s.zarr")), loaded)
    export_anndata(tmp_path / "s.zarr", tmp_path / "s.h5ad")
    _assert_same(ad.read_h5ad(tmp_path / "s.h5ad"), loaded)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_anndata_store_given_for_a_cytearc_store_is_named(
    built: dict[str, Any], tmp_path: Path, zarr_format: int
) -> None:
    """Not "holds no assay ... repack" (v3) or "a Zarr v2 store ... repack" (v2)."""
    import warnings

    path = tmp_path / "a.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the setting, deprecated in 0.13
        with ad.settings.override(zarr_write_format=zarr_format):
            built["b"].write_zarr(path)
    for opener in (cv.to_anndata, cv.anndata_view, cv.open_store):
        with pytest.raises(ValueError, match=r"is an AnnData Zarr store, not a CyteArc store.*"):
            opener(path)
    built["b"].write_h5ad(tmp_path / "a.h5ad")
    with pytest.raises(ValueError, match=r"an \.h5ad file is AnnData in HDF5.*write_counts"):
        cv.to_anndata(tmp_path / "a.h5ad")


@pytest.mark.parametrize("suffix", [".zarr", ".h5ad"])
def test_an_export_reports_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    # it reported OUT as typed ("to pbmc.h5ad") where every other writer reports the path
    cv.write_counts(tmp_path / "s.zarr", sp.csr_matrix(np.eye(3, dtype=np.uint8)))
    monkeypatch.chdir(tmp_path)
    info = export_anndata("s.zarr", f"out{suffix}")
    assert Path(info.location).is_absolute()
    assert Path(info.location).samefile(tmp_path / f"out{suffix}")
