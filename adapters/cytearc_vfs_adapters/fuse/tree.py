"""A zarr ``Store`` seen as a directory tree: what a path is, its size, its children, its bytes.

Key prefixes are directories and keys are files (``RNA/counts/c/0/0`` is the
file ``0`` in the directory ``RNA/counts/c/0``). Everything here answers from
the store's own API: ``exists``, ``getsize``, ``list_dir`` and ranged ``get``.

One kind of key needs care: the count chunks of a composite
(:class:`~cytearc_vfs.CompositeStore`) are computed from the sources when
they are read, so asking zarr's default ``getsize`` for their size would
compute them. Their size is known without that: a virtual chunk is served at
its full chunk shape with only the ``bytes`` codec, so it holds
``prod(chunk_shape) * itemsize`` bytes (:func:`served_chunk_nbytes`). Listing
and sizing a composite therefore never reads a source; reading a virtual
chunk computes it once, whole (:meth:`StoreTree.read_whole`).

A name can be a key and a prefix at once on an object store: a *directory
marker*, the zero-byte object ``RNA/counts/`` that S3 consoles ("Create
folder") and some sync tools write, which obstore lists (and finds) as the
key ``RNA/counts``, beside the prefix ``RNA/counts/``. A Zarr key never has
keys below it, so such a name is shown as the directory: otherwise the
marker would hide the array behind a zero-byte file.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import default_buffer_prototype

from cytearc_vfs.composite.store import CompositeStore
from cytearc_vfs.errors import SourceGoneError
from cytearc_vfs.format.paths import join
from cytearc_vfs.format.store_io import holds_names_below, lists_as_empty_directory

from ..anndata_output.view import AnnDataViewStore
from ..serve.validators import Described, costs_a_request, describe

__all__ = ["Entry", "StoreTree", "served_chunk_nbytes"]


@dataclass(frozen=True, slots=True)
class Entry:
    """What one path of the tree is."""

    is_dir: bool
    """A key prefix (directory) rather than a key (file)."""
    size: int
    """Bytes of the file's value; 0 for a directory."""
    modified_ns: int | None = None
    """The file's modification time (ns since the epoch) where the store keeps one
    that costs no request: a local file's (of an ordinary store, a composite's own
    keys, a mount's local side); ``None`` for directories and everything else."""
    identity: str | None = None
    """For such a local file, its ``stat`` identity (size, ``mtime_ns``, inode,
    device; :attr:`~..serve.validators.Described.identity`): a read of a file
    opened with it checks that the file is still the one opened."""


