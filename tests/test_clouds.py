"""The same test family on every cloud, each a real server on loopback (tests/cloud_servers.py).

S3 (moto), Google Cloud Storage (fake-gcs-server through gcsfs), Azure Blob
(Azurite through obstore) and plain HTTP (a static file server through
obstore, read-only: its stores are written to the served directory). Each
test writes where the backend is writable, opens through the location's
backend with credentials in ``storage_options`` only, composes, mounts,
reads through the source cache within its budget, and fails closed when the
server stops or an object disappears.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cloud_servers import BACKEND_FIXTURES, CloudBackend
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, ProxyProcess

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV

pytestmark = pytest.mark.remote

SMALL = cv.LayoutPolicy(64 * 1024, 4096)


def write_source(cloud: CloudBackend, root: tuple[str, Path | None], name: str, counts: Any) -> str:
    """Write ``counts`` as store ``name`` under ``root`` and return its URL."""
    url, local = root
    features = [f"g{i}" for i in range(counts.shape[1])]
    if cloud.writable:
        cv.write_counts(
            f"{url}/{name}",
            counts,
            features=features,
            layout=SMALL,
            storage_options=cloud.storage_options(),
        )
    else:
        assert local is not None
        cv.write_counts(local / name, counts, features=features, layout=SMALL)
    return f"{url}/{name}"


TwoSources = tuple[dict[str, str], np.ndarray]


@pytest.fixture(scope="module")
def written_sources() -> dict[str, TwoSources]:
    """``two_sources`` of each backend, by its name: written once for the module
    (writing them was most of each test's time), read by every test that takes them
    (none changes its sources; a test that removes objects writes its own)."""
    return {}


@pytest.fixture
def two_sources(cloud: CloudBackend, written_sources: dict[str, TwoSources]) -> TwoSources:
    """Two sources on the backend (cells 0-299 and 300-499, genes shared) and the
    composite's expected dense values."""
    if cloud.name not in written_sources:
        written_sources[cloud.name] = _write_two_sources(cloud)
    return written_sources[cloud.name]


def _write_two_sources(cloud: CloudBackend) -> TwoSources:
    root = cloud.new_root()
    a = realistic_counts(300, 40, density=0.2, seed=1)
    b = realistic_counts(200, 40, density=0.2, seed=2)
    sources = {
        "a": write_source(cloud, root, "a.zarr", a),
        "b": write_source(cloud, root, "b.zarr", b),
    }
    return sources, np.vstack([a.toarray(), b.toarray()])


def _options(cloud: CloudBackend, sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name: cloud.storage_options() for name in sources}


def _composite(
    cloud: CloudBackend, sources: dict[str, str], tmp_path: Path, **options: Any
) -> cv.CompositeStore:
    location = tmp_path / "c.zarr"
    if not location.exists():
        cv.create_composite(location, sources, source_storage_options=_options(cloud, sources))
    store = cv.open_store(location, source_storage_options=_options(cloud, sources), **options)
    assert isinstance(store, cv.CompositeStore)
    return store


def test_write_open_and_verify(cloud: CloudBackend) -> None:
    counts = realistic_counts(120, 30, density=0.2, seed=3)
    url = write_source(cloud, cloud.new_root(), "s.zarr", counts)
    store = cv.open_store(url, storage_options=cloud.storage_options())
    np.testing.assert_array_equal(
        zarr.open_array(store, path="RNA/counts", mode="r")[:], counts.toarray()
    )
    assert all(report.ok for report in deep_verify(store, where=url))


def test_a_composite_over_the_backend_reads_exactly(
    cloud: CloudBackend, two_sources: tuple[dict[str, str], np.ndarray], tmp_path: Path
) -> None:
    sources, expected = two_sources
    store = _composite(cloud, sources, tmp_path)
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(), expected)
    cells = [5, 299, 300, 499]
    np.testing.assert_array_equal(
        reader.read(cells=cells, features=[0, 39]), expected[cells][:, [0, 39]]
    )
    store.close()


