"""``cytearc-vfs serve``: real servers on 127.0.0.1, read by real HTTP clients.

An ordinary store, a composite of three sources (several computed chunks,
a partial edge chunk, uint16 counts), a mount with a source artifact read
through, and a composite over a loopback S3 source (through the source
cache) are served by :class:`StoreServer` on zarr's event loop; zarr-python
(through obstore's and fsspec's HTTP stores) and tensorstore (its ``http``
kvstore) read every value back, compared with numpy. Then: byte ranges,
status codes, keys that try to leave the store (a secret file lies beside
it), write verbs, listings, HEAD without computing a chunk, 32 concurrent
clients, slow and vanishing clients, store errors, and the command line in
a pseudo-terminal and through a pipe.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import logging
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cli_harness import cli_executable, readable, run_main, tree_digest
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer
from cytearc_vfs_adapters.serve.protocol import MalformedRequestError, parse_head
from cytearc_vfs_adapters.serve.ranges import ByteSpan, Unsatisfiable, parse_range, resolve_range
from cytearc_vfs_adapters.serve.server import error_status, is_loopback
from cytearc_vfs_adapters.serve.targets import BadTargetError, Target, parse_target
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV

PROTO = default_buffer_prototype()
SECRET = b"the secret beside the store: 7f3a1c"
PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
# A computed chunk of about this many bytes: the test composite gets a dozen
# chunks and a partial edge chunk (served at full size).
CHUNK_BYTES = 24_000

# ----------------------------------------------------------------- helpers


def request(
    url: str,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection: status, headers (lower-case names), body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def raw_exchange(url: str, data: bytes) -> bytes:
    """Send ``data`` as it is and read until the server closes the connection."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as client:
        client.sendall(data)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
    return received


def raw_status(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert match, answer[:200]
    return int(match.group(1))


def stored(store: Store, key: str) -> bytes:
    value = sync(store.get(key, PROTO))
    assert value is not None, key
    return value.to_bytes()


def all_keys(store: Store) -> list[str]:
    async def collect() -> list[str]:
        return sorted({key async for key in store.list()})

    return sync(collect())


def http_stores(url: str) -> dict[str, Store]:
    """zarr-python's two HTTP stores on ``url``: obstore's and fsspec's (aiohttp)."""
    import obstore.store

    return {
        "obstore": zarr.storage.ObjectStore(
            obstore.store.HTTPStore.from_url(url, client_options={"allow_http": True}),
            read_only=True,
        ),
        "fsspec": zarr.storage.FsspecStore.from_url(url, read_only=True),
    }


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    """Poll ``condition`` (bounded); fail naming ``what`` if it never holds."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {seconds} s")


# ----------------------------------------------------------------- stores


@dataclass
class World:
    """The stores served, what they must read as, and a secret beside them."""

    root: Path
    ordinary: Path
    composite: Path
    mount: Path
    dense: dict[str, np.ndarray]
    composite_dense: np.ndarray
    source_artifact: str


def genes(start: int, count: int) -> list[str]:
    return [f"g{i}" for i in range(start, start + count)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("serve")
    (root / "secret.txt").write_bytes(SECRET)
    spec = {"a": (700, 0, 120, 1), "b": (500, 60, 100, 2), "d": (310, 100, 90, 3)}
    dense: dict[str, np.ndarray] = {}
    features: dict[str, list[str]] = {}
    for name, (cells, first, n_genes, seed) in spec.items():
        counts = realistic_counts(cells, n_genes, density=0.1, seed=seed)
        if name == "a":
            counts = sp.csr_array(counts * 150)  # values past 255: uint16 counts
        dense[name] = counts.toarray()
        features[name] = genes(first, n_genes)
        cv.write_counts(
            root / f"{name}.zarr",
            counts,
            cells=[f"{name}{i}" for i in range(cells)],
            features=features[name],
        )
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", CHUNK_BYTES):
        composite = cv.create_composite(
            root / "comp.zarr", {name: root / f"{name}.zarr" for name in spec}
        )
    union = list(cv.VirtualArrayReader(composite).feature_ids)
    composite.close()
    column = {gene: j for j, gene in enumerate(union)}
    expected = np.zeros((sum(len(d) for d in dense.values()), len(union)), dtype=np.uint16)
    offset = 0
    for name, values in dense.items():
        for j, gene in enumerate(features[name]):
            expected[offset : offset + len(values), column[gene]] = values[:, j]
        offset += len(values)

    return World(
        root,
        root / "a.zarr",
        root / "comp.zarr",
        root / "mount.zarr",
        dense,
        expected,
        make_mount(root),
    )


def make_mount(root: Path) -> str:
    """``root/mount.zarr``, whose source ``root/msrc.zarr`` holds an artifact (read
    through) and whose target holds one; returns the source artifact's id."""
    source = root / "msrc.zarr"
    cv.write_counts(source, realistic_counts(80, 20, density=0.2, seed=9))
    writable = cv.open_store(source, mode="r+")
    with cv.publish_artifact(writable, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(160, dtype=np.float64).reshape(80, 2))
    mount = cv.mount_datastore(source, root / "mount.zarr")
    with cv.publish_artifact(mount, "artifacts", "cell_selection", provenance=PROVENANCE) as sel:
        sel.write_array("mask", np.arange(80) % 3 == 0)
    return art.artifact_id


@dataclass
class Served:
    """A store and the server serving it."""

    store: Store
    server: StoreServer

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def served(world: World) -> Iterator[dict[str, Served]]:
    """The ordinary store, the composite and the mount, each behind its own server."""
    running: dict[str, Served] = {}
    try:
        for kind, location in (
            ("ordinary", world.ordinary),
            ("composite", world.composite),
            ("mount", world.mount),
        ):
            store = cv.open_store(location)
            running[kind] = Served(store, StoreServer.start(store))
        yield running
    finally:
        for each in running.values():
            each.server.close()
            each.store.close()


@pytest.fixture
def composite(served: dict[str, Served]) -> Served:
    return served["composite"]


def list_names(store: Store, prefix: str) -> list[str]:
    async def collect() -> list[str]:
        return sorted({name async for name in store.list_dir(prefix)})

    return sync(collect())


def chunk_keys(store: Store) -> list[str]:
    return [key for key in all_keys(store) if "/counts/c/" in key or "/countsT/c/" in key]


# ------------------------------------------------------ pure parts: ranges


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-9", 100, ByteSpan(0, 10, 100)),
        ("bytes=0-0", 100, ByteSpan(0, 1, 100)),
        ("bytes=99-99", 100, ByteSpan(99, 100, 100)),
        ("bytes=90-1000", 100, ByteSpan(90, 100, 100)),  # last past the end: to the end
        ("bytes=90-", 100, ByteSpan(90, 100, 100)),
        ("bytes=-10", 100, ByteSpan(90, 100, 100)),
        ("bytes=-100", 100, ByteSpan(0, 100, 100)),
        ("bytes=-1000", 100, ByteSpan(0, 100, 100)),  # suffix longer than the value: all of it
        ("BYTES = 5 - 6", 100, ByteSpan(5, 7, 100)),  # unit case-insensitive, spaces tolerated
        ("bytes=3-4,", 100, ByteSpan(3, 5, 100)),  # an empty list element counts for nothing
        ("bytes=100-", 100, Unsatisfiable(100)),
        ("bytes=100-200", 100, Unsatisfiable(100)),
        ("bytes=10000000000000000000000-", 100, Unsatisfiable(100)),
        ("bytes=-0", 100, Unsatisfiable(100)),
        ("bytes=0-0", 0, Unsatisfiable(0)),
        ("bytes=-5", 0, Unsatisfiable(0)),
        ("bytes=5-3", 100, None),  # last before first: invalid, ignored
        ("bytes=-5-10", 100, None),
        ("bytes=a-b", 100, None),
        ("bytes=", 100, None),
        ("bytes=-", 100, None),
        ("bytes=1.5-2", 100, None),
        ("bytes=\u0661-\u0662", 100, None),  # Arabic-Indic digits are not digits here
        ("items=0-9", 100, None),
        ("bytes 0-9", 100, None),
        ("bytes=0-1,5-6", 100, None),  # several ranges: whole value
        ("bytes=0-1, -1", 100, None),
    ],
)
def test_range_rules(header: str, size: int, expected: ByteSpan | Unsatisfiable | None) -> None:
    spec = parse_range(header)
    if expected is None:
        assert spec is None
    else:
        assert spec is not None
        assert resolve_range(spec, size) == expected


