"""``anndata_view``: a read-only zarr Store presenting any CyteArc store as an AnnData.

``anndata.read_zarr(view)`` and ``anndata.experimental.read_lazy(view)``
open it; nothing is copied. The layout (AnnData Zarr spec, current
versions):

- ``zarr.json``: the root group, ``encoding-type: anndata`` 0.1.0.
- ``X``: an ``array`` 0.2.0 element. Its document is the assay's counts
  document with AnnData's attributes, and its chunks are the counts' own
  chunk keys, re-keyed: an ordinary store's stored shards, a composite's
  computed virtual chunks. A mount serves its counts only through the gather
  reader, so its ``X`` chunks are computed from it (uncompressed).
- ``obs`` / ``var``: ``dataframe`` 0.2.0 groups (``_index``,
  ``column-order``) of the columns :mod:`.columns` keeps. Numbers and
  booleans are the table's arrays re-keyed; text is a ``string-array``
  whose variable-length UTF-8 chunks are encoded on read from the stored
  fixed-width chunks; categoricals are ``categorical`` 0.2.0 groups whose
  ``codes`` are computed on read and whose ``categories`` come from the
  column's record.
- ``uns``: the membership declaration (``uns/cytearc/assayMembership``),
  ``obsm``, ``varm``, ``obsp``, ``varp``, ``layers``: empty mappings.

Every key is checked by the package's shared key validation before any
I/O; writes and deletes are refused. The root document carries every other
document as consolidated metadata: the view never changes, so it is exact,
and anndata opens every element without a request per document.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import AsyncIterator
from itertools import product
from typing import Any, Unpack

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from cytearc_vfs.format.chunk_keys import ChunkKeys
from cytearc_vfs.format.key_checked import KeyCheckedStore
from cytearc_vfs.format.paths import join
from cytearc_vfs.remote.locations import Location

from .opened import OpenedAssay, OpenOptions, open_assay
from .view_layout import Computed, Rekeyed, ViewLayout, build_layout

__all__ = ["AnnDataViewStore", "anndata_view"]

_READ_ONLY = (
    "store was opened in read-only mode and does not support writing: the AnnData view of "
    "{where} is computed from that store; write to the store itself, or export a copy with "
    "'cytearc-vfs export'"
)


# How array_document names the chunks of the computed arrays; the one chunk-key
# reader (cytearc_vfs.format.chunk_keys) reads keys back, so the view answers
# exactly the keys it lists.
_CHUNK_KEYS = ChunkKeys("default", "/")


class AnnDataViewStore(KeyCheckedStore):
    """A read-only Store presenting one assay of a CyteArc store as an AnnData container.

    Build it with :func:`anndata_view`. See the module for the layout.
    """

    def __init__(
        self, opened: OpenedAssay, workspace: str | None = None, *, owns_viewed: bool = False
    ) -> None:
        super().__init__(read_only=True)
        self._viewed: Store | None = opened.store
        # a store the view opened itself (from a location, or unpickled) is closed
        # with it: a composite's remote shard cache lives until its store closes
        self._owns_viewed = owns_viewed
        self._assay, self._workspace = opened.assay, workspace
        self._pickled = b""
        self._where = opened.where
        self._built: ViewLayout | None = build_layout(opened)
        self._opening = threading.Lock()

    @classmethod
    def _unpickled(cls, viewed: bytes, assay: str, workspace: str | None) -> AnnDataViewStore:
        """A view of the pickled store ``viewed`` that unpickles and opens it (verified)
        when first read, not when made.

        Unpickling makes one: dask tokenizes each lazy array of ``read_lazy``
        by pickling and unpickling it, which reopened and re-verified the
        viewed store once per array (a composite: 1.8 s of a 2 s
        ``read_lazy`` over two sources); a dask worker opens it at its first
        read.
        """
        view = cls.__new__(cls)
        KeyCheckedStore.__init__(view, read_only=True)
        view._viewed, view._assay, view._workspace = None, assay, workspace
        view._owns_viewed = True
        view._pickled = viewed
        view._where = "a pickled AnnData view"
        view._built = None
        view._opening = threading.Lock()
        return view

    def _open_viewed(self) -> ViewLayout:
        with self._opening:
            if self._built is None:
                if self._viewed is None:
                    self._viewed = pickle.loads(self._pickled)
                opened = open_assay(self._viewed, self._assay, workspace=self._workspace)
                self._where = opened.where
                self._built = build_layout(opened)
            return self._built

    async def _layout(self) -> ViewLayout:
        """The view's layout, the viewed store opened first if it is not yet (off the
        event loop: opening reads through zarr's synchronous calls)."""
        built = self._built
        if built is None:
            built = await asyncio.to_thread(self._open_viewed)
        return built

    # ----------------------------------------------------------- identity

    def _viewed_pickle(self) -> bytes:
        # the viewed store pickles with its sources' storage options (credentials
        # in memory): a worker reads its remote sources (docs/anndata-out.md)
        return self._pickled if self._viewed is None else pickle.dumps(self._viewed)

    def __eq__(self, value: object) -> bool:
        if not isinstance(value, AnnDataViewStore):
            return False
        same_store = (
            value._viewed == self._viewed
            if value._viewed is not None and self._viewed is not None
            else value._viewed_pickle() == self._viewed_pickle()
        )
        return same_store and value._assay == self._assay and value._workspace == self._workspace

    def __hash__(self) -> int:
        return hash((type(self), self._assay, self._workspace))

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the viewed store, unpickled and opened at the first read
        return (AnnDataViewStore._unpickled, (self._viewed_pickle(), self._assay, self._workspace))

    def __str__(self) -> str:
        return f"anndata-view+{self._where}"

    def __repr__(self) -> str:
        return f"AnnDataViewStore({self._where!r}, assay={self._assay!r})"

    @property
    def viewed_store(self) -> Store | None:
        """The CyteArc store the view presents (``None`` until an unpickled view's first read)."""
        return self._viewed

    def close(self) -> None:
        """Close the view, and the viewed store when the view opened it (given a location)."""
        super().close()
        if self._owns_viewed and self._viewed is not None:
            self._viewed.close()

    def with_read_only(self, read_only: bool = False) -> AnnDataViewStore:
        """The view itself for ``read_only=True``; a view has no writable form."""
        if not read_only:
            raise ValueError(_READ_ONLY.format(where=self._where))
        return self

    # -------------------------------------------------------------- reads

    @staticmethod
    def _find(layout: ViewLayout, key: str) -> tuple[str, Rekeyed | Computed, str] | None:
        """(array path, array, key below it) of a chunk key, or ``None``."""
        head, rest = key, ""
        while "/" in head:
            head, _, last = head.rpartition("/")
            rest = f"{last}/{rest}" if rest else last
            array = layout.arrays.get(head)
            if array is not None:
                return head, array, rest
        return None

    def _layout_now(self) -> ViewLayout:
        # built at construction, except in an unpickled view before its first read
        return self._built if self._built is not None else self._open_viewed()

    def rekeyed_key(self, key: str) -> tuple[Store, str] | None:
        """The viewed store and the key there when ``key`` is a chunk of an array the view
        re-keys (``X`` over the stored or a composite's computed counts, numeric
        columns); ``None`` for documents, computed arrays and absent keys.

        What a directory tree of the view needs to size and time such a file as the
        viewed store's own (``cytearc-vfs mount-fs --as-anndata``). Called where
        blocking is allowed: an unpickled view opens its store first.
        """
        return self._rekeyed_in(self._layout_now(), key)

    @classmethod
    def _rekeyed_in(cls, layout: ViewLayout, key: str) -> tuple[Store, str] | None:
        """:meth:`rekeyed_key` in ``layout``: the view's own documents (``X/zarr.json``
        is the view's, not the store's) are not re-keyed."""
        found = None if key in layout.documents else cls._find(layout, key)
        if found is None:
            return None
        _, array, rest = found
        if not isinstance(array, Rekeyed) or rest == "zarr.json":
            return None
        return array.store, join(array.path, rest)

    def computes(self, key: str) -> bool:
        """Whether reading ``key`` computes its value in the view (a text column's or a
        categorical's codes chunk, ``X`` of a mount): a value to read whole, once,
        never range by range."""
        found = self._find(self._layout_now(), key)
        return found is not None and isinstance(found[1], Computed)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """A document or chunk of the view; ``None`` for a key it does not hold."""
        self._check_key(key, "get")
        layout = await self._layout()
        document = layout.documents.get(key)
        if document is not None:
            return _ranged(prototype, document, byte_range)
        found = self._find(layout, key)
        if found is None:
            return None
        _, array, rest = found
        if isinstance(array, Rekeyed):
            return await array.store.get(join(array.path, rest), prototype, byte_range)
        index = _CHUNK_KEYS.decode_in(rest, array.grid)
        if index is None:
            return None
        return _ranged(prototype, await array.chunk(index), byte_range)

    async def getsize(self, key: str) -> int:
        """Size of the value at ``key``: a document's, or a re-keyed chunk's as the
        viewed store gives it (a stat, or a composite's computed chunk's from its
        document: nothing is read or computed); a computed chunk is computed."""
        self._check_key(key, "getsize")
        layout = await self._layout()
        document = layout.documents.get(key)
        if document is not None:
            return len(document)
        inner = self._rekeyed_in(layout, key)
        return await (super().getsize(key) if inner is None else inner[0].getsize(inner[1]))

    async def exists(self, key: str) -> bool:
        """Whether the view holds ``key``."""
        self._check_key(key, "exists")
        layout = await self._layout()
        if key in layout.documents:
            return True
        found = self._find(layout, key)
        if found is None:
            return False
        _, array, rest = found
        if isinstance(array, Rekeyed):
            return rest != "zarr.json" and await array.store.exists(join(array.path, rest))
        return _CHUNK_KEYS.decode_in(rest, array.grid) is not None

    # ------------------------------------------------------------ listing

    @property
    def supports_writes(self) -> bool:
        """``False``: a view is read-only."""
        return False

    @property
    def supports_deletes(self) -> bool:
        """``False``: a view is read-only."""
        return False

    @property
    def supports_listing(self) -> bool:
        """``True``."""
        return True

    async def _chunk_keys(self, path: str, array: Rekeyed | Computed) -> list[str]:
        if isinstance(array, Computed):
            return [
                join(path, _CHUNK_KEYS.encode(index)) for index in product(*map(range, array.grid))
            ]
        prefix = join(array.path, "c")
        return [
            join(path, key[len(array.path) + 1 :])
            async for key in array.store.list_prefix(prefix)
            if key.startswith(prefix + "/")
        ]

    async def _keys(self, prefix: str) -> list[str]:
        layout = await self._layout()
        keys = [key for key in layout.documents if _below(key, prefix)]
        for path, array in layout.arrays.items():
            if _below(path, prefix) or _below(prefix, path):
                keys.extend(k for k in await self._chunk_keys(path, array) if _below(k, prefix))
        return sorted(keys)

    async def list(self) -> AsyncIterator[str]:
        """Every key of the view."""
        for key in await self._keys(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Keys at or below ``prefix`` (a path: ``obs`` does not match ``obsm``)."""
        self._check_prefix(prefix, "list_prefix")
        for key in await self._keys(prefix.rstrip("/")):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """Names of the children of ``prefix``.

        Found from the documents, and from chunk keys only for the array
        ``prefix`` is in: listing a group never enumerates the chunks of
        the arrays below it.
        """
        self._check_prefix(prefix, "list_dir")
        base = prefix.rstrip("/")
        layout = await self._layout()
        keys = [key for key in layout.documents if _below(key, base)]
        for path, array in layout.arrays.items():
            if _below(base, path):
                keys.extend(await self._chunk_keys(path, array))
        start = len(base) + 1 if base else 0
        names = {key[start:].split("/")[0] for key in keys if key != base and _below(key, base)}
        for name in sorted(names):
            yield name

    # ------------------------------------------------------------- writes

    async def set(self, key: str, value: Buffer) -> None:
        """Refused: the view is read-only (``ValueError``)."""
        self._check_key(key, "set")  # an escaping key is named as such first
        raise ValueError(_READ_ONLY.format(where=self._where))

    async def delete(self, key: str) -> None:
        """Refused: the view is read-only (``ValueError``)."""
        self._check_key(key, "delete")
        raise ValueError(_READ_ONLY.format(where=self._where))

    async def delete_dir(self, prefix: str) -> None:
        """Refused: the view is read-only (``ValueError``)."""
        self._check_prefix(prefix, "delete_dir")
        raise ValueError(_READ_ONLY.format(where=self._where))

    async def clear(self) -> None:
        """Refused, as ``delete_dir("")`` is in every store of the package."""
        self._check_prefix("", "clear")


def _below(key: str, prefix: str) -> bool:
    return not prefix or key == prefix or key.startswith(prefix + "/")


def _ranged(prototype: BufferPrototype, data: bytes, byte_range: ByteRequest | None) -> Buffer:
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        data = data[byte_range.start : byte_range.end]
    elif isinstance(byte_range, OffsetByteRequest):
        data = data[byte_range.offset :]
    elif isinstance(byte_range, SuffixByteRequest):
        data = data[-byte_range.suffix :] if byte_range.suffix else b""
    return prototype.buffer.from_bytes(data)


def anndata_view(
    location: Location | Store, assay: str = "RNA", **options: Unpack[OpenOptions]
) -> AnnDataViewStore:
    """A read-only zarr Store under which anndata opens ``location`` as an AnnData.

    Parameters
    ----------
    location
        An ordinary store, a composite or a mount: a path, a URL or a Store.
    assay
        The assay presented as ``X``.
    **options
        ``workspace``, ``storage_options``, ``source_storage_options``
        (:class:`~.opened.OpenOptions`).

    Examples
    --------
    >>> view = cv.anndata_view("pbmc.zarr")  # doctest: +SKIP
    >>> adata = anndata.experimental.read_lazy(view)  # doctest: +SKIP
    """
    unknown = sorted(set(options) - set(OpenOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"anndata_view() takes no option {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(sorted(OpenOptions.__annotations__))} (and assay)"
        )
    # a Store given stays the caller's to close; one opened here is the view's
    owned = not isinstance(location, Store)
    return AnnDataViewStore(
        open_assay(location, assay, **options), options.get("workspace"), owns_viewed=owned
    )
