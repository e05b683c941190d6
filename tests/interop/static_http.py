"""A loopback static file server with byte ranges, for reading a store over plain HTTP.

Python's ``http.server`` ignores ``Range``; sharded arrays are read by range
(the shard index is a suffix range, ``bytes=-N``), so this handler answers
``bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` with 206, a missing file with
404 (a missing chunk is the fill value to every Zarr reader), and nothing
else. It stands for any static web server or public bucket in front of an
ordinary store.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["serve_directory"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class _RangeHandler(SimpleHTTPRequestHandler):
    """GET and HEAD of files under ``directory``, with a single byte range."""

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def _answer(self, *, with_body: bool) -> None:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        data = path.read_bytes()
        start, stop = 0, len(data)
        status = HTTPStatus.OK
        header = self.headers.get("Range")
        if header:
            match = _RANGE.match(header.strip())
            if match is None or match.groups() == ("", ""):
                self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                return
            first, last = match.groups()
            if first == "":  # suffix: the last n bytes
                start = max(0, len(data) - int(last))
            else:
                start = int(first)
                stop = min(len(data), int(last) + 1) if last else len(data)
            if start >= len(data) and len(data) > 0:
                self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                return
            status = HTTPStatus.PARTIAL_CONTENT
        body = data[start:stop]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test output is the table, not the access log."""


@contextmanager
def serve_directory(directory: Path, *, timeout: float = 30) -> Iterator[str]:
    """Serve ``directory`` on a free loopback port; yields its URL (ending in ``/``).

    The server runs in a child process: a reader that blocks on the network
    while holding the GIL (zarrs-python's Rust store does) would otherwise
    wait forever for a server thread that needs the GIL to answer.
    """
    process = subprocess.Popen(
        [sys.executable, __file__, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the static server for {directory} printed {url!r}, not its URL")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


class _Server(ThreadingHTTPServer):
    # A reader may open hundreds of connections at once (zarrita fetches every
    # inner chunk of a shard concurrently; small chunks make that many); the
    # socketserver default backlog of 5 would refuse them.
    request_queue_size = 1024


def main(directory: str) -> None:
    """Serve ``directory`` until terminated; the first line of stdout is the URL."""
    server = _Server(("127.0.0.1", 0), partial(_RangeHandler, directory=directory))
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}/", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main(sys.argv[1])
