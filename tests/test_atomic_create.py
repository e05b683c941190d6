"""Atomic conditional creation (``create_if_absent``) on every backend that can, and refusals.

The race: 16 claimers of one key, as threads sharing a store and as
processes each opening its own, over several rounds per backend. Exactly one
wins every time; the others get ``False`` (never an exception), and the
key holds the winner's whole value.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import cytearc_vfs_adapters as adapters
import pytest
from atomic_claimer import PRELOAD, claim
from cloud_servers import CloudBackend
from cytearc_vfs_adapters import (
    AtomicCreateUnsupportedError,
    create_if_absent,
    supports_atomic_create,
)
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore, MemoryStore

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location

CLAIMERS = 16
THREAD_ROUNDS = 5
PROCESS_ROUNDS = 3

# (location, storage options) of a fresh writable root on each racing backend
Root = tuple[str, dict[str, Any] | None]


def _value(store: Any, key: str) -> bytes | None:
    found = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if found is None else found.to_bytes()


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """16 worker processes, forked from a server that imported the package once."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(CLAIMERS, mp_context=context) as executor:
        # start every worker now, not inside the first race
        list(executor.map(time.sleep, [0.2] * CLAIMERS))
        yield executor


def _cloud_root(backend: CloudBackend, **extra: Any) -> Root:
    url, _ = backend.new_root()
    return f"{url}/claims", {**backend.storage_options(), **extra}


@pytest.fixture(params=["local", "s3", "s3-fsspec", "gs", "az"])
def racing_root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    """A fresh writable location on each backend with atomic creation."""
    name = request.param
    if name == "local":
        return str(tmp_path / "claims"), None
    if name == "s3":
        return _cloud_root(request.getfixturevalue("s3_backend"))
    if name == "s3-fsspec":
        backend = request.getfixturevalue("s3_backend")
        options = backend.storage_options()
        return f"{backend.new_root()[0]}/claims", {
            "backend": "fsspec",
            "key": options["access_key_id"],
            "secret": options["secret_access_key"],
            "endpoint_url": options["endpoint"],
        }
    if name == "gs":
        return _cloud_root(request.getfixturevalue("gcs_backend"))
    return _cloud_root(request.getfixturevalue("azure_backend"))


