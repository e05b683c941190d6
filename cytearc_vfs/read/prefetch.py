"""Fetching the metadata a source's verification reads, in as few round trips as possible.

Verifying a source assay reads some fifteen small ``zarr.json`` documents and
a listing of the store's top level: read one after another, on object
storage each is a round trip. Opening a composite verifies every source, so
those waits add up. :func:`fetch_documents` gets them concurrently and
returns a :class:`PrefetchedStore`, a read-only view that serves them from
memory; verification then runs without I/O.

On an object store that lists with versions (obstore), the view also holds
one listing of the whole source (:meth:`PinnedSourceStore.list_objects`: a
request per 1,000 objects). The listing answers, without a request, every
question of the form "is there such a key" (absent documents, Zarr v2 names,
the children of a group), pins the count arrays' shards, and tells which
documents a *seal* still describes: a seal is the documents a composite
verified at creation with the version each was read at. A document whose
listed version is the sealed one is served from the seal, because the
object is the one whose bytes were sealed; only a document that changed, or
that the seal lacks, is fetched. So a source whose metadata did not change
opens with the listing alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from ..format.gathering import gather_all
from ..format.key_checked import KeyCheckedWrapperStore
from ..format.paths import AssayPaths, join
from ..format.source_store import contents_documents
from ..format.store_keys import METADATA_DOCUMENTS
from ..remote.failures import document_refused
from ..remote.object_versions import Listing
from ..remote.pinned_store import pinned_store_of

__all__ = [
    "LOCAL_READERS",
    "MAX_IN_FLIGHT",
    "LocalReaders",
    "PrefetchedStore",
    "Seal",
    "assay_documents",
    "fetch_documents",
    "prefetched",
    "read_local",
]

#: Requests an open keeps in flight at once, over all its sources: enough to
#: hide a cloud round trip behind the others, few enough not to be throttled.
MAX_IN_FLIGHT = 64
#: Local sources read at first at once, each in one hand-off to a worker thread
#: (its documents and listings, see :func:`read_local`). From a local disk a
#: source's reads cost a fraction of a millisecond of CPU and no wait; more
#: readers at once only contend for the interpreter's lock with each other and
#: with the verification. Opening a composite of 800 local sources (2 shared
#: vCPUs, medians of 9): 1 reader 1.35-1.48 s (1.36-1.43 s of CPU), 2 1.45-1.55
#: s, 4 1.53 s, 64 (the remote limit) 1.62 s (1.66 s of CPU). Reads that wait
#: on their files (a network filesystem) widen it: see :class:`LocalReaders`.
LOCAL_READERS = 1
#: Sealed documents of one source: key -> (version token, the document's bytes).
Seal = Mapping[str, tuple[str, bytes]]


def assay_documents(paths: AssayPaths) -> list[str]:
    """Keys of the documents that verifying the assay at ``paths`` reads.

    Zarr v3 only: verification opens groups with ``zarr_format=3``. The one
    v2 name it asks for (a retired ``state`` group of either format) is
    answered by a listing where there is one, and fetched lazily where not.
    """
    nodes = [
        "",
        paths.root,
        paths.assay_group,
        join(paths.assay_group, "state"),
        paths.matrix_group,
        paths.counts,
        paths.counts_t,
        paths.summaries,
        *(join(paths.summaries, name) for name in ("rowSums", "rowPositive", "columnPositive")),
        paths.cell_data,
        join(paths.cell_data, "ids"),
        paths.feature_data,
        join(paths.feature_data, "ids"),
    ]
    return list(dict.fromkeys(join(node, "zarr.json") for node in nodes))


class PrefetchedStore(KeyCheckedWrapperStore):
    """A read-only view of ``store`` that serves ``documents`` (key: bytes, or
    ``None`` for an absent key) from memory.

    With a ``listing`` of the whole store, a key it does not hold is absent
    (``None`` without a request) and ``list_dir`` / ``list_prefix`` are
    answered from it. ``tokens`` holds the version each document was read at,
    where the backend reports one. ``limit`` bounds the reads in flight that
    go to ``store`` (the views of one open's sources share it). A key under one
    of the ``complete`` prefixes that is not among ``documents`` is absent: the
    documents hold everything under them. ``directories`` holds the names
    below some prefixes, listed with the documents (a local store's).
    """

    def __init__(
        self,
        store: Store,
        documents: Mapping[str, bytes | None],
        listing: Listing | None = None,
        tokens: Mapping[str, str] | None = None,
        *,
        limit: asyncio.Semaphore | None = None,
        complete: tuple[str, ...] = (),
        directories: Mapping[str, list[str]] | None = None,
        refused: str | None = None,
    ) -> None:
        super().__init__(store.with_read_only(True) if not store.read_only else store)
        self._refused = refused
        self._documents = dict(documents)
        self._directories = dict(directories or {})
        self._listing = listing
        self._tokens = dict(tokens or {})
        self._limit = limit
        self._complete = complete

    def _with_store(self, store: Store) -> PrefetchedStore:
        return type(self)(
            store,
            self._documents,
            self._listing,
            self._tokens,
            limit=self._limit,
            complete=self._complete,
            directories=self._directories,
            refused=self._refused,
        )

    @property
    def supports_listing(self) -> bool:
        # a source whose listing was refused is read by path: its checks ask for
        # the keys a listing would have shown (see fetch_documents)
        return self._refused is None and self._store.supports_listing

    @property
    def listing_refused(self) -> str | None:
        """Why the store could not be listed (its listing was refused), or ``None``."""
        return self._refused

    def _refuse_listing(self, prefix: str) -> None:
        if self._refused is None:
            return
        pinned = pinned_store_of(self._store)
        if pinned is not None:  # names the source and the remedy
            raise pinned.listing_refused_error(prefix)
        what = repr(prefix) if prefix else "its root"
        raise PermissionError(f"listing {what} was refused: {self._refused}")

    @property
    def wrapped(self) -> Store:
        """The store underneath."""
        return self._store

    @property
    def listing(self) -> Listing | None:
        """The listing of the whole store taken with the documents, if any."""
        return self._listing

    def seal(self) -> dict[str, tuple[str, bytes]]:
        """The documents held with the version each was read at (see the module docstring)."""
        return {
            key: (self._tokens[key], data)
            for key, data in self._documents.items()
            if data is not None and key in self._tokens
        }

    def _known_absent(self, key: str) -> bool:
        if self._complete and key.startswith(self._complete) and key not in self._documents:
            return True
        return self._listing is not None and key not in self._listing

    def held(self, key: str) -> tuple[bool, bytes | None]:
        """A document's bytes when known without I/O (see :class:`HeldDocuments`)."""
        if key in self._documents:
            return True, self._documents[key]
        return self._known_absent(key), None

    def held_children(self, prefix: str) -> list[str] | None:
        """The names below ``prefix`` in the listing, when there is one (or when
        ``prefix`` was listed with the documents)."""
        directory = prefix.rstrip("/")
        if self._listing is None:
            held = self._directories.get(directory)
            return None if held is None else list(held)
        start = len(directory) + 1 if directory else 0
        return sorted(
            {
                key[start:].split("/", 1)[0]
                for key in self._listing
                if not directory or key.startswith(directory + "/")
            }
        )

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._check_key(key, "get")
        if byte_range is None and key in self._documents:
            data = self._documents[key]
            return None if data is None else prototype.buffer.from_bytes(data)
        if self._known_absent(key):
            return None
        if self._limit is None:
            return await self._store.get(key, prototype, byte_range)
        async with self._limit:
            return await self._store.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        self._check_key(key, "exists")
        if key in self._documents:
            return self._documents[key] is not None
        if self._known_absent(key):
            return False
        if self._listing is not None:
            return key in self._listing
        return await self._store.exists(key)

    async def list_prefix(self, prefix: str) -> Any:
        self._check_prefix(prefix, "list_prefix")
        self._refuse_listing(prefix)
        if self._listing is None:
            async for key in self._store.list_prefix(prefix):
                yield key
            return
        directory = prefix.rstrip("/")
        for key in sorted(self._listing):
            if not directory or key.startswith(directory + "/"):
                yield key

    async def list_dir(self, prefix: str) -> Any:
        self._check_prefix(prefix, "list_dir")
        self._refuse_listing(prefix)
        names = self.held_children(prefix)
        if names is None:
            async for name in self._store.list_dir(prefix):
                yield name
            return
        for name in names:
            yield name


async def fetch_documents(
    store: Store,
    keys: Iterable[str],
    *,
    seal: Seal | None = None,
    deferred: Iterable[str] = (),
    limit: asyncio.Semaphore | None = None,
    directories: Iterable[str] = (),
    groups: Iterable[str] = (),
    probes: Iterable[str] = (),
) -> PrefetchedStore:
    """``store`` with ``keys`` (and what :func:`read_contents` will read) fetched.

    Where ``store`` is (or wraps) a :class:`PinnedSourceStore` that lists with
    versions, the whole store is listed once, beside the documents' fetch
    (one round trip); with a ``seal``, after the listing, and only the
    documents whose version changed are fetched (usually none). Then, in a
    second round only when the listing shows them, the top-level documents
    that neither fetched nor sealed (another assay, a workspace). ``deferred``
    keys (documents that are usually absent) wait for the listing to show
    them, where there is one. ``limit`` bounds the requests in flight
    (shared by the sources of one open).

    A local store (zarr's ``LocalStore`` itself) is read in one call on a
    worker thread: every document, and the names below each of
    ``directories`` (which verification would otherwise list one call at a
    time through zarr's event loop). An open of many local sources then
    costs one thread hand-off per source, not one per document. Each of
    ``groups`` is listed too, and its members' ``zarr.json`` read (a table a
    creation reads next: its columns' documents, not known before the
    listing); other stores ignore ``directories`` and ``groups``.

    Where the backend refuses the listing (credentials that may read but not
    list: S3 without ``s3:ListBucket``), the ``deferred`` keys and the
    ``probes`` (keys only a listing would have told absent, such as a v2
    document) are fetched in the same round instead, and the view refuses
    listings itself (``PermissionError``, no request): its reader reads by path.
    """
    wanted = list(dict.fromkeys(keys))
    later = list(dict.fromkeys(deferred))
    gate = limit if limit is not None else asyncio.Semaphore(MAX_IN_FLIGHT)
    if type(store) is LocalStore:  # exactly zarr's: a subclass may read otherwise
        async with gate:
            return await asyncio.to_thread(
                read_local,
                store,
                wanted,
                deferred=later,
                limit=gate,
                directories=directories,
                groups=groups,
            )
    pinned = pinned_store_of(store)
    if pinned is None:  # no listing will tell whether they exist: fetched with the rest
        wanted += [key for key in later if key not in wanted]
    else:
        wanted = [key for key in wanted if key not in later]
    prototype = default_buffer_prototype()
    documents: dict[str, bytes | None] = {}
    tokens: dict[str, str] = {}

    undecided: dict[str, BaseException] = {}

    async def fetch(key: str) -> None:
        async with gate:
            if pinned is not None:
                try:
                    data, token = await pinned.get_versioned(key)
                except OSError as exc:
                    if pinned.listing_refused is not None or not document_refused(
                        key, exc.__cause__ or exc
                    ):
                        raise
                    # S3 answers 403 for an absent document to credentials that may
                    # not list: absent if the listing in flight is refused too
                    undecided[key] = exc
                    return
            else:
                buffer = await store.get(key, prototype)
                data, token = (None if buffer is None else buffer.to_bytes()), None
        documents[key] = data
        if token is not None:
            tokens[key] = token

    async def listed() -> Listing | None:
        if pinned is None:
            return None
        async with gate:
            return await pinned.list_objects()

    if seal is not None and pinned is not None:
        listing = await listed()
        if listing is None and pinned.listing_refused is not None:
            wanted += [key for key in [*later, *probes] if key not in wanted]
        if listing is not None:
            for key, (token, data) in seal.items():
                entry = listing.get(key)
                if entry is not None and entry.token == token:
                    documents[key], tokens[key] = data, token
        wanted = [key for key in wanted if key not in documents]
        if listing is not None:
            wanted = [key for key in wanted if key in listing]
        await gather_all(*(fetch(key) for key in wanted))
    else:
        listing, *_ = await gather_all(listed(), *(fetch(key) for key in wanted))
        if listing is None and pinned is not None and pinned.listing_refused is not None:
            # the listing that would have told these absent was refused: asked by path
            await gather_all(*(fetch(key) for key in [*later, *probes] if key not in documents))
    if undecided:
        if pinned is None or pinned.listing_refused is None:
            raise next(iter(undecided.values()))  # listed: the 403 is the document's own
        documents.update(dict.fromkeys(undecided))
    if listing is not None:
        later = [
            key for key in contents_documents(listing) if key in listing and key not in documents
        ]
        await gather_all(*(fetch(key) for key in later))
    refused = None if pinned is None else pinned.refusal_reason()
    return PrefetchedStore(store, documents, listing, tokens, limit=gate, refused=refused)


def read_local(
    store: LocalStore,
    keys: Iterable[str],
    *,
    deferred: Iterable[str] = (),
    limit: asyncio.Semaphore | None = None,
    directories: Iterable[str] = (),
    groups: Iterable[str] = (),
    probes: Iterable[str] = (),
) -> PrefetchedStore:
    """What :func:`fetch_documents` returns for a local ``store``, read synchronously on
    the calling thread (a worker: see :data:`LOCAL_READERS`). ``probes`` are not read:
    a local directory is listed."""
    read, children = _read_local(
        store,
        list(dict.fromkeys([*keys, *deferred])),
        list(dict.fromkeys(directories)),
        list(dict.fromkeys(groups)),
    )
    return PrefetchedStore(store, read, limit=limit, directories=children)


def _read_local(
    store: LocalStore, keys: list[str], directories: list[str], groups: list[str]
) -> tuple[dict[str, bytes | None], dict[str, list[str]]]:
    """``keys`` of a local ``store`` (``None`` where absent), the names below each of
    ``directories`` and ``groups``, and the ``zarr.json`` of each member of
    ``groups``, read synchronously, as ``LocalStore.get`` and ``list_dir`` would
    answer them one by one."""
    documents: dict[str, bytes | None] = {}
    prototype = default_buffer_prototype()  # zarr's configuration, read once

    def read(key: str) -> None:
        # opens the store first: a missing root raises
        buffer = store.get_sync(key, prototype=prototype)
        documents[key] = None if buffer is None else buffer.to_bytes()

    for key in keys:
        read(key)
    children: dict[str, list[str]] = {}
    for prefix in dict.fromkeys([*directories, *groups]):
        try:
            names = [entry.name for entry in (store.root / prefix).iterdir()]
        except (FileNotFoundError, NotADirectoryError):
            names = []
        children[prefix.rstrip("/")] = sorted(names)
    for prefix in dict.fromkeys(groups):
        for name in children[prefix.rstrip("/")]:
            key = join(prefix, name, "zarr.json")
            if name not in METADATA_DOCUMENTS and key not in documents:
                read(key)
    return documents, children


class LocalReaders:
    """Local sources' reads, :data:`LOCAL_READERS` at a time while they do not wait.

    When most reads spend their time waiting for their files rather than
    computing (a network filesystem answering in milliseconds), each further
    read that waits doubles the readers, up to ``most``: there, reads in flight
    at once hide each other's waits, as requests to an object store do. A read
    of a local disk waits now and then too (its thread was preempted): those
    few do not widen it. Belongs to one event loop (an open).
    """

    def __init__(self, most: int) -> None:
        self._gate = asyncio.Semaphore(LOCAL_READERS)
        self.width = LOCAL_READERS
        """Reads allowed at once now."""
        self._most = most
        self._reads = self._waits = 0

    async def run[T](self, read: Callable[..., T], *args: Any) -> T:
        """``read(*args)`` on a worker thread, when a reader is free."""
        async with self._gate:
            result, waited = await asyncio.to_thread(_waited, read, *args)
        self._reads += 1
        self._waits += waited
        if (
            waited
            and self._waits >= 3
            and 2 * self._waits > self._reads
            and self.width < self._most
        ):
            wider = min(self._most, 2 * self.width)
            for _ in range(wider - self.width):
                self._gate.release()  # one more permit each
            self.width = wider
        return result


def _waited[T](read: Callable[..., T], *args: Any) -> tuple[T, bool]:
    """``read(*args)``, and whether it mostly waited (wall time well above its thread's
    CPU time, and a millisecond at least: not a local disk's page cache)."""
    started, cpu = time.perf_counter(), time.thread_time()
    result = read(*args)
    wall, used = time.perf_counter() - started, time.thread_time() - cpu
    return result, wall > 1e-3 and wall > 4 * used


def prefetched(store: Store, keys: Iterable[str]) -> PrefetchedStore:
    """``store`` with ``keys`` fetched concurrently, in one round (from synchronous code)."""
    return sync(fetch_documents(store, keys))
