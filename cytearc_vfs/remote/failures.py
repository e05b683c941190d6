"""The cause of a remote backend's failure, and the one remedy it points at.

A source that cannot be read fails for one of a few causes, and each has its
own remedy: a server that did not answer in time (allow more time), one that
cannot be reached (start it, or fix the URL), one that refused (403: on a
cloud, credentials allowed to read and list; on a plain HTTP server, a
server that lets clients read and list, which no credential changes), or
anything else (the location and its options). Error messages name the
remedy of the cause found, never all of them.

>>> failure_remedy(TimeoutError("operation timed out"), http=False, options="storage_options={...}")
'if the source is slow rather than unreachable, allow slower requests with CYTEARC_SOURCE_TIMEOUT=SECONDS'
>>> failure_remedy(ConnectionRefusedError(), http=True, options="x")[:32]
'nothing answered at that address'
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from ..errors import VfsError
from ..format.option_names import option_name
from ..format.store_io import missing_bucket
from ..format.store_keys import METADATA_DOCUMENTS
from .password_masking import passwords_masked
from .timeouts import TIMEOUT_ENV

__all__ = [
    "BackendOptionsError",
    "StoreAccessError",
    "failing_location",
    "document_refused",
    "failure_remedy",
    "forbidden_unlisted",
    "first_line",
    "is_backend_error",
    "is_http_location",
    "listing_unsupported",
    "missing_bucket",
    "named_backend_failures",
    "names_backend_failures",
    "named_source_failure",
    "refused",
    "source_failure",
    "timed_out",
    "unreachable",
]


#: Where the Python API takes a location's backend options.
PYTHON_OPTIONS = (
    "the storage options given for it (storage_options=, or source_storage_options= for a source)"
)
#: obstore's account of a request's retries.
_RETRIES = re.compile(r"after (\d+) retries, max_retries: (\d+)")
#: A server's answer that it is failing or busy for now (5xx, S3's SlowDown).
_SERVER_FAILING = re.compile(r"status code: 5\d\d|slowdown|service unavailable")
#: A server's answer that it failed at the request, not that it is busy: more time is no remedy.
_SERVER_BROKEN = re.compile(r"status code: (50[01])\b")
#: A web server's answer that it does not list directories (WebDAV ``PROPFIND``).
_NO_LISTING = re.compile(r"propfind .*status code: (501|405)\b")


def is_http_location(where: str) -> bool:
    """Whether the printed location ``where`` is read over plain HTTP(S) (a URL, or a
    store over an HTTP client, which prints its URL)."""
    return "http://" in where or "https://" in where


#: The prolog of an S3 error answer, where obstore's first line of a failure ends.
_XML_PROLOG = re.compile(r"\s*<\?xml[^>]*\?>\s*$")
#: The error code and message of an S3 error answer.
_S3_ERROR = re.compile(r"<Code>([^<]+)</Code>\s*(?:<Message>([^<]*)</Message>)?")


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none), with
    any password of a URL it names masked (:func:`passwords_masked`).

    obstore quotes an S3 error answer from its next line on, so its first line
    ends with the answer's XML prolog: that is replaced by the answer's error
    code and message, which say what happened.

    >>> first_line(OSError('GET x - 404 Not Found: <?xml version="1.0"?>\\n<Error>'
    ...     '<Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>'))
    'GET x - 404 Not Found: NoSuchBucket (The specified bucket does not exist)'
    """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    first = text.splitlines()[0]
    answer = _S3_ERROR.search(text)
    if answer is not None and _XML_PROLOG.search(first):
        code, message = answer.groups()
        first = _XML_PROLOG.sub(" ", first) + code + (f" ({message})" if message else "")
    return passwords_masked(first)


