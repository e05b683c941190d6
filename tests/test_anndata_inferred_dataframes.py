"""A group with ``_index`` and no other attribute is a dataframe by structure (the
AnnData spec's fallback for anndata 0.7 files): its members are its columns.

Without ``column-order`` the columns were none, so ``read`` gave an empty
DataFrame and ``anndata ls`` showed ``2 x 0``, dropping ``col`` silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from cytearc_vfs_adapters.anndata import AnnDataContainer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def _text(group: Any, name: str, values: list[str]) -> None:
    if isinstance(group, h5py.Group):
        group.create_dataset(name, data=np.array(values, dtype=h5py.string_dtype()))
    else:
        group.create_array(name, shape=(len(values),), dtype=str)[:] = np.array(
            values, dtype=object
        )


def _numbers(group: Any, name: str, values: list[int]) -> None:
    if isinstance(group, h5py.Group):
        group.create_dataset(name, data=np.array(values, dtype="i4"))
    else:
        group.create_array(name, shape=(len(values),), dtype="i4")[:] = values


def _container(root: Any) -> None:
    """anndata 0.7's layout (no root attributes), with an attribute-less dataframe in uns."""
    for frame, names in (("obs", ["c0", "c1"]), ("var", ["g0"])):
        group = root.create_group(frame)
        group.attrs.update(
            {
                "_index": "_index",
                "column-order": [],
                "encoding-type": "dataframe",
                "encoding-version": "0.1.0",
            }
        )
        _text(group, "_index", names)
    uns = root.create_group("uns")
    frame = uns.create_group("noattr_df")
    frame.attrs["_index"] = "idx"
    _text(frame, "idx", ["a", "b"])
    _numbers(frame, "col", [5, 6])
    _text(frame, "label", ["x", "y"])
    labels = frame.create_group("__categories")  # legacy labels: never a column
    _text(labels, "unused", ["p"])


@pytest.mark.parametrize("storage", ["zarr2", "zarr3", "h5ad"])
def test_an_attribute_less_dataframe_reads_its_members_as_columns(
    tmp_path: Path, storage: str
) -> None:
    if storage == "h5ad":
        location = tmp_path / "a.h5ad"
        with h5py.File(location, "w") as file:
            _container(file)
    else:
        location = tmp_path / "a.zarr"
        _container(zarr.open_group(location, mode="w", zarr_format=int(storage[-1])))
    with AnnDataContainer.open(location) as adata:
        frame = adata.read("uns/noattr_df")
        assert list(frame.columns) == ["col", "label"]  # by name, __categories left out
        assert frame.index.name == "idx" and list(frame.index) == ["a", "b"]
        assert frame["col"].tolist() == [5, 6] and frame["label"].tolist() == ["x", "y"]
        listed = {info.path: info for info in adata.elements()}
        assert listed["uns/noattr_df"].shape == (2, 2)
        assert {"uns/noattr_df/col", "uns/noattr_df/label"} <= set(listed)
