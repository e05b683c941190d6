"""``cytearc-vfs serve`` validators: ``ETag``, ``Last-Modified`` and conditional requests.

Real servers on 127.0.0.1 over real stores (an ordinary store, a composite
of two sources, a mount with a source artifact and a target artifact, an
ordinary store on a loopback S3 server), read with ``http.client`` and with
obstore's HTTP client, which sends the conditional requests itself. Each
rule of RFC 9110 the server follows is checked with its status and fields;
tags are stable across requests and servers while the bytes are, change
when a file is rewritten, and a composite's ``HEAD`` and ``304`` compute no
chunk (its chunk counters).
"""

from __future__ import annotations

import http.client
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import numpy as np
import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer
from cytearc_vfs_adapters.serve.conditions import entity_tags, precondition, range_applies
from cytearc_vfs_adapters.serve.protocol import parse_head
from cytearc_vfs_adapters.serve.validators import SETTLED_SECONDS, Validators
from s3_server import S3Server, fsspec_options
from test_serve import PROVENANCE, all_keys, make_mount, propfind, request
from test_serve import stored as stored_value
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create

#: Every file of the test stores is dated here: a real time, long settled.
PAST = 1_700_000_000


def age(root: Path, when: int = PAST) -> None:
    """Date every file under ``root`` at ``when`` (a written store is seconds old)."""
    for directory, _, files in os.walk(root):
        for name in files:
            os.utime(Path(directory) / name, (when, when))


@dataclass
class Stores:
    ordinary: Path
    composite: Path
    mount: Path
    source_artifact: str


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    root = tmp_path_factory.mktemp("validators")
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(
            root / f"{name}.zarr",
            realistic_counts(300, 40, density=0.1, seed=seed),
            features=[f"g{i}" for i in range(40)],
        )
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 8_000):
        cv.create_composite(
            root / "comp.zarr", {"a": root / "a.zarr", "b": root / "b.zarr"}
        ).close()
    artifact = make_mount(root)
    age(root)
    return Stores(root / "a.zarr", root / "comp.zarr", root / "mount.zarr", artifact)


@pytest.fixture
def served(request: pytest.FixtureRequest, stores: Stores) -> Iterator[tuple[Store, StoreServer]]:
    store = cv.open_store(getattr(stores, request.param))
    server = StoreServer.start(store)
    try:
        yield store, server
    finally:
        server.close()
        store.close()


def head(url: str, key: str, fields: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    status, headers, body = request(url, "HEAD", "/" + key, fields)
    assert body == b""
    return status, headers


# ---------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("fields", "validators", "expected"),
    [
        ({}, Validators('"a"', PAST), None),
        ({"If-None-Match": '"a"'}, Validators('"a"'), 304),
        ({"If-None-Match": 'W/"a"'}, Validators('"a"'), 304),  # weak comparison
        ({"If-None-Match": '"x", W/"a"'}, Validators('"a"'), 304),
        ({"If-None-Match": '"x", "y"'}, Validators('"a"'), None),
        ({"If-None-Match": "*"}, Validators(), 304),  # any existing key
        ({"If-None-Match": '"a"'}, Validators(), None),  # no tag matches nothing
        ({"If-Match": '"a"'}, Validators('"a"'), None),
        ({"If-Match": '"x", "a"'}, Validators('"a"'), None),
        ({"If-Match": 'W/"a"'}, Validators('"a"'), 412),  # strong comparison
        ({"If-Match": '"x"'}, Validators('"a"'), 412),
        ({"If-Match": '"a"'}, Validators(), 412),
        ({"If-Match": "*"}, Validators(), None),
        ({"If-Match": "not a tag"}, Validators('"a"'), 412),
        # dates only where Last-Modified is real
        ({"If-Modified-Since": formatdate(PAST, usegmt=True)}, Validators('"a"', PAST), 304),
        ({"If-Modified-Since": formatdate(PAST - 1, usegmt=True)}, Validators('"a"', PAST), None),
        ({"If-Modified-Since": formatdate(PAST, usegmt=True)}, Validators('"a"'), None),
        ({"If-Modified-Since": "yesterday"}, Validators('"a"', PAST), None),
        ({"If-Unmodified-Since": formatdate(PAST - 1, usegmt=True)}, Validators(None, PAST), 412),
        ({"If-Unmodified-Since": formatdate(PAST, usegmt=True)}, Validators(None, PAST), None),
        ({"If-Unmodified-Since": formatdate(PAST - 1, usegmt=True)}, Validators(), None),
        # the -Match field wins over its -Since field (RFC 9110, 13.2.2)
        (
            {"If-None-Match": '"x"', "If-Modified-Since": formatdate(PAST, usegmt=True)},
            Validators('"a"', PAST),
            None,
        ),
        (
            {"If-Match": '"a"', "If-Unmodified-Since": formatdate(PAST - 1, usegmt=True)},
            Validators('"a"', PAST),
            None,
        ),
        # If-Match is evaluated before If-None-Match
        ({"If-Match": '"x"', "If-None-Match": '"a"'}, Validators('"a"'), 412),
    ],
)
def test_precondition_rules(
    fields: dict[str, str], validators: Validators, expected: int | None
) -> None:
    lines = "".join(f"\r\n{name}: {value}" for name, value in fields.items())
    parsed = parse_head(f"GET /k HTTP/1.1\r\nHost: h{lines}".encode())
    assert precondition(parsed, validators) == (None if expected is None else HTTPStatus(expected))


