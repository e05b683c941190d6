"""A real S3 API server on loopback (moto's server mode), for remote-path tests.

Tests talk to it over HTTP with obstore or s3fs exactly as they would to a
cloud bucket; nothing is mocked inside the client.
"""

from __future__ import annotations

import logging
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class S3Server:
    """Endpoint and credentials of the loopback server."""

    endpoint: str

    def storage_options(self) -> dict[str, Any]:
        """obstore options for URLs on this server."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": "testing-key",
            "secret_access_key": "testing-secret",
            "region": "us-east-1",
            "client_options": {"allow_http": True},
        }

    def unreachable_options(self) -> dict[str, Any]:
        """The server's options with its endpoint on a closed port: refused at once, no retries."""
        return {
            **self.storage_options(),
            "endpoint": f"http://127.0.0.1:{_free_port()}",  # free: nothing listens there
            "retry_config": {"max_retries": 0},
        }

    def new_bucket(self) -> str:
        """Create an empty bucket and return its name."""
        name = f"bkt-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return name


def fsspec_options(endpoint: str) -> dict[str, Any]:
    """s3fs options for the loopback S3 server at ``endpoint``."""
    return {
        "backend": "fsspec",
        "endpoint_url": endpoint,
        "key": "testing-key",
        "secret": "testing-secret",
        "client_kwargs": {"region_name": "us-east-1"},
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _conditional_puts_are_atomic() -> None:
    """Make moto's ``PUT`` with ``If-None-Match: *`` one step, as S3's is.

    moto checks that the key is absent and then stores it, with no lock, and
    its threaded server runs requests at once: two racing claims can both
    pass the check (CI saw two winners of 16 threads once). AWS decides a
    conditional write in one step, which is what the atomic-claim tests rely on.
    """
    import threading

    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_serialized", False):
        return
    put_object = S3Response.put_object
    lock = threading.Lock()

    def serialized(self: Any) -> Any:
        if self.headers.get("If-None-Match") != "*":
            return put_object(self)  # other writes stay concurrent (tests count rounds)
        with lock:
            return put_object(self)

    serialized._serialized = True  # type: ignore[attr-defined]
    S3Response.put_object = serialized  # type: ignore[method-assign]


def _module_list_is_read_once() -> None:
    """Make moto's server list its own service modules once, not per request.

    For every request moto's dispatcher checks the Host header against
    ``moto.backends.list_of_moto_modules()``, which lists moto's package
    directory and stats its ~170 entries: about 1.3 ms of a request's ~5 ms
    here, on the test process's own cores. The listing cannot change while the
    process runs, so one reading gives the same answers.
    """
    import moto.backends

    if getattr(moto.backends.list_of_moto_modules, "_read_once", False):
        return
    modules = tuple(moto.backends.list_of_moto_modules())

    def read_once() -> tuple[str, ...]:
        return modules

    read_once._read_once = True  # type: ignore[attr-defined]
    moto.backends.list_of_moto_modules = read_once  # type: ignore[assignment]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """Start moto's S3 server on a free loopback port for the session."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _conditional_puts_are_atomic()
    _module_list_is_read_once()
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3_proxy(s3_server: S3Server) -> Iterator[Any]:
    """A counting proxy (``loopback_proxy.LoopbackProxy``) in front of the session's
    S3 server, for one test."""
    from loopback_proxy import LoopbackProxy

    running = LoopbackProxy(s3_server.endpoint)
    try:
        yield running
    finally:
        running.close()
