"""Adversarial ``obs``/``var`` tables through ``write_counts`` and every AnnData output.

Each table is written by ``write_counts`` and read back through
``to_anndata`` (lazy and loaded), the view (``anndata.read_zarr`` and
``anndata.experimental.read_lazy``) and ``export`` (Zarr v3, v2, ``.h5ad``),
and compared with what anndata itself reads back from the original
AnnData written by ``anndata.write_zarr``. The one documented difference is
normalised, never hidden: text may come back as ``object`` (a
``string-array``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.anndata_output import export_anndata

import cytearc_vfs as cv

# anndata 0.13 reads a pandas option that pandas 3 deprecates (anndata's own code)
pytestmark = pytest.mark.filterwarnings("ignore:The 'mode.chained_assignment' option is deprecated")


def _adversarial() -> ad.AnnData:
    # BMP, emoji and other non-BMP (U+1D518) characters, in ids, text and categories
    cells = ["c0", "é1", "😀2", "\U0001d5183", "中文4"]
    obs = pd.DataFrame(
        {
            "unused": pd.Categorical(list("abaab"), categories=["a", "b", "zz"]),
            "ordered": pd.Categorical(
                ["lo", "hi", "lo", "mid", "hi"], categories=["lo", "mid", "hi"], ordered=True
            ),
            "int_categories": pd.Categorical([3, 1, 3, 1, 2]),
            # beyond int64: numpy makes [0, 2**64 - 1] float64, which rounds the latter
            "uint64_categories": pd.Categorical(
                np.array([2**64 - 1, 0, 0, 5, 2**63 + 1], dtype=np.uint64)
            ),
            "float_categories": pd.Categorical(
                [0.5, 1.5, 0.5, 2.5, 0.5], categories=[0.5, 1.5, 2.5, 9.0]
            ),
            "bool_categories": pd.Categorical([True, False, True, True, False]),
            "text_categories": pd.Categorical(["", "a", "", "😀", "nan"]),
            "flag": np.array([True, False, True, False, True]),
            "real": np.array([np.nan, np.inf, -np.inf, 1.5, -0.0]),
            "real32": np.arange(5, dtype=np.float32) / 3,
            "tiny": np.array([-128, 0, 1, 2, 127], dtype=np.int8),
            "huge": np.array([2**64 - 1, 0, 1, 2, 2**63], dtype=np.uint64),
            "signed": np.array([-(2**63), 2**63 - 1, 0, 1, 2], dtype=np.int64),
            "nullable_int": pd.array([1, 2, 3, 4, 2**53 + 1], dtype="Int64"),
            "nullable_bool": pd.array([True, False, True, True, False], dtype="boolean"),
            "text": pd.array(["a", "é", "😀", "\U0001d518nicode", " \t"], dtype="str"),
        },
        index=pd.Index(cells, name="cell_id"),
    )
    var = pd.DataFrame(
        {"symbol": ["G😀", "G2", "G3"], "hv": [True, False, True]},
        index=pd.Index(["g1", "g2", "g3"], name="gene_id"),
    )
    counts = sp.csr_matrix(np.arange(15, dtype=np.int32).reshape(5, 3) % 4)
    return ad.AnnData(X=counts, obs=obs, var=var)


def _outputs(location: Path, tmp: Path) -> dict[str, Callable[[], ad.AnnData]]:
    """Every AnnData output of ``location``, as functions giving an in-memory AnnData."""

    def exported(name: str, **options: Any) -> Callable[[], ad.AnnData]:
        def run() -> ad.AnnData:
            out = tmp / name
            export_anndata(location, out, **options)
            return ad.read_h5ad(out) if name.endswith(".h5ad") else ad.read_zarr(out)

        return run

    return {
        "to_anndata": lambda: cv.to_anndata(location),
        "to_anndata loaded": lambda: cv.to_anndata(location, lazy=False),
        "view read_zarr": lambda: ad.read_zarr(cv.anndata_view(location)),
        "view read_lazy": lambda: ad.experimental.read_lazy(cv.anndata_view(location)).to_memory(),
        "export v3": exported("v3.zarr"),
        "export v2": exported("v2.zarr", zarr_format=2),
        "export h5ad": exported("out.h5ad"),
    }


def _normalised(frame: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``frame`` with the documented differences undone (see the module's doc)."""
    out = frame[order].copy()
    for name in order:
        dtype = out[name].dtype
        if dtype.kind == "O" or isinstance(dtype, pd.StringDtype):
            out[name] = out[name].astype("str")
    out.index = out.index.astype("str")
    return out


def _assert_frames(got: pd.DataFrame, expected: pd.DataFrame, *, lazy: bool) -> None:
    assert got.index.name == expected.index.name
    assert list(got.columns) == list(expected.columns)  # the order they were written in
    if lazy:
        # anndata's read_lazy drops unused categories of anndata's own files too
        expected = expected.copy()
        for name in expected.columns:
            if isinstance(expected[name].dtype, pd.CategoricalDtype):
                expected[name] = expected[name].cat.remove_unused_categories()
    order = list(expected.columns)
    pd.testing.assert_frame_equal(_normalised(got, order), _normalised(expected, order))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tables")
    original = _adversarial()
    original.write_zarr(root / "original.zarr")
    cv.write_counts(root / "memory.zarr", original)  # from the AnnData in memory
    cv.write_counts(root / "file.zarr", root / "original.zarr")  # from its file, streamed
    cv.mount_datastore(root / "memory.zarr", root / "mount.zarr")
    return {"root": root, "anndata": ad.read_zarr(root / "original.zarr")}


