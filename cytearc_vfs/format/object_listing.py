"""Recursive listings of obstore-backed stores, also of HTTP servers that refuse them.

obstore lists an HTTP store recursively with one WebDAV ``PROPFIND`` of
``Depth: infinity``, which a server may refuse with ``403`` (RFC 4918 lets
it; ``cytearc-vfs serve`` and Apache's default configuration do), while
``Depth: 1`` must be answered. Every recursive listing this package takes of
an obstore store goes through :func:`list_recursive`, which asks once and,
refused by an HTTP server, walks the directories below the prefix one
``Depth: 1`` request each (concurrently, a bounded number at a time).

The refusal is remembered for the client (the obstore store object, shared
by the stores opened over it), so later listings of the same server walk at
once instead of being refused again: an open of a served store costs one
refused request, not one per listing. A caller that can do without a
listing (it reads the keys it needs one by one) calls
:func:`list_unless_refused` and walks nothing.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any

from zarr.storage import ObjectStore

from .object_keys import listing_prefix

if TYPE_CHECKING:
    from obstore import ObjectMeta

__all__ = ["is_http_store", "list_recursive", "list_unless_refused", "refuses_recursive"]

#: ``Depth: 1`` requests of one walk in flight at once.
_WALK_REQUESTS = 16

# id(client) -> a weak reference to the client (obstore's clients are not
# hashable, so no WeakSet); the entry leaves with the client.
_refused: dict[int, weakref.ref[Any]] = {}
_refused_lock = threading.Lock()


def is_http_store(store: ObjectStore[Any]) -> bool:
    """Whether ``store`` reads a plain HTTP (WebDAV) server through obstore."""
    return type(store.store).__name__ == "HTTPStore"


def refuses_recursive(store: ObjectStore[Any]) -> bool:
    """Whether ``store``'s server is known to refuse recursive listings."""
    if not is_http_store(store):
        return False
    client = store.store
    with _refused_lock:
        ref = _refused.get(id(client))
        return ref is not None and ref() is client


def _remember_refusal(store: ObjectStore[Any]) -> None:
    client = store.store
    key = id(client)

    def forget(_: object, key: int = key) -> None:
        with _refused_lock:
            _refused.pop(key, None)

    with _refused_lock:
        _refused[key] = weakref.ref(client, forget)


async def list_recursive(store: ObjectStore[Any], prefix: str) -> list[ObjectMeta]:
    """Every object below ``prefix`` (a store prefix, ``""`` for all) as obstore's
    ``ObjectMeta`` (``path`` is the client's key: map it with ``store_key``).

    One recursive listing (one request per page); from an HTTP server that
    refuses it, a walk of one ``Depth: 1`` request per directory below
    ``prefix``. Any other failure is the backend's own exception.
    """
    found = await list_unless_refused(store, prefix)
    return found if found is not None else await _walk(store, prefix)


async def list_unless_refused(store: ObjectStore[Any], prefix: str) -> list[ObjectMeta] | None:
    """As :func:`list_recursive`, but ``None`` instead of a walk when the HTTP server
    refuses recursive listings: for a caller that can read what it needs key by key."""
    import obstore
    from obstore.exceptions import PermissionDeniedError

    if refuses_recursive(store):
        return None
    try:
        return list(
            await obstore.list(store.store, prefix=listing_prefix(store, prefix)).collect_async()
        )
    except PermissionDeniedError:
        if not is_http_store(store):
            raise
    # a server that refuses Depth: 1 too raises its own error from the walk
    # or from the caller's own requests, naming what it refused
    _remember_refusal(store)
    return None


async def _walk(store: ObjectStore[Any], prefix: str) -> list[ObjectMeta]:
    """``prefix`` listed one directory level at a time (one request per directory)."""
    import obstore

    limit = asyncio.Semaphore(_WALK_REQUESTS)
    found: list[ObjectMeta] = []

    async def level(directory: str | None) -> None:
        async with limit:
            answer = await obstore.list_with_delimiter_async(store.store, prefix=directory)
        found.extend(answer["objects"])
        await asyncio.gather(*(level(below) for below in answer["common_prefixes"]))

    await level(listing_prefix(store, prefix))
    return found
