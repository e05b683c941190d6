"""A composite through ``to_dask`` and a lazy ``X`` on a real LocalCluster of two
worker processes: random selections equal the local read, a source replaced
between building the graph and computing it reaches the client as the
package's ``IdentityMismatchError`` (message intact), and a worker that dies
in a block is replaced and the block read again to the same values."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts
from dask_clusters import process_cluster

import cytearc_vfs as cv
from cytearc_vfs.errors import IdentityMismatchError

pytestmark = pytest.mark.slow

FEATURES = [f"g{i}" for i in range(30)]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with process_cluster() as connected:
        yield connected


def _composite(root: Path) -> tuple[Any, np.ndarray]:
    parts = [realistic_counts(150, 30, density=0.2, seed=seed) for seed in range(3)]
    sources = {}
    for index, part in enumerate(parts):
        sources[f"s{index}"] = root / f"s{index}.zarr"
        cv.write_counts(sources[f"s{index}"], part, features=FEATURES)
    return cv.create_composite(root / "c.zarr", sources), np.vstack([p.toarray() for p in parts])


def test_random_selections_equal_the_local_read(client: Any, tmp_path: Path) -> None:
    composite, expected = _composite(tmp_path)
    rng = np.random.default_rng(5)
    cells = rng.permutation(450)[:60]  # unsorted, across the three sources
    genes = np.sort(rng.choice(30, 7, replace=False))
    lazy = composite.reader().to_dask(chunks=(64, 16))
    got = client.compute(lazy[cells][:, genes]).result()
    np.testing.assert_array_equal(got, composite.reader().read(cells, genes))
    np.testing.assert_array_equal(got, expected[np.ix_(cells, genes)])
    x = cv.to_anndata(tmp_path / "c.zarr").X
    subset = client.compute(x[np.sort(cells)][:, genes]).result()
    np.testing.assert_array_equal(subset.toarray(), expected[np.ix_(np.sort(cells), genes)])
    composite.close()


def test_a_source_replaced_before_compute_reaches_the_client_as_its_error(
    client: Any, tmp_path: Path
) -> None:
    composite, _ = _composite(tmp_path)
    lazy = composite.reader().to_dask(chunks=(64, 30))
    x = cv.to_anndata(composite).X
    shutil.rmtree(tmp_path / "s1.zarr")
    cv.write_counts(tmp_path / "s1.zarr", realistic_counts(150, 30, seed=9), features=FEATURES)
    for array in (lazy, x):
        with pytest.raises(IdentityMismatchError, match=r"source 's1'.*recreate the composite"):
            client.compute(array).result()
    composite.close()


def _dies_once(block: np.ndarray, marker: str) -> np.ndarray:
    """Kill this worker process the first time any block runs here."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return block


def test_a_worker_killed_in_a_block_is_replaced_and_the_values_are_right(
    client: Any, tmp_path: Path
) -> None:
    composite, expected = _composite(tmp_path)
    lazy = composite.reader().to_dask(chunks=(50, 30))
    marker = str(tmp_path / "died")
    # meta given: dask would otherwise call the function here to infer it
    dying = lazy.map_blocks(_dies_once, marker, meta=np.empty((0, 0), lazy.dtype))
    np.testing.assert_array_equal(client.compute(dying).result(), expected)
    assert os.path.exists(marker), "a worker died in a block"
    composite.close()
