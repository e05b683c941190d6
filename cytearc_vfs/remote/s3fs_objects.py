"""S3 objects read through s3fs with their ETags: one listing, conditional ranged GETs.

zarr's ``FsspecStore`` reads bytes only, so a source opened through s3fs
(``storage_options={"backend": "fsspec"}`` for an ``s3://`` URL) could not be
pinned: an object replaced after the open read as valid different bytes.
s3fs's public API has no conditional read, and its public recursive listing
(``find``) fills its directory cache as it goes, so this module reaches past
it, in one place, to the two calls that give what pins need:

- ``S3FileSystem._lsdir(path, delimiter="")``: every object under a path,
  from ListObjectsV2 (one request per 1,000 objects), each entry with its
  ``ETag`` and ``size``; a listing without a delimiter is never put in s3fs's
  directory cache, so later calls see no stale entries of it;
- ``S3FileSystem._call_s3("get_object", Bucket=, Key=, Range=, IfMatch=)``:
  botocore's GetObject through s3fs's client, its retries and its error
  translation (``412`` -> ``OSError(EINVAL)`` whose ``__cause__`` is the
  botocore ``ClientError``, ``404`` -> ``FileNotFoundError``), wrapped, as
  ``_cat_file`` wraps it, in ``s3fs.core._error_wrapper`` so that a body cut
  short is fetched again.

Both are private API. Checked on s3fs 2026.9.0 with aiobotocore 3.10.0 and
botocore 1.43.117 (the versions ``uv.lock`` pins). Where either is missing
(another s3fs), :func:`s3fs_filesystem` answers ``None`` and warns once per
filesystem class (a ``RuntimeWarning``): the
source is then read as any other fsspec source (error translation, no
pins), as before this module, and the warning names the remedy.

Only s3fs pins. gcsfs, HTTP and other fsspec filesystems keep the error
translation without pins (:mod:`.pinned_store`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.storage import FsspecStore

from ..errors import warn_at_caller
from .object_versions import ListedObject, version_token

__all__ = [
    "CHECKED_S3FS",
    "ObjectReplacedError",
    "get_s3_object",
    "list_s3_objects",
    "object_path",
    "range_header",
    "s3fs_filesystem",
]

#: The s3fs release whose private calls this module was checked against.
CHECKED_S3FS = "2026.9.0"
#: The private methods of ``S3FileSystem`` this module calls.
_NEEDED = ("_call_s3", "_lsdir", "split_path")
#: Filesystem classes already warned about (one warning per class and process).
_WARNED: set[type] = set()


class ObjectReplacedError(OSError):
    """A conditional GET was refused with ``412 Precondition Failed``: the object at
    the key is no longer the version its ``If-Match`` named (or it is gone, on a
    backend that answers a deleted object so)."""


def _is_s3fs(fs: object) -> bool:
    return any(
        cls.__module__.split(".")[0] == "s3fs" and cls.__name__ == "S3FileSystem"
        for cls in type(fs).__mro__
    )


def s3fs_filesystem(store: Store) -> Any | None:
    """The ``S3FileSystem`` under ``store`` when it is an ``FsspecStore`` over s3fs
    whose private calls this module knows, else ``None`` (no request).

    An s3fs without them is warned about once per filesystem class: its
    sources are read unpinned.
    """
    if not isinstance(store, FsspecStore) or not _is_s3fs(store.fs):
        return None
    fs = store.fs
    missing = [name for name in _NEEDED if not callable(getattr(fs, name, None))]
    if not missing:
        return fs
    if type(fs) not in _WARNED:
        _WARNED.add(type(fs))
        warn_at_caller(
            f"s3fs {_version(fs)} has no S3FileSystem.{', .'.join(missing)}, which pinning "
            f"S3 objects read through fsspec needs (checked on s3fs {CHECKED_S3FS}); sources "
            f"at s3:// read through fsspec are not pinned, so an object replaced while a "
            "composite or mount is open is not detected. Install s3fs "
            f"{CHECKED_S3FS}, or open the sources through obstore "
            '(storage_options={"backend": "obstore"})',
            RuntimeWarning,
        )
    return None


def _version(fs: object) -> str:
    import sys

    module = sys.modules.get(type(fs).__module__.split(".")[0])
    return str(getattr(module, "__version__", "(version unknown)"))


def object_path(root: str, key: str) -> str:
    """The s3fs path of ``key`` in a store rooted at ``root``, as ``FsspecStore`` forms it.

    >>> object_path("bkt/a.zarr/", "RNA/counts/c/0/0")
    'bkt/a.zarr/RNA/counts/c/0/0'
    """
    directory = root.rstrip("/")
    return f"{directory}/{key}" if directory else key


async def list_s3_objects(fs: Any, root: str, prefix: str = "") -> dict[str, ListedObject]:
    """Every object under ``root/prefix`` (``prefix`` a directory, or ``""``), keyed
    relative to ``root``, with its size and version (its ETag), from one recursive
    listing (a request per 1,000 objects).

    ``root`` is the store's path (``bucket/a.zarr``). Directory markers (keys
    ending in ``/``) are left out. Errors are s3fs's (already translated).
    """
    directory = root.rstrip("/")
    path = f"{directory}/{prefix.strip('/')}" if prefix.strip("/") else directory
    entries: list[Mapping[str, Any]] = await fs._lsdir(path, delimiter="")
    start = len(directory) + 1
    found = {}
    for entry in entries:
        name = str(entry.get("name") or entry.get("Key") or "")
        if entry.get("type") == "directory" or name.endswith("/"):
            continue
        if not name.startswith(directory + "/"):
            continue  # not below the root (never seen; kept out rather than mis-keyed)
        token = version_token({"e_tag": entry.get("ETag")})
        found[name[start:]] = ListedObject(int(entry["size"]), token)
    return found


async def head_s3_object(fs: Any, path: str) -> ListedObject | None:
    """The size and version of the object at ``path`` (``bucket/key``) from one
    HeadObject, as :func:`list_s3_objects` lists them; ``None`` for an absent object
    (for a source whose listing is refused). Other errors are s3fs's."""
    bucket, key, version = fs.split_path(path)
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version:
        request["VersionId"] = version
    try:
        response = await fs._call_s3("head_object", **request)
    except FileNotFoundError:
        return None
    return ListedObject(
        int(response["ContentLength"]), version_token({"e_tag": response.get("ETag")})
    )


