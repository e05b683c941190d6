"""Record arrays (``rec-array`` 0.2.0): their text fields are read as ``str``, as anndata reads them.

scanpy's ``rank_genes_groups`` results (``uns/rank_genes_groups/names``) are
record arrays; in an ``.h5ad`` file their text fields are HDF5
variable-length strings, which h5py gives as ``bytes``. anndata < 0.7 wrote
``obs`` and ``var`` as record arrays with fixed-width ``|S`` fields.
"""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np
import pytest
import zarr
from anndata_files import write_anndata_zarr
from cytearc_vfs_adapters.anndata import AnnDataContainer, MalformedElementError

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::anndata.OldFormatWarning"
)

NAMES = np.array(["CD3E", "bé-gène"])


def _with_records() -> ad.AnnData:
    data = ad.AnnData(np.ones((2, 2), dtype=np.float32))
    data.uns["ranked"] = np.rec.fromarrays([NAMES, np.array([1.5, 2.0])], names="names,score")
    return data


def _reference(path: Path) -> np.ndarray:
    data = ad.read_h5ad(path) if path.suffix == ".h5ad" else ad.read_zarr(path)
    return np.asarray(data.uns["ranked"])


@pytest.mark.parametrize("storage", ["h5ad", "zarr2", "zarr3"])
def test_text_fields_read_as_str(tmp_path: Path, storage: str) -> None:
    if storage == "h5ad":
        path = tmp_path / "r.h5ad"
        _with_records().write_h5ad(path)
    else:
        path = write_anndata_zarr(_with_records(), tmp_path / "r.zarr", int(storage[-1]))
    with AnnDataContainer.open(str(path)) as container:
        got = container.read("uns/ranked")
    reference = _reference(path)
    assert got.dtype.names == reference.dtype.names
    assert got.tolist() == reference.tolist()
    assert all(type(item) is str for item in got["names"].tolist())
    np.testing.assert_array_equal(got["score"], [1.5, 2.0])


def test_fixed_width_byte_fields_of_a_legacy_table(tmp_path: Path) -> None:
    """anndata < 0.7: ``obs`` a record array of ``|S`` fields (a Zarr v2 array)."""
    path = tmp_path / "old.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=2)
    records = np.array(
        [(b"c1", "bé".encode()), (b"c2", b"b")], dtype=[("index", "S2"), ("label", "S3")]
    )
    root.create_array("obs", data=records)
    root.create_array("var", data=np.array([(b"g1",), (b"g2",)], dtype=[("index", "S2")]))
    root.create_array("X", data=np.ones((2, 2), dtype=np.float32))
    with AnnDataContainer.open(str(path)) as container:
        got = container.read("obs")
        table = container.obs()
    assert got["label"].tolist() == ["bé", "b"]
    assert got["index"].tolist() == ["c1", "c2"]
    assert table["label"].tolist() == ["bé", "b"]
    assert table.index.tolist() == ["c1", "c2"]


@pytest.mark.parametrize("stored", [np.arange(3), np.array(7)], ids=["1-d", "0-d"])
def test_a_table_stored_as_a_plain_array_is_refused_by_name(
    tmp_path: Path, stored: np.ndarray
) -> None:
    """An ``obs`` that is an array but no record array holds no ids: refused naming the
    element, not a bare ``has no len()`` (1-d) or ``tuple index out of range`` (0-d)."""
    path = write_anndata_zarr(ad.AnnData(np.ones((3, 2), dtype=np.float32)), tmp_path / "a.zarr", 3)
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    del root["obs"]
    root.create_array("obs", data=stored)
    message = r"element obs: a dataframe must be a group .* found (array|numeric-scalar) 0\.2\.0"
    with AnnDataContainer.open(str(path)) as container:
        with pytest.raises(MalformedElementError, match=message):
            container.obs()
        with pytest.raises(MalformedElementError, match=message):
            _ = container.shape
    with pytest.raises(MalformedElementError, match=message):
        cv.write_counts(str(tmp_path / "out.zarr"), str(path))
    assert not (tmp_path / "out.zarr").exists()


def test_a_legacy_record_table_imports_as_anndata_reads_it(tmp_path: Path) -> None:
    """The ids' field names the index (``index``), as in ``anndata.read_zarr``: an import
    from the path keeps the same index name as an import of the loaded AnnData."""
    path = tmp_path / "old.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=2)
    root.create_array(
        "obs", data=np.array([(b"c1", 1.5), (b"c2", 2.0)], dtype=[("index", "S2"), ("q", "<f8")])
    )
    root.create_array("var", data=np.array([(b"g1",), (b"g2",)], dtype=[("index", "S2")]))
    root.create_array("X", data=np.array([[1, 0], [2, 3]], dtype=np.float32))
    loaded = ad.read_zarr(path)
    with AnnDataContainer.open(str(path)) as container:
        assert container.obs().index.name == loaded.obs.index.name == "index"
        assert container.var().index.name == loaded.var.index.name
    stores = {
        "path": cv.write_counts(str(tmp_path / "from_path.zarr"), str(path)).location,
        "memory": cv.write_counts(str(tmp_path / "from_memory.zarr"), loaded).location,
    }
    tables = {
        how: {
            name: dict(group[name].attrs)
            for group in [zarr.open_group(cv.open_store(str(location)), mode="r")]
            for name in ("cellData", "RNA/featureData")
        }
        for how, location in stores.items()
    }
    assert tables["path"] == tables["memory"]
    assert tables["path"]["cellData"]["cytearc:indexName"] == "index"