@pytest.mark.parametrize(
    ("if_range", "validators", "expected"),
    [
        (None, Validators(), True),
        ('"a"', Validators('"a"', PAST), True),
        ('"b"', Validators('"a"', PAST), False),
        ('W/"a"', Validators('"a"', PAST), False),  # a weak tag never holds
        ('"a", "b"', Validators('"a"'), False),  # one tag, not a list
        ('"a"', Validators(None, PAST), False),
        (formatdate(PAST, usegmt=True), Validators('"a"', PAST), True),
        (formatdate(PAST + 1, usegmt=True), Validators('"a"', PAST), False),
        (formatdate(PAST, usegmt=True), Validators('"a"'), False),
        ("garbage", Validators('"a"', PAST), False),
    ],
)
def test_if_range_rules(if_range: str | None, validators: Validators, expected: bool) -> None:
    assert range_applies(if_range, validators) is expected


def test_entity_tag_lists() -> None:
    assert entity_tags('"a",W/"b" , "c"') == [(False, '"a"'), (True, '"b"'), (False, '"c"')]
    assert entity_tags("*") is None
    assert entity_tags('"a", bad, "c"') == [(False, '"a"')]
    assert entity_tags("") == []


# ---------------------------------------------------------- ordinary store


@pytest.mark.parametrize("served", ["ordinary"], indirect=True)
def test_an_ordinary_store_answers_every_condition(
    served: tuple[Store, StoreServer], stores: Stores
) -> None:
    _, server = served
    url, key = server.url, "RNA/counts/zarr.json"
    status, headers, body = request(url, "GET", "/" + key)
    tag, modified = headers["etag"], headers["last-modified"]
    assert status == 200 and tag.startswith('"') and modified == formatdate(PAST, usegmt=True)
    assert body == (stores.ordinary / key).read_bytes()
    status, answer = head(url, key)
    assert (status, answer["etag"], answer["last-modified"]) == (200, tag, modified)
    assert int(answer["content-length"]) == len(body)
    # stable across requests; every key its own
    assert request(url, "GET", "/" + key)[1]["etag"] == tag
    assert head(url, "zarr.json")[1]["etag"] != tag

    def status_of(method: str, fields: dict[str, str], path: str = key) -> int:
        return request(url, method, "/" + path, fields)[0]

    for method in ("GET", "HEAD"):
        status, answer, body = request(url, method, "/" + key, {"If-None-Match": tag})
        assert (status, body) == (304, b"")
        assert answer["etag"] == tag and answer["last-modified"] == modified
        assert "content-length" not in answer  # no body, and no length of one
        assert status_of(method, {"If-None-Match": f'"x", W/{tag}'}) == 304
        assert status_of(method, {"If-None-Match": "*"}) == 304
        assert status_of(method, {"If-None-Match": '"x"'}) == 200
        assert status_of(method, {"If-Modified-Since": modified}) == 304
        assert status_of(method, {"If-Modified-Since": formatdate(PAST - 60, usegmt=True)}) == 200
        # If-None-Match present: If-Modified-Since is not looked at
        assert status_of(method, {"If-None-Match": '"x"', "If-Modified-Since": modified}) == 200
        assert status_of(method, {"If-Match": tag}) == 200
        assert status_of(method, {"If-Match": "*"}) == 200
        assert status_of(method, {"If-Match": '"x"'}) == 412
        assert status_of(method, {"If-Match": f"W/{tag}"}) == 412
        earlier = formatdate(PAST - 60, usegmt=True)
        assert status_of(method, {"If-Unmodified-Since": earlier}) == 412
        assert status_of(method, {"If-Match": tag, "If-Unmodified-Since": earlier}) == 200
        assert status_of(method, {"If-Unmodified-Since": modified}) == 200
        assert status_of(method, {"If-Modified-Since": "not a date"}) == 200
    status, answer, body = request(url, "GET", "/" + key, {"If-Match": '"x"'})
    assert tag in body.decode() and "If-Match" in body.decode()
    # a key the store does not hold stays 404 whatever the conditions
    assert status_of("GET", {"If-None-Match": "*"}, "RNA/nothing") == 404
    assert status_of("GET", {"If-Match": "*"}, "RNA/nothing") == 404

    # If-Range: the range when the validator names these bytes, else the whole value
    whole = (stores.ordinary / key).read_bytes()
    for if_range, expected in (
        (tag, 206),
        (modified, 206),
        ('"x"', 200),
        (f"W/{tag}", 200),
        (formatdate(PAST + 1, usegmt=True), 200),
    ):
        status, answer, body = request(
            url, "GET", "/" + key, {"Range": "bytes=0-9", "If-Range": if_range}
        )
        assert status == expected, if_range
        assert body == (whole[:10] if expected == 206 else whole)
        assert answer["etag"] == tag

    # a 304 keeps the connection: the next request on it is answered
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/" + key, headers={"If-None-Match": tag})
        first = connection.getresponse()
        assert (first.status, first.read()) == (304, b"")
        connection.request("GET", "/" + key)
        second = connection.getresponse()
        assert (second.status, second.read()) == (200, whole)
    finally:
        connection.close()


