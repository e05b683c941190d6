"""``serve --allow-origin``: answers that HTTP caches may keep say how they vary by ``Origin``.

The CORS fields were sent only to a request whose ``Origin`` matched, with
``Vary: Origin`` only then. So an answer to a request without ``Origin``
(the URL opened in the browser, a ``no-cors`` request, a proxy's fetch)
carried neither: a cache could keep it (it has ``ETag`` and
``Last-Modified``, heuristically fresh) and hand it to the allowed page's
``fetch``, which then fails on CORS with nothing wrong on the server. The
Fetch standard's rule ("CORS protocol and HTTP caches"): an origin echoed
per request needs ``Vary: Origin`` on every answer; ``*`` is sent always and
needs none.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer
from zarr.abc.store import Store

import cytearc_vfs as cv

ALLOWED = "https://viewer.example"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root: Path = tmp_path_factory.mktemp("cors-caching")
    cv.write_counts(root / "a.zarr", realistic_counts(40, 20, seed=1))
    opened = cv.open_store(root / "a.zarr")
    yield opened
    opened.close()


def ask(
    server: StoreServer, method: str, path: str, fields: dict[str, str]
) -> tuple[int, http.client.HTTPMessage]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request(method, path, headers=fields)
        response = connection.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        connection.close()


def varies_by_origin(headers: http.client.HTTPMessage) -> bool:
    named = [n.strip().lower() for v in headers.get_all("Vary") or [] for n in v.split(",")]
    return "origin" in named


REQUESTS = [
    ("GET", "/zarr.json", {}),
    ("HEAD", "/RNA/counts/zarr.json", {}),
    ("GET", "/RNA/", {"Accept": "application/json"}),
    ("GET", "/absent", {}),
    ("GET", "/zarr.json", {"Origin": "https://other.example"}),
    ("GET", "/zarr.json", {"Origin": ALLOWED}),
]


def test_an_echoed_origin_varies_every_answer(store: Store) -> None:
    with StoreServer.start(store, options=ServeOptions(allow_origin=ALLOWED)) as server:
        for method, path, fields in REQUESTS:
            status, headers = ask(server, method, path, fields)
            assert varies_by_origin(headers), (method, path, fields, status)
            allowed = headers.get("Access-Control-Allow-Origin")
            assert allowed == (ALLOWED if fields.get("Origin") == ALLOWED else None)


def test_any_origin_is_allowed_on_every_answer(store: Store) -> None:
    with StoreServer.start(store, options=ServeOptions(allow_origin="*")) as server:
        for method, path, fields in REQUESTS:
            status, headers = ask(server, method, path, fields)
            assert headers.get("Access-Control-Allow-Origin") == "*", (method, path, status)
            assert "ETag" in headers["Access-Control-Expose-Headers"]
            # the same for every origin: nothing to vary by
            assert not varies_by_origin(headers), (method, path)


def test_no_cors_fields_without_allow_origin(store: Store) -> None:
    with StoreServer.start(store) as server:
        for method, path, fields in REQUESTS:
            _, headers = ask(server, method, path, fields)
            assert "Access-Control-Allow-Origin" not in headers
            assert not varies_by_origin(headers)
