"""A composite's ``source`` column in every AnnData output is what ``anndata.concat(...,
label="source")`` gives: a categorical whose categories are the sources in the
composite's order (a source none of whose cells is kept included), not text.

It came back as text from ``to_anndata`` (lazy or not), ``export`` (.h5ad, .zarr),
the view and ``serve --as-anndata``. The composite's ``cellData/source`` keeps its
text values (plain zarr and the DataStore read names) and records the categories.
"""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.anndata_output import anndata_view, export_anndata
from interop.kinds import cli_server
from zarr.storage import FsspecStore

import cytearc_vfs as cv
from cytearc_vfs.format.tables import CATEGORICAL_ATTR

N_GENES = 5
#: composite order differs from name order, and "empty" keeps no cell
ORDER = ("zeta", "empty", "alpha")


def source(seed: int, n: int) -> ad.AnnData:
    counts = sp.random(n, N_GENES, density=0.5, format="csr", random_state=seed)
    counts.data = np.ceil(counts.data * 5)
    return ad.AnnData(
        X=counts,
        obs=pd.DataFrame(index=[f"s{seed}-c{i}" for i in range(n)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(N_GENES)]),
    )


@pytest.fixture(scope="module")
def composite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.Series]:
    root = tmp_path_factory.mktemp("source-column")
    sources = {"zeta": source(1, 4), "empty": source(2, 3), "alpha": source(3, 2)}
    locations = {}
    for name, data in sources.items():
        cv.write_counts(root / f"{name}.zarr", data)
        locations[name] = root / f"{name}.zarr"
    kept = {"empty": np.zeros(3, dtype=bool)}
    cv.create_composite(root / "c.zarr", {n: locations[n] for n in ORDER}, cells=kept).close()
    kept_sources = {n: sources[n][: 0 if n == "empty" else None] for n in ORDER}
    expected = ad.concat(kept_sources, label="source").obs["source"]
    return root / "c.zarr", expected


def assert_concat_source(found: pd.Series, expected: pd.Series) -> None:
    assert isinstance(found.dtype, pd.CategoricalDtype), found.dtype
    assert found.cat.categories.tolist() == list(ORDER)
    assert found.dtype == expected.dtype  # categories, their order and type, ordered
    assert found.tolist() == expected.tolist() == ["zeta"] * 4 + ["alpha"] * 2


@pytest.mark.parametrize("lazy", [True, False])
def test_to_anndata_gives_source_as_concat_does(
    composite: tuple[Path, pd.Series], lazy: bool
) -> None:
    location, expected = composite
    assert_concat_source(cv.to_anndata(location, lazy=lazy).obs["source"], expected)


@pytest.mark.parametrize("name", ["out.h5ad", "out.zarr"])
def test_an_export_gives_source_as_concat_does(
    composite: tuple[Path, pd.Series], tmp_path: Path, name: str
) -> None:
    location, expected = composite
    export_anndata(location, tmp_path / name)
    read = ad.read_h5ad if name.endswith(".h5ad") else ad.read_zarr
    assert_concat_source(read(tmp_path / name).obs["source"], expected)


def test_the_view_and_the_server_give_source_as_concat_does(
    composite: tuple[Path, pd.Series],
) -> None:
    location, expected = composite
    view = anndata_view(location)
    try:
        assert_concat_source(ad.read_zarr(view).obs["source"], expected)
    finally:
        view.close()
    with cli_server(["serve", str(location), "--port", "0", "--as-anndata"]) as url:
        served = ad.read_zarr(FsspecStore.from_url(url, read_only=True))
    assert_concat_source(served.obs["source"], expected)


def test_the_stored_column_keeps_its_names_and_records_the_categories(
    composite: tuple[Path, pd.Series],
) -> None:
    location, _ = composite
    cells = zarr.open_group(cv.open_store(location), mode="r")["cellData"]
    stored = cells["source"]
    assert isinstance(stored, zarr.Array)
    assert [str(v) for v in stored[:]] == ["zeta"] * 4 + ["alpha"] * 2
    assert stored.attrs[CATEGORICAL_ATTR] == {"categories": list(ORDER), "ordered": False}


def test_a_composite_created_before_the_record_gives_source_as_concat_does(
    composite: tuple[Path, pd.Series], tmp_path: Path
) -> None:
    """Composites created earlier stored ``source`` as text without categories: the
    outputs take the composite's source order for them; an ordinary store's text column
    named ``source`` stays text."""
    import shutil

    location, expected = composite
    older = tmp_path / "older.zarr"
    shutil.copytree(location, older)
    stored = zarr.open_array(older / "cellData" / "source", mode="r+")
    del stored.attrs[CATEGORICAL_ATTR]
    assert_concat_source(cv.to_anndata(older, lazy=False).obs["source"], expected)
    view = anndata_view(older)
    try:
        assert_concat_source(ad.read_zarr(view).obs["source"], expected)
    finally:
        view.close()
    export_anndata(older, tmp_path / "older.h5ad")
    assert_concat_source(ad.read_h5ad(tmp_path / "older.h5ad").obs["source"], expected)
    plain = source(4, 3)
    plain.obs["source"] = ["x", "y", "x"]
    cv.write_counts(tmp_path / "plain.zarr", plain)
    back = cv.to_anndata(tmp_path / "plain.zarr").obs["source"]
    assert not isinstance(back.dtype, pd.CategoricalDtype) and back.tolist() == ["x", "y", "x"]
