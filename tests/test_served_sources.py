"""A store served by ``cytearc-vfs serve`` as a source, and how its keys look over HTTP.

Each test starts the real command (``cytearc-vfs serve``, a process of its
own) on an ordinary store written here, and reads it over plain HTTP:

- as a composite's source, a mount's source and under the gather reader
  (``cv.VirtualArrayReader``), values compared with numpy. ``serve`` refuses
  recursive listings (``PROPFIND`` with ``Depth: infinity``) by design, so
  these worked only once every recursive listing of an HTTP store fell back
  to ``Depth: 1`` (``cytearc_vfs/format/object_listing.py``); a loopback
  proxy counts what the open asks;
- a server that refuses every listing, and an address where nothing
  answers: the error names that cause and its remedy, not credentials;
- a directory's name without the final ``/`` is no key (``404``): through
  ``cv.open_store``, zarr's ``ObjectStore(HTTPStore)`` and ``mount-fs`` of
  the served URL, directories are directories, never files of HTML;
- ``405`` to a write verb keeps the connection open when the request has no
  body, and closes it when a body was announced (and not read).
"""

from __future__ import annotations

import functools
import http.client
import http.server
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import obstore.store
import pytest
import zarr
from cli_harness import cli_executable, readable
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy
from test_mount_fs import fuse_works, mount_fs, tree_bytes
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import ObjectStore

import cytearc_vfs as cv

__all__ = ["fuse_works"]  # a fixture of test_mount_fs, used here

PROTO = default_buffer_prototype()
PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
FOLDERS = ("RNA", "RNA/counts", "RNA/counts/c", "cellData", "RNA/artifacts")