@pytest.mark.parametrize("served", ["ordinary"], indirect=True)
def test_a_tag_outlives_the_server_and_changes_with_the_file(
    served: tuple[Store, StoreServer], stores: Stores
) -> None:
    _, server = served
    key = "cellData/ids/zarr.json"
    path = stores.ordinary / key
    tag = head(server.url, key)[1]["etag"]
    with StoreServer.start(cv.open_store(stores.ordinary)) as again:
        assert head(again.url, key)[1]["etag"] == tag  # same bytes, same tag
    original = path.read_bytes()
    try:
        # rewritten in place with the same bytes at another time: another tag
        path.write_bytes(original)
        os.utime(path, (PAST + 10, PAST + 10))
        status, headers, body = request(server.url, "GET", "/" + key, {"If-None-Match": tag})
        assert (status, body) == (200, original) and headers["etag"] != tag
        assert headers["last-modified"] == formatdate(PAST + 10, usegmt=True)
        # replaced by rename, same size and time: a new inode, another tag
        second = headers["etag"]
        replacement = path.with_name("zarr.json.new")
        replacement.write_bytes(original)
        os.utime(replacement, (PAST + 10, PAST + 10))
        replacement.replace(path)
        third = head(server.url, key)[1]["etag"]
        assert third not in (tag, second)
        # a file of the current second has no Last-Modified yet (a date that
        # could stay the same over a second write) but a tag
        path.write_bytes(original)
        fresh = head(server.url, key)[1]
        assert "last-modified" not in fresh and fresh["etag"] not in (tag, second, third)
    finally:
        path.write_bytes(original)
        os.utime(path, (PAST, PAST))
    assert head(server.url, key)[1]["etag"] != tag  # same mtime, new inode


# ---------------------------------------------------------- composite


