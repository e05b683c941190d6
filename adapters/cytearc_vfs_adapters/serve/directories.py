"""The answers to directory requests: ``GET /PREFIX/`` listings and WebDAV ``PROPFIND``.

:class:`DirectoryAnswers` answers them from one store object (the store a
request began with, see :class:`~cytearc_vfs_adapters.served_store.ServedStore`),
under the server's read slots. Sizes and validators come from ``describe``,
``exists`` and ``getsize``: a composite's chunk is never computed for a listing.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from zarr.abc.store import Store

from cytearc_vfs.errors import SourceGoneError
from cytearc_vfs.format.store_io import holds_names_below, lists_as_empty_directory

from .answers import Answer, not_found, nothing_under, text_answer
from .listings import Entry, finite_depth_error, html_index, json_listing, multistatus, wants_json
from .validators import describe

__all__ = ["DirectoryAnswers"]

# Children of one listing whose kind and size are asked at once (within one read slot).
_LISTING_PROBES = 16


class DirectoryAnswers:
    """Listings and ``PROPFIND`` answers of one store (see the module).

    Parameters
    ----------
    store
        The store the request reads, all of its answer.
    reads
        The server's read slots.
    started
        The ``getlastmodified`` of ``PROPFIND`` entries without a time of their own.
    """

    def __init__(self, store: Store, reads: asyncio.Semaphore, started: str) -> None:
        self._store = store
        self._reads = reads
        self._started = started

    async def _names(self, prefix: str) -> list[str]:
        return sorted({name async for name in self._store.list_dir(prefix)})

    async def _children(self, prefix: str, names: list[str]) -> list[Entry]:
        """The entries below ``prefix``: each name a key (with its size) or a directory.

        Sizes come from ``store.getsize``: a composite's chunk is never
        computed for them (its size follows from the array document).
        """
        probes = asyncio.Semaphore(_LISTING_PROBES)

        async def entry(name: str) -> Entry:
            path = f"{prefix}/{name}" if prefix else name
            async with probes:
                return await self._entry(path)

        return list(await asyncio.gather(*(entry(name) for name in names)))

    async def _entry(self, path: str) -> Entry:
        """A key with its size and validators, or a directory (nothing is computed).

        Where finding the validators gives the size (a file's ``stat``, an
        object's ``HEAD``), that is the one request; else ``exists`` and ``getsize``.
        """
        described = await describe(self._store, path)
        if described is None:
            return Entry(path, None)  # no value there: a directory, or nothing
        validators = described.validators
        size = described.size
        if size is None and await self._store.exists(path):
            try:
                size = await self._store.getsize(path)
            except FileNotFoundError as exc:
                if isinstance(exc, SourceGoneError):
                    raise  # a source gone is a failure, never a name that went
                # removed meanwhile: it lists as what is left, a directory or nothing
        if size is None or (size == 0 and await holds_names_below(self._store, path)):
            # the second: an object store's directory marker (a zero-byte object named
            # like the prefix, "RNA/counts/"), which obstore finds as the key "RNA/counts";
            # a Zarr key has no keys below it, so the name is the directory
            return Entry(path, None)
        return Entry(path, size, validators.etag, validators.modified)

    async def listing(self, prefix: str, accept: str | None) -> Answer:
        """``GET /PREFIX/``: the names below ``prefix`` as JSON or as an HTML index."""
        if not self._store.supports_listing:
            return text_answer(HTTPStatus.NOT_IMPLEMENTED, "this store cannot list its keys")
        json_wanted = wants_json(accept)
        async with self._reads:
            names = await self._names(prefix)
            if not names and prefix and not await lists_as_empty_directory(self._store, prefix):
                # (an empty directory of a local store, which its parent lists, is
                # listed as empty: its parent's listing links to it)
                return nothing_under(prefix)
            if json_wanted:
                body, kind = json_listing(prefix, names), "application/json"
            else:
                children = await self._children(prefix, names)
                body, kind = html_index(prefix, children), "text/html; charset=utf-8"
        return Answer(HTTPStatus.OK, body, [("Content-Type", kind), ("Vary", "Accept")])

    async def propfind(self, path: str, collection: bool, depth: str | None) -> Answer:
        """A WebDAV ``PROPFIND`` (RFC 4918, section 9.1): the resource, and its children at depth 1.

        ``Depth: infinity`` (also what a missing ``Depth`` means) is refused
        with ``403`` and the ``propfind-finite-depth`` precondition, as RFC
        4918 lets a server do: a whole store's keys with their sizes is one
        request the client cannot bound (every computed chunk of a
        composite; a size request per key of a remote store). A request
        body, if any, is not read: every live property this server has
        (``allprop``) is answered.
        """
        level = (depth or "infinity").strip().lower()
        if level == "infinity":
            return Answer(
                HTTPStatus.FORBIDDEN,
                finite_depth_error(),
                [("Content-Type", "application/xml; charset=utf-8")],
            )
        if level not in ("0", "1"):
            return text_answer(
                HTTPStatus.BAD_REQUEST, f"Depth {depth!r} is not 0, 1 or infinity; send 0 or 1"
            )
        if not self._store.supports_listing:
            return text_answer(HTTPStatus.NOT_IMPLEMENTED, "this store cannot list its keys")
        async with self._reads:
            resource = Entry("", None) if path == "" else await self._entry(path)
            if collection and not resource.is_directory:
                resource = Entry(path, None)  # "/KEY/" names a directory, never the key
            names = await self._names(path) if resource.is_directory else []
            if (
                resource.is_directory
                and path
                and not names
                and not await lists_as_empty_directory(self._store, path)
            ):
                return nothing_under(path) if collection else not_found(path)
            entries = [resource]
            if level == "1":
                entries += await self._children(path, names)
        fields = [("Content-Type", "application/xml; charset=utf-8")]
        return Answer(HTTPStatus.MULTI_STATUS, multistatus(entries, self._started), fields)