def _race_threads(store: Any, key: str) -> list[bool | BaseException]:
    results: list[bool | BaseException] = [False] * CLAIMERS
    start = threading.Barrier(CLAIMERS)

    def claimer(index: int) -> None:
        start.wait()
        try:
            results[index] = create_if_absent(store, key, f"claimer-{index}".encode())
        except BaseException as exc:  # reported by the assertion, not swallowed
            results[index] = exc

    threads = [threading.Thread(target=claimer, args=(index,)) for index in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _check_round(store: Any, key: str, results: list[Any]) -> None:
    failures = [result for result in results if isinstance(result, BaseException)]
    assert not failures, failures
    winners = [index for index, won in enumerate(results) if won is True]
    assert len(winners) == 1, f"{key}: winners {winners}"
    assert all(result is False for index, result in enumerate(results) if index != winners[0])
    assert _value(store, key) == f"claimer-{winners[0]}".encode()


@pytest.mark.remote
def test_exactly_one_of_16_threads_wins(racing_root: Root) -> None:
    location, options = racing_root
    store = open_location(location, read_only=False, storage_options=options)
    assert supports_atomic_create(store)
    for round_ in range(THREAD_ROUNDS):
        key = f"labels/run-{round_}-{uuid.uuid4().hex[:6]}"
        _check_round(store, key, _race_threads(store, key))


@pytest.mark.remote
def test_exactly_one_of_16_processes_wins(racing_root: Root, pool: ProcessPoolExecutor) -> None:
    location, options = racing_root
    store = open_location(location, read_only=False, storage_options=options)
    for round_ in range(PROCESS_ROUNDS):
        key = f"labels/run-{round_}-{uuid.uuid4().hex[:6]}"
        start = time.time() + 0.3
        futures: list[Future[bool]] = [
            pool.submit(claim, location, options, key, f"claimer-{index}".encode(), start)
            for index in range(CLAIMERS)
        ]
        results: list[Any] = []
        for future in futures:
            exc = future.exception()
            results.append(exc if exc is not None else future.result())
        _check_round(store, key, results)


def test_a_memory_store_claims_once_per_key() -> None:
    store = MemoryStore()
    assert supports_atomic_create(store)
    for round_ in range(THREAD_ROUNDS):
        key = f"labels/run-{round_}"
        _check_round(store, key, _race_threads(store, key))
    named = open_location(f"memory://claims-{uuid.uuid4().hex[:6]}/sub", read_only=False)
    assert create_if_absent(named, "a/b", b"1") and not create_if_absent(named, "a/b", b"2")
    assert _value(named, "a/b") == b"1"


def test_a_losing_claim_leaves_the_value_and_no_stray_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    assert create_if_absent(store, "a/claim", b"first")
    assert not create_if_absent(store, "a/claim", memoryview(b"second"))
    assert (tmp_path / "a" / "claim").read_bytes() == b"first"
    assert sorted(path.name for path in (tmp_path / "a").iterdir()) == ["claim"]
    buffer = default_buffer_prototype().buffer.from_bytes(b"third")
    assert create_if_absent(store, "a/other", buffer)


@pytest.mark.parametrize(
    "key",
    ["../escape", "/etc/hostname", "a//b", "a/%2e%2e/b", "", "a/"],
)
def test_unsafe_keys_are_refused_by_the_shared_key_rule(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError, match=r"create_if_absent of key .* refused"):
        create_if_absent(LocalStore(tmp_path), key, b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_store_and_a_bad_value_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read-only; open it with read_only=False"):
        create_if_absent(LocalStore(tmp_path, read_only=True), "k", b"x")
    with pytest.raises(TypeError, match="takes bytes"):
        create_if_absent(LocalStore(tmp_path), "k", "text")  # type: ignore[arg-type]


def test_a_directory_at_the_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    with pytest.raises(ValueError, match="a directory has that name"):
        create_if_absent(LocalStore(tmp_path), "group", b"x")


def test_a_mount_claims_in_its_target_and_never_in_its_source(tmp_path: Path) -> None:
    """Pipeline runs and their atomic label claims stay per store (spec, "Mounted
    targets"): a claim through a mount is the target's own conditional create."""
    import numpy as np

    cv.write_counts(tmp_path / "src.zarr", np.ones((6, 3)))
    with cv.publish_artifact(
        cv.open_store(tmp_path / "src.zarr", mode="r+"),
        "RNA/artifacts",
        "pca",
        provenance={"operation": "pca", "parameters": {}, "inputs": {}},
    ) as art:
        art.write_array("data", np.ones((6, 2)))
    mount = cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "tgt.zarr")
    assert supports_atomic_create(mount)
    key = "pipeline/runs/.label-claims/abc"
    results = _race_threads(mount, key)
    _check_round(mount, key, results)
    assert (tmp_path / "tgt.zarr" / key).is_file()
    assert not (tmp_path / "src.zarr" / "pipeline").exists()
    with pytest.raises(PermissionError, match="belongs to the mounted source"):
        create_if_absent(mount, f"{art.path}/claim", b"x")
    assert not (tmp_path / "src.zarr" / art.path / "claim").exists()
    with pytest.raises(ValueError, match="read-only"):
        create_if_absent(cv.open_store(tmp_path / "tgt.zarr"), "pipeline/other", b"x")


def test_a_composite_claims_in_its_backing_store_never_in_its_record(tmp_path: Path) -> None:
    """The same for a composite: a claim is its backing store's own conditional
    create; the virtual counts and the record's root document are refused."""
    import numpy as np

    cv.write_counts(tmp_path / "a.zarr", np.ones((4, 3)))
    cv.write_counts(tmp_path / "b.zarr", np.ones((5, 3)))
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"})
    composite = cv.open_store(tmp_path / "c.zarr", mode="r+")
    assert supports_atomic_create(composite)
    key = "pipeline/runs/.label-claims/abc"
    results = _race_threads(composite, key)
    _check_round(composite, key, results)
    assert (tmp_path / "c.zarr" / key).is_file()
    assert not (tmp_path / "a.zarr" / "pipeline").exists()
    with pytest.raises(PermissionError, match="cannot create 'RNA/counts/c/9/9' in the composite"):
        create_if_absent(composite, "RNA/counts/c/9/9", b"x")
    with pytest.raises(PermissionError, match="holds the composite record"):
        create_if_absent(composite, "zarr.json", b"{}")
    with pytest.raises(ValueError, match="read-only"):
        create_if_absent(cv.open_store(tmp_path / "c.zarr"), "pipeline/other", b"x")
    composite.close()


def test_a_generic_fsspec_filesystem_is_refused_not_emulated() -> None:
    store = FsspecStore.from_url(f"memory://claims-{uuid.uuid4().hex[:6]}")
    assert not supports_atomic_create(store)
    with pytest.raises(AtomicCreateUnsupportedError, match=r"checking first and writing after"):
        create_if_absent(store, "k", b"x")
    assert not sync(store.exists("k"))


@pytest.mark.remote
def test_plain_http_is_refused(http_backend: CloudBackend) -> None:
    url, _ = http_backend.new_root()
    store = open_location(url, read_only=False, storage_options=http_backend.storage_options())
    assert not supports_atomic_create(store)
    with pytest.raises(AtomicCreateUnsupportedError, match=r"plain HTTP is read-only.*use a store"):
        create_if_absent(store, "k", b"x")
    error = AtomicCreateUnsupportedError("x")
    assert isinstance(error, NotImplementedError) and isinstance(error, cv.VfsError)


def test_the_names_are_at_the_package_root() -> None:
    for name in ("create_if_absent", "supports_atomic_create", "AtomicCreateUnsupportedError"):
        assert name in adapters.__all__ and hasattr(adapters, name)


@pytest.mark.remote
@pytest.mark.parametrize(("name", "method"), [("s3", "PUT"), ("az", "PUT"), ("gs", "POST")])
def test_a_claim_is_one_conditional_request(
    name: str, method: str, request: pytest.FixtureRequest
) -> None:
    from urllib.parse import urlsplit

    from cloud_servers import BACKEND_FIXTURES
    from loopback_proxy import LoopbackProxy

    backend: CloudBackend = request.getfixturevalue(BACKEND_FIXTURES[name])
    server = "{0.scheme}://{0.netloc}".format(urlsplit(backend.endpoint))
    proxy = LoopbackProxy(server)
    try:
        options = backend.storage_options()
        endpoint_key = {"s3": "endpoint", "az": "endpoint", "gs": "endpoint_url"}[name]
        options[endpoint_key] = options[endpoint_key].replace(server, proxy.endpoint)
        url, _ = backend.new_root()
        store = open_location(f"{url}/claims", read_only=False, storage_options=options)
        proxy.take()
        assert create_if_absent(store, "labels/one", b"first")
        first = proxy.take()
        assert not create_if_absent(store, "labels/one", b"second")
        second = proxy.take()
        assert _value(store, "labels/one") == b"first"
    finally:
        proxy.close()
    # no look before the write: the storage decides in the one request
    assert [seen.method for seen in first] == [method], first
    assert [seen.method for seen in second] == [method], second
