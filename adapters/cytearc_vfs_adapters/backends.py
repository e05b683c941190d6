"""Storage backends for location strings: local, memory, fsspec and obstore.

Local paths reach zarr as :class:`pathlib.Path`, because zarr reads a string
as a URL and would cut a directory named ``a#b;c?`` at ``#``. Remote URLs
prefer obstore (fewer copies, native async) and fall back to fsspec; each is
imported lazily, with an error naming the extra to install. Remote stores get
the request timeouts of :mod:`cytearc_vfs.remote.timeouts` unless their options set
their own.

``storage_options={"backend": "fsspec"}`` (or ``"obstore"``) picks the client
library of one URL; the rest of the options go to that library. Google Cloud
Storage through fsspec (gcsfs) is the tested path for ``gs://``: obstore's
GCS client speaks the XML API, which no emulator here implements.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zarr.abc.store import ByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, ManagedMemoryStore, ObjectStore

from cytearc_vfs.format.key_checked import KeyCheckedStore
from cytearc_vfs.format.object_keys import listing_prefix, object_key, store_key
from cytearc_vfs.format.object_listing import is_http_store, list_recursive
from cytearc_vfs.remote.failures import failure_remedy, refused
from cytearc_vfs.remote.locations import absolute_path, register_backend
from cytearc_vfs.remote.timeouts import timeouts

from .obstore_options import client_from_url
from .unlisted_reads import RefusedReads

__all__ = [
    "forget_memory",
    "open_fsspec",
    "open_local",
    "open_memory",
    "open_obstore",
    "open_remote",
    "register_all",
    "SharedClientObjectStore",
]

REMOTE_SCHEMES = ("s3", "gs", "gcs", "az", "azure", "abfs", "http", "https")
#: ``storage_options`` key naming the client library of a remote URL.
BACKEND_OPTION = "backend"
BACKEND_CHOICES = ("obstore", "fsspec")


def open_local(path: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """A LocalStore rooted at ``path``, made absolute.

    A relative root is resolved against the working directory at every file
    access, not at the open: once the process moves (libfuse moves
    ``mount-fs`` to ``/`` as it mounts), the same store reads another
    directory, or none, and shows an empty or partial tree without an error.
    """
    if storage_options:
        # whose options they were (--storage-options, a source's) only the caller knows
        raise ValueError(
            f"backend options were given for the local path {path!r}, which takes none: "
            "they are for remote URLs (s3://, gs://, az://, http://); leave them out for a "
            "local store"
        )
    # messages, zarr's own among them, name the root as describe_location does
    return LocalStore(absolute_path(Path(path)), read_only=read_only)


# zarr drops a ManagedMemoryStore's dict once no instance refers to it; a
# ``memory://name`` location must outlive the writer that created it, so the
# first instance of each name is kept for the life of the process.
_MEMORY_STORES: dict[str, ManagedMemoryStore] = {}


def open_memory(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """The process-local ``memory://name`` store (created on first use, kept until exit)."""
    if storage_options:
        raise ValueError(f"storage_options do not apply to {url!r}")
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"{url!r} names no memory store; write memory://NAME")
    keeper = _MEMORY_STORES.setdefault(parts.netloc, ManagedMemoryStore(name=parts.netloc))
    return ManagedMemoryStore(name=keeper.name, path=parts.path.strip("/"), read_only=read_only)


def forget_memory(name: str) -> None:
    """Release the ``memory://name`` store so its contents can be freed."""
    _MEMORY_STORES.pop(name, None)


