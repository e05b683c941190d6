"""AnnData sources on a flaky cloud: throttled and dropped requests, a source gone.

The sources are AnnData Zarr stores written by anndata and uploaded to the
loopback S3 server, read through :class:`LoopbackProxy`, which answers
chosen requests with 503 or resets their connections. Transient faults are
retried and every value equals ``anndata.concat(join="outer")``; lasting
ones end in an error that names the source, never in wrong values, and a
failed creation leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from test_anndata_sources import remote_parts, write

import cytearc_vfs as cv
from cytearc_vfs.format.tables import read_table
from cytearc_vfs.read.direct_chunks import ChunkDecodeError

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]


@dataclass(frozen=True)
class Written:
    """The sources as anndata wrote them (local files), and in a bucket."""

    local: dict[str, Path]
    expected: ad.AnnData
    bucket: str


def _upload(s3_server: S3Server, local: dict[str, Path]) -> str:
    """Every file of the ``local`` stores into a new bucket; its name."""
    import obstore
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    raw = from_url(f"s3://{bucket}", **s3_server.storage_options())
    for name, root in local.items():
        for file in root.rglob("*"):
            if file.is_file():
                obstore.put(
                    raw, f"{name}.zarr/{file.relative_to(root).as_posix()}", file.read_bytes()
                )
    return bucket


@pytest.fixture(scope="module")
def written(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The sources of ``test_anndata_sources.remote_anndata``, written by anndata and
    uploaded once for the module: most tests only read them (writing them was most of
    each test's time); a test that changes them takes ``own_flaky``."""
    directory = tmp_path_factory.mktemp("anndata_remote_faults")
    parts = remote_parts()
    local = {
        name: write(data, directory / f"{name}.zarr", int(name[1])) for name, data in parts.items()
    }
    expected = ad.concat(list(parts.values()), join="outer")
    return Written(local, expected, _upload(s3_server, local))


def _flaky(s3_server: S3Server, written: Written, bucket: str) -> Iterator[dict[str, Any]]:
    from obstore.store import from_url

    # a proxy of the test's own: its faults and counts are this test's alone
    proxy = LoopbackProxy(s3_server.endpoint)
    direct = s3_server.storage_options()
    try:
        yield {
            "sources": {name: f"s3://{bucket}/{name}.zarr" for name in written.local},
            "options": {name: {**direct, "endpoint": proxy.endpoint} for name in written.local},
            "expected": written.expected,
            "proxy": proxy,
            "raw": from_url(f"s3://{bucket}", **direct),
            "bucket": bucket,
        }
    finally:
        proxy.close()


# two AnnData sources on S3 behind the proxy: r3 (CSR, Zarr v3, obs "kind"), r2 (CSC, v2)
@pytest.fixture
def flaky(s3_server: S3Server, written: Written) -> Iterator[dict[str, Any]]:
    """The module's sources (read, never changed) behind a proxy of this test's."""
    yield from _flaky(s3_server, written, written.bucket)


@pytest.fixture
def own_flaky(s3_server: S3Server, written: Written) -> Iterator[dict[str, Any]]:
    """The same sources uploaded to a bucket of this test's own: for a test that
    changes them."""
    yield from _flaky(s3_server, written, _upload(s3_server, written.local))


def _check(store: cv.CompositeStore, expected: ad.AnnData) -> None:
    reader = store.reader()
    x = expected[:, list(reader.feature_ids)].X
    truth = np.asarray(x.toarray() if sp.issparse(x) else x)
    np.testing.assert_array_equal(reader.read(), truth)
    cells = np.random.default_rng(3).choice(len(truth), 60, replace=False)
    np.testing.assert_array_equal(reader.read_sparse(cells).toarray(), truth[cells])
    np.testing.assert_array_equal(reader.read(features=[0, 15, 29]), truth[:, [0, 15, 29]])
    table = read_table(zarr.open_group(store, mode="r")["cellData"])
    assert table["kind"].tolist() == expected.obs["kind"].astype(object).fillna("").tolist()


def test_transient_faults_during_creation_and_reads_are_retried(
    flaky: dict[str, Any], tmp_path: Path
) -> None:
    proxy: LoopbackProxy = flaky["proxy"]
    # throttled and reset: listings, documents, obs columns, matrix chunks
    proxy.fail(2, match="list-type")
    proxy.fail(2, match="/X/")
    proxy.drop(2, match="/X/indptr")
    proxy.fail(2, match="/obs/depth")
    proxy.drop(1, match="/var/")
    location = tmp_path / "c.zarr"
    store = cv.create_composite(location, flaky["sources"], source_storage_options=flaky["options"])
    assert proxy.faulted == 9  # every fault was met, and retried past
    _check(store, flaky["expected"])
    store.close()
    proxy.faulted = 0
    proxy.fail(2, match="list-type")
    store = cv.open_store(location, source_storage_options=flaky["options"])
    proxy.fail(3, match="/X/data")
    proxy.drop(3, match="/X/indices")
    _check(store, flaky["expected"])
    assert proxy.faulted == 8
    store.close()