# ----------------------------------------------------- pure parts: targets


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/zarr.json", Target("zarr.json", False)),
        ("/RNA/counts/c/0/0", Target("RNA/counts/c/0/0", False)),
        ("/RNA/counts/zarr.json?cache=1", Target("RNA/counts/zarr.json", False)),
        ("/a%2541", Target("a%41", False)),  # a literal '%' in a name, sent encoded
        ("/caf%C3%A9", Target("caf\u00e9", False)),
        ("/", Target("", True)),
        ("/RNA/", Target("RNA", True)),
        ("http://127.0.0.1:1/RNA/zarr.json", Target("RNA/zarr.json", False)),
    ],
)
def test_targets_name_keys(raw: str, expected: Target) -> None:
    assert parse_target(raw) == expected


ESCAPES = [
    "/../secret.txt",
    "/RNA/../../secret.txt",
    "/./zarr.json",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/.%2e/secret.txt",
    "/%2e%2e%2fsecret.txt",
    "/..%2Fsecret.txt",
    "/%252e%252e/secret.txt",
    "/%25252e%25252e/secret.txt",
    "/..\\secret.txt",
    "/%5c..%5csecret.txt",
    "/..%5csecret.txt",
    "/secret.txt%00",
    "/zarr.json%00.png",
    "/C:/secret.txt",
    "/c:%5csecret.txt",
    "/.. /secret.txt".replace(" ", "%20"),
    "/.../secret.txt",
    "/%c0%ae%c0%ae/secret.txt",
    "/%zz/secret.txt",
    "/RNA//zarr.json",
    "/../",
    "/%2e%2e/",
    "secret.txt",
    "*",
]


@pytest.mark.parametrize(
    ("raw", "key"),
    [("//RNA/zarr.json", "RNA/zarr.json"), ("//secret.txt", "secret.txt"), ("///", "")],
)
def test_leading_slashes_name_keys_of_the_store(raw: str, key: str) -> None:
    """zarrs joins the printed URL (ending in '/') with '/RNA/...': the same key,
    inside the store; a doubled slash anywhere else is still refused."""
    assert parse_target(raw).path == key


@pytest.mark.parametrize("raw", ESCAPES)
def test_targets_that_leave_the_store_are_refused(raw: str) -> None:
    # named as a request: a HEAD was refused as a "get", a listing as a "list_dir"
    with pytest.raises(
        BadTargetError, match=r"^(request of|the request target|a request|the path seg)"
    ):
        parse_target(raw)