def test_a_mount_over_the_backend_reads_exactly(cloud: CloudBackend, tmp_path: Path) -> None:
    counts = realistic_counts(150, 25, density=0.25, seed=4)
    url = write_source(cloud, cloud.new_root(), "m.zarr", counts)
    mount = cv.mount_datastore(
        url, tmp_path / "m.zarr", source_storage_options=cloud.storage_options()
    )
    assert isinstance(mount, cv.MountStore)
    np.testing.assert_array_equal(mount.reader().read(), counts.toarray())
    mount.close()


def test_the_cache_serves_a_second_read_within_its_budget(
    cloud: CloudBackend,
    two_sources: tuple[dict[str, str], np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources, expected = two_sources
    monkeypatch.delenv(CACHE_ENV, raising=False)
    store = _composite(cloud, sources, tmp_path)
    np.testing.assert_array_equal(store.reader().read(), expected)
    first = store.cache_info()
    assert first.enabled and first.misses > 0 and first.bytes_cached > 0
    np.testing.assert_array_equal(store.reader().read(), expected)
    assert store.cache_info().misses == first.misses  # nothing fetched again
    directory = first.directory
    assert directory is not None
    sizes = [entry.stat().st_size for entry in Path(directory).iterdir() if entry.is_file()]
    store.close()
    assert not Path(directory).exists()
    # room for the largest entry, not for all of them: entries are evicted,
    # the budget holds, and the values stay exact
    budget = max(max(sizes), sum(sizes) // 2) + 1
    monkeypatch.setenv(CACHE_ENV, str(budget))
    bounded = _composite(cloud, sources, tmp_path)
    for _ in range(2):
        np.testing.assert_array_equal(bounded.reader().read(), expected)
    info = bounded.cache_info()
    assert info.max_bytes == budget and 0 < info.bytes_cached <= budget and info.evictions > 0
    bounded.close()


def _remove_object(cloud: CloudBackend, url: str, key: str, root: Path | None) -> None:
    if root is not None:  # served read-only: the file behind the URL goes
        (root / key).unlink()
        return
    writable = open_location(url, read_only=False, storage_options=cloud.storage_options())
    from zarr.core.sync import sync

    sync(writable.delete(key))


def _count_shards(source_url: str, cloud: CloudBackend) -> list[str]:
    """Every shard of both count arrays of a source (a read may take either)."""
    source = open_location(source_url, read_only=True, storage_options=cloud.storage_options())
    from zarr.core.sync import sync

    async def keys() -> list[str]:
        return [
            key
            for array in ("counts", "countsT")
            async for key in source.list_prefix(f"RNA/{array}/c/")
        ]

    found = sorted(sync(keys()))
    assert found, f"no shard under {source_url}/RNA/counts/c/"
    return found


def test_an_object_removed_after_open_is_a_clear_error(cloud: CloudBackend, tmp_path: Path) -> None:
    root = cloud.new_root()
    counts = realistic_counts(200, 30, density=0.2, seed=5)
    sources = {"a": write_source(cloud, root, "a.zarr", counts)}
    store = _composite(cloud, sources, tmp_path)
    local = None if root[1] is None else root[1] / "a.zarr"
    for shard in _count_shards(sources["a"], cloud):
        _remove_object(cloud, sources["a"], shard, local)
    # the pinned read notices (FileNotFoundError); a backend that reports no
    # versions (gcsfs) is caught by the shard-table check (IdentityMismatchError)
    with pytest.raises(
        (FileNotFoundError, cv.IdentityMismatchError), match=r"(no longer exists|is missing)"
    ):
        store.reader().read()
    store.close()


def _through(
    cloud: CloudBackend, proxy: LoopbackProxy | ProxyProcess
) -> tuple[dict[str, Any], str]:
    """Storage options (and the URL prefix, for HTTP) that reach the server through ``proxy``."""
    options = cloud.storage_options()
    server = "{0.scheme}://{0.netloc}".format(urlsplit(cloud.endpoint))
    endpoint_keys = {"s3": "endpoint", "gs": "endpoint_url", "az": "endpoint"}
    if cloud.name in endpoint_keys:
        key = endpoint_keys[cloud.name]
        options[key] = options[key].replace(server, proxy.endpoint)
    return options, proxy.endpoint


class _ShortBackOff:
    """``asyncio`` for gcsfs's retry module, with its back-off sleeps cut to 10 ms.

    gcsfs retries a refused connection 6 times with a back-off of about 31 s
    in all (fixed in its decorator, not per filesystem: the figure
    docs/remote.md gives for gs:// through fsspec). The retries, and the
    error after them, stay the same.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(min(delay, 0.01), result)


@pytest.mark.parametrize(
    "name",
    # obstore gives up after CYTEARC_SOURCE_TIMEOUT; gcsfs after its retries
    ["s3", "gs", "az", "http"],
)
def test_a_stopped_server_is_a_clear_error_never_wrong_values(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud: CloudBackend = request.getfixturevalue(BACKEND_FIXTURES[name])
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    if name == "gs":
        import gcsfs.retry

        monkeypatch.setattr(gcsfs.retry, "asyncio", _ShortBackOff())
    root = cloud.new_root()
    counts = realistic_counts(200, 30, density=0.2, seed=6)
    url = write_source(cloud, root, "a.zarr", counts)
    # the proxy runs in a process of its own: ending it drops every open
    # connection at once, as a server that stops does
    proxy = ProxyProcess("{0.scheme}://{0.netloc}".format(urlsplit(cloud.endpoint)))
    try:
        options, endpoint = _through(cloud, proxy)
        through = url.replace(cloud.endpoint, endpoint) if cloud.name == "http" else url
        sources = {"a": through}
        cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options={"a": options})
        store = cv.open_store(tmp_path / "c.zarr", source_storage_options={"a": options})
        assert isinstance(store, cv.CompositeStore)
        assert [seen for seen in proxy.take() if seen.method == "GET"]  # it went through
    finally:
        proxy.close()  # the server is gone for this client: connections are refused or reset
    # nothing of the counts was read before: every value must come from the
    # server, which is unreachable, so the read fails, naming the source
    with pytest.raises(OSError, match=r"source 'a'.*(failed|reachable)"):
        store.reader().read()
    assert store.cache_info().bytes_cached == 0
    store.close()


def test_no_credential_reaches_a_file(
    cloud: CloudBackend,
    two_sources: tuple[dict[str, str], np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    sources, expected = two_sources
    store = _composite(cloud, sources, tmp_path)
    np.testing.assert_array_equal(store.reader().read(), expected)
    directory = store.cache_info().directory
    assert directory is not None
    blobs = [path.read_bytes() for path in Path(directory).rglob("*") if path.is_file()]
    blobs += [path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()]
    for url in sources.values():  # every object of every source
        source = open_location(url, read_only=True, storage_options=cloud.storage_options())
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        async def values(source: Any = source) -> list[bytes]:
            keys = [key async for key in source.list()]
            found = [await source.get(key, prototype=default_buffer_prototype()) for key in keys]
            return [value.to_bytes() for value in found if value is not None]

        blobs += sync(values())
    assert len(blobs) > 20
    for secret in cloud.secrets:
        assert not any(secret.encode() in blob for blob in blobs), cloud.name
    store.close()


def test_sources_of_every_backend_in_one_composite(
    s3_backend: CloudBackend,
    gcs_backend: CloudBackend,
    azure_backend: CloudBackend,
    http_backend: CloudBackend,
    tmp_path: Path,
) -> None:
    backends = [s3_backend, gcs_backend, azure_backend, http_backend]
    sources: dict[str, str] = {}
    options: dict[str, dict[str, Any]] = {}
    parts: list[sp.csr_array] = []
    for seed, backend in enumerate(backends):
        counts = realistic_counts(60, 20, density=0.3, seed=10 + seed)
        sources[backend.name] = write_source(backend, backend.new_root(), "s.zarr", counts)
        options[backend.name] = backend.storage_options()
        parts.append(counts)
    cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=options)
    store = cv.open_store(tmp_path / "c.zarr", source_storage_options=options)
    assert isinstance(store, cv.CompositeStore)
    np.testing.assert_array_equal(
        store.reader().read(), np.vstack([part.toarray() for part in parts])
    )
    store.close()


def test_a_suffix_longer_than_the_object_is_the_whole_object(cloud: CloudBackend) -> None:
    # a whole-shard read asks for more than the shard may hold; Azure has no
    # suffix ranges, and the explicit range that replaces one must not start
    # before the object does
    from zarr.abc.store import SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    counts = realistic_counts(50, 10, density=0.3, seed=7)
    url = write_source(cloud, cloud.new_root(), "s.zarr", counts)
    store = open_location(url, read_only=True, storage_options=cloud.storage_options())
    prototype = default_buffer_prototype()
    whole = sync(store.get("zarr.json", prototype))
    assert whole is not None
    tail = sync(store.get("zarr.json", prototype, SuffixByteRequest(len(whole) + 10_000)))
    assert tail is not None and tail.to_bytes() == whole.to_bytes()
    end = sync(store.get("zarr.json", prototype, SuffixByteRequest(5)))
    assert end is not None and end.to_bytes() == whole.to_bytes()[-5:]
    assert sync(store.get("absent.json", prototype, SuffixByteRequest(5))) is None


#: Requests per source of an open of a composite whose sources are unchanged:
#: exactly one listing where the backend reports versions (the seals apply);
#: through gcsfs, which reports none, the 12 documents and the listing pages,
#: at most 15 (fewer when fsspec's listing cache of the same filesystem
#: instance still holds a page).
OPEN_REQUESTS_PER_SOURCE = {"s3": 1, "az": 1, "http": 1, "gs": 15}
V2_KEYS = (".zgroup", ".zattrs", ".zmetadata", ".zarray")


def test_an_open_costs_the_documented_requests_and_no_v2_probe(
    cloud: CloudBackend, two_sources: tuple[dict[str, str], np.ndarray], tmp_path: Path
) -> None:
    sources, expected = two_sources
    proxy = LoopbackProxy("{0.scheme}://{0.netloc}".format(urlsplit(cloud.endpoint)))
    try:
        options, endpoint = _through(cloud, proxy)
        if cloud.name == "http":
            sources = {name: url.replace(cloud.endpoint, endpoint) for name, url in sources.items()}
        per_source = {name: options for name in sources}
        cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=per_source)
        created = proxy.take()
        store = cv.open_store(tmp_path / "c.zarr", source_storage_options=per_source)
        opened = proxy.take()
        assert isinstance(store, cv.CompositeStore)
        np.testing.assert_array_equal(store.reader().read(), expected)
        store.close()
    finally:
        proxy.close()
    bound = OPEN_REQUESTS_PER_SOURCE[cloud.name] * len(sources)
    shown = [(seen.method, seen.path) for seen in opened]
    if cloud.name == "gs":
        assert 12 * len(sources) <= len(opened) <= bound, shown
    else:
        assert len(opened) == bound, shown
    for seen in created + opened:
        path = urlsplit(seen.path).path
        assert not path.endswith(V2_KEYS), seen
        assert not path.endswith("zarr.json/zarr.json"), seen


def test_writing_to_read_only_http_is_refused_clearly(http_backend: CloudBackend) -> None:
    url, local = http_backend.new_root()
    counts = realistic_counts(20, 5, density=0.5, seed=8)
    with pytest.raises(
        PermissionError, match=r"refused writing .*plain HTTP servers are read-only"
    ):
        cv.write_counts(f"{url}/x.zarr", counts, storage_options=http_backend.storage_options())
    assert local is not None and list(local.iterdir()) == []


def test_a_composite_over_https_sources_reads_exactly(
    https_backend: CloudBackend, tmp_path: Path
) -> None:
    root = https_backend.new_root()
    a = realistic_counts(120, 20, density=0.3, seed=9)
    b = realistic_counts(80, 20, density=0.3, seed=10)
    sources = {
        "a": write_source(https_backend, root, "a.zarr", a),
        "b": write_source(https_backend, root, "b.zarr", b),
    }
    assert all(url.startswith("https://") for url in sources.values())
    store = _composite(https_backend, sources, tmp_path)
    np.testing.assert_array_equal(store.reader().read(), np.vstack([a.toarray(), b.toarray()]))
    store.close()
