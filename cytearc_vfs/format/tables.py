"""Cell and feature tables: one 1-D Zarr array per column, all of one length.

Every table has ``ids`` (unique, from the DataFrame index), ``names`` and
``I`` (bool, the live selection: every row, unless the DataFrame has a
boolean ``I`` column, as an export of a narrowed selection writes), then the
DataFrame's own columns. Text is
stored as fixed-width ``<U`` strings, which the DataStore above requires. A
categorical column is stored as its values (what plain readers expect) with
``categories`` and ``ordered`` attributes so :func:`read_table` restores it.

A ``names`` column given with the table is text too (:func:`names_text`).
Ids are strings, or integers converted with ``str()``; every other value,
the empty string, a NUL character and ids longer than :data:`MAX_ID_LENGTH`
are refused (see ``docs/writing.md``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import zarr
from zarr.abc.store import Store
from zarr.api.asynchronous import open_group as open_group_async
from zarr.core.array import AsyncArray

from .column_names import check_column_name, lone_surrogate
from .column_refusals import column_refusal, refuse_columns
from .live_selection import live_selection, live_selection_problem
from .missing_values import fill_missing, values_with_gaps
from .option_names import on_command_line, switched_on
from .table_attributes import (
    kept_index_name,
    recorded_column_order,
    recorded_index_name,
    table_attributes,
)
from .table_names import TableName

__all__ = [
    "CATEGORICAL_ATTR",
    "MAX_ID_LENGTH",
    "NULLABLE_ATTR",
    "PreparedTable",
    "StoredColumn",
    "StoredTable",
    "checked_ids",
    "column_values",
    "fill_missing",
    "live_selection_problem",
    "names_text",
    "prepare_table",
    "read_columns",
    "read_stored_table",
    "read_table",
    "write_table",
]

CATEGORICAL_ATTR = "cytearc:categorical"
#: Column attribute (``true``): the column was a pandas nullable integer or boolean
#: (``Int64``, ``boolean``...) without missing values, stored as its numpy type, so
#: readers that know it give the nullable type back (as anndata gives its own files).
NULLABLE_ATTR = "cytearc:nullable"
MAX_ID_LENGTH = 1024
"""Longest id accepted, in characters.