def range_header(byte_range: ByteRequest | None) -> str | None:
    """The ``Range`` header ``FsspecStore`` sends through s3fs for ``byte_range``
    (``None``: the whole object), so a pinned read answers the same bytes.

    >>> range_header(RangeByteRequest(2, 5)), range_header(OffsetByteRequest(7))
    ('bytes=2-4', 'bytes=7-')
    >>> range_header(SuffixByteRequest(16)), range_header(SuffixByteRequest(0))
    ('bytes=-16', 'bytes=0-')
    >>> range_header(None) is None
    True
    """
    if byte_range is None:
        return None
    if isinstance(byte_range, RangeByteRequest):
        return f"bytes={byte_range.start}-{byte_range.end - 1}"
    if isinstance(byte_range, OffsetByteRequest):
        return f"bytes={byte_range.offset}-"
    if isinstance(byte_range, SuffixByteRequest):
        # fsspec asks for start=-suffix: a suffix of 0 is start 0, the whole object
        return f"bytes=-{byte_range.suffix}" if byte_range.suffix > 0 else "bytes=0-"
    raise TypeError(f"unsupported byte range {byte_range!r}")


async def _retrying(call: Callable[[], Awaitable[bytes]], fs: Any) -> bytes:
    """``await call()`` as s3fs's ``_cat_file`` does: a connection cut while the body is
    read is retried with the request (``s3fs.core._error_wrapper``, private too; once
    where a release lacks it)."""
    import s3fs.core

    wrapper = getattr(s3fs.core, "_error_wrapper", None)
    if wrapper is None:
        return await call()
    return cast(bytes, await wrapper(call, retries=fs.retries))


def _status(exc: BaseException) -> int | None:
    """The HTTP status of the botocore error behind an s3fs error, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, Mapping):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        seen = seen.__cause__
    return None


async def get_s3_object(
    fs: Any, path: str, byte_range: ByteRequest | None, if_match: str | None
) -> tuple[bytes, str | None]:
    """The bytes of ``byte_range`` of the object at ``path`` (``bucket/key``), and their
    version (:func:`~.object_versions.version_token` of the answer's ETag), in one
    GetObject; with ``if_match`` (an ETag), sent as ``If-Match``.

    Raises :class:`ObjectReplacedError` on ``412``, ``FileNotFoundError`` for an
    absent object; a range past the end answers ``b""``, as ``FsspecStore``
    does. Other errors are s3fs's.
    """
    bucket, key, version = fs.split_path(path)
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    header = range_header(byte_range)
    if header is not None:
        request["Range"] = header
    if if_match is not None:
        request["IfMatch"] = if_match
    if version:
        request["VersionId"] = version
    answered: list[Any] = []  # the ETag of the answer whose body was read

    async def call_and_read() -> bytes:
        response = await fs._call_s3("get_object", **request)
        body = response["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        answered.append(response.get("ETag"))
        return bytes(data)

    try:
        data = await _retrying(call_and_read, fs)
    except OSError as exc:
        status = _status(exc)
        if status == 412:
            raise ObjectReplacedError(f"{path}: {exc}") from exc
        if status == 416:  # FsspecStore answers a range past the end with no bytes
            return b"", None
        raise
    return data, version_token({"e_tag": answered[-1]})