def test_lasting_faults_end_in_errors_naming_the_source(
    flaky: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source that keeps failing: creation fails naming it and leaves nothing;
    a read fails naming it (never zeros in its place)."""
    monkeypatch.setenv("CYTEARC_SOURCE_TIMEOUT", "2")  # retries end after 2 s
    proxy: LoopbackProxy = flaky["proxy"]
    options = flaky["options"]
    proxy.fail(10**6, match="/r3.zarr/X/data")
    with pytest.raises(
        OSError, match=r"source 'r3' at s3://.*r3\.zarr.*503.*CYTEARC_SOURCE_TIMEOUT"
    ):
        cv.create_composite(tmp_path / "a.zarr", flaky["sources"], source_storage_options=options)
    assert not (tmp_path / "a.zarr").exists()
    proxy.clear()
    proxy.drop(10**6, match="/r2.zarr/obs/depth")
    with pytest.raises(OSError, match=r"source 'r2' at s3://.*obs/depth"):
        cv.create_composite(tmp_path / "b.zarr", flaky["sources"], source_storage_options=options)
    assert not (tmp_path / "b.zarr").exists()
    proxy.clear()
    location = tmp_path / "c.zarr"
    cv.create_composite(location, flaky["sources"], source_storage_options=options).close()
    store = cv.open_store(location, source_storage_options=options)
    proxy.fail(10**6, match="/r2.zarr/X/indices")
    with pytest.raises(OSError, match=r"source 'r2' at s3://.*X/indices"):
        store.reader().read()
    with pytest.raises(OSError, match=r"source 'r2'"):
        zarr.open_array(store, path="RNA/countsT", mode="r")[:]
    proxy.clear()
    _check(store, flaky["expected"])  # the faults pass: the same store reads right
    store.close()


def test_a_deleted_source_is_named_at_open(own_flaky: dict[str, Any], tmp_path: Path) -> None:
    import obstore

    location = tmp_path / "c.zarr"
    options = own_flaky["options"]
    cv.create_composite(location, own_flaky["sources"], source_storage_options=options).close()
    raw = own_flaky["raw"]
    for batch in obstore.list(raw, prefix="r2.zarr/"):
        obstore.delete(raw, [entry["path"] for entry in batch])
    proxy: LoopbackProxy = own_flaky["proxy"]
    proxy.take()
    with pytest.raises(OSError, match=r"source 'r2' at s3://.*r2\.zarr is gone.*restored"):
        cv.open_store(location, source_storage_options=options)
    assert len(proxy.take()) <= 6  # listings and the root documents, whatever the size


def test_a_resized_remote_object_fails_the_open_without_reading_the_element(
    own_flaky: dict[str, Any], tmp_path: Path
) -> None:
    """A chunk of X rewritten with another size: the open fails from the listing and
    the documents; no chunk of the element is fetched (the cost does not grow
    with the source)."""
    import obstore

    location = tmp_path / "c.zarr"
    options = own_flaky["options"]
    cv.create_composite(location, own_flaky["sources"], source_storage_options=options).close()
    raw = own_flaky["raw"]
    key = next(
        entry["path"]
        for batch in obstore.list(raw, prefix="r3.zarr/X/data/")
        for entry in batch
        if not entry["path"].endswith("zarr.json")
    )
    obstore.put(raw, key, bytes(obstore.get(raw, key).bytes()) + b"\0")
    proxy: LoopbackProxy = own_flaky["proxy"]
    proxy.take()
    with pytest.raises(cv.IdentityMismatchError, match=r"'r3'.*now changed.*X/data/c/0"):
        cv.open_store(location, source_storage_options=options)
    paths = [seen.path.split("?")[0] for seen in proxy.take()]
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert [path for path in paths if "/X/" in path and not path.endswith(documents)] == []


def test_a_chunk_damaged_on_the_way_is_fetched_again_not_kept(
    flaky: dict[str, Any], tmp_path: Path
) -> None:
    """One answer of a chunk of r3's ``X/data`` (Zarr v3: its chunk keys go through
    the source cache) cut short on the way: the read drops what the cache holds of
    it and fetches it once more, and the values are right; the damaged bytes are
    not kept for later reads. Damaged at every fetch, the error says so."""
    proxy: LoopbackProxy = flaky["proxy"]
    location = tmp_path / "c.zarr"
    cv.create_composite(location, flaky["sources"], source_storage_options=flaky["options"]).close()
    store = cv.open_store(location, source_storage_options=flaky["options"])
    assert isinstance(store, cv.CompositeStore)
    proxy.faulted = 0
    proxy.corrupt(1, how="short", match="r3.zarr/X/data/c/")
    _check(store, flaky["expected"])
    assert proxy.faulted == 1 and store.cache_info().refetches == 1
    _check(store, flaky["expected"])  # read from the cache: nothing damaged was kept
    assert store.cache_info().refetches == 1
    store.close()
    store = cv.open_store(location, source_storage_options=flaky["options"])
    proxy.corrupt(1000, how="short", match="r3.zarr/X/data/c/")
    with pytest.raises(ChunkDecodeError, match="failed again when fetched anew from the source"):
        store.reader().read()
    proxy.clear()  # the transfers heal: the same store reads right
    _check(store, flaky["expected"])
    store.close()