Ids are stored as fixed-width UTF-32, so the longest id sets the width of
every row: at 1,024 characters an id column costs at most 4 KiB per row,
while real ids (barcodes, sample-prefixed barcodes, Ensembl ids, gene
symbols) stay under a hundred characters.
"""
# Target size of one chunk of a text column: wide strings get fewer rows per
# chunk, so neither a chunk nor its in-memory conversion grows with the width.
_TEXT_CHUNK_BYTES = 4 << 20


def column_values(
    series: pd.Series, *, table: TableName
) -> tuple[npt.NDArray[Any], dict[str, Any]]:
    """The numpy values and attributes that store ``series`` as a column of ``table``
    (which a refusal names as its caller knows it)."""
    name = str(series.name)
    attrs: dict[str, Any] = {}
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        if series.isna().any():
            raise column_refusal(
                table,
                name,
                "is categorical with missing values",
                "fill them (e.g. add an 'unknown' category) before writing, or pass "
                f'{switched_on("fill_missing")} to store them as ""',
            )
        categories = dtype.categories
        attrs[CATEGORICAL_ATTR] = {
            "categories": [_json_scalar(v) for v in categories],
            "ordered": bool(dtype.ordered),
        }
        series = series.astype(categories.dtype)
        dtype = series.dtype
    if dtype.kind in "biuf" and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
        return np.asarray(series.to_numpy()), attrs
    if dtype.kind == "M" and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
        try:
            return np.asarray(series.to_numpy(dtype="datetime64[ns]")), attrs
        except (OverflowError, pd.errors.OutOfBoundsDatetime):
            # numpy's words ("Overflow when converting between datetime64 units") name
            # no column, and were no ValueError: every other column went unchecked
            raise column_refusal(
                table,
                name,
                f"({dtype}) holds datetimes outside {pd.Timestamp.min.year}.."
                f"{pd.Timestamp.max.year}, which a column stores as datetime64[ns] cannot hold",
                "convert it, e.g. with .astype(str)",
            ) from None
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "biuf":
        if series.isna().any():
            if dtype.kind == "f":
                # NaN marks them, in the column's own float width
                return series.to_numpy(
                    dtype=getattr(dtype, "numpy_dtype", np.float64), na_value=np.nan
                ), attrs
            raise column_refusal(
                table,
                name,
                f"({dtype}) holds missing values, which a Zarr column cannot mark",
                "fill them or convert the column to float, or pass "
                f"{switched_on('fill_missing')} to store them as NaN",
            )
        if dtype.kind in "biu":
            attrs[NULLABLE_ATTR] = True
        return series.to_numpy(dtype=getattr(dtype, "numpy_dtype", None)), attrs
    # strings (object, pandas string dtypes)
    values = series.to_numpy(dtype=object)
    bad = [v for v in values if not isinstance(v, str)]
    if bad and len(bad) == len(values) and not series.isna().any():
        # no text at all: a type no column stores (say so, rather than "among strings")
        timezone = (
            " (for a time zone: .dt.tz_convert(None) stores UTC)" if dtype.kind == "M" else ""
        )
        raise column_refusal(
            table,
            name,
            f"holds {dtype} values such as {bad[0]!r}, which a Zarr column cannot store "
            "(numbers, booleans, text, datetimes without a time zone and categoricals can)",
            f"convert it, e.g. with .astype(str){timezone}",
        )
    kind = values_with_gaps(values)
    if kind is not None:
        # booleans or numbers with None/NaN (or the "" fill_missing gave them): "among
        # strings" and its remedy fill_missing=True would go round in a circle
        raise column_refusal(
            table,
            name,
            f"holds {kind} with missing values (None or NaN) in an object column, which no "
            "Zarr column stores as it is",
            "give it a type that marks them, e.g. column.astype('boolean'), .astype('Int64') "
            f"or .astype('Float64') ({switched_on('fill_missing')} then stores them as "
            "float64 with NaN), or make it text with .astype(str)",
        )
    if bad:
        raise column_refusal(
            table,
            name,
            f"holds non-string values such as {bad[0]!r} among strings",
            "convert it with .astype(str) or fill missing values first (or pass "
            f'{switched_on("fill_missing")} to store missing text as "")',
        )
    _refuse_trailing_nul(values, table=table, name=name)
    # kept as Python strings: written chunk by chunk at the column's width, so a
    # long string costs its own length, not the width times every row
    return values, attrs


def _refuse_trailing_nul(values: npt.NDArray[Any], *, table: TableName, name: str) -> None:
    """Refuse text that ends in NUL: fixed-width ``<U`` text drops trailing NULs,
    so ``"x\\0"`` would read back as ``"x"`` (and a categorical's value would leave
    its recorded categories). A NUL inside the text is kept."""
    for position, text in enumerate(values.tolist()):
        if text.endswith("\0"):
            raise column_refusal(
                table,
                name,
                f"holds text ending in a NUL character at row {position} ({text[:40]!r}), "
                "which fixed-width text cannot keep (it drops trailing NULs, so the value "
                "would change)",
                "remove them first, e.g. column.str.rstrip('\\x00')",
            )


def _json_scalar(value: object) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def _create_column(
    group: zarr.Group, name: str, values: npt.NDArray[Any], attrs: dict[str, Any]
) -> None:
    text = values.dtype.kind in "UO"
    if text:
        # Fixed-width UTF-32, as CyteArc's and scarf's own writers store text:
        # the DataStore's string fingerprints cannot cast variable-length strings.
        width = max(1, _text_width(values))
        dtype = np.dtype(f"<U{width}")
        rows = max(1, min(262_144, _TEXT_CHUNK_BYTES // dtype.itemsize))
    else:
        dtype = values.dtype
        rows = 262_144
    array = group.create_array(
        name,
        shape=values.shape,
        dtype=dtype,
        chunks=(max(1, min(len(values), rows)),),
        attributes=attrs,
    )
    if not text:
        if len(values):
            array[:] = values
        return
    for start in range(0, len(values), rows):
        stop = min(len(values), start + rows)
        array[start:stop] = np.asarray(values[start:stop], dtype=dtype)


def _text_width(values: npt.NDArray[Any]) -> int:
    if values.dtype.kind == "U":
        return values.dtype.itemsize // 4
    return max(map(len, values), default=0)


@dataclass(frozen=True, slots=True)
class PreparedTable:
    """A table checked and converted, ready to write (so refusals come first)."""

    columns: tuple[tuple[str, npt.NDArray[Any], dict[str, Any]], ...]
    """(name, values, attributes) in write order, ``ids``, ``names`` and ``I`` first."""
    ids_fingerprint: str
    """Identity of the ordered ids."""
    index_name: str | None = None
    """The name of the DataFrame index the ids came from, or ``None``."""
    column_order: tuple[str, ...] = ()
    """The DataFrame's own columns, in its order (:mod:`.table_attributes`)."""

    @property
    def attributes(self) -> dict[str, Any]:
        """The table group's attributes (:func:`~.table_attributes.table_attributes`)."""
        return table_attributes(self.index_name, self.column_order)

    @property
    def length(self) -> int:
        """Number of rows."""
        return len(self.columns[0][1])

    @property
    def ids(self) -> npt.NDArray[np.str_]:
        """The checked ids, in row order."""
        return self.columns[0][1]

    def with_columns(
        self,
        columns: Sequence[tuple[str, npt.NDArray[Any], dict[str, Any]]],
        *,
        table: TableName,
    ) -> PreparedTable:
        """This table with ``columns`` (converted values and attributes) after its own.

        Raises ``ValueError`` for a name the table already has, an invalid
        name, or a column that is not 1-D of the table's length.
        """
        names = {name for name, _, _ in self.columns}
        for name, values, _ in columns:
            check_column_name(name, table=table)
            if name in names:
                raise ValueError(f"{table} already has a column {name!r}")
            if values.shape != (self.length,):
                raise ValueError(
                    f"{table.column(name)} has shape {values.shape}; every column of the "
                    f"table is 1-D of its {self.length} rows"
                )
            names.add(name)
        added = tuple(name for name, _, _ in columns)
        return replace(
            self,
            columns=(*self.columns, *columns),
            column_order=(*self.column_order, *added),
        )