@dataclass(frozen=True)
class World:
    """Two ordinary stores (one with an artifact) and what they must read as."""

    root: Path
    a: Path
    b: Path
    dense_a: np.ndarray
    dense_b: np.ndarray
    genes_a: list[str]
    genes_b: list[str]
    artifact: np.ndarray


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("served_sources")
    genes_a = [f"g{i}" for i in range(60)]
    genes_b = [f"g{i}" for i in range(30, 100)]
    counts_a = realistic_counts(900, len(genes_a), density=0.1, seed=21)
    counts_b = realistic_counts(400, len(genes_b), density=0.1, seed=22)
    cv.write_counts(
        root / "a.zarr", counts_a, cells=[f"a{i}" for i in range(900)], features=genes_a
    )
    cv.write_counts(
        root / "b.zarr", counts_b, cells=[f"b{i}" for i in range(400)], features=genes_b
    )
    artifact = np.arange(1800, dtype=np.float64).reshape(900, 2)
    writable = cv.open_store(root / "a.zarr", mode="r+")
    with cv.publish_artifact(writable, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", artifact)
    writable.close()
    return World(
        root,
        root / "a.zarr",
        root / "b.zarr",
        counts_a.toarray(),
        counts_b.toarray(),
        genes_a,
        genes_b,
        artifact,
    )


@contextmanager
def serve(location: Path) -> Iterator[str]:
    """``cytearc-vfs serve LOCATION`` in a process of its own; yields its URL."""
    process = subprocess.Popen(
        [cli_executable(), "serve", str(location)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline() if readable(process.stdout, 120) else ""
        assert line.startswith("serving http://"), (line, process.poll())
        yield line.split(" ", 1)[1].strip()
    finally:
        process.terminate()
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=30)


@pytest.fixture(scope="module")
def served_a(world: World) -> Iterator[str]:
    with serve(world.a) as url:
        yield url


def composite_dense(world: World) -> np.ndarray:
    """The union of the two sources' features in first-seen order, a's cells first."""
    union = list(dict.fromkeys(world.genes_a + world.genes_b))
    column = {gene: j for j, gene in enumerate(union)}
    expected = np.zeros((900 + 400, len(union)), dtype=world.dense_a.dtype)
    for offset, dense, genes in (
        (0, world.dense_a, world.genes_a),
        (900, world.dense_b, world.genes_b),
    ):
        for j, gene in enumerate(genes):
            expected[offset : offset + len(dense), column[gene]] = dense[:, j]
    return expected


# ------------------------------------------------------------ served sources


def test_a_served_store_is_a_composite_source(world: World, served_a: str, tmp_path: Path) -> None:
    """Created over the served URL, reopened (from its seals), read whole and gathered."""
    composite = cv.create_composite(tmp_path / "c.zarr", {"h": served_a, "l": world.b})
    expected = composite_dense(world)
    reader = cv.VirtualArrayReader(composite)
    assert list(reader.feature_ids) == list(dict.fromkeys(world.genes_a + world.genes_b))
    counts = zarr.open_array(composite, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], expected.astype(counts.dtype))
    composite.close()
    reopened = cv.open_store(tmp_path / "c.zarr")
    try:
        cells = [0, 7, 899, 900, 1299]
        got = cv.VirtualArrayReader(reopened).read(cells=cells)
        np.testing.assert_array_equal(np.asarray(got), expected[cells].astype(got.dtype))
    finally:
        reopened.close()


def test_a_served_store_is_a_mount_source(world: World, served_a: str, tmp_path: Path) -> None:
    mount = cv.mount_datastore(served_a, tmp_path / "m.zarr")
    try:
        group = zarr.open_group(mount, mode="r")
        ids = zarr.open_array(world.a, path="cellData/ids", mode="r")[:]
        np.testing.assert_array_equal(group["cellData/ids"][:], ids)
        # the source's artifact shows through the mount, read over HTTP
        (data,) = [path for path, _ in group.members(max_depth=None) if path.endswith("/data")]
        np.testing.assert_array_equal(group[data][:], world.artifact)
    finally:
        mount.close()


def test_the_gather_reader_reads_a_served_store(world: World, served_a: str) -> None:
    store = cv.open_store(served_a)
    try:
        reader = cv.VirtualArrayReader(store, assay="RNA")
        for cells in ([1, 2], [899, 0, 450], list(range(0, 900, 7))):
            got = reader.read(cells=cells)
            np.testing.assert_array_equal(np.asarray(got), world.dense_a[cells])
        # list_prefix is a recursive listing too: walked at Depth: 1 here
        keys = sync(_collect(store, "RNA/counts/"))
        assert keys and all(key.startswith("RNA/counts/") for key in keys)
        assert "RNA/counts/zarr.json" in keys
    finally:
        store.close()


async def _collect(store: zarr.abc.store.Store, prefix: str) -> list[str]:
    return sorted([key async for key in store.list_prefix(prefix)])


def test_a_served_source_is_opened_with_few_requests(
    world: World, served_a: str, tmp_path: Path
) -> None:
    """Depth: infinity is refused once; only the count arrays' shard directories are walked."""
    # the module's server (a process of its own, as any): a proxy of this test's counts
    proxy = LoopbackProxy(served_a)
    try:
        through = proxy.endpoint.rstrip("/") + "/"
        composite = cv.create_composite(tmp_path / "c.zarr", {"h": through, "l": world.b})
        composite.close()
        seen = proxy.take()
    finally:
        proxy.close()
    listings = [each.path for each in seen if each.method == "PROPFIND"]
    shard_dirs = {path for path in listings if path.startswith(("/RNA/counts/c", "/RNA/countsT/c"))}
    shards = len(list((world.a / "RNA" / "counts" / "c").iterdir())) + len(
        list((world.a / "RNA" / "countsT" / "c").iterdir())
    )
    # the shard directories: each c/ once and each shard row once
    assert len(shard_dirs) == shards + 2, listings
    others = [path for path in listings if path not in shard_dirs]
    # the refused recursive listing of the root, and the groups the verification
    # lists (the root, the assay, cellData, featureData): never a walk of every
    # directory of the store, nor of another array's chunks
    assert len(others) <= 6, others
    assert not any(path.endswith("/c") or "/c/" in path for path in others), others
    assert len(seen) <= 40, [(each.method, each.path) for each in seen]


# ------------------------------------------------------------------ failures


class _NoListings(http.server.SimpleHTTPRequestHandler):
    """A static file server that refuses every WebDAV listing (403)."""

    def do_PROPFIND(self) -> None:
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@contextmanager
def no_listings(directory: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_NoListings, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_listing_names_the_refusal(world: World, tmp_path: Path) -> None:
    with no_listings(world.a) as url:
        with pytest.raises(OSError) as raised:
            cv.create_composite(tmp_path / "c.zarr", {"h": url, "l": world.b})
        text = str(raised.value)
        assert "source 'h'" in text and url in text
        assert "refused" in text and "403" in text and "PROPFIND" in text, text
        assert "credentials" not in text and "source_storage_options" not in text, text
        assert text.count("serve the store from a server") == 1, text  # said once
        with pytest.raises(PermissionError, match=r"listing its root was refused.*403"):
            cv.mount_datastore(url, tmp_path / "m.zarr")
    assert not (tmp_path / "c.zarr").exists() and not (tmp_path / "m.zarr").exists()


def test_an_unreachable_source_names_the_connection(world: World, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    with pytest.raises(OSError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"h": url, "l": world.b})
    text = str(raised.value)
    assert "source 'h'" in text and "nothing answered at that address" in text, text
    assert "credentials" not in text and "CYTEARC_SOURCE_TIMEOUT" not in text, text


def test_a_served_url_whose_server_stopped_is_503_with_the_remedy(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve http://...`` (a remote ordinary store) whose upstream stops answering: the
    obstore backend's error was a 500 ("a bug") whose body was its multi-line debug dump;
    it is a 503 (a retry may clear it) naming the cause and its remedy on one line."""
    from cytearc_vfs_adapters.serve import StoreServer

    monkeypatch.setenv("CYTEARC_SOURCE_TIMEOUT", "1")  # obstore's retries end within a second
    with serve(world.a) as upstream:
        remote = cv.open_store(upstream)
        with StoreServer.start(remote) as front:
            host, port = front.url.removeprefix("http://").rstrip("/").split(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            connection.request("GET", "/RNA/counts/zarr.json")
            assert (
                connection.getresponse().read() == (world.a / "RNA/counts/zarr.json").read_bytes()
            )
            connection.close()
    # the upstream server is stopped: nothing answers at its address
    with StoreServer.start(remote) as front:
        host, port = front.url.removeprefix("http://").rstrip("/").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.request("GET", "/RNA/counts/zarr.json")
        answer = connection.getresponse()
        text = answer.read().decode()
        connection.close()
        assert answer.status == 503, text
        assert text.count("\n") == 1 and "Debug source" not in text, text
        assert "'RNA/counts/zarr.json'" in text and upstream in text, text
        assert "nothing answered at that address" in text, text
        assert front.stats().statuses == {503: 1}
    remote.close()


# --------------------------------------------------- folders are not keys


@pytest.mark.parametrize("client", ["open_store", "ObjectStore(HTTPStore)"])
def test_folders_are_not_keys_over_http(world: World, served_a: str, client: str) -> None:
    if client == "open_store":
        store = cv.open_store(served_a)
    else:
        http_store = obstore.store.HTTPStore.from_url(served_a, client_options={"allow_http": True})
        store = ObjectStore(http_store, read_only=True)
    try:
        for folder in FOLDERS:
            assert (world.a / folder).is_dir(), folder
            assert sync(store.exists(folder)) is False, folder
            assert sync(store.get(folder, PROTO)) is None, folder
            with pytest.raises(FileNotFoundError):
                sync(store.getsize(folder))
        # keys still are keys
        key = "RNA/counts/zarr.json"
        assert sync(store.exists(key))
        assert sync(store.getsize(key)) == (world.a / key).stat().st_size
        got = sync(store.get(key, PROTO))
        assert got is not None and got.to_bytes() == (world.a / key).read_bytes()
    finally:
        store.close()


def test_a_folder_name_is_404_and_names_its_listing(served_a: str) -> None:
    host, port = served_a.removeprefix("http://").rstrip("/").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        for method in ("GET", "HEAD"):
            connection.request(method, "/RNA/counts")
            answer = connection.getresponse()
            body = answer.read()
            assert answer.status == 404 and answer.getheader("Location") is None
            assert method == "HEAD" or b"/RNA/counts/" in body
        connection.request("GET", "/RNA/counts/", headers={"Accept": "text/html"})
        answer = connection.getresponse()
        assert answer.status == 200 and b'href="c/"' in answer.read()
    finally:
        connection.close()


def test_mount_fs_of_a_served_url_has_directories(
    fuse_works: None, world: World, served_a: str, tmp_path: Path
) -> None:
    with mount_fs(served_a, tmp_path / "mp") as mounted:  # type: ignore[arg-type]  # a URL
        root = mounted.mountpoint
        for folder in FOLDERS:
            assert (root / folder).is_dir(), folder
        listed = subprocess.run(
            ["ls", str(root / "RNA") + "/"], capture_output=True, text=True, check=True
        )
        assert "counts" in listed.stdout.split()
        # every key reads byte for byte, chunks and shards too
        assert tree_bytes(root) == tree_bytes(world.a)
        np.testing.assert_array_equal(
            zarr.open_array(root / "RNA/counts", mode="r")[:], world.dense_a
        )
        code, _, err = mounted.stop()
    assert code == 0, err


# ------------------------------------------------------ 405 and the connection


def _exchange(connection: socket.socket, request: bytes) -> bytes:
    """Send one request, read its answer whole (a HEAD's has no body); its head."""
    connection.sendall(request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += _received(connection)
    head, _, rest = answer.partition(b"\r\n\r\n")
    if request.startswith(b"HEAD "):
        return head
    length = int(
        next(
            line.split(b":", 1)[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
    )
    while len(rest) < length:
        rest += _received(connection)
    return head


def _received(connection: socket.socket) -> bytes:
    data = connection.recv(65536)
    assert data, "the server closed the connection before the answer was complete"
    return data


def test_405_keeps_the_connection_unless_a_body_was_announced(served_a: str) -> None:
    host, port = served_a.removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        for method in ("DELETE", "OPTIONS", "TRACE"):
            head = _exchange(
                connection, f"{method} /zarr.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            )
            assert head.startswith(b"HTTP/1.1 405") and b"Connection: keep-alive" in head
        # the same connection still answers
        head = _exchange(connection, f"HEAD /zarr.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 200")
        head = _exchange(
            connection,
            f"PUT /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello".encode(),
        )
        assert head.startswith(b"HTTP/1.1 405") and b"Connection: close" in head
        assert connection.recv(1) == b""  # closed: the body was never read