def _text(exc: BaseException) -> str:
    # obstore's errors print the client's settings ("retry_timeout: 30s"),
    # which say nothing about what happened; the cause is in the debug part
    # ("kind: Connect", "kind: Timeout"), not in the first line
    return str(exc).lower().replace("retry_timeout", "")


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` says a request ran out of time (obstore reports it in its text):
    a request that timed out, retries that stopped before their count for lack of time
    (``after 6 retries, max_retries: 10``: a lasting ``503``, as far as the time allowed),
    or every retry answered by a failing or busy server (a quick ``503`` each time:
    more time is the remedy there too).

    >>> timed_out(OSError("GET x after 6 retries, max_retries: 10, retry_timeout: 2s - 503"))
    True
    >>> timed_out(OSError("GET x after 10 retries, max_retries: 10, retry_timeout: 2s - "
    ...                   "Server returned non-2xx status code: 503 Service Unavailable"))
    True
    >>> timed_out(OSError("GET x after 10 retries, max_retries: 10, retry_timeout: 30s - HTTP"))
    False
    """
    text = _text(exc)
    retries = _RETRIES.search(text)
    if retries is not None and (
        int(retries.group(1)) < int(retries.group(2)) or _SERVER_FAILING.search(text)
    ):
        return True
    return isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text


def server_broken(exc: BaseException) -> str | None:
    """The status (``500`` or ``501``) a server answered to every retry of a request, or ``None``.

    Unlike a ``503`` (busy) or a request cut short by the time limit, these
    say the server fails at the request: waiting longer is not the remedy.

    >>> server_broken(OSError("GET x after 10 retries, max_retries: 10, retry_timeout: 30s - "
    ...                       "Server returned non-2xx status code: 500 Internal Server Error"))
    '500'
    >>> server_broken(OSError("GET x after 3 retries, max_retries: 10, retry_timeout: 2s - "
    ...                       "Server returned non-2xx status code: 500 Internal Server Error"))
    """
    text = _text(exc)
    retries = _RETRIES.search(text)
    status = _SERVER_BROKEN.search(text)
    if retries is None or status is None or int(retries.group(1)) < int(retries.group(2)):
        return None  # the time ran out first: more of it may see the request through
    return status.group(1)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says no connection could be made (refused, no route, bad name)."""
    if isinstance(exc, ConnectionError) and not isinstance(exc, ConnectionResetError):
        return True
    text = _text(exc)
    return any(
        words in text
        for words in (
            "connection refused",
            "kind: connect",
            "dns error",
            "no route to host",
        )
    )


def listing_unsupported(exc: BaseException) -> str | None:
    """The status (``501``, ``405``) with which a web server refused to list a directory
    (obstore lists an HTTP store with WebDAV's ``PROPFIND``), or ``None``. A static
    server (``python -m http.server``, nginx without DAV) answers so every time.

    >>> listing_unsupported(OSError("Error performing PROPFIND http://h/a.zarr after 10 "
    ...     "retries - Server returned non-2xx status code: 501 Not Implemented"))
    '501'
    >>> listing_unsupported(OSError("Error performing GET http://h/a - status code: 501"))
    """
    found = _NO_LISTING.search(_text(exc))
    return None if found is None else found.group(1)


def no_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` says no credentials were found: obstore, given none, asks the
    cloud's instance metadata service for some (``PUT .../latest/api/token``), which
    off the cloud is refused or does not answer; botocore (s3fs) says it in words.

    >>> no_credentials(OSError("Error performing PUT http://169.254.169.254/latest/api/token"))
    True
    >>> no_credentials(OSError("Error performing GET http://127.0.0.1:9/bkt/a.zarr/zarr.json"))
    False
    """
    text = _text(exc)
    return (
        "/latest/api/token" in text
        or "/latest/meta-data/iam" in text
        or "unable to locate credentials" in text
        or type(exc).__name__ == "NoCredentialsError"
    )


def plain_http_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is obstore refusing an ``http://`` endpoint it was not allowed to
    use (``HTTP error: builder error`` with ``BadScheme``): no request was sent."""
    return "badscheme" in _text(exc)


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing the request (``403``, permission denied)."""
    if isinstance(exc, PermissionError) or type(exc).__name__ == "PermissionDeniedError":
        return True
    return "403 forbidden" in _text(exc)


def failure_remedy(exc: BaseException, *, http: bool, options: str) -> str:
    """The remedy of the cause ``exc`` names, for a source read over plain HTTP(S)
    (``http``) or from another remote backend, whose options are passed as ``options``
    (a keyword is named as the caller gives it: ``--storage-options`` at a shell)."""
    options = option_name(options)
    if no_credentials(exc) and not http:
        # before the connection checks: the request that failed went to the metadata
        # service, not to the endpoint, which may be right
        return (
            "no credentials were found (none in the options given, nor in the "
            "environment, and the cloud's instance metadata service gave none): pass "
            f"them (obstore: access_key_id and secret_access_key) as {options}"
        )
    # a refused connection first: its retries may be cut short by the time limit too,
    # and more time is not its remedy
    if unreachable(exc) and http:
        return (
            "nothing answered at that address (the connection failed): check that the "
            "server is running and that the URL is right"
        )
    if unreachable(exc):
        return (
            "nothing answered at that address (the connection failed): check that the "
            f"endpoint is right and reachable, and pass it (and credentials) as {options}"
        )
    if plain_http_refused(exc):
        # refused before any request (MinIO, a local gateway): reachable or not, the
        # client never asked; "check that it is reachable" sent people to the server
        return (
            "the endpoint is plain http://, which the backend refuses unless allowed: add "
            f'"client_options": {{"allow_http": true}} to {options}'
        )
    if missing_bucket(exc):
        # a 404 of the bucket itself: no credential or endpoint option is the remedy
        return (
            "its bucket does not exist (S3 NoSuchBucket): check the bucket name in the URL, "
            "or create the bucket"
        )
    unlisted = listing_unsupported(exc) if http else None
    if unlisted is not None:
        # a static server answers every PROPFIND so: "check its health" misled
        return (
            f"the web server does not list directories (it answered WebDAV PROPFIND with "
            f"{unlisted}), which opening a store over HTTP needs: serve the directory with a "
            "server that lists, such as cytearc-vfs serve, WsgiDAV, or nginx or Apache with DAV"
        )
    broken = server_broken(exc)
    if broken is not None:
        return (
            f"the server kept answering {broken} to every retry: it fails at the request "
            "rather than being slow or busy, so more time will not help; check the server "
            "(its logs, its health) and try again once it answers"
        )
    if timed_out(exc):
        return (
            "if the source is slow rather than unreachable, allow slower requests with "
            f"{TIMEOUT_ENV}=SECONDS"
        )
    if refused(exc) and http:
        return (
            "the web server refused it (403 Forbidden): serve the store from a server that "
            "lets clients read its keys and list its directories (WebDAV PROPFIND with "
            "Depth: 1, as `cytearc-vfs serve` and WsgiDAV do)"
        )
    if refused(exc):
        return (
            "the credentials given may not read or list it (S3 also answers 403 for a "
            "missing object to credentials that may not list: check the path too): pass "
            f"ones that may, as {options}"
        )
    if http:
        return "check that the server is running at that URL and serves the store there"
    # a destination's failure ends here too: "the source" named the wrong location
    return f"check that it is reachable, and pass its endpoint and credentials as {options}"


def document_refused(key: str, exc: BaseException) -> bool:
    """Whether ``exc``, a failed read of ``key``, is a ``403`` for a metadata document
    other than the root's: what S3 answers for an absent key to credentials without
    ``s3:ListBucket``, so such a document is absent when the source's listing was
    refused too (a document holds no values; the root must be read for any open)."""
    return key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS and key != "zarr.json" and refused(exc)


#: Why a key answered ``403`` is not taken as absent, when nothing proves it absent.
UNPROVEN = "nothing the store records proves it absent"


def forbidden_unlisted(label: str, key: str, why: str = UNPROVEN) -> str:
    """The refusal of ``key`` of the source ``label`` answered ``403`` after the
    source's listing was refused: S3 answers so for a missing object to credentials
    without ``s3:ListBucket``, and ``why`` says why this one cannot be read as absent
    (zeros). One line: the cause, the two readings, the two remedies."""
    return (
        f"{label}: {key} was answered 403 Forbidden; S3 answers 403 for a missing object "
        f"to credentials without s3:ListBucket, but {why}, so it is forbidden or lost "
        "(never read as zeros): grant s3:ListBucket (read-only) on the store's prefix, "
        "or check that object's permissions"
    )


def source_failure(exc: OSError) -> OSError:
    """Mark ``exc`` as a source's failure said in full: the source, what failed and
    the remedy of its cause. Outer layers pass it on (or quote its detail) instead
    of naming the source again, and the command line prints it as it is."""
    exc.cytearc_source = True  # type: ignore[attr-defined]
    return exc


def named_source_failure(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from, is a :func:`source_failure`."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "cytearc_source", False):
            return True
        seen = seen.__cause__
    return False


class BackendOptionsError(VfsError, ValueError):
    """Backend options of a location that its backend cannot take (an unknown key, a
    client option outside ``client_options``); the message names the option and where
    it goes, before any request was made."""

    def __init__(self, where: str, problem: str, *, options: str = PYTHON_OPTIONS) -> None:
        super().__init__(
            f"{where}: the storage backend refused its options: {problem}; fix {options}"
        )
        self.where = where
        """The location, as printed."""
        self.problem = problem
        """What is wrong with the options, and where the option goes."""


class StoreAccessError(VfsError, OSError):
    """The backend of a store could not read or write it (unreachable, refused, timed
    out); the message names the store and the remedy of the cause, the backend's error
    is the ``__cause__``."""

    where: str = ""
    """The store, as printed."""

    @classmethod
    def naming(cls, where: str, backend_error: BaseException, *, options: str) -> StoreAccessError:
        """The error of ``backend_error`` from the store at ``where``, whose options are
        passed as ``options``."""
        remedy = failure_remedy(backend_error, http=is_http_location(where), options=options)
        error = cls(
            f"{where} cannot be {_access(backend_error, where)} "
            f"({type(backend_error).__name__}: "
            f"{first_line(backend_error)}); {remedy}"
        )
        # an attribute, not an argument: OSError reads two arguments as errno and text,
        # and pickling (a worker process's error) passes the message alone
        error.where = where
        return error


#: A request a backend's error names (obstore: "Error performing PUT http://...").
_REQUEST = re.compile(r"\b(GET|HEAD|PROPFIND|LIST|PUT|POST|PATCH|DELETE|COPY|MOVE) (\S+)")
_WRITES = frozenset({"PUT", "POST", "PATCH", "DELETE", "COPY", "MOVE"})


def _access(exc: BaseException, where: str) -> str:
    """``"written"`` when the request of ``exc`` to the store at ``where`` wrote, else
    ``"read"`` (a credential request, such as the PUT of a cloud's metadata token, is
    not a write of the store).

    >>> _access(OSError("Error performing PUT http://h:9/bkt/b.zarr/zarr.json"), "s3://bkt/b.zarr")
    'written'
    >>> _access(OSError("Error performing PUT http://169.254.169.254/token"), "s3://bkt/b.zarr")
    'read'
    """
    for method, url in _REQUEST.findall(str(exc)):
        if method in _WRITES and _location_key(where) in url:
            return "written"
    return "read"


def _location_key(where: str) -> str:
    """What a backend's URLs hold of the location ``where``: its bucket or host and path
    (``""`` for a local path)."""
    parts = urlsplit(where)
    return (parts.netloc + parts.path).rstrip("/") if parts.scheme else ""


#: The backends' own errors: obstore's are not ``OSError``s, and fsspec's clients
#: raise their HTTP libraries' errors as they come.
_BACKEND_MODULES = frozenset({"obstore", "aiohttp", "botocore", "fsspec", "s3fs", "gcsfs"})
#: obstore's errors that name a wrong option or path, which pass as they are.
_OPTION_REFUSALS = frozenset({"UnknownConfigurationKeyError", "InvalidPathError"})


def is_backend_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a storage backend's own failure (obstore's, an fsspec client's,
    a network error), not a refusal of its options nor one of this package's errors."""
    if type(exc).__name__ in _OPTION_REFUSALS or isinstance(exc, VfsError):
        return False
    if type(exc).__module__.partition(".")[0] in _BACKEND_MODULES or missing_bucket(exc):
        # s3fs answers a missing bucket with a bare FileNotFoundError naming no location
        return True
    return isinstance(exc, (ConnectionError, TimeoutError))


