"""Writing, deleting and renaming one store's keys, every key checked first.

A rename moves a chunk's stored bytes to another key without decoding them.
How depends on the store:

| store | rename | atomic |
| --- | --- | --- |
| ``LocalStore`` | ``os.replace`` of the file (no bytes written) | yes |
| ``ObjectStore`` (obstore: S3, GCS, Azure) | server-side copy, then delete (no bytes uploaded) | no |
| any other store, and wrappers | ``get`` + ``set`` of the same bytes, then ``delete`` | no |

Every key goes through :func:`cytearc_vfs.format.store_keys.check_key`
before the store sees it. The journal (:mod:`.journal`) only needs each
rename to be "copy, then delete the source": a crash between the two leaves
both keys, which recovery tells apart from every other state.

Local directories are hierarchical: ``c/0/1`` cannot be a file while
``c/0/1/0`` is written. :attr:`KeyMover.flat` says whether the store has
that constraint, so a promote knows when to pass chunks through a staging
prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.storage import LocalStore, MemoryStore

from ..format.object_keys import KEY_PREFIX_ATTR, object_key
from ..format.store_io import innermost_store
from ..format.store_keys import check_key, check_prefix

__all__ = ["KeyMover", "LocalKeyMover", "ObjectKeyMover", "mover_for", "replace_file"]


class KeyMover:
    """Key operations on ``store`` through zarr's Store API (the portable way).

    Parameters
    ----------
    store
        A writable store.
    flat
        Whether a key may be a path prefix of another key (object stores,
        memory); ``False`` for directories.
    """

    #: A rename is one indivisible step (no state with both keys).
    atomic_moves = False

    def __init__(self, store: Store, *, flat: bool) -> None:
        self.store = store
        self.flat = flat
        self.where = str(store)

    def _key(self, key: str, op: str) -> str:
        return check_key(key, op=op, where=self.where)

    async def get(self, key: str) -> bytes | None:
        """The bytes at ``key``, or ``None``."""
        found = await self.store.get(self._key(key, "get"), prototype=default_buffer_prototype())
        return None if found is None else found.to_bytes()

    async def set(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key``."""
        await self.store.set(self._key(key, "set"), Buffer.from_bytes(data))

    async def delete(self, key: str) -> None:
        """Delete ``key`` (nothing happens when it is absent)."""
        await self.store.delete(self._key(key, "delete"))

    async def move(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``: the same bytes, never decoded.

        Raises
        ------
        FileNotFoundError
            ``source`` does not exist.
        """
        source, target = self._key(source, "move"), self._key(target, "move")
        data = await self.get(source)
        if data is None:
            raise FileNotFoundError(f"{self.where}: key {source!r} to move to {target!r} is gone")
        await self.set(target, data)
        await self.delete(source)

    async def existing(self, prefix: str) -> frozenset[str]:
        """Every key under ``prefix`` (a directory prefix: ``"a/b/"`` or ``""``)."""
        check_prefix(prefix, op="list_prefix", where=self.where)
        if not self.store.supports_listing:
            raise ValueError(
                f"{self.where} cannot list its keys; resize and promote need to find the "
                "chunks an array holds"
            )
        if not self.store.supports_deletes:
            raise ValueError(
                f"{self.where} cannot delete keys (a zip file, for one, can only be added "
                "to); resize and promote rename chunks, which deletes their old keys, so "
                "nothing was changed. Copy the array to a directory or object store, change "
                "it there, and write a new zip from that copy"
            )
        return frozenset([key async for key in self.store.list_prefix(prefix)])

    async def tidy(self, prefix: str) -> None:
        """Remove what renames leave behind that is not a key (empty directories)."""


def replace_file(source: Path, target: Path) -> None:
    """``os.replace`` with the target's directories created first.

    Module-level so that the crash tests can count renames as the writes they are.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)


def _remove_empty_directories(top: Path) -> None:
    if not top.is_dir():
        return
    for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        # a directory another process just filled stays: rmdir refuses it
        with contextlib.suppress(OSError):
            os.rmdir(directory)


class LocalKeyMover(KeyMover):
    """A ``LocalStore``: renames are ``os.replace`` calls, atomic, with no bytes written."""

    atomic_moves = True

    def __init__(self, store: LocalStore) -> None:
        super().__init__(store, flat=False)
        self.root = Path(store.root)

    async def move(self, source: str, target: str) -> None:
        source, target = self._key(source, "move"), self._key(target, "move")
        try:
            await asyncio.to_thread(replace_file, self.root / source, self.root / target)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{self.where}: key {source!r} to move to {target!r} is gone"
            ) from exc

    async def tidy(self, prefix: str) -> None:
        # Chunk directories emptied by renames (a shrunk dimension's last
        # index, the staging prefix) are not keys, but would linger on disk.
        # Only the array's own chunk directories are touched.
        base = self.root / prefix if prefix else self.root
        for name in ("c", "cytearc.staging"):
            await asyncio.to_thread(_remove_empty_directories, base / name)


class ObjectKeyMover(KeyMover):
    """An obstore-backed ``ObjectStore``: a rename is a server-side copy, then a delete."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, flat=True)
        self._backend: Any = store.store  # type: ignore[attr-defined]

    async def move(self, source: str, target: str) -> None:
        import obstore

        source, target = self._key(source, "move"), self._key(target, "move")
        # a store over a shared client holds its keys below a prefix (object_keys)
        source, target = object_key(self.store, source), object_key(self.store, target)
        try:
            await obstore.copy_async(self._backend, source, target, overwrite=True)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{self.where}: key {source!r} to move to {target!r} is gone"
            ) from exc
        await obstore.delete_async(self._backend, source)


def _is_object_store(store: Store) -> bool:
    try:
        from zarr.storage import ObjectStore
    except ImportError:  # pragma: no cover - zarr without obstore support
        return False
    # exact type, or the backends' store over a shared client, whose methods
    # only map keys below its prefix (format/object_keys)
    return type(store) is ObjectStore or (
        isinstance(store, ObjectStore) and hasattr(store, KEY_PREFIX_ATTR)
    )


def mover_for(store: Store) -> KeyMover:
    """The fastest safe way to move keys in ``store`` (see the module's table).

    Exact types only: a subclass or wrapper may count or refuse what passes
    through it, so it gets the portable path through its own methods.
    """
    if type(store) is LocalStore:
        return LocalKeyMover(store)
    if _is_object_store(store):
        return ObjectKeyMover(store)
    inner = innermost_store(store)
    flat = isinstance(inner, MemoryStore) or _is_object_store(inner)
    return KeyMover(store, flat=flat)
