"""``serve``: conditional requests of a listing (``GET /PREFIX/``) follow RFC 9110, section 13.

A listing carries no ``ETag``, and its conditions were ignored: ``If-Match:
"x"`` (which no tag of a listing can equal) got the listing (``200``) where
RFC 9110, 13.1.1 says the method must not be performed (``412``), and
``If-None-Match: *`` (any current representation) got it again instead of
``304`` (13.1.2). Keys were already right (``tests/test_serve_validators.py``).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import StoreServer
from test_serve import wait_until

import cytearc_vfs as cv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    root: Path = tmp_path_factory.mktemp("listing-conditions")
    cv.write_counts(root / "a.zarr", realistic_counts(40, 20, seed=1))
    store = cv.open_store(root / "a.zarr")
    with StoreServer.start(store) as running:
        yield running
    store.close()


def ask(server: StoreServer, method: str, path: str, fields: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request(method, path, headers={"Accept": "application/json", **fields})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("method", "path", "fields", "status"),
    [
        ("GET", "/RNA/", {"If-None-Match": "*"}, 304),
        ("HEAD", "/RNA/", {"If-None-Match": "*"}, 304),
        ("GET", "/", {"If-None-Match": "*"}, 304),
        ("GET", "/RNA/", {"If-Match": '"x"'}, 412),
        ("GET", "/RNA/", {"If-Match": '"x"', "If-None-Match": "*"}, 412),
        # conditions that hold, or that a listing (no tag, no time) cannot judge
        ("GET", "/RNA/", {"If-Match": "*"}, 200),
        ("GET", "/RNA/", {"If-None-Match": '"x"'}, 200),
        ("GET", "/RNA/", {"If-Modified-Since": "Thu, 01 Jan 2099 00:00:00 GMT"}, 200),
        ("GET", "/RNA/", {"If-Unmodified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"}, 200),
        # an absent listing stays 404 (13.2.1: conditions are for what exists)
        ("GET", "/nothing/", {"If-None-Match": "*"}, 404),
        ("GET", "/nothing/", {"If-Match": '"x"'}, 404),
    ],
)
def test_listing_conditions(
    server: StoreServer, method: str, path: str, fields: dict[str, str], status: int
) -> None:
    got, body = ask(server, method, path, fields)
    assert got == status, body
    if status == 304:
        assert body == b""
    if status == 412:
        assert b"listing" in body and path.strip("/").encode() in body
    if status == 200 and method == "GET":
        assert b'"names"' in body


def test_listing_conditions_keep_the_connection(server: StoreServer) -> None:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        for fields, status in (({"If-None-Match": "*"}, 304), ({}, 200)):
            connection.request("GET", "/RNA/", headers={"Accept": "application/json", **fields})
            response = connection.getresponse()
            assert (response.status, response.will_close) == (status, False)
            response.read()
    finally:
        connection.close()
    # the last listing's memory is given back once the socket has taken it
    wait_until(lambda: server.stats().held_bytes == 0, "the listing's memory given back")