@contextmanager
def named_backend_failures(where: str, *, options: str) -> Iterator[None]:
    """Re-raise a backend's own error (obstore's, or a network error of an fsspec
    client) from reading the store at ``where`` as a :class:`StoreAccessError`
    naming the store, the backend's first line and the remedy of its cause (whose
    options are passed as ``options``); everything else passes as it is.

    >>> try:
    ...     with named_backend_failures("http://127.0.0.1:9/a.zarr", options="..."):
    ...         raise ConnectionRefusedError("connection refused")
    ... except StoreAccessError as exc:
    ...     said, remedy = str(exc).split("; ")
    ...     print(said, remedy.split(":")[0], sep="\\n")
    http://127.0.0.1:9/a.zarr cannot be read (ConnectionRefusedError: connection refused)
    nothing answered at that address (the connection failed)
    """
    try:
        yield
    except Exception as exc:
        if not is_backend_error(exc):
            raise
        raise StoreAccessError.naming(where, exc, options=options) from exc


_Function = TypeVar("_Function", bound=Callable[..., Any])

#: The remedy's words for where a public function takes a location's options.
_API_OPTIONS = "storage_options (or the *_storage_options argument of that location)"


def names_backend_failures(*parameters: str) -> Callable[[_Function], _Function]:
    """Decorate a public function whose parameters ``parameters`` are locations: a
    backend's own error raised while it runs becomes a :class:`StoreAccessError`
    naming the location it is about (the one whose bucket or URL path the backend's
    message names, else the only remote one) and the remedy of its cause."""

    def decorate(function: _Function) -> _Function:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def named(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except Exception as exc:
                if not is_backend_error(exc):
                    raise
                # imported here: the command line loads this module before zarr
                from zarr.abc.store import Store

                from .locations import describe_location

                given = signature.bind_partial(*args, **kwargs).arguments
                wheres = [
                    describe_location(given[name])
                    for name in parameters
                    # a parameter may hold a location or data (write_counts' counts)
                    if isinstance(given.get(name), (str, os.PathLike, Store))
                ]
                where = failing_location(exc, wheres)
                raise StoreAccessError.naming(where, exc, options=_API_OPTIONS) from exc

        return named  # type: ignore[return-value]

    return decorate


def failing_location(exc: BaseException, wheres: Sequence[str]) -> str:
    """Which of the printed locations ``wheres`` the backend's error ``exc`` is about.

    >>> error = OSError("Error performing GET http://127.0.0.1:9000/bkt/b.zarr/zarr.json")
    >>> failing_location(error, ["s3://bkt/a.zarr", "s3://bkt/b.zarr"])
    's3://bkt/b.zarr'
    >>> listing = OSError("Error performing GET http://h:9/bkt?list-type=2&prefix=b.zarr%2F")
    >>> failing_location(listing, ["s3://bkt/a.zarr", "s3://bkt/b.zarr"])
    's3://bkt/b.zarr'
    >>> failing_location(OSError("refused"), ["/data/a.zarr", "http://h/b.zarr"])
    'http://h/b.zarr'
    """
    text = str(exc)

    def named_in_text(where: str) -> bool:
        key = _location_key(where)
        if not key:
            return False
        # a request for a key of it, or a listing of it (S3: the bucket, prefix=path/)
        bucket, _, path = key.partition("/")
        listing = f"{bucket}?list-type=2&prefix={quote(path + '/', safe='')}"
        return key in text or (bool(path) and listing in text)

    for candidates in (
        [where for where in wheres if named_in_text(where)],
        [where for where in wheres if "://" in where and not where.startswith("file://")],
    ):
        if len(candidates) == 1:
            return candidates[0]
    return " or ".join(wheres) or "a remote store"
