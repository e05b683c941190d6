"""A composite over S3 sources read through ``to_dask()`` on a LocalCluster of worker processes.

Each worker unpickles the composite (credentials in memory, inside the
pickled store), builds its own reader once and its own bounded source
cache; the result equals a local read, and no worker's files or
environment hold the credentials.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cloud_servers import CloudBackend
from conftest import realistic_counts
from dask_clusters import process_cluster

import cytearc_vfs as cv
from cytearc_vfs.remote.source_cache import CACHE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.remote]

SMALL = cv.LayoutPolicy(64 * 1024, 4096)
BUDGET = 200_000


def _worker_state() -> dict[str, Any]:
    """On a worker: its readers' cache figures, and whether a credential is in its environment."""
    from cytearc_vfs.read.blockwise import _PROCESS_READERS

    caches = []
    for reader in _PROCESS_READERS.values():
        store = reader._recipe[0]
        if hasattr(store, "cache_info"):
            caches.append(store.cache_info()._asdict())
    return {"pid": os.getpid(), "caches": caches, "environment": "\n".join(os.environ.values())}


def _files_under(directory: str) -> list[bytes]:
    return [path.read_bytes() for path in Path(directory).rglob("*") if path.is_file()]


def test_a_remote_composite_through_dask_on_worker_processes(
    s3_backend: CloudBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")  # before the sources are written
    monkeypatch.delenv(CACHE_ENV, raising=False)
    url, _ = s3_backend.new_root()
    options = s3_backend.storage_options()
    parts = [realistic_counts(400, 40, density=0.2, seed=20 + index) for index in range(3)]
    sources: dict[str, str] = {}
    for index, part in enumerate(parts):
        sources[f"s{index}"] = f"{url}/s{index}.zarr"
        cv.write_counts(
            sources[f"s{index}"],
            part,
            features=[f"g{i}" for i in range(40)],
            layout=SMALL,
            storage_options=options,
        )
    source_options = {name: options for name in sources}
    composite = cv.create_composite(
        tmp_path / "c.zarr", sources, source_storage_options=source_options
    )
    expected = np.vstack([part.toarray() for part in parts])
    np.testing.assert_array_equal(composite.reader().read(), expected)  # the local read
    worker_dirs = tmp_path / "workers"
    # every worker's cache gets this budget from its environment
    with process_cluster(local_directory=str(worker_dirs), env={CACHE_ENV: str(BUDGET)}) as client:
        lazy = composite.reader().to_dask(chunks=(100, 40))
        np.testing.assert_array_equal(client.compute(lazy).result(), expected)
        # a second pass is served from each worker's cache
        np.testing.assert_array_equal(client.compute(lazy.sum(axis=0)).result(), expected.sum(0))
        states = client.run(_worker_state)
    assert len(states) == 2
    directories, hits = set(), 0
    for state in states.values():
        assert state["caches"], "every worker read through its own reader"
        for cache in state["caches"]:
            assert cache["max_bytes"] == BUDGET
            assert 0 < cache["bytes_cached"] <= BUDGET
            hits += cache["hits"]
            directories.add(cache["directory"])
        for secret in s3_backend.secrets:
            assert secret not in state["environment"]
    # the second pass found blocks in the caches of the workers that ran them
    # first (which worker runs a block is the scheduler's choice)
    assert hits > 0
    assert len(directories) == len(states), "one cache per worker process"
    blobs = _files_under(str(worker_dirs)) + _files_under(str(tmp_path / "c.zarr"))
    for directory in directories:
        if directory is not None and Path(directory).exists():
            blobs += _files_under(directory)
    for secret in s3_backend.secrets:
        assert not any(secret.encode() in blob for blob in blobs)
    composite.close()
