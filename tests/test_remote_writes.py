"""Writers to an S3 destination: requests and sequential round trips, counted at a proxy.

Each writer writes to the loopback S3 server through :class:`LoopbackProxy`,
which delays every request by ``DELAY`` (so requests sent together overlap
and requests sent one after another do not) and records when each started
and ended. Asserted, never wall time:

- the requests to the destination by verb: no read or existence check of a
  key the writer creates (zarr's parent checks are gone), every key written
  once except the root document;
- the sequential rounds of the destination's writes
  (:func:`loopback_proxy.sequential_rounds`);
- crash safety on the wire: the destination's commit (the root document
  without ``cytearc:pending_store``) started after every other write to the
  destination had been answered, and an overwrite's first write is the
  marker, before any delete.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen, sequential_rounds
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.write.claims import CHECK_INTERVAL

pytestmark = pytest.mark.remote

#: Added to every request: long beside the client's own work between
#: requests it sends together, so those overlap at the proxy, even on a loaded
#: CI machine (at 50 ms, a starved event loop once started a write after the
#: one before had been answered: one round more than the writer waits for).
DELAY = 0.2
SMALL = cv.LayoutPolicy(64 * 1024, 4096)


@dataclass
class Remote:
    bucket: str
    direct: dict[str, Any]
    proxied: dict[str, Any]
    proxy: LoopbackProxy

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"


def _remote(s3_server: S3Server, bucket: str) -> Iterator[Remote]:
    proxy = LoopbackProxy(s3_server.endpoint)
    direct = s3_server.storage_options()
    try:
        yield Remote(bucket, direct, {**direct, "endpoint": proxy.endpoint}, proxy)
    finally:
        proxy.close()


@pytest.fixture
def remote(s3_server: S3Server) -> Iterator[Remote]:
    yield from _remote(s3_server, s3_server.new_bucket())


@dataclass(frozen=True)
class Request:
    seen: Seen
    verb: str
    """GET, PUT, DELETE, HEAD, POST (a batch delete) or LIST."""
    key: str
    """The key below the destination, or the listing's prefix."""


