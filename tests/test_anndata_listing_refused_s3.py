"""An AnnData store on real S3 whose credentials may read but not list (no
``s3:ListBucket``): the loopback S3 server behind a proxy that answers every
listing ``403 Forbidden``, as S3 answers such credentials.

zarr's ``ObjectStore`` passes obstore's ``PermissionDeniedError`` on as it is
(not a ``PermissionError``): the write must still import the counts by path,
and say that what else the store holds is not known (``not_imported is None``).
"""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
import zarr
from cli_harness import run_main
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from test_anndata_sources import remote_parts, upload, write

import cytearc_vfs as cv

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]


@pytest.mark.parametrize("name", ["r3", "r2"])
def test_write_from_s3_without_list_permission(
    s3_server: S3Server, tmp_path: Path, name: str
) -> None:
    from obstore.store import from_url

    data = remote_parts()[name]
    local = write(data, tmp_path / f"{name}.zarr", int(name[1]))
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    upload(from_url(f"s3://{bucket}", **direct), local)
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        proxy.fail(10_000, status=403, match="list-type")
        info = cv.write_counts(
            tmp_path / "out.zarr",
            f"s3://{bucket}/{name}.zarr",
            source_storage_options={**direct, "endpoint": proxy.endpoint},
        )
        assert proxy.faulted > 0  # the listings were refused, and the write went on
        url = f"s3://{bucket}/{name}.zarr"
        options = json.dumps({**direct, "endpoint": proxy.endpoint})
        done = run_main(
            "write", url, str(tmp_path / "cli.zarr"), "--source-storage-options", options, "--json"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["notImported"] is None
        assert f"what else {url} holds could not be listed" in done.stderr, done.stderr
        ls = run_main("anndata", "ls", url, "--storage-options", options)
        # anndata ls needs listings: refused in one line naming the refusal, exit 2
        assert ls.returncode == 2, ls.stderr
        assert f"{url}: listing its root was refused" in ls.stderr, ls.stderr
        # the remedy names the flag a shell user gives, not the Python keyword
        assert "pass ones that may, as --storage-options" in ls.stderr, ls.stderr
    finally:
        proxy.close()
    assert info.not_imported is None
    counts = zarr.open_array(cv.open_store(tmp_path / "out.zarr"), path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], ad.read_zarr(local).X.toarray())