def checked_ids(index: Sequence[Any] | pd.Index, *, table: TableName) -> npt.NDArray[np.str_]:
    """``index`` as an array of id strings; raises ``ValueError`` for ids it cannot store.

    Strings are kept and integers converted with ``str()``. Anything else
    (bool, float, NaN, ``None``, bytes, other objects), the empty string, a
    NUL character (fixed-width text drops trailing NULs, so the id would
    change), a lone surrogate (not UTF-8, so no fingerprint) and ids longer
    than :data:`MAX_ID_LENGTH` are refused, naming
    ``table`` (an AnnData's as its index: ``obs index value at position 0``), the
    position and the value. Unique ids are not checked here.

    >>> from cytearc_vfs.format.table_names import CELL_DATA, OBS
    >>> checked_ids(pd.Index([3, 10]), table=CELL_DATA).tolist()
    ['3', '10']
    >>> checked_ids(pd.Index(["a", ""]), table=OBS)
    Traceback (most recent call last):
    ValueError: obs index value at position 1 is the empty string, ...
    """
    values = np.asarray(index, dtype=object) if not isinstance(index, pd.Index) else index
    if isinstance(values, pd.Index) and values.dtype.kind in "iu":
        texts: list[str] = [str(v) for v in values.tolist()]
    else:
        texts = []
        for position, value in enumerate(np.asarray(values, dtype=object).tolist()):
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                texts.append(str(value))
            else:
                raise ValueError(
                    f"{table.ids} must be strings (integers are converted with str()), but "
                    f"position {position} holds {value!r} ({type(value).__name__}); convert "
                    "the ids yourself (e.g. decode bytes, replace missing ids) before "
                    "writing. Nothing was written"
                )
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    if len(texts) and (lengths.min() == 0 or lengths.max() > MAX_ID_LENGTH):
        empty = lengths == 0
        position = int(np.flatnonzero(empty | (lengths > MAX_ID_LENGTH))[0])
        if empty[position]:
            raise ValueError(
                f"{table.an_id} at position {position} is the empty string, which reads like a "
                "missing value; give every row a non-empty id. Nothing was written"
            )
        raise ValueError(
            f"{table.an_id} at position {position} is {lengths[position]:,} characters long "
            f"(starting {texts[position][:40]!r}); ids may have at most {MAX_ID_LENGTH:,} "
            "characters, because the id column is stored at the width of its longest id. "
            "Shorten the ids (keep long text in a column). Nothing was written"
        )
    for position, text in enumerate(texts):
        if "\0" in text:
            raise ValueError(
                f"{table.an_id} at position {position} ({text[:40]!r}) holds a NUL character, "
                "which fixed-width text cannot keep; remove it. Nothing was written"
            )
        surrogate = lone_surrogate(text)
        if surrogate is not None:
            # ids are fingerprinted as UTF-8, which has no lone surrogates
            raise ValueError(
                f"{table.an_id} at position {position} ({text[:40]!r}) holds the lone surrogate "
                f"{surrogate!r}, which is not UTF-8 text (often a file name or bytes decoded "
                "with errors='surrogateescape'); decode the ids correctly or replace it. "
                "Nothing was written"
            )
    return np.array(texts, dtype=str) if texts else np.array([], dtype="<U1")