@pytest.mark.parametrize("served", ["composite"], indirect=True)
def test_a_composite_tags_its_chunks_without_computing_them(
    served: tuple[Store, StoreServer], stores: Stores
) -> None:
    store, server = served
    assert isinstance(store, cv.CompositeStore)
    chunks = [f"RNA/counts/c/{i}/0" for i in range(3)] + ["RNA/countsT/c/0/0"]
    before = store.chunk_stats
    tags = {}
    for key in [*chunks, "RNA/counts/zarr.json"]:
        status, headers = head(server.url, key)
        assert status == 200 and "last-modified" not in headers  # a computed value has no time
        tags[key] = headers["etag"]
        status, headers = head(server.url, key, {"If-None-Match": tags[key]})
        assert (status, headers["etag"]) == (304, tags[key])
        status, headers, body = request(server.url, "GET", "/" + key, {"If-None-Match": tags[key]})
        assert (status, body) == (304, b"")
    assert len(set(tags.values())) == len(tags)
    assert store.chunk_stats == before, "a HEAD or a 304 computed a chunk"
    # a GET computes it once, under the tag its HEAD gave
    status, headers, body = request(server.url, "GET", "/" + chunks[0])
    assert status == 200 and headers["etag"] == tags[chunks[0]]
    assert store.chunk_stats.reads == before.reads + 1
    status, headers, part = request(
        server.url, "GET", "/" + chunks[0], {"Range": "bytes=4-11", "If-Range": tags[chunks[0]]}
    )
    assert (status, part) == (206, body[4:12])
    # the composite's own keys are its backing files
    own = head(server.url, "cellData/ids/zarr.json")[1]
    assert own["last-modified"] == formatdate(PAST, usegmt=True)
    # another open, another server: the same tags (the record is the same)
    reopened = cv.open_store(stores.composite)
    try:
        with StoreServer.start(reopened) as again:
            for key, tag in tags.items():
                assert head(again.url, key)[1]["etag"] == tag
    finally:
        reopened.close()


# ---------------------------------------------------------- mount


@pytest.mark.parametrize("served", ["mount"], indirect=True)
def test_a_mount_tags_target_and_source_keys_apart(
    served: tuple[Store, StoreServer], stores: Stores
) -> None:
    _, server = served
    source_key = f"RNA/artifacts/pca/{stores.source_artifact}/zarr.json"
    target_key = "zarr.json"
    source_tag = head(server.url, source_key)[1]["etag"]
    target = head(server.url, target_key)[1]
    assert source_tag.startswith('"s') and target["etag"].startswith('"t')
    assert target["last-modified"] == formatdate(PAST, usegmt=True)
    assert head(server.url, source_key, {"If-None-Match": source_tag})[0] == 304
    # a target file written moments ago may be written again within its clock
    # tick: no validators until it has settled
    path = stores.mount / target_key
    original = path.read_bytes()
    try:
        path.write_bytes(original)
        status, headers, body = request(server.url, "GET", "/" + target_key)
        assert status == 200 and body == original
        assert "etag" not in headers and "last-modified" not in headers
        assert request(server.url, "GET", "/" + target_key, {"If-None-Match": "*"})[0] == 304
        assert request(server.url, "GET", "/" + target_key, {"If-Match": target["etag"]})[0] == 412
        os.utime(path, (PAST + 5, PAST + 5))
        assert head(server.url, target_key)[1]["etag"] not in (None, target["etag"])
    finally:
        path.write_bytes(original)
        os.utime(path, (PAST, PAST))
    assert SETTLED_SECONDS >= 1


# ---------------------------------------------------------- listings, CORS, clients


