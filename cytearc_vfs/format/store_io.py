"""Synchronous reads of a store's metadata: JSON documents and directory listings.

Modules that inspect a store's layout without opening arrays (artifact
listing, source verification) read ``zarr.json`` documents and list the
children of a prefix. These helpers do that through the async
:class:`zarr.abc.store.Store` API, once, so every caller gets the same
"absent is ``None``" contract and the same error for a corrupt document.
"""

from __future__ import annotations

import json
from typing import Protocol, runtime_checkable

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from ..errors import RecordShapeError

__all__ = [
    "HeldDocuments",
    "document_attribute",
    "get_json",
    "holds_names_below",
    "innermost_store",
    "list_dir",
    "lists_as_empty_directory",
    "missing_bucket",
]


@runtime_checkable
class HeldDocuments(Protocol):
    """A store that already holds some of its documents (and perhaps its listing).

    Verification reads dozens of small documents; when they were fetched
    beforehand (``cytearc_vfs.read.prefetch``), these helpers read them from
    memory without a trip through zarr's event loop.
    """

    def held(self, key: str) -> tuple[bool, bytes | None]:
        """``(True, bytes or None if absent)`` when the answer is known, else ``(False, None)``."""
        ...

    def held_children(self, prefix: str) -> list[str] | None:
        """The sorted names below ``prefix`` when a listing is held, else ``None``."""
        ...


def get_json(
    store: Store, key: str, *, where: str | None = None, remedy: str | None = None
) -> object:
    """The parsed JSON document at ``key``, or ``None`` when there is none.

    Parameters
    ----------
    store
        The store to read.
    key
        Full key of the document, such as ``"RNA/zarr.json"``.
    where
        Prefixes the error message (the store or node the document describes).
    remedy
        Appended to the error message after ``"; "``: what the caller should do.

    Returns
    -------
    object
        Whatever the document holds (any JSON value); ``None`` when the key
        is absent.

    Raises
    ------
    RecordShapeError
        The document is not valid JSON (or not UTF-8).

    Examples
    --------
    >>> get_json(store, "zarr.json", where="data.zarr")  # doctest: +SKIP
    {'zarr_format': 3, 'node_type': 'group', 'attributes': {}}
    """
    known, data = store.held(key) if isinstance(store, HeldDocuments) else (False, None)
    if not known:
        buffer = sync(store.get(key, prototype=default_buffer_prototype()))
        data = None if buffer is None else buffer.to_bytes()
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as exc:
        message = f"{key!r} is not valid JSON ({exc})"
        if where is not None:
            message = f"{where}: {message}"
        if remedy is not None:
            message = f"{message}; {remedy}"
        raise RecordShapeError(message) from exc


def list_dir(store: Store, prefix: str) -> list[str]:
    """The names directly below ``prefix`` (keys and sub-prefixes), sorted.

    The caller checks ``store.supports_listing`` first if it can meet a store
    that cannot list, to say in its own terms what cannot be done.

    Examples
    --------
    >>> list_dir(store, "RNA/artifacts")  # doctest: +SKIP
    ['normalized', 'reduction', 'zarr.json']
    """

    if isinstance(store, HeldDocuments):
        held = store.held_children(prefix)
        if held is not None:
            return held

    async def collect() -> list[str]:
        return [name async for name in store.list_dir(prefix)]

    return sorted(sync(collect()))


async def holds_names_below(store: Store, prefix: str) -> bool:
    """Whether ``store`` lists any name directly below ``prefix`` (one listing, stopped
    at the first name); a prefix the store refuses to spell holds nothing."""
    try:
        async for _ in store.list_dir(prefix):
            return True
    except ValueError:
        return False
    return False


async def lists_as_empty_directory(store: Store, key: str) -> bool:
    """Whether ``key`` is an empty directory: named by the listing above it, no key itself.

    The one way to tell an empty directory of a local store from nothing:
    zarr's ``LocalStore`` lists directories with no file below them (its
    deletes leave them: overwriting chunks with the fill value deletes their
    files, not their directories), and a listing of the directory itself
    does not tell it from an absent name. Object stores list no empty
    prefix, so there this costs one listing and finds nothing. Callers ask
    only once they found nothing below ``key``.
    """
    parent, _, name = key.rstrip("/").rpartition("/")
    try:
        async for listed in store.list_dir(parent):
            if listed == name:
                return not await store.exists(key.rstrip("/"))
    except ValueError:
        return False
    return False


def document_attribute(data: bytes, name: str) -> object:
    """Attribute ``name`` of the Zarr document ``data``, or ``None`` (also for non-JSON bytes).

    Stores that protect a record in their root document compare what a
    write would leave there with the record they verified.

    >>> document_attribute(b'{"attributes": {"a": 1}}', "a")
    1
    >>> document_attribute(b"not json", "a") is None
    True
    """
    try:
        document = json.loads(data)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("attributes"), dict):
        return None
    return document["attributes"].get(name)


def missing_bucket(exc: BaseException) -> bool:
    """Whether ``exc`` is S3's answer that the bucket does not exist (``NoSuchBucket``,
    quoted by obstore and botocore; s3fs says it in words).

    >>> missing_bucket(FileNotFoundError("The specified bucket does not exist"))
    True
    """
    text = str(exc).lower()
    return "nosuchbucket" in text or "specified bucket does not exist" in text


def innermost_store(store: Store) -> Store:
    """The store under every :class:`~zarr.storage.WrapperStore` around ``store``
    (counting, remembered reads, prefetched documents): what it really is."""
    depth = 0
    while isinstance(store, WrapperStore) and depth < 32:  # a bound, not a cycle check
        store = store._store
        depth += 1
    return store
