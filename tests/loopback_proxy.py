"""A loopback HTTP proxy in front of the S3 server that counts requests, delays and can hang.

Requests pass through unchanged (headers, body, signature), so clients talk
real S3 to a real server; the proxy records each request's method, path and
conditional and range headers. With ``delay`` set, every request waits that
many seconds before it is forwarded (a cloud round trip; requests in flight
wait concurrently, as they would on a network); with ``rate`` set (bytes per
second), each response is held back as long as sending its body at that
rate takes (a per-connection bandwidth cap). ``returned`` counts the body
bytes answered. When ``hang`` is set it accepts requests and never answers,
as a stalled server does. :meth:`LoopbackProxy.fail` answers the next
matching requests with an error status (a 503 throttle) without forwarding
them, and :meth:`LoopbackProxy.drop` closes their connections unanswered
(a connection reset), so tests can check retries and failures by count.

Benchmarks run it in a process of its own (``python tests/loopback_proxy.py
UPSTREAM``, driven through :class:`ProxyProcess`), so its threads take
neither the measured process's CPU nor its GIL.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class _Server(ThreadingHTTPServer):
    # many requests in flight at once (a composite's sources open concurrently):
    # the default backlog of 5 would drop connection attempts, which the
    # client retries only after a second
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that gave up (a timeout, a cancelled read: what the fault
        # tests provoke) closes its connection before the answer is written;
        # anything else is a fault of the proxy itself and is printed
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it."""

    method: str
    path: str
    range: str | None
    if_match: str | None
    length: int = 0
    """Content-Length of the request body."""
    copy_source: str | None = None
    """``x-amz-copy-source`` of a server-side copy."""
    started: float = 0.0
    """``time.monotonic()`` when the proxy received the request."""
    ended: float = 0.0
    """``time.monotonic()`` when the proxy had its answer, just before sending it (0: not
    answered yet): a request sent on seeing the answer starts after it."""


def sequential_rounds(seen: Sequence[Seen]) -> int:
    """The longest chain of requests each of which started after the one before had ended.

    With a delay on every request, requests sent together overlap and count
    as one round; a request sent only after another's answer (a parent check
    before a write, a write after a read) adds one. This is the number of
    round trips a client waited for one after another. Unanswered requests
    are left out.

    >>> a, b, c = (Seen("GET", "/", None, None, started=s, ended=e)
    ...            for s, e in ((0, 1), (0.1, 1.1), (1.2, 2)))
    >>> sequential_rounds([a, b, c])
    2
    """
    done = [s for s in seen if s.ended]
    by_start = sorted(range(len(done)), key=lambda i: done[i].started)
    by_end = sorted(range(len(done)), key=lambda i: done[i].ended)
    chain = [0] * len(done)
    best = ended = 0
    for i in by_start:
        # every request that ended before this one started was seen earlier (it started earlier)
        while ended < len(done) and done[by_end[ended]].ended <= done[i].started:
            best = max(best, chain[by_end[ended]])
            ended += 1
        chain[i] = best + 1
    return max(chain, default=0)


#: S3's answer to a request its policy refuses (botocore reads the code).
_ACCESS_DENIED = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"


