"""Source stores on a real S3 API server on loopback: write, open, verify, fail closed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import open_location

pytestmark = pytest.mark.remote


def test_write_open_and_read_back_over_s3(s3_server: S3Server, counts: sp.csr_array) -> None:
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/pbmc.zarr"
    options = s3_server.storage_options()
    info = cv.write_counts(url, counts, storage_options=options)
    assert info.location == url
    store = cv.open_store(url, storage_options=options)
    np.testing.assert_array_equal(
        zarr.open_array(store, path="RNA/counts", mode="r")[:], counts.toarray()
    )
    np.testing.assert_array_equal(
        zarr.open_array(store, path="RNA/countsT", mode="r")[:], counts.toarray().T
    )
    reports = deep_verify(store, where=url)
    assert all(report.ok for report in reports)


def test_remote_overwrite_and_refusals(s3_server: S3Server, counts: sp.csr_array) -> None:
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/x.zarr"
    options = s3_server.storage_options()
    cv.write_counts(url, counts, storage_options=options)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        cv.write_counts(url, counts, storage_options=options)
    cv.write_counts(url, counts * 3, storage_options=options, overwrite=True)
    store = cv.open_store(url, storage_options=options)
    np.testing.assert_array_equal(
        zarr.open_array(store, path="RNA/counts", mode="r")[:], (counts * 3).toarray()
    )


def test_remote_tampered_summaries_fail_closed(s3_server: S3Server, counts: sp.csr_array) -> None:
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/t.zarr"
    options = s3_server.storage_options()
    cv.write_counts(url, counts, storage_options=options)
    writable = open_location(url, read_only=False, storage_options=options)
    group = zarr.open_group(writable, path="RNA/countSummaries", mode="r+")
    group.attrs["source_fingerprint"] = "sha256:" + "2" * 64
    with pytest.raises(cv.IdentityMismatchError, match="bound to other counts"):
        cv.open_store(url, storage_options=options)


def test_missing_remote_store(s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket()
    # an empty path in an existing bucket does not exist, as a missing local path does not:
    # a FileNotFoundError too (and still the ValueError it was)
    with pytest.raises(FileNotFoundError, match=r"absent\.zarr does not exist \(nothing is stored"):
        cv.open_store(f"s3://{bucket}/absent.zarr", storage_options=s3_server.storage_options())


def test_credentials_never_written(s3_server: S3Server, counts: sp.csr_array) -> None:
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/secret.zarr"
    options = s3_server.storage_options()
    cv.write_counts(url, counts, storage_options=options)
    store = open_location(url, read_only=True, storage_options=options)

    async def every_value() -> list[bytes]:
        from zarr.core.buffer import default_buffer_prototype

        keys = [key async for key in store.list()]
        values = [await store.get(key, prototype=default_buffer_prototype()) for key in keys]
        return [value.to_bytes() for value in values if value is not None]

    from zarr.core.sync import sync

    blobs = sync(every_value())
    assert blobs
    for secret in (b"testing-secret", b"testing-key"):
        assert not any(secret in blob for blob in blobs)


def test_a_password_in_a_source_url_is_refused_not_recorded(
    s3_server: S3Server, counts: sp.csr_array, tmp_path: Path
) -> None:
    """A mount's or composite's record keeps its source locations: a URL that carries
    user:password@ would persist the password, so it is refused (masked) before the
    destination exists; a user name alone (abfs://container@account) is a place."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    cv.write_counts(f"s3://{bucket}/src.zarr", counts, storage_options=options)
    url = f"s3://KEY:hunter2@{bucket}/src.zarr"
    with pytest.raises(ValueError, match=r"KEY:\*\*\*@.*storage options") as raised:
        cv.mount_datastore(url, tmp_path / "t.zarr", source_storage_options=options)
    assert "hunter2" not in str(raised.value)
    assert not (tmp_path / "t.zarr").exists()
    with pytest.raises(ValueError, match=r"source 'a' s3://KEY:\*\*\*@") as raised:
        cv.create_composite(tmp_path / "c.zarr", {"a": url}, source_storage_options={"a": options})
    assert "hunter2" not in str(raised.value)
    assert not (tmp_path / "c.zarr").exists()


def test_clients_keep_a_bounded_number_of_idle_connections(s3_server: S3Server) -> None:
    """Each client closes idle connections after a while and keeps a bounded number;
    a process keeps a bounded number of clients, whatever the buckets it opens."""
    from cytearc_vfs_adapters import backends

    options = s3_server.storage_options()
    for _ in range(backends._MAX_CLIENTS + 4):
        store = backends.open_obstore(f"s3://{s3_server.new_bucket()}/x.zarr", True, options)
        client_options = store.store.client_options  # type: ignore[attr-defined]
        assert client_options["pool_idle_timeout"] == f"{backends.POOL_IDLE_SECONDS}s"
        assert client_options["pool_max_idle_per_host"] == str(backends.POOL_MAX_IDLE)
    assert len(backends._CLIENTS) <= backends._MAX_CLIENTS
    # options given explicitly win
    explicit = {
        **options,
        "client_options": {**options["client_options"], "pool_max_idle_per_host": "2"},
    }
    store = backends.open_obstore(f"s3://{s3_server.new_bucket()}/x.zarr", True, explicit)
    assert store.store.client_options["pool_max_idle_per_host"] == "2"  # type: ignore[attr-defined]


def test_a_reader_of_a_remote_composite_takes_its_sources_options(
    s3_server: S3Server, counts: sp.csr_array
) -> None:
    """VirtualArrayReader(URL) of a composite had no source_storage_options: its
    credentialed S3 sources could not be opened (the client fell back to the instance
    metadata service), though open_store takes them."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    source, composite = f"s3://{bucket}/a.zarr", f"s3://{bucket}/c.zarr"
    cv.write_counts(source, counts, storage_options=options)
    cv.create_composite(
        composite, {"a": source}, storage_options=options, source_storage_options={"a": options}
    )
    reader = cv.VirtualArrayReader(
        composite, storage_options=options, source_storage_options={"a": options}
    )
    np.testing.assert_array_equal(reader.read(), counts.toarray())
    np.testing.assert_array_equal(reader.to_dask().compute(), counts.toarray())
    with pytest.raises(ValueError, match="ordinary store; source_storage_options apply to"):
        cv.VirtualArrayReader(
            source, storage_options=options, source_storage_options={"a": options}
        )
