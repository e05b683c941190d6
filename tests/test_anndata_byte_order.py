"""Arrays stored big-endian (``>f4``, ``>i4``) are read and imported like native ones.

HDF5 and Zarr v2 both keep the byte order an array was written with; files
from big-endian machines, and tools that write ``>f4`` explicitly, hold such
arrays. scipy.sparse takes native byte order only, so the bands of such a
matrix failed with scipy's own error before they were converted.
"""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cytearc_vfs_adapters.anndata import AnnDataContainer

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

COUNTS = np.array([[0, 1, 250], [3, 0, 0], [0, 0, 9], [4, 5, 6]], dtype=np.float32)


def _data() -> ad.AnnData:
    data = ad.AnnData(X=COUNTS.copy())
    data.obs_names = [f"c{i}" for i in range(COUNTS.shape[0])]
    data.var_names = [f"g{i}" for i in range(COUNTS.shape[1])]
    return data


def _h5ad(tmp_path: Path, dtype: str) -> Path:
    path = tmp_path / "big_endian.h5ad"
    _data().write_h5ad(path)
    with h5py.File(path, "r+") as handle:
        attributes = dict(handle["X"].attrs)
        del handle["X"]
        stored = handle.create_dataset("X", data=COUNTS.astype(dtype))
        stored.attrs.update(attributes)
    return path


def _zarr_v2(tmp_path: Path, dtype: str) -> Path:
    path = write_anndata_zarr(_data(), tmp_path / "big_endian.zarr", 2)
    root = zarr.open_group(path, mode="r+")
    attributes = dict(root["X"].attrs)
    del root["X"]
    stored = zarr.create_array(
        root.store, name="X", shape=COUNTS.shape, dtype=dtype, chunks=(2, 2), zarr_format=2
    )
    stored[...] = COUNTS.astype(dtype)
    stored.attrs.update(attributes)
    return path


@pytest.mark.parametrize("dtype", [">f4", ">i4"])
@pytest.mark.parametrize("storage", [_h5ad, _zarr_v2], ids=["h5ad", "zarr2"])
def test_bands_and_write_counts_of_a_big_endian_dense_x(
    tmp_path: Path, storage: object, dtype: str
) -> None:
    path = storage(tmp_path, dtype)  # type: ignore[operator]
    with AnnDataContainer.open(str(path)) as container:
        matrix = container.matrix()
        assert matrix.dtype == np.dtype(dtype).newbyteorder("=")
        rows = sp.vstack([band for _, _, band in matrix.iter_bands("rows", 3)])
        columns = sp.hstack([band for _, _, band in matrix.iter_bands("columns", 2)])
    np.testing.assert_array_equal(rows.toarray(), COUNTS)
    np.testing.assert_array_equal(columns.toarray(), COUNTS)
    assert rows.dtype.isnative and columns.dtype.isnative

    info = cv.write_counts(str(tmp_path / "out.zarr"), str(path))
    assert info.dtype == np.uint8  # whole non-negative counts below 256
    reader = cv.VirtualArrayReader(cv.open_store(str(tmp_path / "out.zarr")), assay="RNA")
    np.testing.assert_array_equal(reader.read(), COUNTS)


def test_big_endian_obs_columns(tmp_path: Path) -> None:
    """Plain, categorical-code and nullable-integer columns stored big-endian (a nullable
    one failed inside pandas with ``KeyError: dtype('>i4')``)."""
    data = _data()
    data.obs["n"] = np.array([1, 2, 3, 4], dtype=np.int64)
    data.obs["cat"] = pd.Categorical(["a", "b", "a", None])
    data.obs["ni"] = pd.array([1, None, 3, 4], dtype="Int32")
    path = write_anndata_zarr(data, tmp_path / "obs.zarr", 2)
    root = zarr.open_group(path, mode="r+")
    for key in ("obs/n", "obs/cat/codes", "obs/ni/values"):
        values, attributes = root[key][:], dict(root[key].attrs)
        del root[key]
        swapped = values.dtype.newbyteorder(">")
        stored = zarr.create_array(
            root.store, name=key, shape=values.shape, dtype=swapped, zarr_format=2
        )
        stored[:] = values.astype(swapped)
        stored.attrs.update(attributes)
    with AnnDataContainer.open(str(path)) as container:
        obs = container.obs()
    assert obs["n"].tolist() == [1, 2, 3, 4]
    assert obs["cat"].tolist()[:3] == ["a", "b", "a"] and pd.isna(obs["cat"].iloc[3])
    assert obs["ni"].dtype == pd.Int32Dtype()
    assert obs["ni"].tolist()[::2] == [1, 3] and pd.isna(obs["ni"].iloc[1])

    cv.write_counts(str(tmp_path / "out.zarr"), str(path), fill_missing=True)
    cells = zarr.open_group(cv.open_store(str(tmp_path / "out.zarr")), mode="r")["cellData"]
    assert cells["n"][:].tolist() == [1, 2, 3, 4]
    assert cells["cat"][:].tolist() == ["a", "b", "a", ""]
    np.testing.assert_array_equal(cells["ni"][:], [1.0, np.nan, 3.0, 4.0])
