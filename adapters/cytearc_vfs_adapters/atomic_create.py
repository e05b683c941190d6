"""Atomic conditional creation of one key: exactly one of many racing writers wins.

A pipeline's label claim (the spec: "a storage backend without atomic
conditional creation rejects a labeled run") needs a write that either creates
a key that did not exist or changes nothing, decided by the storage itself in
one step: a check followed by a write lets two writers both see "absent" and
both write (``benchmarks/bench_clouds.py`` shows it losing the race).

How each backend does it:

=====================================  =========================================
store                                  one step
=====================================  =========================================
``LocalStore`` (a directory)           the value goes to a temporary file beside
                                       the key, then ``link(2)`` names it: the
                                       link fails if the name exists, and a reader
                                       never sees a half-written value
``MemoryStore``, ``memory://NAME``     ``dict.setdefault`` (one step under the
                                       GIL; the store lives in one process)
``ObjectStore`` (obstore) over S3      ``PUT`` with ``If-None-Match: *``
... over Google Cloud Storage          ``x-goog-if-generation-match: 0``
... over Azure Blob                    ``PUT`` with ``If-None-Match: *``
... over a local directory or memory   as above (obstore links / locks)
``FsspecStore`` over s3fs              ``PutObject`` with ``IfNoneMatch="*"``
``FsspecStore`` over gcsfs             upload with ``ifGenerationMatch=0``
=====================================  =========================================

Everything else is refused with :class:`AtomicCreateUnsupportedError`, never
emulated by a check and a write: obstore's ``HTTPStore`` (plain HTTP is
read-only here), fsspec filesystems whose ``pipe_file(mode="create")`` is
fsspec's generic check-then-write, and store types this module does not know.

An S3-compatible server must honour ``If-None-Match: *`` on ``PUT`` (AWS S3
does since 2024, moto does); one that ignores the header would let a second
writer overwrite, and no client-side test can tell it from a correct one
short of racing it (``tests/test_atomic_create.py`` does, per backend).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ObjectStore

from cytearc_vfs.errors import VfsError
from cytearc_vfs.format.object_keys import object_key
from cytearc_vfs.format.store_keys import check_key

__all__ = [
    "AtomicCreateUnsupportedError",
    "create_if_absent",
    "create_if_absent_async",
    "supports_atomic_create",
]

#: Bytes-like values ``create_if_absent`` accepts, besides a zarr ``Buffer``.
Value = bytes | bytearray | memoryview | Buffer

# fsspec filesystems (by top-level package) whose pipe_file(mode="create") is
# one conditional request; fsspec's own default checks, then writes.
_ATOMIC_FSSPEC_PACKAGES = frozenset({"s3fs", "gcsfs"})

_REMEDY = (
    "use a store that can: a local directory, memory://NAME, s3://, gs:// or az:// "
    "(obstore), or s3:// and gs:// through fsspec (s3fs, gcsfs)"
)


class AtomicCreateUnsupportedError(VfsError, NotImplementedError):
    """The store cannot create a key atomically, so a claim on it would not be safe."""


def _refusal(store: Store, why: str) -> AtomicCreateUnsupportedError:
    return AtomicCreateUnsupportedError(
        f"{store} ({type(store).__name__}) cannot create a key atomically: {why}; {_REMEDY}"
    )


def _written_store(store: Store) -> Store | None:
    """The store a mount's or a composite's writes go to (its target or backing
    store), or ``None`` for any other store.

    Pipeline runs and their atomic label claims stay per store (spec,
    "Mounted targets"): a claim in a mount or a composite is a claim in the
    store that holds its writes, after the checks of a write through it
    (``conditional_target``).
    """
    from cytearc_vfs.composite.store import CompositeStore
    from cytearc_vfs.mount.store import MountStore

    if isinstance(store, MountStore):
        return store.target
    if isinstance(store, CompositeStore):
        return store.backing
    return None


def _unsupported_reason(store: Store) -> str | None:
    """Why ``store`` has no atomic creation, or ``None`` when it has."""
    written = _written_store(store)
    if written is not None:
        return _unsupported_reason(written)
    if isinstance(store, (LocalStore, MemoryStore)):
        return None
    if isinstance(store, ObjectStore):
        client = type(store.store).__name__
        if client == "HTTPStore":
            return "plain HTTP is read-only here (obstore's HTTPStore has no conditional PUT)"
        return None
    if isinstance(store, FsspecStore):
        package = type(store.fs).__module__.split(".")[0]
        if package in _ATOMIC_FSSPEC_PACKAGES:
            return None
        return (
            f"the fsspec filesystem {type(store.fs).__name__} ({package}) creates by checking "
            "first and writing after, which two writers can both pass"
        )
    return "this store type has no conditional write this module knows"


def supports_atomic_create(store: Store) -> bool:
    """Whether :func:`create_if_absent` can claim a key of ``store`` atomically.

    Decided from the store's type and backend, without a request. A read-only
    store reports the capability of its backend (opening it writable gives
    it).

    Examples
    --------
    >>> from zarr.storage import MemoryStore
    >>> supports_atomic_create(MemoryStore())
    True
    """
    return _unsupported_reason(store) is None


def _as_bytes(value: Value) -> bytes:
    if isinstance(value, Buffer):
        return value.to_bytes()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"create_if_absent takes bytes (or a zarr Buffer) as the value, not {type(value).__name__}"
    )


def _create_local(root: Path, key: str, data: bytes) -> bool:
    target = root / key
    if target.is_dir():
        raise ValueError(
            f"create_if_absent of {key!r} in {root}: a directory has that name, so the key "
            "cannot hold a value; claim a key that names a value, not a group"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # written in full under a temporary name first, so the name appears only
    # with its whole value: a reader never sees a partly written claim
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".new"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, target)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise AtomicCreateUnsupportedError(
                    f"{root}: the filesystem refuses hard links ({exc.strerror}), which atomic "
                    f"creation of {key!r} needs; {_REMEDY}"
                ) from exc
            raise
        return True
    finally:
        os.unlink(temporary)


def _create_in_memory(store: MemoryStore, key: str, data: bytes) -> bool:
    # a ManagedMemoryStore (memory://NAME/PATH) keeps its keys below its path
    prefix = getattr(store, "path", "")
    full = f"{prefix}/{key}" if prefix else key
    buffer = default_buffer_prototype().buffer.from_bytes(data)
    # setdefault is one step under the GIL: the first writer's buffer stays
    return store._store_dict.setdefault(full, buffer) is buffer


async def _create_in_object_store(store: ObjectStore[Any], key: str, data: bytes) -> bool:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        await obstore.put_async(store.store, object_key(store, key), data, mode="create")
    except (AlreadyExistsError, PreconditionError):
        # 409 (Azure) or 412 (S3, GCS): another writer created it first
        return False
    return True


async def _create_in_fsspec(store: FsspecStore, key: str, data: bytes) -> bool:
    path = f"{store.path.rstrip('/')}/{key}"
    try:
        await store.fs._pipe_file(path, data, mode="create")
    except FileExistsError:
        return False
    return True


async def create_if_absent_async(store: Store, key: str, value: Value) -> bool:
    """:func:`create_if_absent` for callers that run an event loop."""
    where = str(store)
    check_key(key, op="create_if_absent", where=where)
    data = _as_bytes(value)
    reason = _unsupported_reason(store)
    if reason is not None:
        raise _refusal(store, reason)
    if store.read_only:
        raise ValueError(
            f"create_if_absent of {key!r} in {where}: the store is read-only; "
            "open it with read_only=False"
        )
    if _written_store(store) is not None:
        forwarding: Any = store
        target = await forwarding.conditional_target(key)
        return await create_if_absent_async(target, key, data)
    if isinstance(store, LocalStore):
        import asyncio

        return await asyncio.to_thread(_create_local, Path(store.root), key, data)
    if isinstance(store, MemoryStore):
        return _create_in_memory(store, key, data)
    if isinstance(store, ObjectStore):
        return await _create_in_object_store(store, key, data)
    assert isinstance(store, FsspecStore)
    return await _create_in_fsspec(store, key, data)


def create_if_absent(store: Store, key: str, value: Value) -> bool:
    """Create ``key`` with ``value`` unless it exists, in one atomic step.

    Parameters
    ----------
    store : zarr.abc.store.Store
        A writable store whose backend can create atomically
        (:func:`supports_atomic_create`).
    key : str
        A store key (``"labels/run-7"``), checked by the package's key rule.
    value : bytes or zarr Buffer
        The whole value; a reader sees it entire or not at all.

    Returns
    -------
    bool
        ``True`` when this call created the key, ``False`` when the key already
        existed (its value is left as it was). Of any number of concurrent
        callers, threads or processes or machines, exactly one gets ``True``.

    Raises
    ------
    AtomicCreateUnsupportedError
        The backend cannot do it atomically (plain HTTP, a generic fsspec
        filesystem): refused rather than emulated by a check and a write.
    ValueError
        An unsafe key, or a read-only store.

    Examples
    --------
    >>> from zarr.storage import MemoryStore
    >>> store = MemoryStore()
    >>> create_if_absent(store, "claims/run-1", b"worker-a")
    True
    >>> create_if_absent(store, "claims/run-1", b"worker-b")
    False
    """
    return sync(create_if_absent_async(store, key, value))
