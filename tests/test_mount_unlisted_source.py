"""A mount whose source is on S3 with credentials that may read but not list it (no
``s3:ListBucket``): the loopback S3 server behind a proxy that answers every
listing ``403 Forbidden``, as S3 answers such credentials.

Opening it failed ("cannot be read (PermissionError: listing its root was
refused ...)"). Now the source is read by path as a composite's source is
(documents at their keys, a ``HEAD`` per shard for the pins): the counts, the
tables and a source artifact at its path read as with a listing. Listing the
artifacts is the union of the target's and the source's listings, which the
source refuses: said so, with the remedy. Mounting needs the listing (it finds
the source's assays and copies its tables), and says so.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from cli_harness import run_main
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy
from s3_server import S3Server

import cytearc_vfs as cv

pytestmark = pytest.mark.remote

_PCA = np.arange(600.0).reshape(300, 2)


@pytest.fixture
def source(s3_server: S3Server) -> Iterator[dict[str, Any]]:
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    url = f"s3://{bucket}/a.zarr"
    counts = realistic_counts(300, 40, density=0.2, seed=5)
    cv.write_counts(url, counts, storage_options=direct, layout=cv.LayoutPolicy(4 << 10, 1 << 10))
    store = cv.open_store(url, mode="r+", storage_options=direct)
    provenance = {"operation": "pca", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=provenance) as pca:
        pca.write_array("data", _PCA)
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    try:
        yield {
            "url": url,
            "counts": counts,
            "direct": direct,
            "unlisted": {**direct, "endpoint": proxy.endpoint},
            "proxy": proxy,
            "pca": pca.path,
        }
    finally:
        proxy.close()


def test_a_mount_opens_and_reads_by_path_without_list_permission(
    source: dict[str, Any], tmp_path: Path
) -> None:
    target = tmp_path / "mine.zarr"
    cv.mount_datastore(source["url"], target, source_storage_options=source["direct"]).close()
    proxy = source["proxy"]
    proxy.take()
    mount = cv.open_store(target, source_storage_options=source["unlisted"])
    opened = proxy.take()
    kinds = Counter("LIST" if "list-type" in r.path else r.method for r in opened)
    # one refused listing, the documents by path, a HEAD per shard (3 counts, 4 countsT)
    assert kinds == {"LIST": 1, "GET": 14, "HEAD": 7}, opened
    np.testing.assert_array_equal(mount.reader().read(), source["counts"].toarray())
    data = zarr.open_array(mount, path=f"{source['pca']}/data", mode="r")
    np.testing.assert_array_equal(data[:], _PCA)
    assert len(zarr.open_array(mount, path="cellData/ids", mode="r")[:]) == 300
    assert not [r for r in proxy.take() if "list-type" in r.path]
    # the union listing needs the source's: refused in the mount's words
    with pytest.raises(PermissionError) as refused:
        cv.list_artifacts(mount, "RNA/artifacts")
    said = str(refused.value)
    assert said.startswith(f"mount of {source['url']}: listing 'RNA/artifacts'"), said
    assert "s3:ListBucket" in said and "source_storage_options={...}" in said
    mount.close()


def test_mounting_needs_list_permission(source: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "mine.zarr"
    with pytest.raises(PermissionError) as refused:
        cv.mount_datastore(source["url"], target, source_storage_options=source["unlisted"])
    said = str(refused.value)
    assert said.startswith(f"the source {source['url']}: its listing was refused"), said
    assert "s3:ListBucket" in said
    assert "Mount it with credentials that may also list it" in said
    assert not target.exists()


def test_verify_of_the_mount_says_what_it_must_list(source: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "mine.zarr"
    cv.mount_datastore(source["url"], target, source_storage_options=source["direct"]).close()
    options = json.dumps(source["unlisted"])
    said = run_main("verify", str(target), "--source-storage-options", options)
    assert said.returncode == 2, said.stderr
    assert f"the mount's source at {source['url']}: listing its root was refused" in said.stderr
    assert "s3:ListBucket" in said.stderr and "--source-storage-options '{...}'" in said.stderr