@pytest.mark.parametrize("served", ["ordinary", "composite"], indirect=True)
def test_propfind_gives_the_tags_and_times_of_get(served: tuple[Store, StoreServer]) -> None:
    _, server = served
    for directory in ("RNA/counts", "RNA/counts/c/0", "cellData/ids"):
        status, _, body = propfind(server.url, "/" + directory + "/", "1")
        assert status == 207
        for response in ET.fromstring(body).findall("{DAV:}response"):
            href = response.findtext("{DAV:}href")
            prop = response.find("{DAV:}propstat/{DAV:}prop")
            assert href is not None and prop is not None
            modified = prop.findtext("{DAV:}getlastmodified")
            assert modified  # object_store requires it, directories too
            if href.endswith("/"):
                assert prop.findtext("{DAV:}getetag") is None
                continue
            answer = head(server.url, href.lstrip("/"))[1]
            assert prop.findtext("{DAV:}getetag") == answer["etag"], href
            if "last-modified" in answer:
                assert modified == answer["last-modified"]


def test_cors_exposes_the_validators(stores: Stores) -> None:
    store = cv.open_store(stores.ordinary)
    origin = {"Origin": "https://viewer.example"}
    with StoreServer.start(store, options=ServeOptions(allow_origin="*")) as server:
        _, headers, _ = request(server.url, "GET", "/zarr.json", origin)
        exposed = {name.strip() for name in headers["access-control-expose-headers"].split(",")}
        assert {"ETag", "Last-Modified"} <= exposed
        tag = headers["etag"]
        status, headers, _ = request(
            server.url, "GET", "/zarr.json", {**origin, "If-None-Match": tag}
        )
        assert status == 304 and "ETag" in headers["access-control-expose-headers"]
        status, headers, _ = request(
            server.url,
            "OPTIONS",
            "/zarr.json",
            {**origin, "Access-Control-Request-Headers": "if-none-match"},
        )
        allowed = {name.strip() for name in headers["access-control-allow-headers"].split(",")}
        assert status == 204 and {"If-None-Match", "If-Match", "Range", "If-Range"} <= allowed
        assert "content-length" not in headers  # a 204 has no body length


@pytest.mark.parametrize("served", ["ordinary", "composite"], indirect=True)
def test_obstore_revalidates_through_the_server(served: tuple[Store, StoreServer]) -> None:
    """obstore's HTTP client sends the conditional requests and reads their answers."""
    import obstore
    from obstore.exceptions import NotModifiedError, PreconditionError
    from obstore.store import HTTPStore

    _, server = served
    client = HTTPStore.from_url(server.url, client_options={"allow_http": True})
    key = "RNA/counts/c/0/0"
    meta = obstore.head(client, key)
    assert meta["e_tag"] == head(server.url, key)[1]["etag"]
    listed = {
        m["path"]: m["e_tag"]
        for m in obstore.list_with_delimiter(client, "RNA/counts/c/0")["objects"]
    }
    assert listed[key] == meta["e_tag"]
    whole = obstore.get(client, key).bytes()
    assert obstore.get(client, key, options={"if_match": meta["e_tag"]}).bytes() == whole
    ranged = obstore.get(client, key, options={"if_match": meta["e_tag"], "range": (2, 9)})
    assert bytes(ranged.bytes()) == bytes(whole)[2:9]
    with pytest.raises(NotModifiedError):
        obstore.get(client, key, options={"if_none_match": meta["e_tag"]})
    with pytest.raises(PreconditionError):
        obstore.get(client, key, options={"if_match": '"not-this-one"'})


# ---------------------------------------------------------- remote


@pytest.mark.remote
@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_remote_store_sends_its_backends_tag(s3_server: S3Server, backend: str) -> None:
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    location = f"s3://{bucket}/r.zarr"
    cv.write_counts(location, realistic_counts(200, 30, seed=4), storage_options=options)
    reading = options if backend == "obstore" else fsspec_options(s3_server.endpoint)
    store = cv.open_store(location, storage_options=reading)
    assert (
        type(store).__name__
        == {"obstore": "SharedClientObjectStore", "fsspec": "FsspecStore"}[backend]
    )
    with StoreServer.start(store) as server:
        key = "RNA/counts/zarr.json"
        status, headers = head(server.url, key)
        tag = headers["etag"]
        assert status == 200 and "last-modified" not in headers
        # a whole small value is one read: no HEAD is added to learn its tag...
        status, headers, body = request(server.url, "GET", "/" + key)
        assert status == 200 and "etag" not in headers
        # ...but a conditional request is answered from the backend's tag
        status, headers, _ = request(server.url, "GET", "/" + key, {"If-None-Match": tag})
        assert (status, headers["etag"]) == (304, tag)
        status, headers, ranged = request(
            server.url, "GET", "/" + key, {"Range": "bytes=0-4", "If-Range": tag}
        )
        assert (status, ranged, headers["etag"]) == (206, body[:5], tag)
        _, _, listing = propfind(server.url, "/RNA/counts/", "1")
        assert f"<D:getetag>{tag}</D:getetag>" in listing.decode()
        # the object replaced: another backend ETag, another tag
        replaced = cv.open_store(location, mode="r+", storage_options=options)
        sync(replaced.set(key, default_buffer_prototype().buffer.from_bytes(body + b" ")))
        status, headers, _ = request(server.url, "GET", "/" + key, {"If-None-Match": tag})
        assert status == 200 and headers["etag"] != tag
    store.close()


