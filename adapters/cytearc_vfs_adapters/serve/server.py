"""``StoreServer``: any zarr Store of this layer, read-only over HTTP/1.1.

The server runs on zarr's own event loop (the thread ``zarr.core.sync``
keeps), with ``asyncio.start_server``: the store's methods are coroutines
that zarr runs on that loop, so each request awaits them directly, with no
thread hop and no second loop; thousands of idle keep-alive connections
cost a few kilobytes each instead of a thread each; and the protections a
server needs are native to asyncio: a timeout on every request head (idle
and slow clients), ``drain`` with a timeout on every write (backpressure; a
client that stops reading is dropped), a bound on open connections and on
store reads running at once. A client that goes away mid-answer is counted
and dropped without a log line. Answer bodies are held under one
server-wide budget of bytes (:mod:`.budget`); large stored values are read
and sent in pieces (:mod:`.pieces`, read by :mod:`.values`), so a slow
client holds one piece, not a whole value.

What is answered, in ``docs/serve.md``: ``GET``/``HEAD`` of keys with one
byte range (:mod:`.ranges`), their ``ETag`` and ``Last-Modified``
(:mod:`.validators`) and conditions (:mod:`.conditions`), ``GET /PREFIX/`` listings (JSON, or the HTML
index fsspec reads) and ``PROPFIND`` with ``Depth`` 0 or 1 (the WebDAV
listing object_store reads; :mod:`.listings`), ``405`` for every other
method; keys pass the package's key rule (:mod:`.targets`). A store error
is a ``5xx`` whose one-line body names the key and the error, logged on the
``cytearc_vfs_adapters.serve.server`` logger at ERROR; the server goes on.
A read that finds a composite's or mount's source gone or changed first
asks its :class:`~cytearc_vfs_adapters.served_store.ServedStore` to reopen
the location (the source may be back) and, when it did, is read again,
once, all of it from the new store.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import threading
from collections import Counter
from email.utils import formatdate
from http import HTTPStatus
from types import TracebackType

from zarr.abc.store import Store
from zarr.core.sync import sync

from ..served_store import ServedStore
from .answers import (
    Answer,
    error_detail,
    error_status,
    not_found,
    nothing_under,
    one_line,
    text_answer,
)
from .budget import AnswerBudget
from .conditions import precondition
from .directories import DirectoryAnswers
from .options import ServeOptions, ServeStats
from .pieces import PieceReader, StreamAbortedError, StreamedSpan, piece_reads
from .protocol import (
    HeadTooLargeError,
    MalformedRequestError,
    RequestHead,
    parse_head,
    read_head,
    response_head,
)
from .sockets import ListenError, is_loopback, listening_socket
from .targets import BadTargetError, Target, parse_target, target_host
from .validators import NO_VALIDATORS
from .values import KeyAnswers

__all__ = [
    "ListenError",
    "ServeOptions",
    "ServeStats",
    "StoreServer",
    "error_status",
    "is_loopback",
]

log = logging.getLogger(__name__)

_ALLOW = "GET, HEAD, PROPFIND"
# CORS: the answer fields a page's script may read, and the request fields it may send
_EXPOSED = "Content-Length, Content-Range, Accept-Ranges, ETag, Last-Modified"
_ALLOWED_FIELDS = "Range, If-Range, If-None-Match, If-Match, If-Modified-Since, If-Unmodified-Since"
_READ_METHODS = ("GET", "HEAD", "PROPFIND")
# Body slices handed to the socket between drains: each must be taken within
# write_timeout, so a client that stops reading is dropped.
_SLICE = 1 << 20


class StoreServer:
    """Serves one zarr Store, read-only, over HTTP/1.1 (see the module).

    Start it with :meth:`start`; it serves on zarr's event loop until
    :meth:`close`. Usable as a context manager.

    Examples
    --------
    >>> import cytearc_vfs as cv  # doctest: +SKIP
    >>> with StoreServer.start(cv.open_store("atlas.zarr")) as server:  # doctest: +SKIP
    ...     print(server.url)
    http://127.0.0.1:40123/
    """

    def __init__(self, served: ServedStore, options: ServeOptions) -> None:
        self._served = served
        self._options = options
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._reads: asyncio.Semaphore | None = None
        # the current store's answers, made with the read slots on zarr's event loop
        self._keys: KeyAnswers
        self._budget = AnswerBudget(options.max_answer_bytes)
        self._closed = threading.Event()
        self._lock = threading.Lock()  # guards the counters, read from other threads
        self._accepted = 0
        # "request", "timed_out", "dropped", "aborted", "streamed", "piece_read"
        self._events: Counter[str] = Counter()
        self._statuses: Counter[int] = Counter()
        self.host = ""
        self.port = 0
        self._loopback = True
        self._host_names: set[str] = set()
        # the getlastmodified of PROPFIND entries without a time of their own
        self._started = formatdate(usegmt=True)

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def start(
        cls,
        store: Store | ServedStore,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        options: ServeOptions | None = None,
    ) -> StoreServer:
        """Listen on ``host``:``port`` (``0``: a free port) and serve ``store``.

        A :class:`~cytearc_vfs_adapters.served_store.ServedStore` is reopened
        when a read finds a source gone or changed (and is restored); a plain
        store is served as it is. The caller closes either. Returns once the
        socket listens. Raises ``OSError`` naming the host and port when it
        cannot listen.
        """
        served = store if isinstance(store, ServedStore) else ServedStore.fixed(store)
        server = cls(served, options or ServeOptions())
        listener = listening_socket(host, port)
        bound = listener.getsockname()
        server.host, server.port = str(bound[0]), int(bound[1])
        server._loopback = is_loopback(server.host)
        server._host_names = {"localhost", server.host.lower(), host.lower()}
        try:
            sync(server._listen(listener))
        except BaseException:
            listener.close()
            raise
        return server

    async def _listen(self, listener: socket.socket) -> None:
        self._reads = asyncio.Semaphore(self._options.max_reads)
        self._keys = KeyAnswers(
            self._served.current, self._options, self._budget, self._reads, self._count
        )
        self._server = await asyncio.start_server(
            self._connection, sock=listener, limit=self._options.max_head_bytes
        )

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` of the listening socket, as a client on this machine reaches it.

        IPv6 hosts are in brackets. A wildcard address (``0.0.0.0``, ``::``),
        which listens on every interface, is no address to connect to: the
        URL names the loopback address of its family instead.
        """
        host = self.host
        if self.all_interfaces:
            host = "::1" if ":" in host else "127.0.0.1"
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    @property
    def all_interfaces(self) -> bool:
        """Whether the server listens on every interface (a wildcard address)."""
        try:
            return ipaddress.ip_address(self.host.split("%", 1)[0]).is_unspecified
        except ValueError:
            return False

    @property
    def loopback(self) -> bool:
        """Whether the server listens on a loopback address only."""
        return self._loopback

    def stats(self) -> ServeStats:
        """A snapshot of the counters."""
        with self._lock:
            return ServeStats(
                self._accepted,
                len(self._tasks),
                self._events["request"],
                dict(self._statuses),
                self._events["timed_out"],
                self._events["dropped"],
                self._events["aborted"],
                self._budget.held,
                self._budget.peak,
                self._budget.waits,
                self._events["streamed"],
                self._events["piece_read"],
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server is closed (or ``timeout`` passes); ``True`` once closed.

        Waits in short steps, so SIGINT and SIGTERM handlers run meanwhile.
        """
        remaining = timeout
        while remaining is None or remaining > 0:
            step = 0.25 if remaining is None else min(0.25, remaining)
            if self._closed.wait(step):
                return True
            if remaining is not None:
                remaining -= step
        return self._closed.is_set()

    def close(self) -> None:
        """Stop listening, drop every connection, and return when they are gone."""
        if self._closed.is_set():
            return
        try:
            sync(self._shutdown())
        finally:
            self._closed.set()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._server is not None:
            try:
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            except TimeoutError:
                log.warning("serving %s: connections still open after closing", self.url)

    def __enter__(self) -> StoreServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------- connections

    def _count(self, what: str, status: int | None = None) -> None:
        """Count one event: ``"status"`` (with its code), or an event named as in :meth:`stats`."""
        with self._lock:
            if what == "status" and status is not None:
                self._statuses[status] += 1
            else:
                self._events[what] += 1

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            self._tasks.add(task)
            self._accepted += 1
            crowded = len(self._tasks) > self._options.max_connections
        # drain() returns only once the kernel has taken every byte: an answer's
        # memory is given back to the budget when it is truly no longer held
        writer.transport.set_write_buffer_limits(high=0)
        try:
            if crowded:
                answer = text_answer(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"more than {self._options.max_connections} connections are open; retry",
                    close=True,
                )
                await self._send(writer, answer, None)
                return
            while await self._exchange(reader, writer):
                pass
        except StreamAbortedError as exc:
            # cut before the body's end: the client sees a short body and a
            # closed connection, never one it could take as complete
            self._count("aborted")
            log.warning("serving %s: answer cut off, connection closed: %s", self.url, exc)
            writer.transport.abort()
        except (ConnectionError, TimeoutError) as exc:
            # the client went away mid-answer, or stopped reading: nothing to report
            self._count("dropped")
            log.debug("serving %s: dropped a connection (%s)", self.url, type(exc).__name__)
            writer.transport.abort()
        except asyncio.CancelledError:
            # close() cancels every connection; ending the task normally keeps
            # asyncio's stream callback (which asks a cancelled task for its
            # exception on 3.12.1) from logging the cancellation as an error
            writer.transport.abort()
        finally:
            with self._lock:
                self._tasks.discard(task)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and answer it; ``True`` to read another on this connection."""
        try:
            async with asyncio.timeout(self._options.header_timeout):
                data = await read_head(reader, self._options.max_head_bytes)
        except TimeoutError:
            self._count("timed_out")
            writer.transport.abort()
            return False
        except asyncio.IncompleteReadError:
            return False  # the client closed the connection between requests
        except HeadTooLargeError:
            answer = text_answer(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"the request head is larger than {self._options.max_head_bytes} bytes",
                close=True,
            )
            await self._send(writer, answer, None)
            return False
        try:
            head = parse_head(data)
        except MalformedRequestError as exc:
            await self._send(writer, text_answer(exc.status, str(exc), close=True), None)
            return False
        self._count("request")
        used: list[Store] = []  # the stores this request reads, given back once it is sent
        try:
            answer = await self._answer(head, used)
            keep = head.keep_alive and not head.announces_body and not answer.close
            answer.close = not keep
            try:
                await self._send(writer, answer, head)
            finally:
                answer.release()
        finally:
            await self._served.finished(used)
        return keep

    async def _send(
        self, writer: asyncio.StreamWriter, answer: Answer, head: RequestHead | None
    ) -> None:
        self._count("status", answer.status.value)
        length = len(answer.body) if answer.length is None else answer.length
        # a 304 (and a 204) has no body and no length of one (RFC 9110, 8.6)
        bodiless = answer.status in (HTTPStatus.NOT_MODIFIED, HTTPStatus.NO_CONTENT)
        fields = [
            *answer.fields,
            *([] if bodiless else [("Content-Length", str(length))]),
            ("Connection", "close" if answer.close else "keep-alive"),
            ("Server", "cytearc-vfs"),
            *self._cors_fields(head),
        ]
        writer.write(response_head(answer.status, fields))
        if head is not None and head.method == "HEAD":
            await self._write_body(writer, b"")
            return
        await self._write_body(writer, answer.body)
        answer.release()
        if answer.rest is not None:
            assert answer.reader is not None
            await self._stream(writer, answer.rest, answer.reader)

    async def _write_body(self, writer: asyncio.StreamWriter, body: bytes | memoryview) -> None:
        """Hand ``body`` to the socket slice by slice, each taken within ``write_timeout``."""
        view = memoryview(body)
        # an empty body still drains once: the head must reach the client
        for start in range(0, len(view), _SLICE) or (0,):
            if writer.transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
            writer.write(view[start : start + _SLICE])
            async with asyncio.timeout(self._options.write_timeout):
                await writer.drain()

    async def _stream(
        self, writer: asyncio.StreamWriter, rest: StreamedSpan, reader: PieceReader
    ) -> None:
        """Read and send the rest of a streamed value, one piece in memory at a time.

        The pieces come from ``reader``, the store that read the first bytes:
        a store reopened meanwhile is not the one this answer began on.

        Each piece asks the budget anew, at the back of the line, so a slow
        client keeps no memory (and no place) between its pieces.
        """
        for read in piece_reads(rest, self._options.piece_bytes):
            try:
                lease = await self._budget.acquire(
                    read.stop - read.start, self._options.answer_wait_timeout
                )
            except TimeoutError as exc:
                raise StreamAbortedError(
                    f"{rest.key!r}: no answer memory came free within "
                    f"{self._options.answer_wait_timeout:g} s (max_answer_bytes "
                    f"{self._options.max_answer_bytes})"
                ) from exc
            try:
                data = await reader.read_piece(rest, read)
                await self._write_body(writer, data[: read.sent])
                del data  # freed before its bytes go back to the budget
            finally:
                lease.release()

    def _cors_fields(self, head: RequestHead | None) -> list[tuple[str, str]]:
        """The CORS fields of every answer under ``--allow-origin`` (none without it).

        ``*`` is the same for every request, so it is always sent. One origin is
        echoed to its own requests only, so every answer varies by ``Origin``:
        one kept by a cache from a request without it (the URL opened in the
        browser) must not be handed to the allowed page's ``fetch``, which would
        fail on CORS (the Fetch standard, "CORS protocol and HTTP caches").
        """
        allowed = self._options.allow_origin
        if allowed is None:
            return []
        exposed = [
            ("Access-Control-Allow-Origin", allowed),
            ("Access-Control-Expose-Headers", _EXPOSED),
        ]
        if allowed == "*":
            return exposed
        origin = None if head is None else head.field("origin")
        return [*(exposed if origin == allowed else []), ("Vary", "Origin")]

    def _host_allowed(self, host: str | None) -> bool:
        """Whether the ``Host`` a client sent names this server.

        On a loopback address only loopback names are answered: a web page
        whose own name an attacker rebinds to 127.0.0.1 (DNS rebinding)
        sends its own name, and is refused.
        """
        if not self._loopback or host is None:
            return True
        name = host.strip().lower()
        if name.startswith("["):
            name = name[1:].partition("]")[0]
        elif name.count(":") == 1:
            name = name.partition(":")[0]
        return name in self._host_names or is_loopback(name)

    async def _answer(self, head: RequestHead, used: list[Store]) -> Answer:
        """The answer to ``head``; the stores it reads are added to ``used`` (see
        :meth:`ServedStore.use`)."""
        if head.method == "OPTIONS" and self._options.allow_origin is not None:
            return Answer(
                HTTPStatus.NO_CONTENT,
                fields=[
                    ("Allow", f"{_ALLOW}, OPTIONS"),
                    ("Access-Control-Allow-Methods", "GET, HEAD"),
                    ("Access-Control-Allow-Headers", _ALLOWED_FIELDS),
                    ("Access-Control-Max-Age", "600"),
                ],
            )
        if head.method not in _READ_METHODS:
            answer = text_answer(
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"{head.method} is not allowed: this server is read-only",
            )
            answer.fields.append(("Allow", _ALLOW))
            return answer
        host = target_host(head.target, head.field("host"))
        if not self._host_allowed(host):
            return text_answer(
                HTTPStatus.MISDIRECTED_REQUEST,
                f"Host {host!r} does not name this server; use {self.url}",
            )
        try:
            target = parse_target(head.target)
        except BadTargetError as exc:
            return text_answer(HTTPStatus.BAD_REQUEST, str(exc))
        used.append(self._served.use())
        keys = self._keys_for(used[-1])
        try:
            return await self._read(keys, head, target)
        except Exception as exc:
            failure: Exception = exc
        # a source gone or changed: reopened (once for all such requests), and
        # read again on the new store, once; a request never mixes two stores
        store = await self._served.recover(keys.store, failure)
        if store is None:
            return self._failed(head, target, failure, self._served.explain(failure))
        used.append(store)
        try:
            return await self._read(self._keys_for(store), head, target)
        except Exception as exc:
            return self._failed(head, target, exc, self._served.explain(exc))

    async def _read(self, keys: KeyAnswers, head: RequestHead, target: Target) -> Answer:
        """The answer to a read request, all of it from ``keys``' store; raises what the store raises."""
        if head.method == "PROPFIND":
            path, depth = target.path, head.field("depth")
            directories = DirectoryAnswers(keys.store, keys.reads, self._started)
            return await keys.within_budget(
                path, lambda: directories.propfind(path, target.listing, depth)
            )
        if target.listing:
            path, accept = target.path, head.field("accept")
            directories = DirectoryAnswers(keys.store, keys.reads, self._started)
            answer = await keys.within_budget(path, lambda: directories.listing(path, accept))
            return _listing_conditions(head, path, answer)
        return await keys.value(target.path, head)

    def _keys_for(self, store: Store) -> KeyAnswers:
        """The answers of ``store`` (made again when a reopen put another store in service)."""
        assert self._reads is not None
        if self._keys.store is not store:
            self._keys = KeyAnswers(store, self._options, self._budget, self._reads, self._count)
        return self._keys

    def _failed(self, head: RequestHead, target: Target, exc: Exception, note: str) -> Answer:
        """The answer to a read that raised ``exc`` (``note``: what a reopen found, or ``""``)."""
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # a name longer than the file system allows is a key the store cannot
            # hold: absent, not a failure to retry (and its message names the
            # server's directory)
            if target.listing:
                return nothing_under(target.path)
            return not_found(target.path)
        return self._store_error(head, target.path, exc, note)

    def _store_error(self, head: RequestHead, key: str, exc: Exception, note: str) -> Answer:
        """The answer to a store error: its status, one line naming the key; logged."""
        status = error_status(exc)
        message = f"{head.method} {key!r}: {error_detail(exc)}"
        if note:
            message += f"; {one_line(note)}"
        log.error("%d %s", status.value, message)
        return text_answer(status, message)


def _listing_conditions(head: RequestHead, path: str, listing: Answer) -> Answer:
    """``listing``, or the ``304``/``412`` its request's conditions call for (RFC 9110, 13.2.2).

    A listing has no ``ETag`` and no time: ``If-Match`` with tags never holds
    (``412``), ``If-None-Match: *`` always does (``304``), dates are not judged.
    An absent listing stays ``404``.
    """
    if listing.status != HTTPStatus.OK:
        return listing
    refused = precondition(head, NO_VALIDATORS)
    if refused is None:
        return listing
    listing.release()
    if refused == HTTPStatus.NOT_MODIFIED:
        return Answer(refused, fields=[("Vary", "Accept")])
    return text_answer(
        refused,
        f"the listing of {path + '/'!r} has no ETag, so If-Match names none of its "
        "versions; ask again without If-Match",
    )
