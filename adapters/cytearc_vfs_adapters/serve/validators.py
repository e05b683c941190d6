"""The validators of a served key: a strong ``ETag`` and a real ``Last-Modified``.

RFC 9110, section 8.8: an entity tag must change whenever the bytes it
describes could have changed, and should not change otherwise. A store key
has no version of its own, so :func:`describe` derives one per store kind,
from what the store already knows or from the request that finds the size
anyway (``getsize``); no value is read and no composite chunk is computed:

* a local store (zarr's ``LocalStore``): the file's ``stat``, its size,
  ``mtime_ns``, inode and device (a rewrite in place moves the mtime, a
  replace by rename brings a new inode), and ``Last-Modified`` from the
  mtime once its second has passed (a date of the current second could
  stay the same over a second write); one ``stat`` gives the size as well.
  An ordinary store's files get their tag at once: this package writes its
  shards whole and does not rewrite them while served, and a client that
  pins versions from a listing (this package reading a served store as a
  source) must find the same tag in the listing and in every later ``GET``;
* a composite's computed keys (its count arrays' documents and chunks): the
  composite's record (source bindings with their fingerprints, mapping
  fingerprints, array documents), which the open verified against every
  source, plus the key: a verified composite is immutable, and a source that
  changes after the open is refused (``502``), never read. No time is sent:
  a computed chunk has none. Every other key of a composite is its backing
  store's, described as that store's, settled (below);
* a mount: a target key from the target's store, a key the source serves
  from the source's store (an ``s``/``t`` mark keeps the two apart). A
  target file is *settled*: one whose mtime is less than
  :data:`SETTLED_SECONDS` old gets no validators, since the target is
  written by other processes and two writes of the same size in one clock
  tick would leave size, mtime and inode equal; a target on an object store
  gets none. A source key read through the remote pins gets its pinned
  version (the pinned store reads it with ``If-Match`` on it), and none
  before it is pinned;
* an object store (obstore, zarr's ``ObjectStore``): the backend's own
  ``ETag`` (or object version) from the ``HEAD`` that gives the size;
  fsspec: the ``ETag`` its ``info`` reports, asked of the backend (its
  listing cache is dropped for the key first); none when the backend has none;
* an AnnData view (``serve --as-anndata``): a chunk it re-keys from the
  viewed store (``X``, numeric columns) as that store's key, whose bytes
  it is; its own documents and the chunks it computes (text columns,
  categorical codes) get none;
* anything else: no validators.

The value is the store kind's identity hashed with the key (the composite
and the object-store cases) or written out (local files), quoted, so it is
one token in ``If-None-Match`` lists.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import weakref
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore, ObjectStore

from cytearc_vfs.composite.store import CompositeStore
from cytearc_vfs.format.object_keys import object_key
from cytearc_vfs.mount.store import MountStore
from cytearc_vfs.remote.object_versions import version_token
from cytearc_vfs.remote.pinned_store import PinnedSourceStore

from ..anndata_output.view import AnnDataViewStore
from .pieces import computed_on_read

__all__ = [
    "NO_VALIDATORS",
    "SETTLED_SECONDS",
    "Described",
    "Validators",
    "costs_a_request",
    "describe",
]

#: A mount target's file younger than this gets no validators (see the module).
SETTLED_SECONDS = 2.0
#: Changes when the bytes of a computed chunk would change for the same record
#: (how this package lays a chunk out): part of every composite tag.
_COMPUTED_LAYOUT = "cytearc-computed-chunk/1"
#: A composite's record, digested once per open store (a record of many sources
#: is large; every HEAD of a chunk needs it).
_RECORD_DIGESTS: weakref.WeakKeyDictionary[CompositeStore, str] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Validators:
    """What identifies the current bytes of a key, as sent in answer fields."""

    etag: str | None = None
    """A strong entity tag, quoted (``"..."``); ``None`` when the store gives none."""
    modified: int | None = None
    """The value's real modification time, whole seconds since the epoch; ``None``
    when there is none (a computed chunk, an object store's, or in doubt)."""

    def fields(self) -> list[tuple[str, str]]:
        """The ``ETag`` and ``Last-Modified`` fields of an answer."""
        fields = []
        if self.etag is not None:
            fields.append(("ETag", self.etag))
        if self.modified is not None:
            fields.append(("Last-Modified", formatdate(self.modified, usegmt=True)))
        return fields


#: A key the store gives no validators for.
NO_VALIDATORS = Validators()


@dataclass(frozen=True, slots=True)
class Described:
    """A key's validators, and its size when finding them gave it."""

    validators: Validators
    """Its ``ETag`` and ``Last-Modified``."""
    size: int | None
    """Its size in bytes, when the same request told it (``None``: ask ``getsize``)."""
    modified_ns: int | None = None
    """A local file's modification time in nanoseconds, exact and even while it may
    still change (``mount-fs`` shows it as the file's time); ``None`` elsewhere."""
    identity: str | None = None
    """A local file's size, ``mtime_ns``, inode and device, also while it is not
    settled (its tag, unquoted, once it is): a streamed answer compares it after
    every piece, so a file replaced or rewritten meanwhile is cut, never sent as
    a body of mixed bytes. ``None`` elsewhere."""


def _quoted(identity: str) -> str:
    """A strong tag of ``identity``: 32 hex digits of its SHA-256, quoted."""
    return '"' + hashlib.sha256(identity.encode()).hexdigest()[:32] + '"'


def costs_a_request(store: Store, key: str) -> bool:
    """Whether :func:`describe` asks the backend (a remote store's ``HEAD``).

    Such a request replaces ``getsize`` where an answer needs the size; a
    whole small value (one read, no size asked) describes itself only when the
    request is conditional.
    """
    if isinstance(store, CompositeStore):
        return not computed_on_read(store, key) and costs_a_request(store.backing, key)
    if isinstance(store, MountStore):
        return False  # a remote source gives only its pins, a local one a stat
    if isinstance(store, AnnDataViewStore):
        inner = store.rekeyed_key(key)
        return inner is not None and costs_a_request(*inner)
    return isinstance(store, ObjectStore | FsspecStore)


async def describe(store: Store, key: str) -> Described | None:
    """The validators of ``key`` of ``store`` (see the module); ``None`` when it holds no such key.

    Raises what the backend raises for other failures (the server answers them ``5xx``).
    """
    if isinstance(store, CompositeStore):
        if computed_on_read(store, key):  # the count arrays' documents and chunks
            return Described(Validators(_composite_tag(store, key)), None)
        # analyses write the composite's own keys, maybe in another process
        return await _describe_plain(store.backing, key, settled=True)
    if isinstance(store, MountStore):
        owner, from_source = await store.owner_of(key)
        described = await _describe_mount_side(owner, key, settled=not from_source)
        if described is None and from_source:
            # a chunk the source lacks is all fill only while its artifact is there: the
            # mount raises SourceGoneError (a 502) for a source gone, never a 404 (zeros)
            await store.exists(key)
        if described is None or described.validators.etag is None:
            return described
        mark = "s" if from_source else "t"
        tag = described.validators.etag
        return Described(
            Validators(f'"{mark}{tag[1:]}', described.validators.modified),
            described.size,
            described.modified_ns,
            described.identity,
        )
    if isinstance(store, AnnDataViewStore):
        inner = store.rekeyed_key(key)
        # a re-keyed chunk holds the viewed store's bytes: its validators are theirs
        return Described(NO_VALIDATORS, None) if inner is None else await describe(*inner)
    return await _describe_plain(store, key, settled=False)


def _composite_tag(store: CompositeStore, key: str) -> str:
    digest = _RECORD_DIGESTS.get(store)
    if digest is None:
        record = store.record
        identity = {
            "layout": _COMPUTED_LAYOUT,
            "record": record.to_json(),
            # verified against every source as the composite opened
            "sources": [
                [s.name, s.dataset_fingerprint, s.counts_fingerprint] for s in record.sources
            ],
        }
        encoded = json.dumps(identity, sort_keys=True, default=str).encode()
        digest = _RECORD_DIGESTS[store] = hashlib.sha256(encoded).hexdigest()
    return _quoted(f"{digest}:{key}")


async def _describe_mount_side(store: Store, key: str, *, settled: bool) -> Described | None:
    """A mount's side: a pinned remote source gives its pin, anything else as plain."""
    inner: Any = store
    while inner is not None and not isinstance(inner, PinnedSourceStore | LocalStore):
        wrapped = getattr(inner, "wrapped", None)
        inner = wrapped if isinstance(wrapped, Store) and wrapped is not inner else None
    if isinstance(inner, PinnedSourceStore):
        token = inner.token(key)
        # a pinned object is read with If-Match on its version: its bytes cannot change
        return Described(Validators(None if token is None else _quoted(f"pin:{key}:{token}")), None)
    if isinstance(inner, LocalStore):
        return await _describe_plain(inner, key, settled=settled)
    return Described(NO_VALIDATORS, None)  # a remote target is written by others: in doubt


async def _describe_plain(store: Store, key: str, *, settled: bool) -> Described | None:
    if isinstance(store, LocalStore):
        # a stat of a local file, on the event loop: a hop to a thread for it
        # cost more than the stat (GET of every key of an ordinary store took
        # 1.48x as long as with no validators; measured in docs/serve.md)
        return _describe_file(Path(store.root) / key, settled=settled)
    if isinstance(store, ObjectStore):
        return await _describe_object(store, key)
    if isinstance(store, FsspecStore):
        return await _describe_fsspec(store, key)
    return Described(NO_VALIDATORS, None)


def _describe_file(path: Path, *, settled: bool) -> Described | None:
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None  # a directory is no key
    identity = f"{info.st_size:x}-{info.st_mtime_ns:x}-{info.st_ino:x}-{info.st_dev:x}"
    if settled and time.time_ns() - info.st_mtime_ns < SETTLED_SECONDS * 1e9:
        # may still be written: no validators
        return Described(NO_VALIDATORS, info.st_size, info.st_mtime_ns, identity)
    # a date in the current second could stay the same over a second write (RFC
    # 9110, 8.8.2.2): Last-Modified only once its second has passed
    modified = int(info.st_mtime) if time.time() - info.st_mtime >= 1 else None
    validators = Validators(f'"{identity}"', modified)
    return Described(validators, info.st_size, info.st_mtime_ns, identity)


async def _describe_object(store: ObjectStore[Any], key: str) -> Described | None:
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        meta = await obstore.head_async(store.store, object_key(store, key))
    except (NotFoundError, FileNotFoundError):
        return None
    token = version_token(meta)
    # an ETag or a version id names the object's bytes; a time and size may not
    strong = token is not None and (token.startswith("version:") or token.startswith('etag:"'))
    return Described(Validators(_quoted(f"{key}:{token}") if strong else None), int(meta["size"]))


async def _describe_fsspec(store: FsspecStore, key: str) -> Described | None:
    path = f"{store.path.rstrip('/')}/{key}" if store.path else key
    # s3fs answers info from a cached listing, which may describe an older object
    store.fs.invalidate_cache(path)
    try:
        info = await store.fs._info(path)
    except FileNotFoundError:
        return None
    size = info.get("size")
    if info.get("type") == "directory":
        return None
    tag = info.get("ETag") or info.get("etag") or info.get("e_tag")
    strong = isinstance(tag, str) and not tag.startswith("W/") and tag.strip('"') != ""
    validators = Validators(_quoted(f"{key}:{tag}") if strong else None)
    return Described(validators, None if size is None else int(size))
