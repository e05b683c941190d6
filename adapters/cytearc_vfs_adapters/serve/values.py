"""The answers to ``GET`` and ``HEAD`` of a key: whole, ranged, streamed in pieces, or computed.

:class:`KeyAnswers` reads values for a :class:`~.server.StoreServer` under
its two bounds: the read slots (store reads running at once) and the answer
budget (bytes of answer bodies held, :mod:`.budget`). A small stored value is
one read; a large one, or a large range, is read in pieces of
``piece_bytes`` (:mod:`.pieces`), the first here and the rest as the server
sends them (:meth:`KeyAnswers.read_piece`); a value the store computes (a
composite's chunk) is computed once, whole. A value whose size changes
while it is read is an ``OSError`` before the head is sent, and a
:class:`~.pieces.StreamAbortedError` after, as is a local file replaced or
rewritten with as many bytes while its pieces are sent. Listings are held under the
same budget (:meth:`KeyAnswers.within_budget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import default_buffer_prototype

from cytearc_vfs.errors import SourceGoneError
from cytearc_vfs.remote.failures import timed_out, unreachable

from .answers import Answer, bytes_of, content_type, error_detail, not_found, text_answer
from .budget import AnswerBudget, Lease
from .conditions import precondition, range_applies
from .options import ServeOptions
from .pieces import PieceRead, StreamAbortedError, StreamedSpan, computed_on_read
from .protocol import RequestHead
from .ranges import ByteSpan, RangeSpec, parse_range, resolve_range
from .validators import NO_VALIDATORS, Validators, costs_a_request, describe

__all__ = ["KeyAnswers"]

#: Request fields that make a request conditional (RFC 9110, section 13.1).
_CONDITIONS = ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since", "if-range")


class KeyAnswers:
    """Reads the values a server answers with (see the module).

    Parameters
    ----------
    store
        The served store.
    options
        The server's options (``piece_bytes``, ``answer_wait_timeout``, ...).
    budget
        The server's answer budget.
    reads
        The server's read slots.
    count
        Counts an event of the server's stats (``"streamed"``, ``"piece_read"``).
    """

    def __init__(
        self,
        store: Store,
        options: ServeOptions,
        budget: AnswerBudget,
        reads: asyncio.Semaphore,
        count: Callable[[str], None],
    ) -> None:
        self._store = store
        self._options = options
        self._budget = budget
        self._reads = reads
        self._count = count

    @property
    def store(self) -> Store:
        """The store these answers read, all of each answer."""
        return self._store

    @property
    def reads(self) -> asyncio.Semaphore:
        """The server's read slots."""
        return self._reads

    async def value(self, key: str, head: RequestHead) -> Answer:
        """The answer to ``GET`` or ``HEAD`` of ``key``: its validators, conditions, then the value.

        The validators (:mod:`.validators`) are found before any byte is read,
        so a value replaced meanwhile is sent under its older tag, which the
        next request no longer matches (the other order could tie new
        validators to old bytes for good).
        """
        assert self._reads is not None
        fields = [("Content-Type", content_type(key)), ("Accept-Ranges", "bytes")]
        conditional = any(head.field(name) is not None for name in _CONDITIONS)
        # a range needs the size, whose request (a remote object's HEAD) gives the tag
        # too: asked here, before any byte is read, the 206 carries it
        ranged = head.field("range") is not None
        described = None
        if head.method == "HEAD" or conditional or ranged or not costs_a_request(self._store, key):
            async with self._reads:
                described = await describe(self._store, key)
            if described is None:
                return not_found(key)
        validators = NO_VALIDATORS if described is None else described.validators
        size = None if described is None else described.size
        identity = None if described is None else described.identity
        if head.method == "HEAD" or conditional:
            if size is None:
                size = await self._existing_size(key)
                if size is None:
                    return not_found(key)
            refused = precondition(head, validators)
            if refused is not None:
                return self._unmet(key, refused, validators)
        fields += validators.fields()
        if head.method == "HEAD":
            # sizes only: a composite's chunk is never computed for a HEAD
            return Answer(HTTPStatus.OK, fields=fields, length=size)
        # a range whose If-Range names other bytes is the whole value (RFC 9110, 13.1.5)
        applies = range_applies(head.field("if-range"), validators)
        header = head.field("range") if applies else None
        spec = None if header is None else parse_range(header)
        if computed_on_read(self._store, key):
            return await self._computed_value(key, spec, header, fields, size)
        if spec is None:
            return await self._stored_value(key, fields, size, identity)
        return await self._stored_range(key, spec, header, fields, size, identity)

    async def _existing_size(self, key: str) -> int | None:
        """The size of ``key``, ``None`` when the store does not hold it (nothing is computed)."""
        assert self._reads is not None
        async with self._reads:
            if not await self._store.exists(key):
                return None
            try:
                return await self._store.getsize(key)
            except SourceGoneError:
                raise  # a source gone (a 502), not a key absent: never a 404, read as zeros
            except FileNotFoundError:
                return None

    @staticmethod
    def _unmet(key: str, status: HTTPStatus, validators: Validators) -> Answer:
        """``304`` with the validators and no body, or ``412`` naming the key's tag."""
        if status == HTTPStatus.NOT_MODIFIED:
            return Answer(status, fields=validators.fields())
        current = validators.etag or "none (this store gives no ETag for it)"
        answer = text_answer(
            status,
            f"{key!r}: the request's precondition does not hold (its ETag is {current}); "
            "read it again without If-Match or If-Unmodified-Since",
        )
        answer.fields += validators.fields()
        return answer

    async def _stored_value(
        self, key: str, fields: list[tuple[str, str]], known: int | None, identity: str | None
    ) -> Answer:
        """``GET`` of a whole stored value: one read when it is small, pieces when it is large.

        The first read asks for one piece: fewer bytes back means that is the
        whole value (one store call, as small chunks and documents need);
        a full piece means a large value, whose size is then asked and whose
        rest is streamed. When the budget has a line, the size is asked
        first, so a small value waits for its own bytes, not a piece's.
        """
        piece = self._options.piece_bytes
        lease = self._budget.try_acquire(piece)
        if lease is None:
            size = known if known is not None else await self._size_of(key)
            if size is None:
                return not_found(key)
            # one byte more than the size: a value that grew meanwhile reads as large
            lease = await self._lease(min(size + 1, piece))
            if lease is None:
                return self._busy(key)
        try:
            data = await self._read_held(key, lease, RangeByteRequest(0, lease.nbytes))
        except Exception as exc:
            # S3 refuses every range of an empty object (416), the first piece's too;
            # a backend that timed out or is not there would make the size's question
            # wait out the timeout a second time, for the same error
            stalled = timed_out(exc) or unreachable(exc)
            if known is None and not stalled and await self._holds_nothing(key):
                return Answer(HTTPStatus.OK, b"", fields)
            raise
        if data is None:
            return not_found(key)
        if len(data) < lease.nbytes:
            lease.shrink(len(data))
            return Answer(HTTPStatus.OK, data, fields, lease=lease)
        size = known if known is not None else await self._size_of(key)
        if size is None:
            lease.release()
            return not_found(key)  # removed just after its first piece was read
        if size < len(data):
            raise self._changed(key, lease, size, len(data), len(data))
        answer = Answer(HTTPStatus.OK, data, fields, length=size, lease=lease)
        if size > len(data):
            answer.rest, answer.reader = StreamedSpan(key, len(data), size, size, identity), self
            self._count("streamed")
            self._count("piece_read")
        return answer

    async def _stored_range(
        self,
        key: str,
        spec: RangeSpec,
        header: str | None,
        fields: list[tuple[str, str]],
        known: int | None,
        identity: str | None,
    ) -> Answer:
        """``GET`` of a byte range of a stored value: one read, or pieces when it is large."""
        size = known if known is not None else await self._size_of(key)
        if size is None:
            return not_found(key)
        span = resolve_range(spec, size)
        if not isinstance(span, ByteSpan):
            return self._unsatisfiable(key, header, size)
        lease = await self._lease(min(span.length, self._options.piece_bytes))
        if lease is None:
            return self._busy(key)
        first = RangeByteRequest(span.start, span.start + lease.nbytes)
        data = await self._read_held(key, lease, first)
        if data is None:
            return not_found(key)
        if len(data) != lease.nbytes:
            raise self._changed(key, lease, size, len(data), lease.nbytes)
        fields.append(("Content-Range", span.content_range))
        answer = Answer(HTTPStatus.PARTIAL_CONTENT, data, fields, length=span.length, lease=lease)
        if span.length > len(data):
            answer.rest, answer.reader = (
                StreamedSpan(key, first.end, span.stop, size, identity),
                self,
            )
            self._count("streamed")
            self._count("piece_read")
        return answer

    async def _computed_value(
        self,
        key: str,
        spec: RangeSpec | None,
        header: str | None,
        fields: list[tuple[str, str]],
        known: int | None,
    ) -> Answer:
        """``GET`` of a value the store computes (a composite's chunk): computed once, whole.

        Its size comes from the array document (``getsize`` computes
        nothing); the budget is asked for the whole chunk, which the
        computation holds whatever range is sent.
        """
        size = known if known is not None else await self._size_of(key)
        if size is None:
            return not_found(key)
        byte_range = None
        due = size
        if spec is not None:
            span = resolve_range(spec, size)
            if not isinstance(span, ByteSpan):
                return self._unsatisfiable(key, header, size)
            byte_range, due = RangeByteRequest(span.start, span.stop), span.length
            fields.append(("Content-Range", span.content_range))
        lease = await self._lease(size)
        if lease is None:
            return self._busy(key)
        data = await self._read_held(key, lease, byte_range)
        if data is None:
            return not_found(key)
        if len(data) != due:
            raise self._changed(key, lease, size, len(data), due)
        status = HTTPStatus.OK if spec is None else HTTPStatus.PARTIAL_CONTENT
        return Answer(status, data, fields, lease=lease)

    async def read_piece(self, span: StreamedSpan, read: PieceRead) -> memoryview:
        """The bytes of one piece read, or :class:`StreamAbortedError` if they are not the ones due.

        A value with an identity (a local file's stat) is described again after
        the read: a file replaced or rewritten with as many bytes since the
        answer began is cut here, where it read the new bytes (it was sent on,
        a complete-looking body of old and new bytes under the old ``ETag``).
        """
        assert self._reads is not None
        key = span.key
        try:
            async with self._reads:
                value = await self._store.get(
                    key, default_buffer_prototype(), RangeByteRequest(read.start, read.stop)
                )
                now = None if span.identity is None else await describe(self._store, key)
        except Exception as exc:
            raise StreamAbortedError(
                f"{key!r}: reading bytes {read.start}-{read.stop - 1} failed: {error_detail(exc)}"
            ) from exc
        self._count("piece_read")
        if value is None:
            raise StreamAbortedError(f"{key!r} vanished while it was sent")
        data = bytes_of(value)
        if len(data) != read.expected:
            raise StreamAbortedError(
                f"{key!r} changed size while it was sent: bytes {read.start}-{read.stop - 1} "
                f"read {len(data)} bytes where {read.expected} were due"
            )
        if span.identity is not None and (now is None or now.identity != span.identity):
            raise StreamAbortedError(
                f"{key!r} was replaced or rewritten while it was sent (bytes "
                f"{read.start}-{read.stop - 1} are not those of the value the answer began with)"
            )
        return data

    # --------------------------------------------------------------- answers

    async def within_budget(self, path: str, make: Callable[[], Awaitable[Answer]]) -> Answer:
        """The answer ``make`` builds (a listing), its body held under the budget.

        A listing's size is known only once it is built: when its bytes are
        not free at once, the body is dropped, its size waited for in line,
        and the listing built again (the directory may have changed meanwhile:
        built again until its lease covers it).
        """
        answer = await make()
        lease = self._budget.try_acquire(len(answer.body))
        while lease is None or lease.nbytes < min(len(answer.body), self._budget.limit):
            wanted = len(answer.body)
            answer.release()
            if lease is not None:
                lease.release()
            lease = await self._lease(wanted)
            if lease is None:
                return self._busy(path + "/")
            answer = await make()
        lease.shrink(len(answer.body))
        answer.lease = lease
        return answer

    async def _holds_nothing(self, key: str) -> bool:
        """Whether ``key`` is an empty value (asked once a ranged read of it failed)."""
        try:
            return await self._size_of(key) == 0
        except Exception:
            return False  # the read's own error is the one to answer

    async def _size_of(self, key: str) -> int | None:
        """The size of ``key`` (under a read slot), or ``None`` when the store does not hold it."""
        assert self._reads is not None
        async with self._reads:
            try:
                return await self._store.getsize(key)
            except SourceGoneError:
                # a FileNotFoundError too, but a source gone (502), not a key absent: a
                # 404 tells a client an all-fill chunk (a mount's source artifact, a
                # composite's deleted source object read as zeros over HTTP)
                raise
            except FileNotFoundError:
                return None

    async def _lease(self, nbytes: int) -> Lease | None:
        """Answer memory for ``nbytes``, waited for in line; ``None`` after ``answer_wait_timeout``."""
        try:
            return await self._budget.acquire(nbytes, self._options.answer_wait_timeout)
        except TimeoutError:
            return None

    def _busy(self, key: str) -> Answer:
        answer = text_answer(
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"{key!r}: the server's answer memory ({self._options.max_answer_bytes} bytes) "
            f"stayed in use by other answers for {self._options.answer_wait_timeout:g} s; retry",
        )
        answer.fields.append(("Retry-After", "1"))
        return answer

    async def _read_held(
        self, key: str, lease: Lease, byte_range: RangeByteRequest | None
    ) -> memoryview | None:
        """Read ``key`` (or its ``byte_range``) under a read slot; ``lease`` is given back on failure."""
        assert self._reads is not None
        try:
            async with self._reads:
                value = await self._store.get(key, default_buffer_prototype(), byte_range)
        except BaseException:
            lease.release()
            raise
        if value is None:
            lease.release()
            return None
        return bytes_of(value)

    def _unsatisfiable(self, key: str, header: str | None, size: int) -> Answer:
        answer = text_answer(
            HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
            f"{header!r} selects no byte of {key!r} ({size} bytes)",
        )
        answer.fields.append(("Content-Range", f"bytes */{size}"))
        return answer

    @staticmethod
    def _changed(key: str, lease: Lease, size: int, got: int, due: int) -> OSError:
        lease.release()
        return OSError(
            f"{key!r} changed size while it was read ({size} bytes, then a read of "
            f"{got} where {due} were due); retry"
        )
