"""A remote source read as it was when first read: objects pinned, errors named.

A composite's or mount's open verifies its sources' identities from their
metadata; the counts' shard objects are read later, possibly long after, and
may have been replaced or deleted in between. :class:`PinnedSourceStore` wraps
a remote source store for the life of one open store and

- pins the chunk objects (the shards of ``counts`` and ``countsT``) when the
  store opens, from a listing (a LIST answer carries each object's ETag: one
  request per thousand objects; :meth:`PinnedSourceStore.list_objects` lists
  the whole source once, and the open reuses that listing for its metadata),
  and any other chunk object the first time it is read: its ETag, or else its
  version, or else last-modified and size, as the backend reports them;
- sends every later read of that object with ``If-Match: <ETag>``, so the
  check rides on the read itself (no extra request), and refuses a replaced
  object with :class:`IdentityMismatchError` and a deleted one with
  :class:`SourceGoneError` (a ``FileNotFoundError``), never with zeros;
- translates any other backend error once, into a
  :class:`SourceUnavailableError` (an ``OSError``) naming the
  source, its location, the key and the remedy, chained with ``from exc``.

Pins need object metadata with the bytes. Two backends give it: obstore's
own API (stores zarr opens through obstore, ``zarr.storage.ObjectStore``) and
s3fs's botocore calls (``zarr.storage.FsspecStore`` over s3fs, reached in
one module, :mod:`.s3fs_objects`). Other fsspec backends (gcsfs, HTTP, any
other filesystem) get the error translation and the deleted-object check
for keys read before, not the replaced-object check. Pins live in memory with
the open store: a reopen pins the objects as it finds them (``cytearc-vfs
verify`` re-reads every value).

Every request to a backend other than obstore's is bounded by
``CYTEARC_SOURCE_TIMEOUT`` in total, retries included (:mod:`.timeouts`):
obstore stops its own retries then, but s3fs retries a hung server or a
lasting ``503`` for minutes whatever botocore's per-attempt timeouts say.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from zarr.abc.store import (
    ByteRequest,
    Store,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import FsspecStore, ObjectStore

from ..errors import IdentityMismatchError, SourceGoneError, SourceUnavailableError, VfsError
from ..format.chunk_keys import array_documents, is_chunk_key
from ..format.gathering import first_failure, gather_all, gather_bounded
from ..format.object_keys import object_key, store_key
from ..format.object_listing import is_http_store, list_recursive, list_unless_refused
from ..format.option_names import source_label, source_options_example
from .failures import (
    UNPROVEN,
    document_refused,
    failure_remedy,
    first_line,
    forbidden_unlisted,
    is_http_location,
    refused,
    source_failure,
)
from .object_pins import ObjectPins
from .object_versions import ListedObject, Listing, version_token
from .s3fs_objects import (
    ObjectReplacedError,
    get_s3_object,
    head_s3_object,
    list_s3_objects,
    object_path,
    s3fs_filesystem,
)
from .source_read_wrapper import Batches, Ranges, SourceReadWrapper, check_byte_range, obstore_range
from .timeouts import TIMEOUT_ENV, timeouts

if TYPE_CHECKING:
    from obstore import GetOptions

T = TypeVar("T")

__all__ = [
    "ObjectPins",
    "PinnedSourceStore",
    "pin_arrays",
    "pinned_store_of",
]


class PinnedSourceStore(SourceReadWrapper):
    """A read-only remote source store whose chunk objects are pinned.

    Parameters
    ----------
    store
        The source's backend store.
    name
        The source name, for messages (``"source"`` for a mount's source).
    where
        The source's location, for messages.
    pins
        Shared pins (stores derived by ``with_read_only`` keep them).
    """

    def __init__(
        self, store: Store, *, name: str, where: str, pins: ObjectPins | None = None
    ) -> None:
        super().__init__(store)
        self._name = name
        self._where = where
        self.pins = ObjectPins() if pins is None else pins
        self.listing_refused: BaseException | None = None
        """The backend's refusal of :meth:`list_objects` (credentials that may read but
        not list: S3 without ``s3:ListBucket``), or ``None``: the open then reads by
        path what it would have listed, and pins shards with :meth:`pin_keys`."""
        # obstore's client stops at the total itself (its retry_timeout)
        self._limit = None if isinstance(store, ObjectStore) else timeouts().total
        # an FsspecStore over s3fs lists with ETags and reads with If-Match
        self._s3fs = s3fs_filesystem(store)

    async def _bounded(self, request: Awaitable[T]) -> T:
        """``await request``, within ``CYTEARC_SOURCE_TIMEOUT`` for backends that do not
        bound their own retries (a ``TimeoutError`` then, the request cancelled)."""
        if self._limit is None:
            return await request
        try:
            return await asyncio.wait_for(request, self._limit)
        except TimeoutError as exc:
            raise TimeoutError(
                f"no answer within {TIMEOUT_ENV}={self._limit:g} seconds, retries included"
            ) from exc

    def _with_store(self, store: Store) -> PinnedSourceStore:
        return type(self)(store, name=self._name, where=self._where, pins=self.pins)

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy in another process pins what it reads there; the shards the open
        # proved absent travel (asked there, they would be answered 403 again)
        return (_unpickle, (self._store, self._name, self._where, self.pins.proved_absent))

    def token(self, key: str) -> str | None:
        """The pinned version of ``key`` (``None`` before it is pinned)."""
        return self.pins.get(key)

    async def pin_listing(self, array: str) -> int:
        """Pin every chunk object of ``array`` as a listing finds it; returns how many.

        Only obstore-backed and s3fs-backed stores list with metadata; others
        pin at first read.
        """
        prefix = f"{array}/c/"
        if self._s3fs is not None:
            try:
                listing = await self._bounded(self._list_s3fs(prefix))
            except Exception as exc:
                raise source_failure(self._failed(prefix, exc)) from exc
            return self.pin_listed(listing, [array])
        if not isinstance(self._store, ObjectStore):
            return 0
        try:
            # an HTTP server that refuses Depth: infinity is walked at Depth: 1
            listed = await list_recursive(self._store, prefix)
        except Exception as exc:
            raise source_failure(self._failed(prefix, exc)) from exc
        pinned = 0
        for meta in listed:
            token = version_token(meta)
            if token is not None:
                self.pins.pin(store_key(self._store, str(meta["path"])), token)
                pinned += 1
        return pinned

    async def list_objects(self) -> dict[str, ListedObject] | None:
        """Every object of the source with its size and version, from one listing.

        One request per 1,000 objects on S3 (pages follow each other); the
        answer holds each object's ETag, so an open learns every version it
        needs without a request per object. ``None`` when the backend cannot
        list with metadata (obstore-backed and s3fs-backed stores do), or is an HTTP
        server that refuses recursive listings (``cytearc-vfs serve``; one
        refused request): the open then reads the documents it needs one by
        one, as it would read them anyway, and :meth:`pin_listing` walks only
        the count arrays' shard directories, instead of a ``Depth: 1`` walk
        of every directory of the store. ``None`` too when object storage
        refuses the listing (credentials that may read but not list): the
        refusal is kept in :attr:`listing_refused` and the open reads by path.
        """
        if self.listing_refused is not None:
            return None  # refused once: asked again, it is refused again
        if self._s3fs is not None:
            try:
                return await self._bounded(self._list_s3fs(""))
            except Exception as exc:
                if refused(exc):  # read access without list access: read by path
                    self.listing_refused = exc
                    return None
                raise source_failure(self._failed("its listing", exc)) from exc
        if not isinstance(self._store, ObjectStore):
            return None  # no listing with versions (a plain HTTP or local backend)
        try:
            listed = await list_unless_refused(self._store, "")
        except Exception as exc:
            if refused(exc) and not is_http_store(self._store):
                # read access without list access: the open reads by path instead
                self.listing_refused = exc
                return None
            raise source_failure(self._failed("its listing", exc)) from exc
        if listed is None:
            return None
        return {
            store_key(self._store, str(meta["path"])): ListedObject(
                int(meta["size"]), version_token(meta)
            )
            for meta in listed
        }

    async def _list_s3fs(self, prefix: str) -> dict[str, ListedObject]:
        assert isinstance(self._store, FsspecStore)
        return await list_s3_objects(self._s3fs, self._store.path, prefix)

    async def get_versioned(self, key: str) -> tuple[bytes | None, str | None]:
        """The whole object at ``key`` and the version it was read at.

        ``(None, None)`` for an absent key; the version is ``None`` when the
        backend reports none (stores other than obstore's and s3fs's). The
        version comes with the bytes of the same response, so it names exactly
        the bytes returned (a listing taken beside it could describe a newer
        object).
        """
        self._check_key(key, "get")
        if self._s3fs is not None:
            assert isinstance(self._store, FsspecStore)
            path = object_path(self._store.path, key)
            try:
                return await self._bounded(get_s3_object(self._s3fs, path, None, None))
            except FileNotFoundError:
                return None, None
            except Exception as exc:
                if self.forbidden_document(key, exc):
                    return None, None
                raise source_failure(self._failed(key, exc)) from exc
        if not isinstance(self._store, ObjectStore):
            buffer = await self.get(key, default_buffer_prototype())
            return (None if buffer is None else buffer.to_bytes()), None
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            result = await obstore.get_async(self._store.store, object_key(self._store, key))
            data = await result.bytes_async()
        except (NotFoundError, FileNotFoundError):
            return None, None
        except Exception as exc:
            if self.forbidden_document(key, exc):
                return None, None
            raise source_failure(self._failed(key, exc)) from exc
        return bytes(data), version_token(result.meta)

    def forbidden_document(self, key: str, exc: BaseException) -> bool:
        """Whether ``exc`` is a document's ``403`` read as absent (the listing was refused
        too: see :func:`.failures.document_refused`)."""
        return self.listing_refused is not None and document_refused(key, exc)

    def refusal_reason(self, exc: BaseException | None = None) -> str | None:
        """Why :meth:`list_objects` (or ``exc``'s listing) was refused, in a few words
        (obstore's own run on over the request made), or ``None`` when it was not."""
        exc = self.listing_refused if exc is None else exc
        if exc is None:
            return None
        # the adapter's PermissionError carries the backend's answer as its cause
        said = f"{exc} {exc.__cause__ or ''}"
        if "403" in said or "AccessDenied" in said:
            return "the server answered 403 Forbidden"
        return first_line(exc)

    def listing_refused_error(
        self,
        prefix: str,
        exc: BaseException | None = None,
        *,
        needs: str = "what needs the listing",
    ) -> PermissionError:
        """The refusal of a listing of ``prefix`` (refused as ``exc``, or as the source's
        whole listing was) that only a listing can answer (``needs`` says what): the
        source, why, the remedy."""
        what = repr(prefix) if prefix else "its root"
        return PermissionError(
            f"{self.label()}: listing {what} was refused ({self.refusal_reason(exc)}): the "
            "credentials given may read it but not list it (S3 without s3:ListBucket); "
            f"{needs} needs ones that may, as {source_options_example(self._name)}"
        )

    async def head_objects(
        self, keys: Sequence[str], *, limit: int, forbidden: list[str] | None = None
    ) -> Listing:
        """The size and version of each of ``keys`` that exists, from a ``HEAD`` each, at
        most ``limit`` at once: what a listing tells of them, for a source whose listing
        was refused (an absent key is left out, as a listing leaves it out). A key
        answered ``403`` (S3's answer to an absent key too) goes to ``forbidden`` if given."""
        found: dict[str, ListedObject] = {}

        def forbid(key: str, exc: BaseException) -> bool:
            if forbidden is None or self.listing_refused is None or not refused(exc):
                return False
            forbidden.append(key)
            return True

        if self._s3fs is not None:
            assert isinstance(self._store, FsspecStore)
            root, fs = self._store.path, self._s3fs

            async def head(key: str) -> None:
                self._check_key(key, "exists")
                try:
                    listed = await self._bounded(head_s3_object(fs, object_path(root, key)))
                except Exception as exc:
                    if forbid(key, exc):
                        return
                    raise source_failure(self._failed(key, exc)) from exc
                if listed is not None:
                    found[key] = listed

        elif isinstance(self._store, ObjectStore):
            import obstore
            from obstore.exceptions import NotFoundError

            store = self._store

            async def head(key: str) -> None:
                self._check_key(key, "exists")
                try:
                    meta = await obstore.head_async(store.store, object_key(store, key))
                except (NotFoundError, FileNotFoundError):
                    return
                except Exception as exc:
                    if forbid(key, exc):
                        return
                    raise source_failure(self._failed(key, exc)) from exc
                found[key] = ListedObject(int(meta["size"]), version_token(meta))

        else:
            return {}

        await gather_bounded(head, list(keys), limit)
        return {key: found[key] for key in keys if key in found}

    async def pin_keys(
        self, keys: Sequence[str], *, limit: int, forbidden: list[str] | None = None
    ) -> int:
        """Pin each of ``keys`` (chunk objects) as a ``HEAD`` finds it (see
        :meth:`head_objects`); returns how many were pinned. The same pins as
        :meth:`pin_listing`, at a request per key instead of one per thousand."""
        pinned = 0
        found = await self.head_objects(keys, limit=limit, forbidden=forbidden)
        for key, listed in found.items():
            if listed.token is not None:
                self.pins.pin(key, listed.token)
                pinned += 1
        return pinned

    def pin_listed(self, listing: Listing, arrays: Iterable[str]) -> int:
        """Pin the chunk objects of ``arrays`` as ``listing`` shows them; returns how many.

        No request: the listing was taken by the open (:meth:`list_objects`).
        """
        prefixes = tuple(f"{array}/c/" for array in arrays)
        pinned = 0
        for key, listed in listing.items():
            if listed.token is not None and key.startswith(prefixes):
                self.pins.pin(key, listed.token)
                pinned += 1
        return pinned

    # ------------------------------------------------------------ messages

    def label(self) -> str:
        """The source and its location, as messages name it."""
        return f"{source_label(self._name)} at {self._where}"

    def _replaced(self, key: str, pinned: str, found: str | None) -> IdentityMismatchError:
        self.pins.refused = True
        return IdentityMismatchError(
            f"{self.label()}: {key} changed while this store was open (pinned as "
            f"{pinned}, now {found or 'a different version'}); the source was modified after "
            "the composite or mount was opened, so its counts would mix two versions. Restore "
            "the source and reopen, or recreate the composite (mount again) if the change is meant"
        )

    def _deleted(self, key: str) -> SourceGoneError:
        self.pins.refused = True
        return SourceGoneError(
            f"{self.label()}: {key} no longer exists; the source was deleted or moved after "
            "it was opened. Restore it at that location and reopen"
        )

    def forbidden(self, key: str, why: str = UNPROVEN) -> SourceUnavailableError:
        """The refusal of ``key``, answered ``403`` once the listing was refused, which
        ``why`` says cannot be read as absent (see :func:`.failures.forbidden_unlisted`)."""
        return SourceUnavailableError(forbidden_unlisted(self.label(), key, why))

    def _failed(self, key: str, exc: BaseException) -> SourceUnavailableError:
        if self.listing_refused is not None and refused(exc) and "/" in key:
            # a missing key too, for S3: "may not read" misled. Not a root document: a
            # source whose root cannot be read is not read at all (credentials, or path)
            return self.forbidden(key)
        # one remedy, the one the failure points at
        remedy = failure_remedy(
            exc, http=is_http_location(self._where), options=source_options_example(self._name)
        )
        return SourceUnavailableError(
            f"{self.label()}: reading {key} failed ({type(exc).__name__}: {first_line(exc)}); "
            + remedy
        )

    # ------------------------------------------------------------- reading

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        check_byte_range(byte_range)
        if self.pins.absent(key):
            return None  # proved absent at the open (its GET would be answered 403)
        try:
            if is_chunk_key(key) and (
                isinstance(self._store, ObjectStore) or self._s3fs is not None
            ):
                return await self._get_pinned(key, prototype, byte_range)
            buffer = await self._bounded(self._store.get(key, prototype, byte_range))
        except Exception as exc:
            if isinstance(exc, VfsError) or getattr(exc, "cytearc_source", False):
                raise  # said already
            if self.forbidden_document(key, exc):
                return None
            raise source_failure(self._failed(key, exc)) from exc
        if buffer is None and is_chunk_key(key):
            await self._check_absent(key)
        return buffer

    async def _check_absent(self, key: str) -> None:
        """A chunk read as absent: an object pinned before, or a whole source, is gone.

        An absent chunk of a live array is legitimate (never written: it holds
        zeros); the array's own document tells the two apart, at one extra
        request on this rare path only.
        """
        if self.pins.get(key) is not None:
            raise source_failure(self._deleted(key))
        for document in array_documents(key):
            try:
                if await self._bounded(self._store.exists(document)):
                    return
            except Exception as exc:
                raise source_failure(self._failed(document, exc)) from exc
        raise source_failure(self._deleted(key))

    async def _get_pinned(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        """A chunk read in one request that also checks (``If-Match``) or takes its pin."""
        pinned = self.pins.get(key)
        # conditional: the backend refuses a replaced object in the same request
        tag = pinned[len("etag:") :] if pinned is not None and pinned.startswith("etag:") else None
        try:
            if self._s3fs is not None:
                assert isinstance(self._store, FsspecStore)
                path = object_path(self._store.path, key)
                data, found = await self._bounded(get_s3_object(self._s3fs, path, byte_range, tag))
            else:
                fetched = await self._get_obstore(key, byte_range, tag)
                if fetched is None:
                    # a backend without suffix ranges (Azure): zarr's own fallback, unpinned
                    return await self._store.get(key, prototype, byte_range)
                data, found = fetched
        except ObjectReplacedError as exc:
            assert pinned is not None
            # Azure answers a conditional GET of a deleted blob 412, not 404
            if not await self._bounded(self._store.exists(key)):
                raise source_failure(self._deleted(key)) from exc
            raise self._replaced(key, pinned, None) from exc
        except FileNotFoundError:
            await self._check_absent(key)
            return None
        if found is not None:
            kept = self.pins.pin(key, found)
            if kept != found:  # a backend that ignores If-Match, or pins without ETags
                raise self._replaced(key, kept, found)
        return prototype.buffer.from_bytes(data)

    async def _get_obstore(
        self, key: str, byte_range: ByteRequest | None, if_match: str | None
    ) -> tuple[Any, str | None] | None:
        """One obstore GET: the bytes and their version; ``None`` for a range the backend
        cannot serve. A 412 is :class:`ObjectReplacedError`, a 404 ``FileNotFoundError``."""
        import obstore
        from obstore.exceptions import NotFoundError, NotSupportedError, PreconditionError

        assert isinstance(self._store, ObjectStore)
        options: GetOptions = {}
        requested = obstore_range(byte_range)
        if requested is not None:
            options["range"] = requested
        if if_match is not None:
            options["if_match"] = if_match
        try:
            result = await obstore.get_async(
                self._store.store, object_key(self._store, key), options=options
            )
            data = await result.bytes_async()
        except PreconditionError as exc:
            raise ObjectReplacedError(f"{key}: {exc}") from exc
        except NotFoundError as exc:
            raise FileNotFoundError(key) from exc
        except NotSupportedError:
            return None
        return data, version_token(result.meta)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self._listed(super().list_prefix(prefix), prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        async for name in self._listed(super().list_dir(prefix), prefix):
            yield name

    async def _listed(self, names: AsyncIterator[str], prefix: str) -> AsyncIterator[str]:
        """``names``, a refused listing said as this source's (the backend's words name
        the bucket and its own options, not the source and ``source_storage_options``)."""
        try:
            async for name in names:
                yield name
        except PermissionError as exc:
            if is_http_location(self._where):
                raise  # a web server's refusal has its own remedy (a server that lists)
            raise self.listing_refused_error(prefix, exc) from exc

    async def _get_ranges(
        self, key: str, byte_ranges: Ranges, prototype: BufferPrototype, limits: dict[str, int]
    ) -> Batches:
        # the coalescer's merged requests are the ones ObjectStore would issue
        try:
            async for batch in super()._get_ranges(key, byte_ranges, prototype, limits):
                yield batch
        except BaseExceptionGroup as group:
            # one failure, named, instead of a group callers must unpack
            leaf = first_failure(group)
            if isinstance(leaf, VfsError) or getattr(leaf, "cytearc_source", False):
                raise leaf from None
            raise source_failure(self._failed(key, leaf)) from leaf


def pin_arrays(store: Store, arrays: Iterable[str]) -> int:
    """Pin the chunk objects of ``arrays`` of a source, when ``store`` is (or wraps) a
    :class:`PinnedSourceStore`; returns how many objects were pinned.

    Called once when a composite or mount opens, from synchronous code.
    """
    from zarr.core.sync import sync

    found = pinned_store_of(store)
    if found is None:
        return 0
    pinned = found

    async def pin_all() -> list[int]:
        return list(await gather_all(*(pinned.pin_listing(array) for array in arrays)))

    return sum(sync(pin_all()))


def pinned_store_of(store: Store) -> PinnedSourceStore | None:
    """The :class:`PinnedSourceStore` ``store`` is or wraps (through ``wrapped``), or ``None``."""
    while not isinstance(store, PinnedSourceStore):
        inner = getattr(store, "wrapped", None)
        if not isinstance(inner, Store) or inner is store:
            return None
        store = inner
    return store


def _unpickle(store: Store, name: str, where: str, absent: frozenset[str]) -> PinnedSourceStore:
    return PinnedSourceStore(store, name=name, where=where, pins=ObjectPins(absent))