def open_obstore(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """An obstore-backed store for a cloud or HTTP URL.

    Stores of one bucket (or host) with the same options share one client
    (:func:`_shared_client`): building a client costs milliseconds of CPU,
    which a composite of hundreds of sources would otherwise pay per source.
    """
    try:
        import obstore  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {url!r} needs obstore: pip install 'cytearc-vfs[obstore]'"
        ) from exc
    options: dict[str, Any] = dict(storage_options or {})
    limits = timeouts()
    # bounded by default (obstore would retry a hung server for minutes), and
    # so are the idle connections a client keeps: a read's concurrent range
    # requests open dozens, and kept forever by every client a process has
    # made they exhaust its file descriptors; options given explicitly win
    # an http:// location is read over plain HTTP, as written (obstore refuses
    # it unless told: a guard for cloud endpoints, not for a URL that says http)
    plain = {"allow_http": True} if urlsplit(url).scheme == "http" else {}
    options["client_options"] = {
        "timeout": timedelta(seconds=limits.total),
        "connect_timeout": timedelta(seconds=limits.connect),
        "pool_idle_timeout": timedelta(seconds=POOL_IDLE_SECONDS),
        "pool_max_idle_per_host": str(POOL_MAX_IDLE),
        **plain,
        **(options.get("client_options") or {}),
    }
    options["retry_config"] = options.get("retry_config") or {
        "retry_timeout": timedelta(seconds=limits.total)
    }
    parts = urlsplit(url)
    # named in messages without any user or password the URL carries
    shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}".rstrip("/")
    if parts.query or parts.fragment or not parts.netloc:
        return ObjectStore(client_from_url(url, options, shown=shown), read_only=read_only)
    client = _shared_client(f"{parts.scheme}://{parts.netloc}", options, shown=shown)
    return SharedClientObjectStore(client, parts.path.strip("/"), read_only=read_only, url=shown)


# Clients by (bucket URL, options), most recently used last; a client holds
# its connection pool, so a bounded number is kept for the life of the process
# (with at most POOL_MAX_IDLE idle connections each, closed after
# POOL_IDLE_SECONDS): at most a few hundred sockets however many buckets.
_CLIENTS: OrderedDict[tuple[str, str], Any] = OrderedDict()
_CLIENTS_LOCK = threading.Lock()
_MAX_CLIENTS = 16
POOL_MAX_IDLE = 64
POOL_IDLE_SECONDS = 30


def _shared_client(base: str, options: Mapping[str, Any], *, shown: str) -> Any:
    """The obstore client of ``base`` (``scheme://bucket``) with ``options``, made once."""
    key = (base, json.dumps(options, sort_keys=True, default=repr))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is not None:
            _CLIENTS.move_to_end(key)
            return client
    # built outside the lock: another thread may build the same one meanwhile,
    # and the first kept wins
    client = client_from_url(base, options, shown=shown)
    with _CLIENTS_LOCK:
        client = _CLIENTS.setdefault(key, client)
        _CLIENTS.move_to_end(key)
        while len(_CLIENTS) > _MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
    return client


