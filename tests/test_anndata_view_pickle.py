"""A pickled cv.anndata_view of a composite over a remote source reads it.

The view pickles with the open composite, which carries its sources'
``storage_options`` (credentials in memory, docs/anndata-out.md); the
unpickled view uses that composite and does not reopen it without them.
Real loopback S3 server (moto) and a real pool of worker processes.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import anndata as ad
import dask
import numpy as np
import obstore
import pandas as pd
import scipy.sparse as sp
from anndata_files import write_anndata_zarr
from obstore.store import from_url
from s3_server import S3Server

import cytearc_vfs as cv


def _remote_composite(s3_server: S3Server, tmp_path: Path) -> tuple[Path, dict, np.ndarray]:
    rng = np.random.default_rng(5)
    counts = sp.random(120, 15, density=0.3, format="csr", random_state=rng).astype(np.float32)
    counts.data = rng.integers(1, 40, counts.nnz).astype(np.float32)
    data = ad.AnnData(
        counts.astype(np.int32),
        obs=pd.DataFrame(index=[f"c{i}" for i in range(120)]),
        var=pd.DataFrame(index=[f"g{j}" for j in range(15)]),
    )
    local = write_anndata_zarr(data, tmp_path / "a.zarr", 3)
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **options)
    for file in local.rglob("*"):
        if file.is_file():
            obstore.put(raw, f"a.zarr/{file.relative_to(local).as_posix()}", file.read_bytes())
    location = tmp_path / "comp.zarr"
    source_options = {"a": options}
    cv.create_composite(
        location, {"a": f"s3://{bucket}/a.zarr"}, source_storage_options=source_options
    ).close()
    return location, source_options, counts.toarray().astype(np.int64)


def test_an_unpickled_view_reads_its_remote_sources(s3_server: S3Server, tmp_path: Path) -> None:
    location, options, expected = _remote_composite(s3_server, tmp_path)
    view = cv.anndata_view(location, source_storage_options=options)
    data = pickle.dumps(view)
    # documented: the source options travel inside the pickle, in memory
    assert b"testing-secret" in data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read = ad.read_zarr(pickle.loads(data))
    np.testing.assert_array_equal(np.asarray(read.X), expected)
    assert list(read.obs_names[:2]) == ["c0", "c1"]


def test_read_lazy_of_a_remote_view_computes_on_worker_processes(
    s3_server: S3Server, tmp_path: Path
) -> None:
    location, options, expected = _remote_composite(s3_server, tmp_path)
    view = cv.anndata_view(location, source_storage_options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lazy = ad.experimental.read_lazy(view)
    with dask.config.set(scheduler="processes", num_workers=2):
        computed = lazy.X.compute()
    dense = computed.toarray() if sp.issparse(computed) else np.asarray(computed)
    np.testing.assert_array_equal(dense, expected)
