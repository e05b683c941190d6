"""``serve s3://...``: a backend that stops answering costs a client one timeout, not two.

A ``GET`` of a remote store's key reads its first piece with a ranged read;
when that read failed, the server asked the key's size (a ``HEAD``) in case
the key was an empty object (S3 refuses every range of one). Against a
backend that stopped answering, that ``HEAD`` waited out
``CYTEARC_SOURCE_TIMEOUT`` a second time, so the client waited twice the
timeout (60 s by default) for the ``503``, and clients that give up after 30
s (obstore's default) saw their own timeout instead of the server's answer
naming the cause. Now a read that timed out, or found nothing at the
address, is answered at once; an empty object still reads as empty
(``tests/test_directory_markers.py``).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import StoreServer
from loopback_proxy import LoopbackProxy
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV


@pytest.fixture
def served(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StoreServer, LoopbackProxy]]:
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    bucket = s3_server.new_bucket()
    cv.write_counts(
        f"s3://{bucket}/s.zarr",
        realistic_counts(200, 30, density=0.2, seed=1),
        storage_options=s3_server.storage_options(),
    )
    proxy = LoopbackProxy(s3_server.endpoint)
    options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
    store = cv.open_store(f"s3://{bucket}/s.zarr", storage_options=options)
    try:
        with StoreServer.start(store) as server:
            yield server, proxy
    finally:
        store.close()
        proxy.close()


def get(server: StoreServer, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.remote
def test_a_stalled_backend_is_asked_once(served: tuple[StoreServer, LoopbackProxy]) -> None:
    server, proxy = served
    assert get(server, "/RNA/counts/zarr.json")[0] == 200
    proxy.take()
    proxy.hang = True
    status, body = get(server, "/RNA/counts/zarr.json")
    proxy.hang = False
    assert status == 503, body
    assert b"CYTEARC_SOURCE_TIMEOUT" in body
    seen = proxy.take()
    # the ranged read (and obstore's retries of it), and no HEAD for the size after it
    assert [s.method for s in seen if s.method != "GET"] == []
    assert all(s.range is not None for s in seen), seen
    # the backend back: read again
    assert get(server, "/RNA/counts/zarr.json")[0] == 200
