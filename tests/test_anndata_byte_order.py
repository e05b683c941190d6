"""A dense ``X`` stored big-endian (``>f4``, ``>i4``) is read and imported like a native one.

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
