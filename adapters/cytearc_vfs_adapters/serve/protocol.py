"""The small part of HTTP/1.1 (RFC 9112) a read-only server needs.

:func:`parse_head` reads a request head (request line and header fields,
without the final empty line) strictly: whatever could be read two ways by
two parties (whitespace before a colon, folded lines, two ``Host`` fields,
two differing ``Content-Length`` fields) is refused with ``400``, as RFC 9112
asks of a server, so a proxy in front cannot be made to see another request
than this server does. Request bodies are never read: a request that
announces one is answered and its connection closed, so the body is never
taken for the next request. :func:`read_head` reads a head off a stream,
ending its lines at CRLF, or at a bare LF when its request line does (RFC
9112, section 2.2, lets a recipient take a bare LF as a line's end, so a
request typed by hand into ``nc`` is answered, not left waiting).
:func:`response_head` writes a status line and fields.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

__all__ = [
    "HeadTooLargeError",
    "MalformedRequestError",
    "RequestHead",
    "parse_head",
    "read_head",
    "response_head",
]

# token (RFC 9110, section 5.6.2): a method, a field name
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(r"HTTP/([0-9])\.([0-9])")
# field values: visible ASCII, obs-text, spaces and tabs (no CR, LF or NUL)
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
MAX_FIELDS = 100


class MalformedRequestError(ValueError):
    """A request head that is not HTTP/1.x as this server reads it."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class HeadTooLargeError(ValueError):
    """A request head longer than the server reads."""


async def read_head(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    """The next request head on ``reader``, up to the empty line that ends it (left out).

    Empty lines before the request line are skipped (RFC 9112, section 2.2).
    A head whose request line ends at CRLF (every HTTP library's) is read in
    three reads: the request line, two bytes (the empty line, or the start
    of the fields), the fields to their CRLF CRLF. One whose request line
    ends at a bare LF (typed by hand) is read line by line, each line ending
    at LF or CRLF: a read per line costs several times as much.

    Raises
    ------
    HeadTooLargeError
        The head (with any empty lines before it) passes ``max_bytes``.
    asyncio.IncompleteReadError
        The stream ended before the head did.
    """
    size = 0

    async def through(separator: bytes) -> bytes:
        nonlocal size
        try:
            found = await reader.readuntil(separator)
        except asyncio.LimitOverrunError as exc:
            raise HeadTooLargeError(f"more than {max_bytes} bytes") from exc
        size += len(found)
        if size > max_bytes:
            raise HeadTooLargeError(f"more than {max_bytes} bytes")
        return found

    line = await through(b"\n")
    while line in (b"\r\n", b"\n"):
        line = await through(b"\n")
    if line.endswith(b"\r\n"):
        start = await reader.readexactly(2)
        size += 2
        if start == b"\r\n":
            return line[:-2]
        return (line + start + await through(b"\r\n\r\n"))[:-4]
    lines = [line]
    while (line := await through(b"\n")) not in (b"\r\n", b"\n"):
        lines.append(line)
    return b"".join(lines)[:-1]


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A parsed request line and its header fields."""

    method: str
    """The method, case-sensitive (``GET``)."""
    target: str
    """The request target as sent (``/RNA/counts/zarr.json``)."""
    minor_version: int
    """``1`` for HTTP/1.1, ``0`` for HTTP/1.0."""
    fields: dict[str, str]
    """Field name (lower case) -> value; repeated fields joined with ``", "``."""

    def field(self, name: str) -> str | None:
        """The value of the field ``name`` (any case), or ``None``."""
        return self.fields.get(name.lower())

    def _connection_tokens(self) -> set[str]:
        return {t.strip().lower() for t in (self.field("connection") or "").split(",")}

    @property
    def keep_alive(self) -> bool:
        """Whether the client keeps the connection open after this exchange."""
        tokens = self._connection_tokens()
        if self.minor_version >= 1:
            return "close" not in tokens
        return "keep-alive" in tokens

    @property
    def announces_body(self) -> bool:
        """Whether a body follows the head (``Content-Length`` > 0 or ``Transfer-Encoding``)."""
        if self.field("transfer-encoding") is not None:
            return True
        length = self.field("content-length")
        return length is not None and length.strip() != "0"


def parse_head(data: bytes) -> RequestHead:
    """Parse a request head (the bytes before the empty line that ends it).

    Raises
    ------
    MalformedRequestError
        ``400`` for a malformed head, ``505`` for an HTTP version other than 1.x.

    Examples
    --------
    >>> head = parse_head(b"GET /zarr.json HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nRange: bytes=0-9")
    >>> head.method, head.target, head.field("range"), head.keep_alive
    ('GET', '/zarr.json', 'bytes=0-9', True)
    """
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover (latin-1 decodes any byte)
        raise MalformedRequestError(HTTPStatus.BAD_REQUEST, "undecodable request head") from exc
    # RFC 9112, section 2.2: empty lines before the request line are ignored, and
    # a line may end at a bare LF (a CR left inside a line is refused below)
    lines = [
        line.removesuffix("\r") for line in text.lstrip("\r\n").replace("\r\n", "\n").split("\n")
    ]
    request_line, field_lines = lines[0], lines[1:]
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise MalformedRequestError(
            HTTPStatus.BAD_REQUEST, f"malformed request line {request_line[:200]!r}"
        )
    method, target, version = parts
    if not target.isascii() or not target.isprintable():
        raise MalformedRequestError(
            HTTPStatus.BAD_REQUEST, "the request target holds non-ASCII or control characters"
        )
    matched = _VERSION.fullmatch(version)
    if matched is None:
        raise MalformedRequestError(HTTPStatus.BAD_REQUEST, f"malformed HTTP version {version!r}")
    if matched.group(1) != "1":
        raise MalformedRequestError(
            HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"{version} is not served; use HTTP/1.1"
        )
    if len(field_lines) > MAX_FIELDS:
        raise MalformedRequestError(
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"more than {MAX_FIELDS} header fields"
        )
    fields: dict[str, str] = {}
    for line in field_lines:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            # also catches obs-fold (a line starting with whitespace)
            raise MalformedRequestError(
                HTTPStatus.BAD_REQUEST, f"malformed header field {line[:200]!r}"
            )
        value = value.strip(" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise MalformedRequestError(
                HTTPStatus.BAD_REQUEST, f"header field {name!r} holds a control character"
            )
        key = name.lower()
        if key in fields:
            if key == "host" or (key == "content-length" and fields[key] != value):
                raise MalformedRequestError(HTTPStatus.BAD_REQUEST, f"two {name} header fields")
            if key != "content-length":
                fields[key] = f"{fields[key]}, {value}"
        else:
            fields[key] = value
    length = fields.get("content-length")
    if length is not None and not (length.isascii() and length.isdigit()):
        raise MalformedRequestError(HTTPStatus.BAD_REQUEST, f"malformed Content-Length {length!r}")
    if int(matched.group(2)) >= 1 and "host" not in fields:
        raise MalformedRequestError(HTTPStatus.BAD_REQUEST, "an HTTP/1.1 request needs a Host")
    return RequestHead(method, target, min(int(matched.group(2)), 1), fields)


def response_head(status: HTTPStatus, fields: list[tuple[str, str]]) -> bytes:
    """A response's status line and header fields, with ``Date``, ending in the empty line.

    >>> response_head(HTTPStatus.NOT_FOUND, [("Content-Length", "0")]).split(b"\\r\\n")[0]
    b'HTTP/1.1 404 Not Found'
    """
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Date: {formatdate(usegmt=True)}"]
    lines.extend(f"{name}: {value}" for name, value in fields)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
