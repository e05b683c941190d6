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
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
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


def _uploaded(
    s3_server: S3Server, tmp_path: Path, data: ad.AnnData
) -> tuple[str, dict[str, Any], LoopbackProxy]:
    """``data`` uploaded as ``r3.zarr``: its bucket, the server's options and a proxy."""
    from obstore.store import from_url

    local = write(data, tmp_path / "r3.zarr", 3)
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    upload(from_url(f"s3://{bucket}", **direct), local)
    return bucket, direct, LoopbackProxy(s3_server.endpoint)


def _on_aws(
    s3_server: S3Server, tmp_path: Path, data: ad.AnnData
) -> tuple[str, dict[str, Any], LoopbackProxy]:
    """``data`` uploaded as ``r3.zarr``, and options through a proxy that refuses listings
    and answers an absent key ``403``, as AWS answers credentials without
    ``s3:ListBucket`` (the loopback server answers ``404``)."""
    bucket, direct, proxy = _uploaded(s3_server, tmp_path, data)
    proxy.fail(10_000, status=403, match="list-type")
    proxy.absent_forbidden = True
    return bucket, {**direct, "endpoint": proxy.endpoint}, proxy


def test_write_on_aws_without_list_access_takes_refused_documents_as_absent(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """Every reading asks for documents absent in every store (a v3 root's ``.zgroup``
    and ``.zmetadata``): answered 403 after a refused listing, they are absent, and a
    store whose every chunk is written imports as with a listing."""
    data = remote_parts()["r3"]
    # object-dtype indexes: string-array elements, without the all-false mask chunk
    # a nullable one leaves unwritten
    data.obs.index = pd.Index(list(data.obs_names), dtype=object)
    data.var.index = pd.Index(list(data.var_names), dtype=object)
    bucket, options, proxy = _on_aws(s3_server, tmp_path, data)
    try:
        url = f"s3://{bucket}/r3.zarr"
        info = cv.write_counts(tmp_path / "out.zarr", url, source_storage_options=options)
        done = run_main(
            "write",
            url,
            str(tmp_path / "cli.zarr"),
            "--source-storage-options",
            json.dumps(options),
        )
        assert done.returncode == 0, done.stderr
    finally:
        proxy.close()
    assert info.not_imported is None
    for out in ("out.zarr", "cli.zarr"):
        counts = zarr.open_array(cv.open_store(tmp_path / out), path="RNA/counts", mode="r")
        np.testing.assert_array_equal(counts[:], data.X.toarray())


def test_write_on_aws_without_list_access_refuses_an_unwritten_chunk(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """anndata leaves a nullable index's all-false mask chunk unwritten; answered 403
    after a refused listing, nothing proves it absent (a forbidden chunk would read as
    the same zeros): refused in one line naming both readings and the remedies, and
    nothing is written."""
    bucket, options, proxy = _on_aws(s3_server, tmp_path, remote_parts()["r3"])
    try:
        with pytest.raises(PermissionError) as raised:
            cv.write_counts(
                tmp_path / "out.zarr", f"s3://{bucket}/r3.zarr", source_storage_options=options
            )
    finally:
        proxy.close()
    message = str(raised.value)
    assert "/mask/c/0 was answered 403 Forbidden" in message, message
    assert "forbidden or lost" in message and "grant s3:ListBucket" in message, message
    assert not (tmp_path / "out.zarr").exists()


def test_a_missing_store_without_list_access_names_both_readings(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A mistyped store name answers 403 for every document: no root group is readable,
    so no document is taken as absent, and the message names both readings."""
    bucket, options, proxy = _on_aws(s3_server, tmp_path, remote_parts()["r3"])
    try:
        with pytest.raises(OSError, match="S3 also answers 403 for a missing object"):
            cv.write_counts(
                tmp_path / "out.zarr", f"s3://{bucket}/r4.zarr", source_storage_options=options
            )
    finally:
        proxy.close()
    assert not (tmp_path / "out.zarr").exists()


def test_a_refused_object_is_refused_when_the_listing_is_allowed(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A 403 is read as an absent document only when the listing is refused too: with a
    listing allowed, a refused object is the object's own refusal."""
    bucket, direct, proxy = _uploaded(s3_server, tmp_path, remote_parts()["r3"])
    try:
        proxy.fail(10_000, status=403, match="X/zarr.json")
        with pytest.raises(OSError, match="403"):
            cv.write_counts(
                tmp_path / "out.zarr",
                f"s3://{bucket}/r3.zarr",
                source_storage_options={**direct, "endpoint": proxy.endpoint},
            )
    finally:
        proxy.close()
    assert not (tmp_path / "out.zarr").exists()