class SharedClientObjectStore(KeyCheckedStore, ObjectStore[Any]):
    """zarr's ``ObjectStore`` over a prefix of a client shared by several stores.

    Every key is the client's key below ``key_prefix`` (the URL's path), which
    is how the core maps keys when it calls obstore itself
    (:mod:`cytearc_vfs.format.object_keys`). Every key and prefix is checked
    first (:class:`~cytearc_vfs.format.key_checked.KeyCheckedStore`, whose
    ``get_ranges`` checks before zarr's coalescer reads): an HTTP server resolves
    ``..`` in a path, so ``"../x"`` would read outside the prefix. Unlike the
    package's stores above it, a backend may be emptied whole
    (``delete_dir("")``: an unfinished remote destination is removed so).
    """

    def __init__(
        self, store: Any, key_prefix: str, *, read_only: bool = False, url: str | None = None
    ) -> None:
        super().__init__(store, read_only=read_only)
        self.key_prefix = key_prefix.strip("/")
        #: The URL it was opened from, which messages name (the client's own description,
        #: ``S3Store(bucket="b")``, is not what the caller wrote)
        self.url = url
        #: What a refused read means when the credentials may not list (S3 answers 403 for
        #: an absent key then); a web server's 403 is its refusal, as it came
        self.refused_reads = (
            None if is_http_store(self) else RefusedReads(str(self), self._read_unlisted)
        )

    async def _read_unlisted(self) -> bool:
        """Whether these credentials may read the store's root group but not list the
        store: the one case where S3 answers ``403`` for an absent key
        (:mod:`.unlisted_reads`)."""
        try:
            async for _ in self.list_dir(""):
                break
        except PermissionError:
            pass
        else:
            return False  # a 403 is then the object's own
        for name in ("zarr.json", ".zgroup"):
            try:
                # the backend's own answer, not through refused_reads (which asks this)
                if await super().exists(self._key(name, "exists")):
                    return True
            except Exception:  # refused too (or unreachable): not this root
                continue
        return False

    def _key(self, key: str, op: str = "get") -> str:
        return object_key(self, self._check_key(key, op))

    def _prefix(self, prefix: str, op: str) -> str:
        if prefix == "":
            return ""  # the whole store: listed, or emptied by delete_dir
        return self._check_prefix(prefix, op).strip("/")

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, SharedClientObjectStore)
            and self.store == value.store
            and self.key_prefix == value.key_prefix
        )

    def __hash__(self) -> int:
        return hash((type(self), self.key_prefix))

    def with_read_only(self, read_only: bool = False) -> SharedClientObjectStore:
        return type(self)(self.store, self.key_prefix, read_only=read_only, url=self.url)

    def __str__(self) -> str:
        if self.url is not None:
            return self.url
        return f"object_store://{self.store}/{self.key_prefix}"

    def __repr__(self) -> str:
        return f"SharedClientObjectStore({self.store!r}, key_prefix={self.key_prefix!r})"

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if isinstance(byte_range, SuffixByteRequest) and not self._suffix_ranges:
            byte_range = await self._suffix_as_range(key, byte_range.suffix)
            if byte_range is None:
                return None
        try:
            found: Buffer | None = await super().get(self._key(key), prototype, byte_range)
        except Exception as exc:
            if self.refused_reads is not None and await self.refused_reads.absent(key, exc):
                return None
            raise
        return found

    @property
    def _suffix_ranges(self) -> bool:
        # Azure Blob has no suffix ranges ("bytes=-N"); obstore refuses them
        return type(self.store).__name__ != "AzureStore"

    async def _suffix_as_range(self, key: str, suffix: int) -> RangeByteRequest | None:
        """The last ``suffix`` bytes as an explicit range, from the object's size.

        zarr's own fallback computes ``size - suffix`` and fails when the
        suffix is longer than the object, which a whole-shard read asks for
        (other backends answer such a suffix with the whole object).
        """
        import obstore

        try:
            meta = await obstore.head_async(self.store, self._key(key))
        except FileNotFoundError:
            return None
        size = int(meta["size"])
        return RangeByteRequest(max(0, size - suffix), size)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        mapped = [(self._key(key, "get_partial_values"), rng) for key, rng in key_ranges]
        return list(await super().get_partial_values(prototype, mapped))

    async def exists(self, key: str) -> bool:
        try:
            return bool(await super().exists(self._key(key, "exists")))
        except Exception as exc:
            if self.refused_reads is not None and await self.refused_reads.absent(key, exc):
                return False
            raise

    async def set(self, key: str, value: Buffer) -> None:
        from obstore.exceptions import PermissionDeniedError

        try:
            await super().set(self._key(key, "set"), value)
        except PermissionDeniedError as exc:
            # translated here, once: a read-only HTTP server or a read-only
            # credential answers 403 in obstore's words, with a page of HTML
            reason = str(exc).split(":", 1)[0]
            raise PermissionError(
                f"{self}: the server refused writing {key!r} ({reason}); write to a location "
                "these storage_options may write (plain HTTP servers are read-only here), or "
                "give credentials with write access"
            ) from exc

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await super().set_if_not_exists(self._key(key, "set_if_not_exists"), value)

    async def delete(self, key: str) -> None:
        await super().delete(self._key(key, "delete"))

    async def delete_dir(self, prefix: str) -> None:
        # zarr's version deletes what it lists through self.delete, which would
        # prefix the listed (already prefixed) keys a second time
        self._check_writable()
        keys = [key async for key in self.list_prefix(self._prefix(prefix, "delete_dir"))]
        limit = asyncio.Semaphore(64)

        async def delete(key: str) -> None:
            async with limit:
                await self.delete(key)

        await asyncio.gather(*(delete(key) for key in keys))

    async def _list(self, prefix: str | None = None) -> AsyncGenerator[Any, None]:
        checked = self._prefix(prefix or "", "list_prefix")
        with self._listing_refused(checked):
            if is_http_store(self):
                # a server that refuses Depth: infinity (403) is walked at Depth: 1
                for meta in await list_recursive(self, checked):
                    yield {**meta, "path": store_key(self, meta["path"])}
                return
            async for meta in super()._list(listing_prefix(self, checked)):
                yield {**meta, "path": store_key(self, meta["path"])}

    async def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        checked = self._prefix(prefix, "list_dir")
        with self._listing_refused(checked):
            # zarr names the children relative to the prefix it listed
            async for name in super().list_dir(object_key(self, checked)):
                yield name

    @contextmanager
    def _listing_refused(self, prefix: str) -> Iterator[None]:
        """A refused listing as a ``PermissionError`` naming the store, the prefix and the
        remedy of the cause (obstore's own words end in a page of HTML).

        obstore raises a refused S3 listing (credentials without ``s3:ListBucket``) as a
        ``GenericError`` whose text holds the ``403 Forbidden`` (only a refused GET is
        its ``PermissionDeniedError``): both are refusals, for callers that read by path
        when they cannot list."""
        from obstore.exceptions import BaseError, PermissionDeniedError

        try:
            yield
        except BaseError as exc:
            if not (isinstance(exc, PermissionDeniedError) or refused(exc)):
                raise
            remedy = failure_remedy(exc, http=is_http_store(self), options="storage_options")
            what = repr(prefix + "/") if prefix else "its root"
            raise PermissionError(f"{self}: listing {what} was refused; {remedy}") from exc

    async def getsize(self, key: str) -> int:
        return int(await super().getsize(self._key(key, "getsize")))