# ---------------------------------------------------- pure parts: requests


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/2.0\r\nHost: x", 505),
        (b"GET / HTTP/1.1", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b", 400),
        (b"GET / HTTP/1.1\r\nHost : a", 400),  # whitespace before the colon
        (b"GET / HTTP/1.1\r\nHost: a\r\n folded", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: \xb2", 400),  # "²" is a digit to str
        (b"GET  / HTTP/1.1\r\nHost: a", 400),
        (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a", 400),
        (b"GET / HTTX/1.1\r\nHost: a", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b", 400),
    ],
)
def test_malformed_heads_are_refused(head: bytes, status: int) -> None:
    with pytest.raises(MalformedRequestError) as refused:
        parse_head(head)
    assert refused.value.status == status


def test_heads_parse() -> None:
    head = parse_head(
        b"\r\nGET /zarr.json HTTP/1.0\r\nConnection: keep-alive\r\nAccept: a\r\nAccept: b"
    )
    assert (head.method, head.target, head.minor_version) == ("GET", "/zarr.json", 0)
    assert head.keep_alive and head.field("ACCEPT") == "a, b" and not head.announces_body
    assert not parse_head(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close").keep_alive
    assert parse_head(b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked").announces_body


def test_loopback_names_and_error_statuses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.1") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert error_status(cv.IdentityMismatchError("x")) == 502
    assert error_status(FileNotFoundError("source gone")) == 502
    assert error_status(TimeoutError("slow")) == 503
    assert error_status(PermissionError(13, "denied")) == 503
    assert error_status(RuntimeError("bug")) == 500
    # obstore's own errors (a served remote ordinary store) are the backend's, not a bug
    from obstore.exceptions import GenericError, NotFoundError, PermissionDeniedError

    assert error_status(GenericError("Generic S3 error: ...")) == 503
    assert error_status(PermissionDeniedError("403")) == 503
    assert error_status(NotFoundError("gone")) == 502


# ------------------------------------------------ every value, every client


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
@pytest.mark.parametrize("client", ["obstore", "fsspec"])
def test_zarr_reads_every_array_over_http(
    served: dict[str, Served], world: World, kind: str, client: str
) -> None:
    """Every array of the hierarchy reads the same over HTTP as in process."""
    here = served[kind]
    remote = http_stores(here.url)[client]
    local = zarr.open_group(here.store, mode="r")
    arrays = [
        (path, node) for path, node in local.members(max_depth=None) if isinstance(node, zarr.Array)
    ]
    assert len(arrays) >= 5, [path for path, _ in arrays]
    for path, node in arrays:
        over_http = zarr.open_array(store=remote, path=path, mode="r")
        assert over_http.shape == node.shape and over_http.dtype == node.dtype, path
        np.testing.assert_array_equal(over_http[...], node[...], err_msg=path)
    root = zarr.open_group(store=remote, mode="r")
    if kind == "ordinary":
        np.testing.assert_array_equal(
            zarr.open_array(remote, path="RNA/counts")[:], world.dense["a"]
        )
    if kind == "composite":
        counts = zarr.open_array(store=remote, path="RNA/counts", mode="r")
        assert counts.dtype == np.uint16 and counts.chunks[0] < counts.shape[0]
        np.testing.assert_array_equal(counts[:], world.composite_dense)
        np.testing.assert_array_equal(
            zarr.open_array(store=remote, path="RNA/countsT", mode="r")[:], world.composite_dense.T
        )
        rows = np.sort(np.random.default_rng(1).choice(counts.shape[0], 200, replace=False))
        np.testing.assert_array_equal(counts.oindex[rows, :], world.composite_dense[rows])
    if kind == "mount":
        # the source's artifact, read through the mount, over HTTP
        data = zarr.open_array(
            store=remote, path=f"RNA/artifacts/pca/{world.source_artifact}/data", mode="r"
        )
        np.testing.assert_array_equal(data[:], np.arange(160, dtype=np.float64).reshape(80, 2))
    assert root.attrs.asdict() == local.attrs.asdict()


def test_tensorstore_reads_the_composite(composite: Served, world: World) -> None:
    """The key deliverable: tensorstore's http kvstore reads computed counts, every value."""
    import tensorstore as ts

    def open_array(path: str) -> Any:
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "http", "base_url": composite.url, "path": path},
        }
        return ts.open(spec, read=True).result()

    counts = open_array("RNA/counts/")
    assert tuple(counts.shape) == world.composite_dense.shape
    assert counts.dtype.numpy_dtype == np.uint16
    np.testing.assert_array_equal(counts.read().result(), world.composite_dense)
    np.testing.assert_array_equal(
        counts[333:1007, 17:150].read().result(), world.composite_dense[333:1007, 17:150]
    )
    transposed = open_array("RNA/countsT/")
    np.testing.assert_array_equal(transposed.read().result(), world.composite_dense.T)


def test_tensorstore_reads_a_sharded_source(served: dict[str, Served], world: World) -> None:
    """An ordinary store's sharded, Blosc, crc32c counts: ranged and suffix reads.

    Stores written since issue 14 hold standard Blosc containers of zstd blocks,
    which tensorstore decodes (the row-framed chunks of older stores it does
    not: docs/interop.md).
    """
    import tensorstore as ts

    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "http", "base_url": served["ordinary"].url, "path": "RNA/counts/"},
    }
    counts = ts.open(spec, read=True).result()
    np.testing.assert_array_equal(counts.read().result(), world.dense["a"])
    transposed = ts.open({**spec, "kvstore": {**spec["kvstore"], "path": "RNA/countsT/"}}).result()
    np.testing.assert_array_equal(transposed.read().result(), world.dense["a"].T)


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_every_key_reads_as_the_store_gives_it(served: dict[str, Served], kind: str) -> None:
    """GET of each key is ``store.get``'s bytes; HEAD gives their length; both counted."""
    here = served[kind]
    keys = all_keys(here.store)
    before = here.server.stats()
    parts = urlsplit(here.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        for key in keys:
            connection.request("GET", "/" + key)
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200, (key, body)
            assert body == stored(here.store, key), key
            content_type = (
                "application/json" if key.endswith("zarr.json") else "application/octet-stream"
            )
            assert response.getheader("Content-Type") == content_type
            connection.request("HEAD", "/" + key)
            head = connection.getresponse()
            assert head.read() == b""
            assert head.status == 200 and int(head.getheader("Content-Length")) == len(body), key
            assert head.getheader("Accept-Ranges") == "bytes"
    finally:
        connection.close()
    after = here.server.stats()
    assert after.requests - before.requests == 2 * len(keys)
    assert after.statuses[200] - before.statuses.get(200, 0) == 2 * len(keys)
    assert after.connections - before.connections == 1  # one kept-alive connection


# ------------------------------------------------------------------ ranges


def test_range_requests(composite: Served) -> None:
    key = chunk_keys(composite.store)[-1]  # the edge chunk, served at full size
    whole = stored(composite.store, key)
    size = len(whole)
    cases: list[tuple[str, int, bytes | None]] = [
        ("bytes=0-99", 206, whole[:100]),
        ("bytes=100-", 206, whole[100:]),
        (f"bytes={size - 1}-{size - 1}", 206, whole[-1:]),
        (f"bytes=10-{size + 5000}", 206, whole[10:]),
        ("bytes=-64", 206, whole[-64:]),
        (f"bytes=-{size * 3}", 206, whole),  # a suffix larger than the value: all of it
        (f"bytes={size}-", 416, None),
        (f"bytes={size + 10}-{size + 20}", 416, None),
        ("bytes=-0", 416, None),
        ("bytes=5-3", 200, whole),  # malformed: ignored
        ("bytes=-5-3", 200, whole),
        ("bytes=x-y", 200, whole),
        ("pages=0-1", 200, whole),
        ("bytes=0-1,3-4", 200, whole),  # several ranges: whole value
    ]
    for header, status, body in cases:
        got_status, headers, got = request(composite.url, "GET", "/" + key, {"Range": header})
        assert got_status == status, (header, got[:200])
        if status == 206:
            assert got == body, header
            start = (
                size - len(body) if header.startswith("bytes=-") else int(header[6:].split("-")[0])
            )
            assert headers["content-range"] == f"bytes {start}-{start + len(body) - 1}/{size}"
            assert int(headers["content-length"]) == len(body)
        elif status == 416:
            assert headers["content-range"] == f"bytes */{size}", header
            assert key in got.decode()
        else:
            assert got == body and "content-range" not in headers, header
    # If-Range naming other bytes than the key's: the whole value
    status, headers, got = request(
        composite.url, "GET", "/" + key, {"Range": "bytes=0-9", "If-Range": '"x"'}
    )
    assert (status, got) == (200, whole)
    # a Range on HEAD is ignored: the whole length
    status, headers, got = request(composite.url, "HEAD", "/" + key, {"Range": "bytes=0-9"})
    assert (status, got, int(headers["content-length"])) == (200, b"", size)


def test_empty_value_ranges(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "empty").write_bytes(b"")
    with StoreServer.start(LocalStore(tmp_path / "plain", read_only=True)) as server:
        assert request(server.url, "GET", "/empty")[::2] == (200, b"")
        for header in ("bytes=0-0", "bytes=-1", "bytes=0-"):
            status, headers, _ = request(server.url, "GET", "/empty", {"Range": header})
            assert (status, headers["content-range"]) == (416, "bytes */0"), header


def test_listing_bodies_escape_odd_names() -> None:
    """Names that are not plain: percent-encoded in links and hrefs, escaped in text."""
    import xml.etree.ElementTree as ET
    from urllib.parse import unquote

    from cytearc_vfs_adapters.serve.listings import Entry, html_index, multistatus, wants_json

    odd = ["a b", 'x"y', "<i>&'", "caf\u00e9", "q?#%"]
    page = html_index("d", [Entry(f"d/{name}", 3) for name in odd] + [Entry("d/sub dir", None)])
    links = html_links(page)
    assert [unquote(link) for link in links] == [*odd, "sub dir/"]
    assert all(" " not in link and '"' not in link for link in links)
    assert b"<i>" not in page and b"&lt;i&gt;&amp;" in page
    body = multistatus([Entry("d", None), *(Entry(f"d/{name}", 3) for name in odd)], "now")
    hrefs = [r.findtext("{DAV:}href") for r in ET.fromstring(body).findall("{DAV:}response")]
    assert [unquote(href or "") for href in hrefs] == ["/d/", *(f"/d/{name}" for name in odd)]
    assert wants_json("application/json;q=x, text/html;q=0.1") is False  # bad weight: q=0


# ------------------------------------------------------ status codes, keys


def test_missing_keys_and_listings(served: dict[str, Served]) -> None:
    here = served["composite"]
    for method in ("GET", "HEAD"):
        for path in ("/nothing", "/RNA/counts/c/99999/0", "/RNA/counts/c/0/1"):
            status, _, body = request(here.url, method, path)
            assert status == 404, (method, path)
            assert (body == b"") == (method == "HEAD")
        # a directory named without its final "/" is no key: 404 (a client that
        # followed a redirect would take the listing page for the key's value);
        # the line says where the listing is, for a person at a browser
        for path in ("/RNA", "/RNA/counts", "/RNA/counts/c/0"):
            status, headers, body = request(here.url, method, path)
            assert status == 404 and "location" not in headers, (method, path)
            assert method == "HEAD" or f"{path}/".encode() in body, body
    for path in ("", "RNA", "RNA/counts", "RNA/counts/c", "cellData"):
        status, headers, body = request(here.url, "GET", f"/{path}/" if path else "/")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == {
            "prefix": f"{path}/" if path else "",
            "names": list_names(here.store, path),
        }
    listed = json.loads(request(here.url, "GET", "/RNA/counts/c/")[2])["names"]
    chunks = [key for key in chunk_keys(here.store) if key.startswith("RNA/counts/c/")]
    assert listed == sorted(str(i) for i in range(len(chunks)))
    for path in ("/nothing/", "/zarr.json/", "/RNA/counts/c/0/0/"):
        assert request(here.url, "GET", path)[0] == 404, path
    # the mount lists the source's artifact through the target
    mount = served["mount"]
    kinds = json.loads(request(mount.url, "GET", "/RNA/artifacts/pca/")[2])["names"]
    assert kinds


def propfind(url: str, path: str, depth: str | None) -> tuple[int, dict[str, str], bytes]:
    return request(url, "PROPFIND", path, {} if depth is None else {"Depth": depth})


def dav_entries(body: bytes) -> dict[str, int | None]:
    """href -> getcontentlength (``None``: a collection) of a multistatus body."""
    import xml.etree.ElementTree as ET

    found: dict[str, int | None] = {}
    for response in ET.fromstring(body).findall("{DAV:}response"):
        href = response.findtext("{DAV:}href")
        prop = response.find("{DAV:}propstat/{DAV:}prop")
        assert href is not None and prop is not None
        assert response.findtext("{DAV:}propstat/{DAV:}status") == "HTTP/1.1 200 OK"
        assert prop.findtext("{DAV:}getlastmodified")  # object_store requires it
        collection = prop.find("{DAV:}resourcetype/{DAV:}collection") is not None
        length = prop.findtext("{DAV:}getcontentlength")
        assert collection == (length is None), href
        found[href] = None if length is None else int(length)
    return found


def html_links(body: bytes) -> list[str]:
    return re.findall(r'<a href="([^"]+)"', body.decode())


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_fsspec_reads_by_path_and_lists_the_root(served: dict[str, Served], kind: str) -> None:
    """FsspecStore scrapes the HTML index of the root, and reads every array by path.

    It lists a directory by fetching its name without the final ``/``, which
    is no key here (``404``): below the root it lists nothing, rather than
    taking a listing page for a key's value.
    """
    here = served[kind]
    remote = zarr.storage.FsspecStore.from_url(here.url, read_only=True)
    local = zarr.open_group(here.store, mode="r")
    over_http = zarr.open_group(remote, mode="r")
    assert sorted(over_http.keys()) == sorted(local.keys())

    def members(group: zarr.Group) -> dict[str, str]:
        return {path: type(node).__name__ for path, node in group.members(max_depth=None)}

    expected = members(local)
    top = {path: kind_name for path, kind_name in expected.items() if "/" not in path}
    assert members(over_http) == top and len(expected) >= 8
    for path, kind_name in expected.items():
        if kind_name == "Array":
            np.testing.assert_array_equal(
                zarr.open_array(remote, path=path, mode="r")[...],
                zarr.open_array(here.store, path=path, mode="r")[...],
                err_msg=path,
            )
    # the page itself: one link per name, directories ending in "/"
    for prefix in ("", "RNA", "RNA/counts", "RNA/counts/c"):
        if not list_names(here.store, prefix):
            continue  # (a mount's counts are sharded: c/ may hold nothing yet)
        status, headers, body = request(
            here.url, "GET", f"/{prefix}/" if prefix else "/", {"Accept": "*/*"}
        )
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert headers["vary"] == "Accept"
        names = list_names(here.store, prefix)
        links = html_links(body)
        assert [link.rstrip("/") for link in links] == names
        for link in links:
            key = f"{prefix}/{link.rstrip('/')}".lstrip("/")
            assert link.endswith("/") == (not sync(here.store.exists(key))), key
        assert b"http://" not in body  # fsspec would take any absolute URL for a link


def test_listing_format_follows_accept(composite: Served) -> None:
    names = list_names(composite.store, "RNA")
    cases = {
        None: "application/json",  # as before: clients that say nothing get JSON
        "application/json": "application/json",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": "text/html",
        "*/*": "text/html",  # aiohttp (fsspec), curl
        "application/json;q=0.5, text/html;q=0.4": "application/json",
        "application/*": "application/json",
        "text/html;q=0": "application/json",
    }
    for accept, kind in cases.items():
        headers = {} if accept is None else {"Accept": accept}
        status, answer, body = request(composite.url, "GET", "/RNA/", headers)
        assert status == 200 and answer["content-type"].startswith(kind), accept
        if kind == "application/json":
            assert json.loads(body)["names"] == names
        else:
            assert [link.rstrip("/") for link in html_links(body)] == names


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_obstore_lists_every_key_with_its_size(served: dict[str, Served], kind: str) -> None:
    """obstore's HTTPStore lists by PROPFIND Depth 1: every key, its size, its directories."""
    import obstore
    import obstore.store

    here = served[kind]
    client = obstore.store.HTTPStore.from_url(here.url, client_options={"allow_http": True})
    listed: dict[str, int] = {}
    prefixes: list[str | None] = [None]
    requests = 0
    before = here.store.chunk_stats if isinstance(here.store, cv.CompositeStore) else None
    while prefixes:
        found = obstore.list_with_delimiter(client, prefixes.pop())
        requests += 1
        listed.update({item["path"]: item["size"] for item in found["objects"]})
        prefixes += found["common_prefixes"]
    keys = all_keys(here.store)
    assert sorted(listed) == keys
    assert listed == {key: sync(here.store.getsize(key)) for key in keys}
    directories = {""} | {
        "/".join(key.split("/")[:depth]) for key in keys for depth in range(1, key.count("/") + 1)
    }
    assert requests == len(directories)  # one PROPFIND per directory, none per key
    if before is not None:
        assert here.store.chunk_stats == before, "a listing computed a chunk"
    # zarr's ObjectStore over it lists a directory as the store does
    remote = http_stores(here.url)["obstore"]
    for prefix in ("", "RNA", "RNA/counts"):
        assert list_names(remote, prefix) == list_names(here.store, prefix)


def test_propfind_answers(composite: Served) -> None:
    store = composite.store
    assert isinstance(store, cv.CompositeStore)
    before = store.chunk_stats
    key = "RNA/counts/zarr.json"
    status, headers, body = propfind(composite.url, "/" + key, "0")
    assert status == 207 and headers["content-type"].startswith("application/xml")
    assert dav_entries(body) == {"/" + key: len(stored(store, key))}
    for path in ("/RNA", "/RNA/"):
        assert dav_entries(propfind(composite.url, path, "0")[2]) == {"/RNA/": None}
    assert dav_entries(propfind(composite.url, "/", "0")[2]) == {"/": None}
    # a directory of computed chunks: names and sizes, not one chunk computed
    rows = list_names(store, "RNA/counts/c")
    entries = dav_entries(propfind(composite.url, "/RNA/counts/c", "1")[2])
    assert entries == {"/RNA/counts/c/": None, **{f"/RNA/counts/c/{row}/": None for row in rows}}
    chunk = dav_entries(propfind(composite.url, "/RNA/counts/c/0/", "1")[2])
    assert chunk == {
        "/RNA/counts/c/0/": None,
        "/RNA/counts/c/0/0": sync(store.getsize("RNA/counts/c/0/0")),
    }
    assert store.chunk_stats == before, "a PROPFIND computed a chunk"
    # Depth infinity (also what no Depth means) is refused as RFC 4918 lets a server
    for depth in ("infinity", "Infinity", None):
        status, headers, body = propfind(composite.url, "/", depth)
        assert status == 403 and b"<D:propfind-finite-depth/>" in body, depth
    assert propfind(composite.url, "/", "2")[0] == 400
    for path in ("/nothing", "/nothing/", "/RNA/counts/c/99999/0", "/zarr.json/"):
        assert propfind(composite.url, path, "1")[0] == 404, path
    # a body is never read: the connection closes after the answer
    status, headers, _ = request(
        composite.url,
        "PROPFIND",
        "/",
        {"Depth": "1"},
        body=b"<propfind xmlns='DAV:'><allprop/></propfind>",
    )
    assert status == 207 and headers["connection"] == "close"
    assert store.chunk_stats == before


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_propfind_stays_inside_the_store(
    served: dict[str, Served], world: World, kind: str
) -> None:
    here = served[kind]
    secret = world.root / "secret.txt"
    for raw in (*ESCAPES, "/RNA/%2e%2e/%2e%2e/secret.txt", "/%2f" + str(secret).lstrip("/")):
        for depth in ("0", "1"):
            answer = raw_exchange(
                here.url,
                f"PROPFIND {raw} HTTP/1.1\r\nHost: 127.0.0.1\r\nDepth: {depth}\r\n"
                "Connection: close\r\n\r\n".encode(),
            )
            assert raw_status(answer) in (400, 404), (raw, answer[:300])
            assert SECRET not in answer and str(world.root).encode() not in answer


@pytest.mark.parametrize("kind", ["ordinary", "composite"])
def test_open_store_and_info_over_served_http(
    served: dict[str, Served], world: World, kind: str
) -> None:
    """This package opens what its own serve serves (listings by PROPFIND Depth 1 only)."""
    here = served[kind]
    before = here.server.stats().statuses
    opened = cv.open_store(here.url)  # an http:// URL is read over plain HTTP, as written
    after = here.server.stats().statuses
    # the shard check asks Depth: infinity once, is refused, and walks at Depth 1
    # (the client remembers the refusal; a composite's open lists no shards)
    assert after.get(403, 0) - before.get(403, 0) == (1 if kind == "ordinary" else 0)
    try:
        counts = zarr.open_array(opened, path="RNA/counts", mode="r")
        expected = world.dense["a"] if kind == "ordinary" else world.composite_dense
        np.testing.assert_array_equal(counts[:], expected)
    finally:
        opened.close()
    result = run_main("info", here.url, "--json")
    assert result.returncode == 0, result.stderr
    assert str(expected.shape[0]) in result.stdout


def test_open_store_through_fsspec_names_the_listing_it_cannot_take(
    served: dict[str, Served],
) -> None:
    """fsspec's HTTP filesystem lists a served directory as the directory itself, which
    the shard check took for a shard: "RNA/counts/c/ is not one of the 1 row shards ...;
    shard files were deleted", a damaged store where nothing is wrong. The refusal now
    says which listing failed and how to open the store."""
    url = served["ordinary"].url
    with pytest.raises(ValueError) as refused:
        cv.open_store(url, storage_options={"backend": "fsspec"})
    text = str(refused.value)
    assert not isinstance(refused.value, cv.IdentityMismatchError), text
    assert "cannot list 'RNA/counts/c/'" in text and "obstore" in text, text


def test_a_shard_deleted_behind_a_served_store_is_refused_over_http(
    world: World, tmp_path: Path
) -> None:
    """Over HTTP the open check lists shards one level at a time, and still sees a missing one."""
    import shutil

    copy = tmp_path / "a.zarr"
    shutil.copytree(world.ordinary, copy)
    store = cv.open_store(copy)
    try:
        with StoreServer.start(store) as server:
            cv.open_store(server.url).close()
            shard = next((copy / "RNA" / "counts" / "c").iterdir()) / "0"
            shard.unlink()
            with pytest.raises(cv.IdentityMismatchError, match="missing"):
                cv.open_store(server.url)
            # Depth: infinity refused once, then walked; the shared client remembers it
            assert server.stats().statuses.get(403, 0) == 1
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_nothing_outside_the_store_is_served(
    served: dict[str, Served], world: World, kind: str
) -> None:
    here = served[kind]
    location = {"ordinary": world.ordinary, "composite": world.composite, "mount": world.mount}[
        kind
    ]
    secret = world.root / "secret.txt"
    spellings = [
        *ESCAPES,
        "/" + str(secret),
        "/" + str(secret).replace("/", "%2f"),
        "/" + str(secret).replace("/", "%2F").replace(".", "%2e"),
        "/%2f" + str(secret).lstrip("/"),
        "http://127.0.0.1/../secret.txt",
        "http://127.0.0.1/%2e%2e/secret.txt",
        "/RNA/%2e%2e/%2e%2e/secret.txt",
        "/RNA/counts/../../../secret.txt",
        "/" + "../" * 12 + "etc/hostname",
    ]
    for raw in spellings:
        for method in ("GET", "HEAD"):
            answer = raw_exchange(
                here.url,
                f"{method} {raw} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(),
            )
            assert raw_status(answer) in (400, 404), (raw, answer[:300])
            assert SECRET not in answer and b"7f3a1c" not in answer, raw
            # the answer names what the client sent, never where the store lies
            assert str(location).encode() not in answer, (raw, answer)


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount"])
def test_keys_too_long_for_the_file_system_are_absent(
    served: dict[str, Served], world: World, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A local store's file system refuses such names (ENAMETOOLONG): the key is
    # absent, not a store error to retry, and the answer must not carry the
    # OSError's message, which names the store's directory.
    here = served[kind]
    location = {"ordinary": world.ordinary, "composite": world.composite, "mount": world.mount}[
        kind
    ]
    long_name = "a" * 300
    deep = "a/" * 2100  # beyond PATH_MAX
    with caplog.at_level(logging.ERROR, logger="cytearc_vfs_adapters.serve"):
        for method in ("GET", "HEAD"):
            for path in (f"/{long_name}/zarr.json", f"/RNA/{long_name}", f"/{deep}zarr.json"):
                status, _, body = request(here.url, method, path)
                assert status == 404, (method, path[:40], body[:200])
                assert str(location).encode() not in body
        for path in (f"/{long_name}/", f"/{deep}"):
            status, _, body = request(here.url, "GET", path)
            assert status == 404 and body.startswith(b"nothing under "), body[:200]
            assert str(location).encode() not in body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert request(here.url, "GET", "/zarr.json")[0] == 200


@pytest.mark.parametrize(
    "method",
    [
        "PUT",
        "POST",
        "DELETE",
        "PATCH",
        "OPTIONS",
        "BREW",
        "PROPPATCH",
        "MKCOL",
        "COPY",
        "MOVE",
        "LOCK",
        "UNLOCK",
    ],
)
def test_write_verbs_are_refused(served: dict[str, Served], world: World, method: str) -> None:
    before = {
        name: tree_digest(world.root / name) for name in ("a.zarr", "comp.zarr", "mount.zarr")
    }
    for kind, here in served.items():
        for path in ("/zarr.json", "/RNA/counts/c/0/0", "/new-key", "/RNA/"):
            body = b"x" * 100 if method in ("PUT", "POST", "PATCH") else None
            status, headers, text = request(here.url, method, path, body=body)
            assert status == 405, (kind, method, path)
            assert headers["allow"] == "GET, HEAD, PROPFIND"
            assert b"read-only" in text
            if body is not None:
                assert headers["connection"] == "close"  # the body is never read as a request
    after = {name: tree_digest(world.root / name) for name in before}
    assert after == before


def test_a_request_body_never_becomes_a_request(composite: Served) -> None:
    smuggled = b"GET /zarr.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    answer = raw_exchange(
        composite.url,
        b"POST /zarr.json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
        + smuggled,
    )
    assert raw_status(answer) == 405
    assert answer.count(b"HTTP/1.1 ") == 1  # one answer: the connection closed after it


def test_protocol_refusals_over_the_wire(composite: Served) -> None:
    url = composite.url
    cases = [
        (b"GET /zarr.json HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
        (b"GET /zarr.json HTTP/1.1\r\n\r\n", 400),
        (b"GET /zarr.json HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"garbage\r\n\r\n", 400),
        (b"GET /zarr.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        # DNS rebinding: a page whose name now points at 127.0.0.1 sends its own name
        (b"GET /zarr.json HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n", 421),
    ]
    for data, status in cases:
        answer = raw_exchange(url, data)
        assert raw_status(answer) == status, (data[:60], answer[:200])
    for host in ("localhost", "127.0.0.1", f"127.0.0.1:{composite.server.port}", "[::1]:1"):
        status, _, _ = request(url, "GET", "/zarr.json", {"Host": host})
        assert status == 200, host
    # HTTP/1.0 without Host is served, and the connection closes after the answer
    answer = raw_exchange(url, b"GET /zarr.json HTTP/1.0\r\n\r\n")
    assert raw_status(answer) == 200 and b"Connection: close" in answer
    # lines ending at a bare LF, as `printf ... | nc` sends them (RFC 9112, section 2.2):
    # answered at once; they waited out the header timeout
    for data in (b"GET /zarr.json HTTP/1.0\n\n", b"\nGET /zarr.json HTTP/1.0\nX: 1\r\n\n"):
        answer = raw_exchange(url, data)
        assert raw_status(answer) == 200 and answer.endswith(stored(composite.store, "zarr.json"))
    # an absolute-form target's authority is the host asked for, not Host (RFC 9112, 3.2.2)
    port = composite.server.port
    for target, host, status in (
        (b"http://evil.example/zarr.json", b"127.0.0.1", 421),
        (b"http://127.0.0.1:%d/zarr.json" % port, b"evil.example", 200),
    ):
        data = b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (target, host)
        assert raw_status(raw_exchange(url, data)) == status, target
    # a CR inside a line is no line's end: refused
    assert raw_status(raw_exchange(url, b"GET /zarr.json HTTP/1.0\nX: a\rb\n\n")) == 400


def test_cors_only_when_allowed(world: World) -> None:
    store = cv.open_store(world.ordinary)
    origin = {"Origin": "https://viewer.example"}
    with StoreServer.start(store) as closed:
        status, headers, _ = request(closed.url, "GET", "/zarr.json", origin)
        assert status == 200 and "access-control-allow-origin" not in headers
        assert request(closed.url, "OPTIONS", "/zarr.json", origin)[0] == 405
    with StoreServer.start(
        store, options=ServeOptions(allow_origin="https://viewer.example")
    ) as cors:
        status, headers, _ = request(cors.url, "GET", "/zarr.json", origin)
        assert headers["access-control-allow-origin"] == "https://viewer.example"
        assert "Content-Range" in headers["access-control-expose-headers"]
        status, headers, _ = request(
            cors.url,
            "OPTIONS",
            "/RNA/counts/c/0/0",
            {**origin, "Access-Control-Request-Headers": "range"},
        )
        assert status == 204 and "Range" in headers["access-control-allow-headers"]
        status, headers, _ = request(
            cors.url, "GET", "/zarr.json", {"Origin": "https://other.example"}
        )
        assert status == 200 and "access-control-allow-origin" not in headers


# ---------------------------------------------------- HEAD computes nothing


def test_head_and_getsize_compute_no_chunk(composite: Served) -> None:
    store = composite.store
    assert isinstance(store, cv.CompositeStore)
    keys = chunk_keys(store)
    before = store.chunk_stats
    for key in keys:
        status, headers, _ = request(composite.url, "HEAD", "/" + key)
        assert status == 200
        assert int(headers["content-length"]) == sync(store.getsize(key))
    for path in ("RNA/counts/zarr.json", "RNA/countsT/zarr.json"):
        assert sync(store.getsize(path)) == len(stored(store, path))
    assert store.chunk_stats == before, "a HEAD computed a chunk"
    # the counters are live: one GET computes one chunk
    assert len(stored(store, keys[0])) == sync(store.getsize(keys[0]))
    assert store.chunk_stats.reads == before.reads + 1
    for missing in ("RNA/counts/c/99999/0", "RNA/counts/c/0/1", "RNA/counts/x"):
        with pytest.raises(FileNotFoundError):
            sync(store.getsize(missing))
    # every chunk (the edge one too) is rows x columns x 2 bytes
    document = store.record.arrays["RNA/counts"]
    rows, cols = document["chunk_grid"]["configuration"]["chunk_shape"]
    assert {sync(store.getsize(key)) for key in keys if "/counts/" in key} == {rows * cols * 2}


# ------------------------------------------------------------------- load


def test_32_concurrent_clients_read_random_ranges(composite: Served) -> None:
    store = composite.store
    keys = chunk_keys(store)
    expected = {key: stored(store, key) for key in keys}
    clients, per_client = 32, 12
    before = composite.server.stats()
    failures: list[str] = []
    checked = [0] * clients

    def client(index: int) -> None:
        rng = np.random.default_rng(index)
        parts = urlsplit(composite.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        try:
            for _ in range(per_client):
                key = str(rng.choice(keys))
                whole = expected[key]
                a, b = sorted(int(x) for x in rng.integers(0, len(whole), 2))
                header, want = [
                    (None, whole),
                    (f"bytes={a}-{b}", whole[a : b + 1]),
                    (f"bytes={a}-", whole[a:]),
                    (f"bytes=-{b + 1}", whole[-(b + 1) :]),
                    (f"bytes=-{len(whole) + a + 1}", whole),
                ][int(rng.integers(0, 5))]
                connection.request("GET", "/" + key, headers={"Range": header} if header else {})
                response = connection.getresponse()
                body = response.read()
                if response.status not in (200, 206) or body != want:
                    failures.append(f"{key} {header}: {response.status}, {len(body)} bytes")
                checked[index] += 1
        except Exception as exc:  # reported below, with the client's number
            failures.append(f"client {index}: {type(exc).__name__}: {exc}")
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures[:5]
    assert sum(checked) == clients * per_client
    after = composite.server.stats()
    assert after.requests - before.requests == clients * per_client
    assert after.connections - before.connections == clients
    assert after.dropped == before.dropped


# ---------------------------------------------------- slow and gone clients


@pytest.fixture
def blob_store(tmp_path: Path) -> LocalStore:
    """A plain store with one 48 MiB value: more than socket buffers hold."""
    (tmp_path / "blob").mkdir()
    (tmp_path / "blob" / "big").write_bytes(np.random.default_rng(0).bytes(48 << 20))
    (tmp_path / "blob" / "small").write_bytes(b"small value")
    return LocalStore(tmp_path / "blob", read_only=True)


def test_silent_and_slow_clients_block_no_one(blob_store: LocalStore) -> None:
    options = ServeOptions(header_timeout=60, write_timeout=60)
    with StoreServer.start(blob_store, options=options) as server:
        parts = urlsplit(server.url)
        address = (parts.hostname, parts.port)
        silent = [socket.create_connection(address, timeout=30) for _ in range(4)]
        half = socket.create_connection(address, timeout=30)
        half.sendall(b"GET /small HTTP/1.1\r\nHo")  # a head that never ends
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(address)
        slow.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        slow.recv(1024)  # the answer has begun; nothing more is read
        try:
            for _ in range(40):
                assert request(server.url, "GET", "/small")[::2] == (200, b"small value")
            wait_until(lambda: server.stats().open_connections >= 6, "six stalled connections")
            assert server.stats().open_connections >= 6  # all still open meanwhile
        finally:
            for each in [*silent, half, slow]:
                each.close()


def test_timeouts_close_stalled_connections(blob_store: LocalStore) -> None:
    options = ServeOptions(header_timeout=0.5, write_timeout=0.5)
    with StoreServer.start(blob_store, options=options) as server:
        parts = urlsplit(server.url)
        address = (parts.hostname, parts.port)
        with socket.create_connection(address, timeout=30) as silent:
            assert silent.recv(1) == b""  # closed by the server, not by the test's timeout
        assert server.stats().timed_out == 1
        with socket.socket() as slow:
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.connect(address)
            slow.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            wait_until(lambda: server.stats().dropped == 1, "the slow reader's drop")
        assert request(server.url, "GET", "/small")[0] == 200


def test_a_client_that_leaves_mid_answer_is_dropped_quietly(
    blob_store: LocalStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with StoreServer.start(blob_store) as server:
        parts = urlsplit(server.url)
        for _ in range(3):
            client = socket.create_connection((parts.hostname, parts.port), timeout=30)
            client.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            client.recv(65536)
            # RST rather than FIN: the server's next write fails at once
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
        wait_until(lambda: server.stats().dropped == 3, "three dropped connections")
        assert request(server.url, "GET", "/small")[0] == 200
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, [r.getMessage() for r in noisy]


# ---------------------------------------------------------- store errors


RemoteComposite = tuple[Path, dict[str, Any], LoopbackProxy, str, np.ndarray]


def _remote_sources(s3_server: S3Server) -> tuple[str, np.ndarray]:
    """S3 sources ``s`` and ``other`` in a new bucket; its name and the counts of ``s``."""
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    counts = realistic_counts(2000, 60, density=0.2, seed=31)
    layout = cv.LayoutPolicy(64 * 1024, 4096)
    for name, seed in (("s", 31), ("other", 32)):
        cv.write_counts(
            f"s3://{bucket}/{name}.zarr",
            realistic_counts(2000, 60, density=0.2, seed=seed),
            features=genes(0, 60),
            layout=layout,
            storage_options=direct,
        )
    return bucket, counts.toarray()


@pytest.fixture(scope="module")
def shared_remote_sources(s3_server: S3Server) -> tuple[str, np.ndarray]:
    """``_remote_sources`` written once for the tests that leave the source as it is."""
    return _remote_sources(s3_server)


def _remote_composite(
    tmp_path: Path,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    sources: tuple[str, np.ndarray],
) -> Iterator[RemoteComposite]:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    bucket, expected = sources
    direct = s3_server.storage_options()
    proxy = LoopbackProxy(s3_server.endpoint)
    options = {**direct, "endpoint": proxy.endpoint}
    location = tmp_path / "remote-comp.zarr"
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 30_000):
        cv.create_composite(
            location, {"s": f"s3://{bucket}/s.zarr"}, source_storage_options={"s": options}
        ).close()
    try:
        yield location, options, proxy, bucket, expected
    finally:
        proxy.close()


@pytest.fixture
def remote_composite(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RemoteComposite]:
    """A local composite over one S3 source ``s``, reached through a loopback proxy;
    the source in a bucket of this test's own (the test replaces it)."""
    yield from _remote_composite(tmp_path, s3_server, monkeypatch, _remote_sources(s3_server))


@pytest.fixture
def shared_remote_composite(
    tmp_path: Path,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    shared_remote_sources: tuple[str, np.ndarray],
) -> Iterator[RemoteComposite]:
    """``remote_composite`` over the module's source, for a test that leaves it as it is."""
    yield from _remote_composite(tmp_path, s3_server, monkeypatch, shared_remote_sources)


def replace_source(s3_server: S3Server, bucket: str) -> int:
    import obstore
    from obstore.store import from_url

    store = from_url(f"s3://{bucket}", **s3_server.storage_options())
    listed = obstore.list(store, prefix="other.zarr/RNA/").collect()
    replaced = 0
    for item in listed:
        if "/c/" in item["path"]:
            target = item["path"].replace("other.zarr/", "s.zarr/", 1)
            obstore.put(store, target, obstore.get(store, item["path"]).bytes())
            replaced += 1
    return replaced


@pytest.mark.remote
def test_a_remote_composite_is_served_through_its_cache(
    shared_remote_composite: RemoteComposite,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tensorstore as ts

    location, options, proxy, _, expected = shared_remote_composite
    monkeypatch.setenv(CACHE_ENV, "64M")
    store = cv.open_store(location, source_storage_options={"s": options})
    assert isinstance(store, cv.CompositeStore)
    with StoreServer.start(store) as server:
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "http", "base_url": server.url, "path": "RNA/counts/"},
        }
        np.testing.assert_array_equal(ts.open(spec, read=True).result().read().result(), expected)
        first = len(proxy.take())
        np.testing.assert_array_equal(ts.open(spec, read=True).result().read().result(), expected)
        assert first > 0 and len(proxy.take()) < first  # the second read came from the cache
        assert store.cache_info().bytes_cached > 0
    store.close()


@pytest.mark.remote
def test_a_remote_ordinary_store_is_served(
    shared_remote_composite: RemoteComposite,
    s3_server: S3Server,
) -> None:
    _, _, _, bucket, expected = shared_remote_composite
    # straight to S3: the counting proxy answers a HEAD with Content-Length 0
    options = s3_server.storage_options()
    store = cv.open_store(f"s3://{bucket}/s.zarr", storage_options=options)
    with StoreServer.start(store) as server:
        remote = http_stores(server.url)["obstore"]
        np.testing.assert_array_equal(zarr.open_array(remote, path="RNA/counts")[:], expected)
        np.testing.assert_array_equal(zarr.open_array(remote, path="RNA/countsT")[:], expected.T)
        for key in ("zarr.json", "RNA/counts/zarr.json", "RNA/counts/c/0/0"):
            status, headers, _ = request(server.url, "HEAD", "/" + key)
            assert status == 200 and int(headers["content-length"]) == len(stored(store, key))


@pytest.mark.remote
def test_store_errors_are_5xx_and_the_server_goes_on(
    remote_composite: RemoteComposite,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    location, options, proxy, bucket, _ = remote_composite
    monkeypatch.setenv(CACHE_ENV, "0")
    store = cv.open_store(location, source_storage_options={"s": options})
    keys = chunk_keys(store)
    with StoreServer.start(store) as server:
        status, _, body = request(server.url, "GET", "/" + keys[0])
        assert status == 200
        # the source is replaced behind the composite's back: refused, 502
        assert replace_source(s3_server, bucket) > 0
        status, headers, body = request(server.url, "GET", "/" + keys[1])
        text = body.decode()
        assert status == 502, text
        assert text.count("\n") == 1 and keys[1] in text and "IdentityMismatchError" in text
        assert headers["content-type"].startswith("text/plain")
        # a source that stops answering: 503 within CYTEARC_SOURCE_TIMEOUT
        proxy.hang = True
        status, _, body = request(server.url, "GET", "/" + keys[2])
        assert (
            status == 503 and keys[2] in body.decode() and "CYTEARC_SOURCE_TIMEOUT" in body.decode()
        )
        # the server goes on: metadata and sizes need no source
        assert request(server.url, "GET", "/zarr.json")[0] == 200
        assert request(server.url, "HEAD", "/" + keys[3])[0] == 200
        assert server.stats().statuses[502] == 1 and server.stats().statuses[503] == 1
    store.close()
    logged = [
        r.getMessage() for r in caplog.records if r.name == "cytearc_vfs_adapters.serve.server"
    ]
    assert len(logged) == 2 and logged[0].startswith("502 GET") and logged[1].startswith("503 GET")


# ------------------------------------------------------------ command line


@dataclass
class Running:
    """A ``cytearc-vfs serve`` process and how to read what it printed."""

    process: subprocess.Popen[bytes]
    first_line: str
    read_rest: Callable[[], str]


def _read_line(fd: int, deadline: float, buffer: bytearray) -> str:
    while b"\n" not in buffer:
        if time.monotonic() > deadline:
            raise AssertionError(f"no first line within the deadline: {bytes(buffer)!r}")
        ready = readable(fd, 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"the command ended before its first line: {bytes(buffer)!r}")
            buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode().rstrip("\r")


def _drain(fd: int, deadline: float) -> bytes:
    received = b""
    while time.monotonic() < deadline:
        ready = readable(fd, 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed with the child
                break
            if not chunk:
                break
            received += chunk
    return received


@pytest.fixture
def start_serve() -> Iterator[Callable[..., Running]]:
    """Start ``cytearc-vfs serve ARGS`` on a pseudo-terminal or pipes; killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    descriptors: list[int] = []

    def start(args: list[str], *, terminal: bool) -> Running:
        deadline = time.monotonic() + 120
        if terminal:
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            process = subprocess.Popen(
                [cli_executable(), "serve", *args], stdin=slave, stdout=slave, stderr=slave
            )
            os.close(slave)
            descriptors.append(master)
            out_fd, err_fd = master, None
        else:
            process = subprocess.Popen(
                [cli_executable(), "serve", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert process.stdout is not None and process.stderr is not None
            out_fd, err_fd = process.stdout.fileno(), process.stderr.fileno()
        started.append(process)
        buffer = bytearray()
        first = _read_line(out_fd, deadline, buffer)

        def read_rest() -> str:
            process.wait(timeout=60)
            rest = bytes(buffer) + _drain(out_fd, time.monotonic() + 10)
            if err_fd is not None:
                rest += _drain(err_fd, time.monotonic() + 10)
            return rest.decode(errors="replace")

        return Running(process, first, read_rest)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    for fd in descriptors:
        os.close(fd)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("terminal", "signum", "extra"),
    [
        (True, signal.SIGINT, []),
        (False, signal.SIGTERM, ["--port", "0"]),
        (False, signal.SIGINT, ["--host", "127.0.0.1"]),
        (False, signal.SIGHUP, []),  # the terminal closed: stopped like SIGTERM
    ],
)
def test_cli_serves_until_a_signal(
    start_serve: Callable[..., Running], world: World, terminal: bool, signum: int, extra: list[str]
) -> None:
    running = start_serve([str(world.composite), *extra], terminal=terminal)
    matched = re.fullmatch(r"serving http://127\.0\.0\.1:(\d+)/", running.first_line)
    assert matched, running.first_line
    url = f"http://127.0.0.1:{matched.group(1)}/"
    status, _, body = request(url, "GET", "/RNA/counts/zarr.json")
    assert status == 200 and json.loads(body)["node_type"] == "array"
    counts = zarr.open_array(store=http_stores(url)["obstore"], path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:50], world.composite_dense[:50])
    running.process.send_signal(signum)
    rest = running.read_rest()
    assert running.process.returncode == (130 if signum == signal.SIGINT else 143), rest
    assert signal.Signals(signum).name in rest
    assert "Traceback" not in rest and "Task was destroyed" not in rest, rest
    lines = [line for line in rest.splitlines() if line.strip()]
    assert len(lines) == 1 and "cytearc-vfs serve: interrupted" in lines[0], rest
    with pytest.raises(OSError):  # the port is closed
        request(url, "GET", "/zarr.json")


def test_cli_on_all_interfaces_prints_a_url_a_client_can_use(
    start_serve: Callable[..., Running], world: World
) -> None:
    port = free_port()
    running = start_serve(
        [str(world.ordinary), "--host", "0.0.0.0", "--port", str(port)], terminal=False
    )
    assert running.first_line == f"serving http://127.0.0.1:{port}/"
    status, _, body = request(running.first_line.split()[1], "GET", "/zarr.json")
    assert (status, body) == (200, (world.ordinary / "zarr.json").read_bytes())
    running.process.send_signal(signal.SIGTERM)
    rest = running.read_rest()
    assert "listening on 0.0.0.0 (all interfaces)" in rest and "not a loopback" in rest


def test_cli_serves_an_ordinary_store_and_a_mount_on_a_given_port(
    start_serve: Callable[..., Running], world: World
) -> None:
    for location in (world.ordinary, world.mount):
        port = free_port()
        running = start_serve([str(location), "--port", str(port), "--json"], terminal=False)
        assert running.first_line == f"serving http://127.0.0.1:{port}/"
        status, _, body = request(running.first_line.split()[1], "GET", "/zarr.json")
        assert (status, body) == (200, (location / "zarr.json").read_bytes())
        running.process.send_signal(signal.SIGINT)
        rest = running.read_rest()
        assert running.process.returncode == 130
        payload = json.loads(rest[: rest.rindex("}") + 1])
        assert payload["category"] == "interrupted" and payload["command"] == "serve"


@pytest.mark.remote
def test_cli_serves_a_remote_composite_and_reports_errors_on_stderr(
    remote_composite: RemoteComposite,
    s3_server: S3Server,
    start_serve: Callable[..., Running],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Source credentials from ``--source-storage-options @FILE``; errors one line each."""
    location, options, proxy, bucket, expected = remote_composite
    monkeypatch.setenv(CACHE_ENV, "0")  # the child inherits both settings
    credentials = tmp_path / "creds.json"
    credentials.write_text(json.dumps({"s": options}))
    running = start_serve(
        [str(location), "--source-storage-options", f"@{credentials}"], terminal=False
    )
    url = running.first_line.split()[1]
    counts = zarr.open_array(store=http_stores(url)["fsspec"], path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], expected)
    assert replace_source(s3_server, bucket) > 0
    status, _, body = request(url, "GET", "/RNA/counts/c/1/0")
    assert status == 502 and "IdentityMismatchError" in body.decode()
    proxy.hang = True
    status, _, body = request(url, "GET", "/RNA/countsT/c/0/0")
    assert status == 503, body
    assert request(url, "GET", "/zarr.json")[0] == 200  # it goes on
    running.process.send_signal(signal.SIGTERM)
    rest = running.read_rest()
    assert running.process.returncode == 143, rest
    assert "Traceback" not in rest
    errors = [line for line in rest.splitlines() if line.startswith("cytearc-vfs serve: 5")]
    assert len(errors) == 2, rest
    assert errors[0].startswith(
        "cytearc-vfs serve: 502 GET 'RNA/counts/c/1/0': IdentityMismatchError"
    )
    assert errors[1].startswith("cytearc-vfs serve: 503 GET 'RNA/countsT/c/0/0'")
    assert "secret_access_key" not in rest and "testing-secret" not in rest


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--port", "70000"], 2, "is not a port"),
        (["--storage-options", "{not json"], 2, "--storage-options is not JSON"),
        (["--storage-options", '["a"]'], 2, "must be a JSON object"),
        (["--source-storage-options", "@/nonexistent/creds.json"], 2, "does not exist"),
        # origins no browser sends: accepted, they would never match (CORS fails silently)
        (["--allow-origin", "viewer.example"], 2, "is not an origin"),
        (["--allow-origin", "https://viewer.example/"], 2, "no default port, path or trailing"),
        (["--allow-origin", "https://a.example,https://b.example"], 2, "is not an origin"),
        (["--allow-origin", "https://Viewer.example"], 2, "in lower case"),
        (["--allow-origin", "https://viewer.example:443"], 2, "is not an origin"),
    ],
)
def test_cli_refusals(world: World, args: list[str], code: int, words: str) -> None:
    result = run_main("serve", str(world.composite), *args)
    assert result.returncode == code, result.stderr
    assert result.stdout == "" and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not json" not in result.stderr.replace("is not JSON", "")  # the value is never echoed


@pytest.mark.parametrize("host", ["", " "])
def test_an_empty_host_is_refused_not_all_interfaces(world: World, host: str) -> None:
    # --host "$HOST" with HOST unset listened on 0.0.0.0, every interface, with only a
    # warning: the store went out to the network where the user meant a host
    ran = subprocess.run(
        [cli_executable(), "serve", str(world.ordinary), "--host", host, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 2, ran
    assert "serving" not in ran.stdout
    line = ran.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("cytearc-vfs serve: --host is empty")
    assert "127.0.0.1" in line and "0.0.0.0" in line
    assert json.loads(ran.stdout)["category"] == "refused"


def test_cli_refuses_what_it_cannot_serve(world: World, tmp_path: Path) -> None:
    missing = run_main("serve", str(tmp_path / "missing.zarr"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = run_main("serve", str(world.ordinary), "--port", str(port))
    assert busy.returncode == 4, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in busy.stderr and busy.stdout == ""
    # the line docs/serve.md shows: the remedy, no "[Errno 98]", no generic advice
    assert busy.stderr == (
        f"cytearc-vfs serve: cannot listen on 127.0.0.1:{port} (Address already in use); "
        "choose another --port (0 picks a free one) or --host\n"
    )
    # an address that is not this machine's (TEST-NET-1, RFC 5737): no port helps, and
    # the remedy named --port first, on a port the user had left to the system
    foreign = run_main("serve", str(world.ordinary), "--host", "192.0.2.1")
    assert foreign.returncode == 4, foreign.stderr
    assert foreign.stderr == (
        "cytearc-vfs serve: cannot listen on 192.0.2.1:0 (Cannot assign requested address); "
        "192.0.2.1 is not an address of this machine: give --host one of its addresses "
        "(127.0.0.1: this machine only; 0.0.0.0: all its interfaces)\n"
    )