def prepare_table(
    frame: pd.DataFrame,
    *,
    table: TableName,
    names: npt.NDArray[Any] | None = None,
    fill: bool = False,
) -> PreparedTable:
    """Check and convert ``frame`` (index = ids); raises before anything is written.

    Refusals name ``table`` as its caller knows it: an AnnData's as ``obs``,
    ``var`` or ``raw/var`` (:class:`~.table_names.TableName`).

    Ids follow :func:`checked_ids` and must be unique; column names must be
    unique, valid Zarr array names and not reserved. A column with missing
    values is refused unless ``fill``, which stores them by :func:`fill_missing`.
    """
    from .fingerprints import ids_fingerprint

    repeated = frame.columns[frame.columns.duplicated()].unique().tolist()
    if repeated:
        raise ValueError(
            f"{table} has more than one column named {repeated}; give every column its own "
            "name (e.g. frame.loc[:, ~frame.columns.duplicated()] keeps the first). "
            "Nothing was written"
        )
    ids = checked_ids(frame.index, table=table)
    if len(ids) != len(set(ids.tolist())):
        duplicated = pd.Index(ids)[pd.Index(ids).duplicated()][:3].tolist()
        option = "cells" if table.of_cells else "features"
        # an AnnData given by its path cannot be edited in place: make_unique (or, in
        # Python, a table of unique ids) can; a shell has no table to give
        others = (
            ""
            if on_command_line()
            else f", make the index unique (e.g. {table.unique_ids_call}) before writing, or "
            f"give {option}= a table whose index holds unique ids"
        )
        raise ValueError(
            f"{table.ids} must be unique; {duplicated} repeat. Pass "
            f"{switched_on('make_unique')} to rename repeats as anndata does (id-1, id-2, ...)"
            f"{others}. Nothing was written"
        )
    own: list[tuple[str, npt.NDArray[Any], dict[str, Any]]] = []
    refused: list[tuple[str, ValueError]] = []
    selection = np.ones(len(ids), dtype=bool)
    for position, name in enumerate(frame.columns):
        key = check_column_name(name, table=table)
        if key == "ids":
            raise ValueError(
                f"{table.column('ids', stored=True)} is reserved (ids come from the index); "
                "rename the "
                "column. Nothing was written"
            )
        series = frame.iloc[:, position]
        if key == "I":
            # an export keeps a narrowed live selection as this column: it comes back as one
            selection = live_selection(series, table=table)  # raises when it cannot be
            continue
        if key == "names":
            series = names_text(series, table=table)
        try:
            values, attrs = column_values(fill_missing(series) if fill else series, table=table)
        except ValueError as exc:
            # every column checked before refusing: a user who fixed the one named
            # was refused again for the next
            refused.append((key, exc))
            continue
        own.append((key, values, attrs))
    if refused:
        refuse_columns(refused, table=table)
    fingerprint = ids_fingerprint(ids)
    columns: list[tuple[str, npt.NDArray[Any], dict[str, Any]]] = [
        ("ids", ids, {"fingerprint": fingerprint})
    ]
    if not any(key == "names" for key, _, _ in own):
        columns.append(("names", ids if names is None else np.asarray(names, dtype=str), {}))
    columns.append(("I", selection, {}))
    columns.extend(own)
    order = tuple(str(name) for name in frame.columns)  # each checked above
    return PreparedTable(tuple(columns), fingerprint, kept_index_name(frame.index.name), order)


