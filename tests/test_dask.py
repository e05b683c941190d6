"""Composite and ordinary counts through dask, on worker processes of a LocalCluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts
from dask_clusters import process_cluster

import cytearc_vfs as cv

pytestmark = pytest.mark.slow


def test_to_dask_on_a_process_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed")  # before the sources are written
    a = realistic_counts(300, 40, density=0.1, seed=1)
    b = realistic_counts(200, 30, density=0.1, seed=2)
    cv.write_counts(tmp_path / "a.zarr", a, features=[f"g{i}" for i in range(40)])
    cv.write_counts(tmp_path / "b.zarr", b, features=[f"g{i}" for i in range(20, 50)])
    comp = cv.create_composite(
        tmp_path / "c.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}
    )
    expected = comp.reader().read()
    with process_cluster() as client:
        lazy = comp.reader().to_dask(chunks=(128, 25))
        assert lazy.shape == expected.shape
        np.testing.assert_array_equal(client.compute(lazy).result(), expected)
        totals = client.compute(lazy.sum(axis=0)).result()
        np.testing.assert_array_equal(totals, expected.sum(axis=0))
        ordinary = cv.VirtualArrayReader(tmp_path / "a.zarr").to_dask(chunks=(100, 40))
        np.testing.assert_array_equal(client.compute(ordinary).result(), a.toarray())