def open_fsspec(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """An fsspec-backed store for a cloud or HTTP URL."""
    try:
        from zarr.storage import FsspecStore
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            f"reading {url!r} needs fsspec: pip install 'cytearc-vfs[fsspec]'"
        ) from exc
    options = dict(storage_options or {})
    scheme = urlsplit(url).scheme
    limits = timeouts()
    if scheme == "s3":
        # s3fs passes these to botocore; options given explicitly win
        options["config_kwargs"] = {
            "connect_timeout": limits.connect,
            "read_timeout": limits.total,
            **(options.get("config_kwargs") or {}),
        }
    elif scheme in ("gs", "gcs"):
        # each request of gcsfs; its retries (six, with back-off) are its own
        options.setdefault("requests_timeout", limits.total)
    return FsspecStore.from_url(url, storage_options=options, read_only=read_only)


def _obstore_available() -> bool:
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def open_remote(url: str, read_only: bool, storage_options: Mapping[str, Any] | None) -> Store:
    """A cloud or HTTP URL through obstore (when installed) or fsspec.

    ``storage_options["backend"]`` (``"obstore"`` or ``"fsspec"``) chooses the
    library; it is taken out of the options the library receives.
    """
    options = dict(storage_options or {})
    choice = options.pop(BACKEND_OPTION, None)
    if choice is None:
        choice = "obstore" if _obstore_available() else "fsspec"
    if choice == "obstore":
        return open_obstore(url, read_only, options)
    if choice == "fsspec":
        return open_fsspec(url, read_only, options)
    raise ValueError(
        f"storage_options[{BACKEND_OPTION!r}] is {choice!r} for {url!r}; "
        f"write one of {', '.join(map(repr, BACKEND_CHOICES))}, or leave it out"
    )


def register_all() -> None:
    """Fill the core's backend registry (idempotent; runs when this module is imported)."""
    register_backend("file", open_local)
    register_backend("memory", open_memory)
    for scheme in REMOTE_SCHEMES:
        register_backend(scheme, open_remote, priority=1)


# Registering at import, whichever of cytearc_vfs and cytearc_vfs_adapters is
# imported first, breaks the import cycle between the face and its adapters.
register_all()