@pytest.mark.remote
def test_a_mount_of_a_remote_source_tags_only_pinned_keys(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    source = f"s3://{bucket}/src.zarr"
    cv.write_counts(source, realistic_counts(80, 20, density=0.2, seed=9), storage_options=options)
    writable = cv.open_store(source, mode="r+", storage_options=options)
    with cv.publish_artifact(writable, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(160, dtype=np.float64).reshape(80, 2))
    cv.mount_datastore(source, tmp_path / "m.zarr", source_storage_options=options).close()
    store = cv.open_store(tmp_path / "m.zarr", source_storage_options=options)
    group = f"RNA/artifacts/pca/{art.artifact_id}"
    chunk = next(key for key in all_keys(store) if key.startswith(f"{group}/data/c/"))
    with StoreServer.start(store) as server:
        # not pinned before it is first asked for: no tag it could keep over a replace
        assert "etag" not in head(server.url, chunk)[1]
        # asked once, the object is pinned: every later read is checked against the pin
        status, headers, body = request(server.url, "GET", "/" + chunk)
        tag = headers["etag"]
        assert status == 200 and tag.startswith('"s') and head(server.url, chunk)[1]["etag"] == tag
        assert body == stored_value(store, chunk)
        status, headers, _ = request(server.url, "GET", "/" + chunk, {"If-None-Match": tag})
        assert (status, headers["etag"]) == (304, tag)
        # a source document is not pinned: none
        assert "etag" not in head(server.url, f"{group}/zarr.json")[1]
    store.close()


@pytest.mark.remote
def test_a_remote_tag_costs_no_request_the_answer_did_not_make(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore's calls counted as they pass (each still goes to the S3 server)."""
    import obstore

    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    location = f"s3://{bucket}/c.zarr"
    cv.write_counts(location, realistic_counts(100, 20, seed=5), storage_options=options)
    store = cv.open_store(location, storage_options=options)
    calls: dict[str, int] = {}
    for name in ("head_async", "get_async", "get_range_async"):
        real = getattr(obstore, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(obstore, name, counted)

    def cost(method: str, key: str, fields: dict[str, str] | None = None) -> tuple[int, int, int]:
        calls.clear()
        status = request(server.url, method, "/" + key, fields)[0]
        reads = calls.get("get_async", 0) + calls.get("get_range_async", 0)
        return status, calls.get("head_async", 0), reads

    key = "RNA/counts/zarr.json"
    with StoreServer.start(store) as server:
        tag = head(server.url, key)[1]["etag"]
        assert cost("HEAD", key) == (200, 1, 0)  # the HEAD that gives the size gives the tag
        assert cost("GET", key) == (200, 0, 1)  # a whole small value: one read, as before
        assert cost("GET", key, {"If-None-Match": tag}) == (304, 1, 0)  # a HEAD, no read
        assert cost("GET", key, {"If-None-Match": '"other"'}) == (200, 1, 1)
        assert cost("GET", key, {"Range": "bytes=0-3"}) == (206, 1, 1)  # its size, then bytes
        # the HEAD that gives a range its size gives its tag too (it was left out)
        status, headers, _ = request(server.url, "GET", "/" + key, {"Range": "bytes=0-3"})
        assert (status, headers.get("etag")) == (206, tag)
    store.close()
