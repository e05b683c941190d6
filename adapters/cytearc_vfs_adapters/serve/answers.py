"""The answers the server sends: a status, a body and its fields.

A store error becomes a status by :func:`error_status`; refusals and errors
are one line of text naming the key, so a client (or a person with curl)
reads what went wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus

from zarr.core.buffer import Buffer

from cytearc_vfs.errors import IdentityMismatchError, IncompleteStoreError
from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS
from cytearc_vfs.remote.failures import failure_remedy, first_line

from .budget import Lease
from .listings import href
from .pieces import PieceReader, StreamedSpan

__all__ = [
    "Answer",
    "bytes_of",
    "content_type",
    "error_detail",
    "error_status",
    "not_found",
    "nothing_under",
    "one_line",
    "text_answer",
]

#: Keys answered as JSON documents.


@dataclass(slots=True)
class Answer:
    """One answer: its status, body and fields, and whether the connection closes after it."""

    status: HTTPStatus
    body: bytes | memoryview = b""
    fields: list[tuple[str, str]] = field(default_factory=list)
    length: int | None = None  # Content-Length when it is not len(body) (HEAD, streams)
    close: bool = False
    lease: Lease | None = None
    """Answer memory the body holds, given back once the socket has taken it."""
    rest: StreamedSpan | None = None
    """What follows ``body`` when the value is streamed, read piece by piece while sending."""
    reader: PieceReader | None = None
    """Reads the pieces of ``rest``: the store ``body`` came from, so one answer
    never mixes two stores (a store reopened meanwhile is not asked)."""

    def release(self) -> None:
        """Give back the answer memory the body holds (the body is sent or abandoned)."""
        self.body = b""
        if self.lease is not None:
            self.lease.release()


def one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", "; ", text.strip()) or "no message"


#: Where a backend error's remedy says the served store's options go.
_OPTIONS = "the serve command's --storage-options"


def _from_backend(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the obstore backend itself.

    obstore's errors are not ``OSError``s (a served remote ordinary store is
    zarr's ``ObjectStore``, read without a translating layer), and their text
    goes on with a multi-line debug dump after its first line.
    """
    return type(exc).__module__.partition(".")[0] == "obstore"


def error_status(exc: BaseException) -> HTTPStatus:
    """The status of an answer that met ``exc`` while reading the store.

    ``502`` when a source no longer holds what the store recorded (changed,
    incomplete or deleted); ``503`` for other system errors (a source or a
    served remote store that cannot be reached, a timeout, permissions, the
    obstore backend's own errors), which a retry may clear; ``500`` for
    anything else.
    """
    gone = _from_backend(exc) and type(exc).__name__ == "NotFoundError"
    if gone or isinstance(exc, (IdentityMismatchError, IncompleteStoreError, FileNotFoundError)):
        return HTTPStatus.BAD_GATEWAY
    if isinstance(exc, OSError) or _from_backend(exc):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.INTERNAL_SERVER_ERROR


def error_detail(exc: BaseException) -> str:
    """``exc`` on one line, for an error answer: its type and message.

    An obstore error gives its first line and the remedy of its cause (its
    debug dump, many lines of the client's internals, is left out).

    >>> error_detail(ValueError("bad\\nvalue"))
    'ValueError: bad; value'
    """
    if not _from_backend(exc):
        return f"{type(exc).__name__}: {one_line(str(exc))}"
    first = first_line(exc)
    remedy = failure_remedy(exc, http=first.startswith("Generic HTTP"), options=_OPTIONS)
    return f"{type(exc).__name__}: {first}; {remedy}"


def text_answer(status: HTTPStatus, message: str, *, close: bool = False) -> Answer:
    body = (one_line(message) + "\n").encode("utf-8", errors="replace")
    return Answer(status, body, [("Content-Type", "text/plain; charset=utf-8")], close=close)


def not_found(key: str) -> Answer:
    """``404`` for a key the store does not hold, also a directory's name.

    A directory's name without the final ``/`` is no key (HTTP clients that
    follow a ``301`` would take the listing page for the value of a key named
    so): the line names where its listing would be, for a person at a browser.
    No store call decides whether there is one (zarr readers ask for many
    absent chunks; a listing for each would cost more than the answer), so
    the line says it conditionally.
    """
    return text_answer(
        HTTPStatus.NOT_FOUND,
        f"no key {key!r} in this store (if it is a directory, its listing is at "
        f"{href(key, directory=True)}, with the final '/')",
    )


def nothing_under(prefix: str) -> Answer:
    return text_answer(HTTPStatus.NOT_FOUND, f"nothing under {prefix + '/'!r} in this store")


def content_type(key: str) -> str:
    return (
        "application/json"
        if key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS
        else "application/octet-stream"
    )


def bytes_of(value: Buffer) -> memoryview:
    return memoryview(value.as_numpy_array()).cast("B")