def served_chunk_nbytes(document: Mapping[str, Any]) -> int | None:
    """Bytes of every chunk of an array whose chunks are served whole, uncompressed.

    ``None`` when the array has codecs other than ``bytes`` (its chunks'
    sizes then depend on their values) or an irregular chunk grid.

    >>> served_chunk_nbytes({
    ...     "data_type": "uint16",
    ...     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [100, 30]}},
    ...     "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    ... })
    6000
    >>> served_chunk_nbytes({
    ...     "data_type": "uint16",
    ...     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [100, 30]}},
    ...     "codecs": [{"name": "bytes"}, {"name": "zstd"}],
    ... }) is None
    True
    """
    codecs = document.get("codecs")
    grid = document.get("chunk_grid")
    if not isinstance(codecs, list) or [c.get("name") for c in codecs] != ["bytes"]:
        return None
    if not isinstance(grid, Mapping) or grid.get("name") != "regular":
        return None
    shape = grid.get("configuration", {}).get("chunk_shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return None
    itemsize: int = np.dtype(document["data_type"]).itemsize
    return math.prod(shape) * itemsize


class StoreTree:
    """Paths of a directory tree answered by a zarr ``Store`` (see the module).

    Parameters
    ----------
    store
        Any store: a plain backend store, a :class:`~cytearc_vfs.CompositeStore`,
        a :class:`~cytearc_vfs.MountStore`, or a wrapper of a remote one.

    Paths are store keys: no leading slash, ``""`` for the root.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._prototype = default_buffer_prototype()
        # (array path, bytes of each served chunk) of a composite's virtual arrays
        self._virtual: dict[str, int | None] = {}
        if isinstance(store, CompositeStore):
            self._virtual = {
                path: served_chunk_nbytes(document)
                for path, document in store.record.arrays.items()
            }
        # an AnnData view (mount-fs --as-anndata) re-keys the viewed store's chunks:
        # those are sized, timed and told computed or not as the viewed store's own
        self._view: AnnDataViewStore | None = None
        self._viewed: StoreTree | None = None
        if isinstance(store, AnnDataViewStore) and store.viewed_store is not None:
            self._view, self._viewed = store, StoreTree(store.viewed_store)

    def _in_viewed(self, key: str) -> tuple[StoreTree, str] | None:
        """The viewed store's tree and key of a chunk an AnnData view re-keys."""
        if self._view is None or self._viewed is None:
            return None
        found = self._view.rekeyed_key(key)
        if found is None or found[0] is not self._viewed.store:
            return None
        return self._viewed, found[1]

    @property
    def store(self) -> Store:
        """The store the tree shows."""
        return self._store

    def _virtual_chunk(self, key: str) -> str | None:
        """The virtual array holding ``key`` when ``key`` may be a computed chunk."""
        for path in self._virtual:
            if key.startswith(path + "/") and key != join(path, "zarr.json"):
                return path
        return None

    def is_computed(self, key: str) -> bool:
        """Whether reading ``key`` computes its value (a composite's count chunk).

        Such a value is read whole, once per open file, not range by range:
        every ranged read of it would compute the whole chunk again. So is a
        chunk an AnnData view computes, or re-keys from a composite's computed one.
        """
        inner = self._in_viewed(key)
        if inner is not None:
            return inner[0].is_computed(inner[1])
        if self._view is not None:
            return self._view.computes(key)
        return self._virtual_chunk(key) is not None

    async def _size(self, key: str) -> int:
        inner = self._in_viewed(key)
        if inner is not None:
            return await inner[0]._size(inner[1])
        store = self._store
        virtual = self._virtual_chunk(key)
        if virtual is not None:
            nbytes = self._virtual[virtual]
            if nbytes is not None:
                return nbytes
        if isinstance(store, CompositeStore) and not any(
            key == path or key.startswith(path + "/") for path in self._virtual
        ):
            # The composite's own keys live in its backing store, whose
            # getsize is a stat; the composite's inherited one reads the value.
            return await store.backing.getsize(key)
        # a virtual zarr.json is a small document; an unexpected virtual key
        # (a codec other than bytes) is measured the slow, exact way
        return await store.getsize(key)

    async def _described(self, key: str) -> Described | None:
        """What the server's validators know of the file ``key`` (a local file's
        ``stat``: its size and time), when finding it asks no backend."""
        inner = self._in_viewed(key)
        if inner is not None:
            return await inner[0]._described(inner[1])
        if costs_a_request(self._store, key):
            return None
        return await describe(self._store, key)

    async def _kind(self, key: str) -> bool | None:
        """Whether ``key`` is a key (a file); ``None`` when the store refuses the
        key's spelling (a backslash, a newline: an escape), so it is neither a
        file nor a directory."""
        try:
            return await self._store.exists(key)
        except ValueError:
            return None

    async def _is_dir(self, key: str) -> bool:
        return await holds_names_below(self._store, key)

    async def entry(self, key: str) -> Entry | None:
        """What ``key`` is: a file with its size, a directory, or ``None`` (absent)."""
        if key == "":
            return Entry(is_dir=True, size=0)
        kind = await self._kind(key)
        if kind is None:
            return None  # a spelling the store refuses: children() leaves it out too
        if kind:
            described = await self._described(key)
            try:
                # a local file's stat gives its size too; else the store's getsize
                known = None if described is None else described.size
                size = await self._size(key) if known is None else known
            except FileNotFoundError as exc:  # deleted between the two questions
                if isinstance(exc, SourceGoneError):
                    raise  # a source gone is a failure (EIO), never an absent file
                return None
            if size == 0 and await self._is_dir(key):
                return Entry(is_dir=True, size=0)  # a directory marker (see the module)
            if described is None:
                return Entry(is_dir=False, size=size)
            return Entry(False, size, described.modified_ns, described.identity)
        if await self._is_dir(key):
            return Entry(is_dir=True, size=0)
        if not costs_a_request(self._store, key) and await lists_as_empty_directory(
            self._store, key
        ):
            # an empty directory of a local store, which its parent lists (children()
            # shows it, so it must be entered, or find and cp -r fail on it); object
            # stores list no empty prefix, so a name looked up in vain there (zarr
            # readers probe .zarray, .zattrs...) costs no third request
            return Entry(is_dir=True, size=0)
        return None

    async def children(self, key: str) -> list[tuple[str, bool]]:
        """Names directly under the directory ``key``, each with whether it is a directory.

        Computes nothing: the names come from ``list_dir``, the kinds from
        ``exists`` (keys are files; a name that is no key is a prefix). A
        name the store refuses to read (a file of a local store whose name
        is no valid key) is left out: listed, it could be neither opened nor
        entered, and ``find`` or ``cp -r`` of the tree would fail on it.
        """
        listed = [name async for name in self._store.list_dir(key)]
        # a name listed twice is a prefix and a key: a directory marker (see the module)
        names = list(dict.fromkeys(listed))
        markers = {name for name, count in Counter(listed).items() if count > 1}
        kinds = await asyncio.gather(*(self._kind(join(key, name)) for name in names))
        return [
            (name, name in markers or not is_file)
            for name, is_file in zip(names, kinds, strict=True)
            if is_file is not None
        ]

    async def read(self, key: str, start: int, stop: int, identity: str | None = None) -> bytes:
        """Bytes ``start:stop`` of the value at ``key`` (fewer at its end).

        ``identity``: the :attr:`Entry.identity` the file was opened with. Each
        read opens the key anew, so a file replaced (or rewritten) since the
        open would hand the reader the new file's bytes after the old one's, a
        mix no file ever held; it is refused instead.

        Raises
        ------
        FileNotFoundError
            The key is gone (the file was listed, its value is not there).
        OSError
            The file is no longer the one opened with ``identity``.
        """
        if stop <= start:
            return b""
        value = await self._store.get(key, self._prototype, RangeByteRequest(start, stop))
        if value is None:
            raise FileNotFoundError(f"{key!r} is no longer in {self._store}")
        if identity is not None:
            now = await self._described(key)
            if now is None or now.identity != identity:
                raise OSError(
                    f"{key!r} was replaced or rewritten since it was opened, so its bytes "
                    "are no longer those of the file opened; open it again"
                )
        return value.to_bytes()

    async def read_whole(self, key: str) -> bytes:
        """The whole value at ``key`` (for computed values, see :meth:`is_computed`)."""
        value = await self._store.get(key, self._prototype)
        if value is None:
            raise FileNotFoundError(f"{key!r} is no longer in {self._store}")
        return value.to_bytes()