def destination_requests(remote: Remote, name: str, seen: list[Seen]) -> list[Request]:
    """The requests of ``seen`` to the destination ``name`` of the bucket."""
    found = []
    for request in seen:
        parts = urlsplit(request.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        path = unquote(parts.path).split("/", 2)[-1] if parts.path.count("/") > 1 else ""
        if request.method == "GET" and "list-type" in query:
            verb, key = "LIST", query.get("prefix", [""])[0]
        else:
            verb, key = request.method, path
        if request.method == "POST" and "delete" in query:
            key = name + "/"  # a batch delete names its keys in the body
        if key == name or key.startswith(name + "/"):
            found.append(Request(request, verb, key[len(name) + 1 :]))
    return found


def assert_commit_is_last(requests: list[Request]) -> Request:
    """The commit started after every other write to the destination was answered."""
    writes = [r for r in requests if r.verb in ("PUT", "DELETE", "POST")]
    commits = [r for r in writes if r.key == "zarr.json" and r.verb == "PUT"]
    commit = max(commits, key=lambda r: r.seen.started)
    others = [r for r in writes if r is not commit]
    assert commit.seen.started >= max(r.seen.ended for r in others)
    return commit


def assert_claim_reads(requests: list[Request]) -> None:
    """The destination's reads are the root's: the marker read back, the claim's read
    before the commit (after every other write was answered), and at most one each
    ``CHECK_INTERVAL`` behind the writes (write/claims.py). This is what the check that
    no other writer replaced the destination costs: about two GETs a second."""
    commit = assert_commit_is_last(requests)
    gets = [r for r in requests if r.verb == "GET" and r.seen.started < commit.seen.started]
    assert {r.key for r in gets} == {"zarr.json"}  # (the store opened reads the rest after)
    before = max((r for r in gets), key=lambda r: r.seen.started)
    assert before.seen.ended <= commit.seen.started
    others = [r for r in requests if r.verb in ("PUT", "DELETE") and r is not commit]
    assert before.seen.started >= max(r.seen.ended for r in others)
    span = commit.seen.started - min(r.seen.started for r in requests)
    assert 2 <= len(gets) <= 2 + span / CHECK_INTERVAL + 1
    # and the commit is written only over the root read (compare and swap)
    assert commit.seen.if_match is not None


def write_rounds(requests: list[Request]) -> int:
    return sequential_rounds([r.seen for r in requests if r.verb == "PUT"])


def _take(remote: Remote, name: str) -> list[Request]:
    return destination_requests(remote, name, remote.proxy.take())


def test_write_counts_sends_each_key_once_in_a_few_rounds(remote: Remote) -> None:
    counts = realistic_counts(2000, 60, density=0.2, seed=5)
    remote.proxy.delay = DELAY
    remote.proxy.take()
    cv.write_counts(remote.url("w.zarr"), counts, layout=SMALL, storage_options=remote.proxied)
    found = _take(remote, "w.zarr")
    verbs = Counter(r.verb for r in found)
    # one listing (the destination is empty), the root marker read back (it must be
    # this writer's: spec, mode "w-"), then only writes: no parent checks
    assert verbs == {"LIST": 1, "GET": verbs["GET"], "PUT": verbs["PUT"]}
    assert_claim_reads(found)
    puts = Counter(r.key for r in found if r.verb == "PUT")
    assert {key: n for key, n in puts.items() if n > 1} == {"zarr.json": puts["zarr.json"]}
    assert puts["zarr.json"] <= 3  # the marker, the assay types, the commit
    shards = [key for key in puts if "/c/" in key and "counts" in key]
    assert len(shards) >= 4
    # the listing, the marker and its read-back, the chunks, the documents, the
    # claim's read of the root, the commit (before: ~70)
    assert sequential_rounds([r.seen for r in found]) <= 8
    commit = assert_commit_is_last(found)
    assert "cytearc:pending_store" not in json.dumps(_root(remote, "w.zarr"))
    assert commit.seen is max((r.seen for r in found), key=lambda s: s.started)
    remote.proxy.delay = 0.0
    stored = cv.VirtualArrayReader(remote.url("w.zarr"), storage_options=remote.direct).read()
    np.testing.assert_array_equal(stored, counts.toarray())


def test_a_destination_below_a_remote_store_is_refused(remote: Remote) -> None:
    """``s3://bkt/data.zarr/sub.zarr`` nested a store inside ``data.zarr`` (a local
    destination below a Zarr node is refused), whose next replacement then refused the
    unknown member. The check above costs one concurrent round of HEADs, three a level."""
    counts = realistic_counts(50, 10, seed=7)
    cv.write_counts(remote.url("data.zarr"), counts, storage_options=remote.direct)
    remote.proxy.take()
    remote.proxy.delay = DELAY  # requests sent together overlap at the proxy
    with pytest.raises(ValueError, match=r"below the Zarr node s3://.*/data\.zarr \(it holds "):
        cv.write_counts(
            remote.url("data.zarr/deeper/sub.zarr"), counts, storage_options=remote.proxied
        )
    checks = [r for r in remote.proxy.take() if r.method == "HEAD"]
    assert len(checks) == 9  # the bucket's root, data.zarr, data.zarr/deeper
    assert sequential_rounds(checks) == 1
    remote.proxy.delay = 0.0
    # beside it, a store is written as before
    cv.write_counts(remote.url("other/sub.zarr"), counts, storage_options=remote.direct)


def _root(remote: Remote, name: str) -> dict[str, Any]:
    store = open_location(remote.url(name), read_only=True, storage_options=remote.direct)
    from cytearc_vfs.format.store_io import get_json

    document = get_json(store, "zarr.json")
    assert isinstance(document, dict)
    return document


def test_an_overwrite_writes_the_marker_before_any_delete(remote: Remote) -> None:
    first = realistic_counts(500, 40, seed=6)
    cv.write_counts(remote.url("o.zarr"), first, layout=SMALL, storage_options=remote.direct)
    second = realistic_counts(300, 30, seed=7)
    remote.proxy.delay = DELAY
    remote.proxy.take()
    cv.write_counts(remote.url("o.zarr"), second, storage_options=remote.proxied, overwrite=True)
    found = _take(remote, "o.zarr")
    writes = [r for r in found if r.verb in ("PUT", "DELETE", "POST")]
    marker = min(writes, key=lambda r: r.seen.started)
    assert (marker.verb, marker.key) == ("PUT", "zarr.json")
    removals = [r for r in writes if r.verb in ("DELETE", "POST")]
    assert removals and min(r.seen.started for r in removals) >= marker.seen.ended
    assert_commit_is_last(found)
    remote.proxy.delay = 0.0
    stored = cv.VirtualArrayReader(remote.url("o.zarr"), storage_options=remote.direct).read()
    np.testing.assert_array_equal(stored, second.toarray())


@dataclass(frozen=True)
class Sources:
    bucket: str
    matrices: dict[str, Any]


@pytest.fixture(scope="module")
def shared_sources(s3_server: S3Server) -> Sources:
    """Sources a.zarr and b.zarr in a bucket, written once for the module: the tests
    that take them only read them (each writes a destination of another name)."""
    bucket = s3_server.new_bucket()
    matrices = {
        name: realistic_counts(400, 50, density=0.1, seed=seed)
        for name, seed in (("a", 8), ("b", 9))
    }
    for name, matrix in matrices.items():
        url = f"s3://{bucket}/{name}.zarr"
        cv.write_counts(url, matrix, storage_options=s3_server.storage_options())
    return Sources(bucket, matrices)


@pytest.fixture
def remote_with_sources(s3_server: S3Server, shared_sources: Sources) -> Iterator[Remote]:
    """The bucket of ``shared_sources`` through a proxy of this test's."""
    yield from _remote(s3_server, shared_sources.bucket)


@pytest.fixture
def sources(shared_sources: Sources) -> dict[str, Any]:
    """The counts of a.zarr and b.zarr, beside the destination (``remote_with_sources``)."""
    return shared_sources.matrices


def test_create_composite_writes_in_a_few_rounds(
    remote_with_sources: Remote, sources: dict[str, Any]
) -> None:
    remote = remote_with_sources
    urls = {name: remote.url(f"{name}.zarr") for name in sources}
    remote.proxy.delay = DELAY
    remote.proxy.take()
    store = cv.create_composite(
        remote.url("c.zarr"),
        urls,
        source_storage_options={name: remote.proxied for name in urls},
        storage_options=remote.proxied,
    )
    found = _take(remote, "c.zarr")
    commit = assert_commit_is_last(found)
    before_commit = [r for r in found if r.seen.started < commit.seen.started]
    # nothing of the destination is read before the commit but its listing
    # (and the root marker read back: it must be this writer's)
    assert {r.verb for r in before_commit} == {"LIST", "GET", "PUT"}
    assert_claim_reads(found)
    puts = Counter(r.key for r in found if r.verb == "PUT")
    assert max(n for key, n in puts.items() if key != "zarr.json") == 1
    # the marker, the chunks, the documents, the commit (before: 97 writes, one by one)
    assert write_rounds(found) <= 5
    expected = sp.vstack([sources["a"], sources["b"]]).toarray()
    np.testing.assert_array_equal(store.reader().read(), expected)
    store.close()


def test_mount_writes_in_a_few_rounds(remote_with_sources: Remote, sources: dict[str, Any]) -> None:
    remote = remote_with_sources
    remote.proxy.delay = DELAY
    remote.proxy.take()
    mount = cv.mount_datastore(
        remote.url("a.zarr"),
        remote.url("m.zarr"),
        source_storage_options=remote.proxied,
        storage_options=remote.proxied,
    )
    found = _take(remote, "m.zarr")
    commit = assert_commit_is_last(found)
    before = [r for r in found if r.seen.started < commit.seen.started]
    assert {r.verb for r in before} == {"LIST", "GET", "PUT"}  # GET: the root marker read back
    assert_claim_reads(found)
    assert write_rounds(found) <= 5
    assert mount.record.assays.keys() == {"RNA"}


def test_repack_writes_in_a_few_rounds(
    remote_with_sources: Remote, sources: dict[str, Any]
) -> None:
    remote = remote_with_sources
    remote.proxy.delay = DELAY
    remote.proxy.take()
    destination = open_location(
        remote.url("r.zarr"), read_only=False, storage_options=remote.proxied
    )
    cv.repack(remote.url("a.zarr"), destination, storage_options=remote.proxied)
    found = _take(remote, "r.zarr")
    assert_commit_is_last(found)
    puts = Counter(r.key for r in found if r.verb == "PUT")
    assert max(n for key, n in puts.items() if key != "zarr.json") == 1
    assert write_rounds(found) <= 5
    remote.proxy.delay = 0.0
    stored = cv.VirtualArrayReader(remote.url("r.zarr"), storage_options=remote.direct).read()
    np.testing.assert_array_equal(stored, sources["a"].toarray())


@pytest.mark.parametrize("status", [403, 503])
def test_a_refused_write_fails_the_writer_and_nothing_lands_after(
    remote: Remote, status: int
) -> None:
    counts = realistic_counts(2000, 60, density=0.2, seed=5)
    remote.proxy.delay = 0.05
    remote.proxy.fail(1000, status=status, match="f.zarr/RNA/counts/c/")
    with pytest.raises(
        OSError, match=r"writing 'RNA/counts/c/\d+/0' to .*f\.zarr failed"
    ) as raised:
        cv.write_counts(remote.url("f.zarr"), counts, layout=SMALL, storage_options=remote.proxied)
    assert "overwrite=True" in str(raised.value)
    answered = _take(remote, "f.zarr")
    assert not [r for r in answered if r.verb == "PUT" and r.key == "zarr.json"][1:]  # no commit
    remote.proxy.clear()
    remote.proxy.delay = 0.0
    time.sleep(0.5)  # a write still in flight would reach the proxy now
    assert _take(remote, "f.zarr") == []
    with pytest.raises(cv.IncompleteStoreError):
        cv.open_store(remote.url("f.zarr"), storage_options=remote.direct)
    cv.write_counts(
        remote.url("f.zarr"), counts, layout=SMALL, storage_options=remote.direct, overwrite=True
    )
    stored = cv.VirtualArrayReader(remote.url("f.zarr"), storage_options=remote.direct).read()
    np.testing.assert_array_equal(stored, counts.toarray())