def names_text(series: pd.Series, *, table: TableName) -> pd.Series:
    """A table's own ``names`` column as text, which the DataStore reads names as.

    Text is kept, and integers are converted with ``str()`` as ids are (``7``
    is stored as ``"7"``, an exact and reversible change); a categorical's
    integer categories likewise. Missing values stay missing (refused by
    :func:`column_values`, or stored as ``""`` by :func:`fill_missing`). Every
    other value (float, bool, bytes, datetime...) is refused naming the table,
    the row and the value: its text is a choice (``1.0`` or ``"1"``?) that is
    the caller's, not the writer's.

    >>> from cytearc_vfs.format.table_names import CELL_DATA
    >>> names_text(pd.Series([3, 10], name="names"), table=CELL_DATA).tolist()
    ['3', '10']
    """
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        if categories.dtype.kind in "iu":
            return series.cat.rename_categories([str(v) for v in categories.tolist()])
        values = categories.to_numpy(dtype=object)
        offsets = np.arange(len(values))  # refused below by category, not by row
    else:
        values = series.to_numpy(dtype=object)
        offsets = None
    missing = pd.isna(values) if values.dtype == object else np.zeros(len(values), bool)
    converted: list[object] = []
    for row, value in enumerate(values.tolist()):
        if isinstance(value, str) or missing[row]:
            converted.append(value)
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            converted.append(str(value))
        else:
            where = f"category {row}" if offsets is not None else f"row {row}"
            raise ValueError(
                f"{table.column('names', stored=True)} holds {value!r} "
                f"({type(value).__name__}) at "
                f"{where}; names are text (integers are converted with str()), which the "
                "DataStore reads them as. Convert the column yourself, e.g. "
                f"{table.python}['names'].astype(str) (1.0 becomes '1.0'), or drop it to use "
                "the ids. "
                "Nothing was written"
            )
    if offsets is not None:
        return series  # text categories: stored with the categorical's attributes
    return pd.Series(converted, index=series.index, name=series.name, dtype=object)


def write_table(group: zarr.Group, prepared: PreparedTable) -> str:
    """Write a prepared table into ``group`` (created with ``prepared.attributes``);
    returns its ids fingerprint."""
    for key, values, attrs in prepared.columns:
        _create_column(group, key, values, attrs)
    return prepared.ids_fingerprint


def read_table(group: zarr.Group) -> pd.DataFrame:
    """Read a table group back into a DataFrame indexed by ``ids``."""
    data: dict[str, Any] = {}
    ids: Any = None
    for name, array in sorted(group.arrays(), key=lambda item: item[0]):
        values: Any = array[:]
        if name == "ids":
            ids = values
            continue
        spec = array.attrs.get(CATEGORICAL_ATTR)
        if isinstance(spec, dict):
            values = pd.Categorical(values, categories=spec["categories"], ordered=spec["ordered"])
        data[name] = values
    index = pd.Index(list(ids) if ids is not None else [], dtype=object)
    return pd.DataFrame(data, index=index)


@dataclass(frozen=True, slots=True)
class StoredColumn:
    """One stored column of a table, as read: its values and its array attributes."""

    values: npt.NDArray[Any]
    """The stored values (a categorical column's values, not codes)."""
    attrs: Mapping[str, Any]
    """The array's attributes (``cytearc:categorical``, membership ``role`` ...)."""

    @property
    def categorical(self) -> dict[str, Any] | None:
        """The column's ``{"categories", "ordered"}`` record, or ``None``."""
        spec = self.attrs.get(CATEGORICAL_ATTR)
        return spec if isinstance(spec, dict) else None


@dataclass(frozen=True, slots=True)
class StoredTable:
    """A table as read: its columns and its group's attributes."""

    columns: dict[str, StoredColumn]
    """By column name, sorted by name."""
    attrs: Mapping[str, Any]
    """The table group's attributes."""

    @property
    def index_name(self) -> str | None:
        """The index name the table was written with, or ``None``."""
        return recorded_index_name(self.attrs)

    @property
    def column_order(self) -> tuple[str, ...]:
        """The columns in the order the table was written with (may be empty)."""
        return recorded_column_order(self.attrs)


async def read_columns(store: Store, path: str) -> dict[str, StoredColumn]:
    """Every array of the table group at ``path`` (:func:`read_stored_table`'s columns)."""
    return (await read_stored_table(store, path)).columns


async def read_stored_table(store: Store, path: str) -> StoredTable:
    """Every array of the table group at ``path``, read concurrently, and its attributes.

    One listing, one concurrent round of array documents and one of chunks,
    however many columns the table has: on object storage a table costs a
    few round trips, not one per column. Sub-groups are skipped.

    Parameters
    ----------
    store
        The store holding the table (read only).
    path
        Key of the table group, such as ``"cellData"``.
    """
    group = await open_group_async(store=store, path=path, mode="r", zarr_format=3)
    arrays = sorted(
        [(name, node) async for name, node in group.members() if isinstance(node, AsyncArray)],
        key=lambda item: item[0],
    )
    values = await asyncio.gather(*(array.getitem(...) for _, array in arrays))
    columns = {
        name: StoredColumn(np.asarray(value), dict(array.metadata.attributes))
        for (name, array), value in zip(arrays, values, strict=True)
    }
    return StoredTable(columns, dict(group.metadata.attributes))
