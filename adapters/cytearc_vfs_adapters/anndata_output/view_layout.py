"""The documents and arrays of an AnnData view (:mod:`.view`), built once at open.

What each path of the view holds (the layout is described in :mod:`.view`):
a document, an array whose chunks are another array's keys in the viewed
store (:class:`Rekeyed`), or an array whose chunks are computed on request
(:class:`Computed`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store

from cytearc_vfs.format.paths import join
from cytearc_vfs.format.store_io import get_json
from cytearc_vfs.format.table_attributes import recorded_column_order, recorded_index_name

from .columns import (
    INDEX_KEY,
    ExportedColumn,
    categorical_codes,
    check_encodable,
    exported_columns,
    index_name,
    membership_column,
    membership_uns,
    with_source_categories,
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
from .opened import OpenedAssay

__all__ = ["ChunkFunction", "Computed", "Rekeyed", "ViewLayout", "build_layout"]

#: Bytes of one computed chunk of a mount's ``X``.
_COMPUTED_X_CHUNK_BYTES = 4 << 20
_EMPTY_MAPPINGS = ("obsm", "varm", "obsp", "varp", "layers")
ChunkFunction = Callable[[tuple[int, ...]], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Rekeyed:
    """An array whose chunks are another array's keys in the viewed store."""

    store: Store
    path: str


@dataclass(frozen=True, slots=True)
class Computed:
    """An array whose chunks are computed on request."""

    grid: tuple[int, ...]
    """Chunks per dimension (``()`` for a 0-d array: one chunk, key ``c``)."""
    chunk: ChunkFunction


class ViewLayout:
    """The view's documents and arrays, built once at open."""

    def __init__(self) -> None:
        self.documents: dict[str, bytes] = {}
        self.arrays: dict[str, Rekeyed | Computed] = {}

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
        self.arrays[path] = Rekeyed(store, source)

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
        self.arrays[path] = Computed(grid, chunk)


def _column_chunks(array: zarr.Array[Any]) -> tuple[int, int]:
    """(length, chunk length) of a 1-D table column."""
    length = int(array.shape[0])
    return length, max(1, int(array.chunks[0]))


def _rows_of(array: zarr.Array[Any], index: tuple[int, ...]) -> Awaitable[Any]:
    length, size = _column_chunks(array)
    start = index[0] * size
    return array._async_array.getitem(slice(start, min(length, start + size)))


def _text_array(
    layout: ViewLayout, path: str, array: zarr.Array[Any], attributes: Mapping[str, Any]
) -> None:
    """A ``string-array`` whose chunks are the stored text column's chunks, re-encoded."""
    length, size = _column_chunks(array)

    async def chunk(index: tuple[int, ...]) -> bytes:
        values = np.asarray(await _rows_of(array, index))
        return await asyncio.to_thread(text_chunk, values.astype(str).tolist(), size)

    layout.computed(path, (length,), (size,), "string", attributes, chunk)


def _categorical(
    layout: ViewLayout, path: str, array: zarr.Array[Any], column: ExportedColumn
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
    # the stored values' dtype, which is the categories' (write_counts stores a
    # categorical as its categories' type): numpy alone makes [0, 2**64 - 1] float64
    kind: np.dtype | str = "string" if text else array.dtype

    async def labels(index: tuple[int, ...]) -> bytes:
        if text:
            return text_chunk(categories, count)
        return numeric_chunk(np.asarray(categories, dtype=array.dtype), (count,))

    attributes = encoded_attributes("string-array", "0.2.0") if text else plain
    layout.computed(
        join(path, "categories"), (len(categories),), (count,), kind, attributes, labels
    )


def _nullable(
    layout: ViewLayout, path: str, array: zarr.Array[Any], stored: str, opened: OpenedAssay
) -> None:
    """A ``nullable-integer`` / ``nullable-boolean`` 0.1.0 group: the stored column
    re-keyed as its ``values``, and a ``mask`` computed on read (nothing is missing)."""
    kind = "nullable-boolean" if array.dtype == np.bool_ else "nullable-integer"
    layout.group(path, encoded_attributes(kind, "0.1.0"))
    plain = encoded_attributes("array", "0.2.0")
    layout.rekeyed(join(path, "values"), opened.store, stored, plain, opened.where)
    length, size = _column_chunks(array)

    async def mask(index: tuple[int, ...]) -> bytes:
        return numeric_chunk(np.zeros(size, dtype=bool), (size,))

    layout.computed(join(path, "mask"), (length,), (size,), np.dtype(bool), plain, mask)


def _frame(layout: ViewLayout, path: str, table: str, opened: OpenedAssay) -> str | None:
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

    stored = {name: dict(array.attrs) for name, array in arrays.items()}
    cell_table = table == opened.paths.cell_data
    attrs = with_source_categories(stored, opened.source_names if cell_table else None)
    kept = exported_columns(
        {name: array.dtype for name, array in arrays.items()},
        attrs,
        opened.assay,
        values,
        recorded_column_order(group.attrs),
    )
    names = [column.name for column in kept]
    check_encodable(names, table=table)
    index = index_name(recorded_index_name(group.attrs), names) or INDEX_KEY
    layout.group(
        path,
        encoded_attributes("dataframe", "0.2.0", **{"_index": index, "column-order": names}),
    )
    strings = encoded_attributes("string-array", "0.2.0")
    _text_array(layout, join(path, index), arrays["ids"], strings)
    for column in kept:
        array = arrays[column.name]
        where = join(path, column.name)
        if column.kind == "text":
            _text_array(layout, where, array, strings)
        elif column.kind == "categorical":
            _categorical(layout, where, array, column)
        elif column.kind == "nullable":
            _nullable(layout, where, array, join(table, column.name), opened)
        else:
            layout.rekeyed(
                where,
                opened.store,
                join(table, column.name),
                encoded_attributes("array", "0.2.0"),
                opened.where,
            )
    return membership_column(attrs, opened.assay)


def _counts(layout: ViewLayout, opened: OpenedAssay) -> None:
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


def _mapping(layout: ViewLayout, path: str, content: Mapping[str, Any]) -> None:
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


def build_layout(opened: OpenedAssay) -> ViewLayout:
    layout = ViewLayout()
    layout.group("", ANNDATA_ROOT)
    _counts(layout, opened)
    membership = _frame(layout, "obs", opened.paths.cell_data, opened)
    _frame(layout, "var", opened.paths.feature_data, opened)
    _mapping(layout, "uns", membership_uns(membership, opened.assay))
    for name in _EMPTY_MAPPINGS:
        layout.group(name, encoded_attributes("dict", "0.1.0"))
    layout.consolidate()
    return layout