@pytest.mark.parametrize("store", ["memory", "file", "mount"])
def test_every_output_gives_back_what_anndata_reads(
    written: dict[str, Any], tmp_path: Path, store: str
) -> None:
    expected = written["anndata"]
    for name, output in _outputs(written["root"] / f"{store}.zarr", tmp_path).items():
        got = output()
        x = got.X.compute() if hasattr(got.X, "compute") else got.X
        x = x.toarray() if sp.issparse(x) else np.asarray(x)
        np.testing.assert_array_equal(x, expected.X.toarray(), err_msg=name)
        for which in ("obs", "var"):
            try:
                _assert_frames(getattr(got, which), getattr(expected, which), lazy="lazy" in name)
            except AssertionError as exc:
                raise AssertionError(f"{name} {which}: {exc}") from exc


def test_an_index_name_that_is_also_a_column_leaves_every_index_unnamed(
    tmp_path: Path,
) -> None:
    # pandas allows it; anndata refuses to write such a frame, and its dataframe
    # encoding keeps the index beside the columns: every output leaves the name off
    obs = pd.DataFrame({"cell_type": ["T", "B"]}, index=pd.Index(["c1", "c2"], name="cell_type"))
    adata = ad.AnnData(X=sp.csr_matrix(np.eye(2, dtype=np.uint8)), obs=obs)
    cv.write_counts(tmp_path / "s.zarr", adata)
    for name, output in _outputs(tmp_path / "s.zarr", tmp_path).items():
        got = output()
        assert got.obs.index.name is None, name
        assert got.obs["cell_type"].astype(str).tolist() == ["T", "B"], name


def test_an_unnamed_index_stays_unnamed(tmp_path: Path) -> None:
    adata = ad.AnnData(X=sp.csr_matrix(np.eye(2, dtype=np.uint8)))
    adata.obs_names, adata.var_names = ["c1", "c2"], ["g1", "g2"]
    cv.write_counts(tmp_path / "s.zarr", adata)
    for name, output in _outputs(tmp_path / "s.zarr", tmp_path).items():
        got = output()
        assert (got.obs.index.name, got.var.index.name) == (None, None), name


def _with_times(tmp_path: Path) -> Path:
    times = pd.to_datetime(["2020-01-01", "2021-06-01T12:00:01.5", None], format="ISO8601")
    obs = pd.DataFrame({"seen": times, "z": [1, 2, 3]}, index=["c1", "c2", "c3"])
    cv.write_counts(
        tmp_path / "s.zarr", ad.AnnData(X=sp.csr_matrix((3, 2), dtype=np.uint8), obs=obs)
    )
    return tmp_path / "s.zarr"


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_datetime_column_is_exported_to_zarr_as_the_view_presents_it(
    tmp_path: Path, zarr_format: int
) -> None:
    # anndata has no writer for a pandas datetime column: the export stopped with
    # anndata's IORegistryError naming DatetimeArray; it is written as the view
    # presents it, a datetime64 array element, which anndata reads back as one
    store = _with_times(tmp_path)
    expected = cv.to_anndata(store, lazy=False).obs
    assert expected["seen"].dtype == np.dtype("datetime64[ns]")
    assert expected["seen"].isna().tolist() == [False, False, True]
    export_anndata(store, tmp_path / "out.zarr", zarr_format=zarr_format)
    for got in (ad.read_zarr(tmp_path / "out.zarr").obs, ad.read_zarr(cv.anndata_view(store)).obs):
        assert list(got.columns) == ["seen", "z"]
        pd.testing.assert_frame_equal(got, expected, check_index_type=False)


def test_a_datetime_column_is_refused_for_an_h5ad_naming_it(tmp_path: Path) -> None:
    store = _with_times(tmp_path)
    with pytest.raises(ValueError, match=r"cellData column 'seen' holds datetimes.*\.zarr"):
        export_anndata(store, tmp_path / "out.h5ad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # nothing written


def test_a_composite_gives_its_columns_in_order_of_first_appearance(tmp_path: Path) -> None:
    # its own columns first, then the sources' carried columns in order of first
    # appearance, as anndata.concat(join="outer") orders them (they were in name order)
    for name, columns in {"a": {"z": [1, 2], "b": [3, 4]}, "b": {"m": [5, 6], "z": [7, 8]}}.items():
        obs = pd.DataFrame(columns, index=[f"{name}{i}" for i in range(2)])
        var = pd.DataFrame({"y": ["1", "2"], "x": ["3", "4"]}, index=["g1", "g2"])
        ad.AnnData(X=sp.csr_matrix(np.eye(2, dtype=np.uint8)), obs=obs, var=var).write_zarr(
            tmp_path / f"{name}.zarr"
        )
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"})
    for name, output in _outputs(tmp_path / "c.zarr", tmp_path).items():
        got = output()
        assert list(got.obs.columns) == ["source", "sourceId", "z", "b", "m"], name
        assert list(got.var.columns) == ["y", "x"], name


def test_a_table_without_the_records_gives_name_order_and_an_unnamed_index(
    written: dict[str, Any], tmp_path: Path
) -> None:
    # a store written before cytearc:indexName and cytearc:columnOrder existed
    store = tmp_path / "old.zarr"
    shutil.copytree(written["root"] / "memory.zarr", store)
    for table in ("cellData", "RNA/featureData"):
        group = zarr.open_group(store / table, mode="r+")
        assert set(group.attrs) == {"cytearc:indexName", "cytearc:columnOrder"}
        group.attrs.clear()
    for name, output in _outputs(store, tmp_path).items():
        got = output()
        assert got.obs.index.name is None, name
        assert list(got.obs.columns) == sorted(written["anndata"].obs.columns), name