class LoopbackProxy:
    """Forwards to ``upstream`` (``http://host:port``); see the module docstring."""

    def __init__(self, upstream: str, *, control: bool = False) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.seen: list[Seen] = []
        self.hang = False
        self.delay = 0.0
        self.rate = 0.0
        #: Answer ``403 AccessDenied`` where the server answers ``404``: what S3 answers a
        #: GetObject or HeadObject of an absent key to credentials without s3:ListBucket
        self.absent_forbidden = False
        self._returned = 0
        self._lock = threading.Lock()
        self._release = threading.Event()
        # pending faults: [kind, remaining, path fragment, status], first match wins
        self._faults: list[list[Any]] = []
        # pending actions: [methods, remaining, action], see on()
        self._actions: list[list[Any]] = []
        self.faulted = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: an answer goes out as two sends, headers then body. With
            # Nagle's algorithm the body waited for the client's ACK of the headers,
            # which the client delays (~40 ms on Linux loopback): a GET through the
            # proxy took ~45 ms instead of ~5 ms, a latency no test asked for
            # (``delay`` is how a test asks for one)
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                if control and self.path.startswith(CONTROL):
                    self._control()
                    return
                seen = proxy._record(self)
                fault = proxy._fault(self.path, self.command)
                damage = None
                if fault is not None and fault[0] in ("flip", "short"):
                    damage, fault = fault[0], None  # forwarded, then its answer damaged
                if fault is not None:
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    if fault[0] == "drop":  # the connection reset, no answer at all
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    # S3's own code for the status: a client (botocore) reads the code
                    payload = (
                        _ACCESS_DENIED
                        if fault[3] == 403
                        else b"<Error><Code>SlowDown</Code></Error>"
                    )
                    if fault[4:] == [True] and proxy.delay:
                        time.sleep(proxy.delay)  # a refusal's round trip
                    proxy._answered(seen)  # before the client can see the answer (below)
                    self.send_response(fault[3])
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":  # an answer to HEAD has no body
                        self.wfile.write(payload)
                    return
                if proxy.hang:
                    proxy._release.wait()  # accept, never answer
                    self.close_connection = True
                    return
                if proxy.delay:
                    time.sleep(proxy.delay)  # this request's thread only
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection(*proxy._upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    if damage == "flip" and payload:  # one byte flipped in the middle
                        middle = len(payload) // 2
                        payload = (
                            payload[:middle]
                            + bytes([payload[middle] ^ 0xFF])
                            + payload[middle + 1 :]
                        )
                    elif damage == "short":  # a consistent but shorter answer
                        payload = payload[: len(payload) // 2]
                    if proxy.rate and self.command != "HEAD":
                        time.sleep(len(payload) / proxy.rate)  # the body's time on the wire
                    status, reason = response.status, response.reason
                    if proxy.absent_forbidden and status == 404:
                        status, reason = 403, "Forbidden"
                        payload = _ACCESS_DENIED if self.command != "HEAD" else b""
                    proxy._count(0 if self.command == "HEAD" else len(payload))
                    # answered now, before the client can see it: a request the client
                    # sends on seeing this answer always starts after this one ended
                    proxy._answered(seen)
                    self.send_response(status, reason)
                    for name, value in response.getheaders():
                        if name.lower() not in _HOP_BY_HOP and (
                            status == response.status or name.lower() != "content-length"
                        ):
                            self.send_header(name, value)
                    # a HEAD answer has no body but the object's length
                    length = (
                        response.getheader("Content-Length", "0")
                        if self.command == "HEAD" and status == response.status
                        else str(len(payload))
                    )
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    upstream.close()

            def _control(self) -> None:
                command, _, argument = self.path[len(CONTROL) :].partition("/")
                if command == "delay":
                    proxy.delay = float(argument)
                if command == "rate":
                    proxy.rate = float(argument)
                answer: object = []
                if command == "take":
                    answer = [seen.__dict__ for seen in proxy.take()]
                elif command == "returned":
                    answer = proxy.take_returned()
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            # PROPFIND: WebDAV listings (obstore lists plain HTTP stores that way)
            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PROPFIND = _forward  # noqa: N815

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # a short poll: close() (shutdown) waits for the serving loop to look, up to
        # poll_interval (0.5 s by default, paid in the teardown of every test with a proxy)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The proxy's URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _record(self, handler: BaseHTTPRequestHandler) -> Seen:
        seen = Seen(
            handler.command,
            handler.path,
            handler.headers.get("Range"),
            handler.headers.get("If-Match"),
            int(handler.headers.get("Content-Length") or 0),
            handler.headers.get("x-amz-copy-source"),
            started=time.monotonic(),
        )
        due = []
        with self._lock:
            self.seen.append(seen)
            for action in self._actions:
                if action[1] > 0 and seen.method in action[0]:
                    action[1] -= 1
                    if action[1] == 0:
                        due.append(action[2])
        for call in due:  # before the request is forwarded: it is in flight meanwhile
            call()
        return seen

    def _answered(self, seen: Seen) -> None:
        answered = replace(seen, ended=time.monotonic())
        with self._lock:
            # recent requests are at the end; one taken already is left as it was
            for index in range(len(self.seen) - 1, -1, -1):
                if self.seen[index] is seen:
                    self.seen[index] = answered
                    break

    def take(self) -> list[Seen]:
        """The requests seen since the last call."""
        with self._lock:
            seen, self.seen = self.seen, []
        return seen

    def fail(
        self, count: int, *, status: int = 503, match: str = "", delayed: bool = False
    ) -> None:
        """Answer the next ``count`` requests whose path holds ``match`` with ``status``;
        ``delayed``: after :attr:`delay`, as a server's refusal takes a round trip (else at
        once)."""
        with self._lock:
            self._faults.append(["fail", count, match, status, delayed])

    def drop(self, count: int, *, match: str = "") -> None:
        """Close the connections of the next ``count`` requests whose path holds
        ``match`` without answering them."""
        with self._lock:
            self._faults.append(["drop", count, match, 0])

    def corrupt(self, count: int, *, how: str = "flip", match: str = "") -> None:
        """Damage the answers to the next ``count`` GET requests whose path holds ``match``:
        ``"flip"`` inverts the middle byte of the body, ``"short"`` answers its first half
        (with a Content-Length to match), as a faulty proxy or link might."""
        assert how in ("flip", "short"), how
        with self._lock:
            self._faults.append([how, count, match, 0])

    def on(
        self, count: int, action: Callable[[], object], *, methods: str = "PUT POST DELETE"
    ) -> None:
        """Call ``action`` when the ``count``-th request from now whose method is one of
        ``methods`` has arrived, before it is forwarded (an interrupt while it is in flight)."""
        with self._lock:
            self._actions.append([methods.split(), count, action])

    def clear(self) -> None:
        """Forget the faults and actions not yet met."""
        with self._lock:
            self._faults.clear()
            self._actions.clear()

    def _fault(self, path: str, method: str) -> list[Any] | None:
        with self._lock:
            for fault in self._faults:
                damages = fault[0] in ("flip", "short")
                if fault[1] > 0 and fault[2] in path and (method == "GET" or not damages):
                    fault[1] -= 1
                    self.faulted += 1
                    return fault
        return None

    def _count(self, size: int) -> None:
        with self._lock:
            self._returned += size

    def take_returned(self) -> int:
        """Body bytes answered since the last call."""
        with self._lock:
            returned, self._returned = self._returned, 0
        return returned

    def close(self) -> None:
        """Stop serving; hung requests are released."""
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


#: Path prefix of a proxy process's own requests (never forwarded or recorded).
CONTROL = "/__proxy__/"


class ProxyProcess:
    """A :class:`LoopbackProxy` in a process of its own, with the same surface."""

    def __init__(self, upstream: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__, upstream], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        self.endpoint = self._process.stdout.readline().strip()
        self._delay = 0.0
        self._rate = 0.0

    def _ask(self, command: str) -> Any:
        with urllib.request.urlopen(f"{self.endpoint}{CONTROL}{command}", timeout=60) as reply:
            return json.loads(reply.read())

    @property
    def delay(self) -> float:
        """Seconds each request waits before it is forwarded."""
        return self._delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._ask(f"delay/{seconds}")
        self._delay = seconds

    @property
    def rate(self) -> float:
        """Bytes per second each response body is held to (0: no cap)."""
        return self._rate

    @rate.setter
    def rate(self, bytes_per_second: float) -> None:
        self._ask(f"rate/{bytes_per_second}")
        self._rate = bytes_per_second

    def take(self) -> list[Seen]:
        """The requests seen since the last call."""
        return [Seen(**fields) for fields in self._ask("take")]

    def take_returned(self) -> int:
        """Body bytes answered since the last call."""
        return int(self._ask("returned"))

    def close(self) -> None:
        """Stop the proxy process."""
        self._process.terminate()
        self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


if __name__ == "__main__":
    running = LoopbackProxy(sys.argv[1], control=True)
    print(running.endpoint, flush=True)
    threading.Event().wait()
