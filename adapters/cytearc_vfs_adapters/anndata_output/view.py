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
import json
import pickle
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from cytearc_vfs.format.chunk_keys import ChunkKeys
from cytearc_vfs.format.key_checked import KeyCheckedStore
from cytearc_vfs.format.paths import join
from cytearc_vfs.format.store_io import get_json
from cytearc_vfs.remote.locations import Location

from .columns import (
    ExportedColumn,
    categorical_codes,
    check_encodable,
    exported_columns,
    membership_column,
    membership_uns,
)
from .conversion import band_rows
from .documents import (
    ANNDATA_ROOT,
    array_document,
    encoded_attributes,
    group_document,
    numeric_chunk,
    text_chunk,
)
from .opened import OpenedAssay, OpenOptions, open_assay

__all__ = ["AnnDataViewStore", "anndata_view"]

#: Bytes of one computed chunk of a mount's ``X``.
_COMPUTED_X_CHUNK_BYTES = 4 << 20
_EMPTY_MAPPINGS = ("obsm", "varm", "obsp", "varp", "layers")
_READ_ONLY = (
    "store was opened in read-only mode and does not support writing: the AnnData view of "
    "{where} is computed from that store; write to the store itself, or export a copy with "
    "'cytearc-vfs export'"
)

ChunkFunction = Callable[[tuple[int, ...]], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class _Rekeyed:
    """An array whose chunks are another array's keys in the viewed store."""

    store: Store
    path: str


@dataclass(frozen=True, slots=True)
class _Computed:
    """An array whose chunks are computed on request."""

    grid: tuple[int, ...]
    """Chunks per dimension (``()`` for a 0-d array: one chunk, key ``c``)."""
    chunk: ChunkFunction


class _Layout:
    """The view's documents and arrays, built once at open."""

    def __init__(self) -> None:
        self.documents: dict[str, bytes] = {}
        self.arrays: dict[str, _Rekeyed | _Computed] = {}

    def consolidate(self) -> None:
        """Put every other document into the root's, as consolidated metadata.

        The view's documents never change, so the consolidated copy is exact;
        zarr and anndata then open every element without asking for it.
        """
        root = json.loads(self.documents["zarr.json"])
        root["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": {
                key.removesuffix("/zarr.json"): json.loads(document)
                for key, document in sorted(self.documents.items())
                if key != "zarr.json"
            },
        }
        self.documents["zarr.json"] = json.dumps(root).encode()

    def group(self, path: str, attributes: Mapping[str, Any]) -> None:
        self.documents[join(path, "zarr.json")] = group_document(attributes)

    def rekeyed(
        self, path: str, store: Store, source: str, attributes: Mapping[str, Any], where: str
    ) -> None:
        document = get_json(store, join(source, "zarr.json"), where=where)
        if not isinstance(document, dict) or document.get("node_type") != "array":
            raise ValueError(f"{where}: {source} is not a Zarr v3 array; the store is damaged")
        self.documents[join(path, "zarr.json")] = json.dumps(
            {**document, "attributes": dict(attributes)}
        ).encode()
        self.arrays[path] = _Rekeyed(store, source)

    def computed(
        self,
        path: str,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        dtype: np.dtype | str,
        attributes: Mapping[str, Any],
        chunk: ChunkFunction,
    ) -> None:
        self.documents[join(path, "zarr.json")] = array_document(shape, chunks, dtype, attributes)
        grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
        self.arrays[path] = _Computed(grid, chunk)


def _column_chunks(array: zarr.Array[Any]) -> tuple[int, int]:
    """(length, chunk length) of a 1-D table column."""
    length = int(array.shape[0])
    return length, max(1, int(array.chunks[0]))


def _rows_of(array: zarr.Array[Any], index: tuple[int, ...]) -> Awaitable[Any]:
    length, size = _column_chunks(array)
    start = index[0] * size
    return array._async_array.getitem(slice(start, min(length, start + size)))


def _text_array(
    layout: _Layout, path: str, array: zarr.Array[Any], attributes: Mapping[str, Any]
) -> None:
    """A ``string-array`` whose chunks are the stored text column's chunks, re-encoded."""
    length, size = _column_chunks(array)

    async def chunk(index: tuple[int, ...]) -> bytes:
        values = np.asarray(await _rows_of(array, index))
        return await asyncio.to_thread(text_chunk, values.astype(str).tolist(), size)

    layout.computed(path, (length,), (size,), "string", attributes, chunk)


def _categorical(
    layout: _Layout, path: str, array: zarr.Array[Any], column: ExportedColumn
) -> None:
    """A ``categorical`` 0.2.0 group: codes computed from the stored values."""
    layout.group(path, encoded_attributes("categorical", "0.2.0", ordered=column.ordered))
    length, size = _column_chunks(array)
    categories = list(column.categories)
    codes_dtype = categorical_codes(np.asarray(categories[:1], dtype=object), column).dtype

    async def codes(index: tuple[int, ...]) -> bytes:
        values = np.asarray(await _rows_of(array, index))
        return await asyncio.to_thread(
            lambda: numeric_chunk(categorical_codes(values, column), (size,))
        )

    plain = encoded_attributes("array", "0.2.0")
    layout.computed(join(path, "codes"), (length,), (size,), codes_dtype, plain, codes)
    count = max(1, len(categories))
    text = all(isinstance(value, str) for value in categories)
    kind: np.dtype | str = "string" if text else np.asarray(categories).dtype

    async def labels(index: tuple[int, ...]) -> bytes:
        if text:
            return text_chunk(categories, count)
        return numeric_chunk(np.asarray(categories), (count,))

    attributes = encoded_attributes("string-array", "0.2.0") if text else plain
    layout.computed(
        join(path, "categories"), (len(categories),), (count,), kind, attributes, labels
    )


def _frame(layout: _Layout, path: str, table: str, opened: OpenedAssay) -> str | None:
    """The ``dataframe`` element of the table at ``table``; returns its membership column."""
    group = zarr.open_group(opened.store, path=table, mode="r", zarr_format=3)
    arrays = {name: array for name, array in group.arrays()}
    if "ids" not in arrays:
        raise ValueError(f"{opened.where}: {table} has no ids column; the store is damaged")
    loaded: dict[str, npt.NDArray[Any]] = {}

    def values(name: str) -> npt.NDArray[Any]:
        if name not in loaded:
            loaded[name] = np.asarray(arrays[name][:])
        return loaded[name]

    attrs = {name: dict(array.attrs) for name, array in arrays.items()}
    kept = exported_columns(
        {name: array.dtype for name, array in arrays.items()}, attrs, opened.assay, values
    )
    check_encodable([column.name for column in kept], table=table)
    layout.group(
        path,
        encoded_attributes(
            "dataframe", "0.2.0", **{"_index": "_index", "column-order": [c.name for c in kept]}
        ),
    )
    strings = encoded_attributes("string-array", "0.2.0")
    _text_array(layout, join(path, "_index"), arrays["ids"], strings)
    for column in kept:
        array = arrays[column.name]
        where = join(path, column.name)
        if column.kind == "text":
            _text_array(layout, where, array, strings)
        elif column.kind == "categorical":
            _categorical(layout, where, array, column)
        else:
            layout.rekeyed(
                where,
                opened.store,
                join(table, column.name),
                encoded_attributes("array", "0.2.0"),
                opened.where,
            )
    return membership_column(attrs, opened.assay)


def _counts(layout: _Layout, opened: OpenedAssay) -> None:
    attributes = encoded_attributes("array", "0.2.0")
    if opened.counts_path is not None:
        layout.rekeyed("X", opened.store, opened.counts_path, attributes, opened.where)
        return
    n_cells, n_features = opened.shape
    dtype = opened.reader.dtype
    rows = min(max(1, n_cells), band_rows(n_features, dtype.itemsize, _COMPUTED_X_CHUNK_BYTES))
    chunks = (rows, max(1, n_features))
    reader = opened.reader

    async def chunk(index: tuple[int, ...]) -> bytes:
        start = index[0] * rows
        block = await reader.read_async(slice(start, min(n_cells, start + rows)), None)
        return await asyncio.to_thread(numeric_chunk, block, chunks)

    layout.computed("X", (n_cells, n_features), chunks, dtype, attributes, chunk)


def _mapping(layout: _Layout, path: str, content: Mapping[str, Any]) -> None:
    """A ``dict`` element of nested mappings and strings (what ``uns`` holds here)."""
    layout.group(path, encoded_attributes("dict", "0.1.0"))
    for key, value in content.items():
        where = join(path, key)
        if isinstance(value, Mapping):
            _mapping(layout, where, value)
            continue
        text = str(value)

        async def chunk(index: tuple[int, ...], text: str = text) -> bytes:
            return text_chunk([text], 1)

        layout.computed(where, (), (), "string", encoded_attributes("string", "0.2.0"), chunk)


def _build(opened: OpenedAssay) -> _Layout:
    layout = _Layout()
    layout.group("", ANNDATA_ROOT)
    _counts(layout, opened)
    membership = _frame(layout, "obs", opened.paths.cell_data, opened)
    _frame(layout, "var", opened.paths.feature_data, opened)
    _mapping(layout, "uns", membership_uns(membership, opened.assay))
    for name in _EMPTY_MAPPINGS:
        layout.group(name, encoded_attributes("dict", "0.1.0"))
    layout.consolidate()
    return layout


# How array_document names the chunks of the computed arrays; the one chunk-key
# reader (cytearc_vfs.format.chunk_keys) reads keys back, so the view answers
# exactly the keys it lists.
_CHUNK_KEYS = ChunkKeys("default", "/")


class AnnDataViewStore(KeyCheckedStore):
    """A read-only Store presenting one assay of a CyteArc store as an AnnData container.

    Build it with :func:`anndata_view`. See the module for the layout.
    """

    def __init__(self, opened: OpenedAssay, workspace: str | None = None) -> None:
        super().__init__(read_only=True)
        self._viewed: Store | None = opened.store
        self._assay, self._workspace = opened.assay, workspace
        self._pickled = b""
        self._where = opened.where
        self._built: _Layout | None = _build(opened)
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
        view._pickled = viewed
        view._where = "a pickled AnnData view"
        view._built = None
        view._opening = threading.Lock()
        return view

    def _open_viewed(self) -> _Layout:
        with self._opening:
            if self._built is None:
                if self._viewed is None:
                    self._viewed = pickle.loads(self._pickled)
                opened = open_assay(self._viewed, self._assay, workspace=self._workspace)
                self._where = opened.where
                self._built = _build(opened)
            return self._built

    async def _layout(self) -> _Layout:
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

    def with_read_only(self, read_only: bool = False) -> AnnDataViewStore:
        """The view itself for ``read_only=True``; a view has no writable form."""
        if not read_only:
            raise ValueError(_READ_ONLY.format(where=self._where))
        return self

    # -------------------------------------------------------------- reads

    @staticmethod
    def _find(layout: _Layout, key: str) -> tuple[str, _Rekeyed | _Computed, str] | None:
        """(array path, array, key below it) of a chunk key, or ``None``."""
        head, rest = key, ""
        while "/" in head:
            head, _, last = head.rpartition("/")
            rest = f"{last}/{rest}" if rest else last
            array = layout.arrays.get(head)
            if array is not None:
                return head, array, rest
        return None

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
        if isinstance(array, _Rekeyed):
            return await array.store.get(join(array.path, rest), prototype, byte_range)
        index = _CHUNK_KEYS.decode_in(rest, array.grid)
        if index is None:
            return None
        return _ranged(prototype, await array.chunk(index), byte_range)

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
        if isinstance(array, _Rekeyed):
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

    async def _chunk_keys(self, path: str, array: _Rekeyed | _Computed) -> list[str]:
        if isinstance(array, _Computed):
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
    return AnnDataViewStore(open_assay(location, assay, **options), options.get("workspace"))
