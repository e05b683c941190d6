"""A composite's cell and feature columns, merged from its sources' tables.

The composite's cell table holds every cell column of its sources, for the
cells it keeps, in output order; its feature table holds the feature columns
of the features it chose. The rule for columns that disagree between sources
(documented in ``docs/composite.md``, "Cell and feature columns"):

- **Names.** A source column keeps its name unless the composite reserves it
  (:func:`reserved_cell_columns`: ``ids``, ``names``, ``I``, ``source``,
  ``sourceId``, the assay's membership and preparation columns; ``ids``,
  ``names`` and ``I`` in the feature table). A reserved name is prefixed
  ``orig_``, again until the name is free (as DataStoreMerge names merged
  columns ``orig_<name>``), so a source ``source`` column becomes
  ``orig_source``. Source ``ids`` are not carried again: they are the
  ``sourceId`` cell column and the feature ids; feature ``names`` come from
  the first source holding each feature. A source's cell ``names`` equal to
  its ids and ``I`` selecting every row (cells or features) are the defaults
  ``write_counts`` writes from the index, not data: unless some source holds
  other values in one, it is not carried (:func:`_defaults_left_out`).
- **Order.** Columns follow in order of first appearance over the sources,
  each source's in the order its table records (``cytearc:columnOrder``;
  an AnnData source's ``column-order``), as ``anndata.concat`` orders them.
- **Missing values.** Rows of a source that lacks a column are missing: text
  ``""``, numbers and booleans NaN (the column becomes float64 unless it is
  already a float), datetimes NaT. A categorical text column gets ``""`` as
  its last category.
- **Types.** Booleans and numbers take numpy's common type (``bool`` with
  ``int64`` gives ``int64``, ``int64`` with ``uint64`` gives ``float64``);
  datetimes the common unit; any other mix becomes text (``str`` of each
  value, ``"True"``, ``"1.5"``). A column is categorical only when every
  source stores it categorical; its categories are the sources' categories
  in order of first appearance.
- **Feature values.** A feature takes each column's value from the first
  source, in mapping order, that holds both the feature and the column.
  Features whose later sources hold another value are counted into the
  column's ``cytearc:valueConflicts`` attribute and logged.
- **Membership.** A source's ``{assay}_I`` membership column (``role`` =
  ``assay_membership``) becomes the composite's, ``True`` for the cells of
  sources without one; membership columns of other assays are not carried.
  Carried columns keep no attributes but their categorical record.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import IdentityMismatchError, UnsupportedSourceError, VfsError
from ..format.column_names import ORIG_PREFIX, RESERVED_COLUMNS, free_column_name
from ..format.gathering import gather_bounded
from ..format.paths import join
from ..format.table_attributes import ordered_names
from ..format.tables import CATEGORICAL_ATTR, StoredColumn, read_stored_table
from ..read.anndata_elements import features_frame
from ..read.prefetch import MAX_IN_FLIGHT
from ..read.sources import BoundSource
from ..write.membership import MEMBERSHIP_ROLE
from .anndata_columns import anndata_columns

__all__ = [
    "CONFLICTS_ATTR",
    "COMPOSITE_CELL_COLUMNS",
    "MEMBERSHIP_ROLE",
    "ORIG_PREFIX",
    "Column",
    "SourceTables",
    "merge_cell_columns",
    "merge_feature_columns",
    "read_source_tables",
    "reserved_cell_columns",
]

logger = logging.getLogger(__name__)

#: Cell columns every composite writes besides ``ids``, ``names`` and ``I``.
COMPOSITE_CELL_COLUMNS = ("source", "sourceId")
#: Attribute of a feature column: how many features' values disagree between sources.
CONFLICTS_ATTR = "cytearc:valueConflicts"

Column = tuple[str, npt.NDArray[Any], dict[str, Any]]
"""(name, values, attributes), as :class:`~cytearc_vfs.format.tables.PreparedTable` holds them."""


@dataclass(frozen=True, slots=True)
class SourceTables:
    """The tables of one source, as read at creation."""

    name: str
    """The source's name (for messages)."""
    shape: tuple[int, int]
    """The source assay's (cells, features): the length of each table."""
    cells: Mapping[str, StoredColumn]
    """Every cell column, all rows."""
    features: Mapping[str, StoredColumn]
    """Every feature column, all rows."""
    assay_attrs: Mapping[str, Any]
    """Attributes of the source's assay group (``percentFeatures`` names metric columns)."""


async def _read_source(source: BoundSource) -> SourceTables:
    if source.anndata is not None:
        # an AnnData source's obs and var, read by the adapters' element layer
        counts = source.anndata
        assert counts.cell_ids is not None and counts.feature_ids is not None
        features_table = features_frame(counts.element.path)
        try:
            read = await anndata_columns(
                source.store,
                assay=source.info.paths.assay,
                source=source.name,
                features=features_table,
            )
        except UnsupportedSourceError:
            raise
        except ValueError as exc:
            if not isinstance(exc, VfsError):  # a fault of this package, not of the source
                raise
            # the element layer's refusal of obs or var names the element, not the
            # source: with many sources, which one is the user's first question
            raise UnsupportedSourceError(
                f"source {source.name!r} at {source.location}: {exc}; repair the source's obs "
                f"and {features_table} (or write it again with anndata), then create the "
                "composite"
            ) from exc
        if read is None:  # no element reader installed: the indexes alone
            return SourceTables(
                source.name,
                source.info.shape,
                {"ids": StoredColumn(counts.cell_ids, {})},
                {"ids": StoredColumn(counts.feature_ids, {})},
                {},
            )
        cells, features = read
        _check_same_ids(source.name, cells["ids"].values, counts.cell_ids, "obs")
        _check_same_ids(source.name, features["ids"].values, counts.feature_ids, features_table)
        return SourceTables(source.name, source.info.shape, cells, features, {})
    paths = source.info.paths
    # through the documents and listing the source was verified from: the
    # tables' group documents, ids and member listing cost no request
    store = source.view if source.view is not None else source.store
    cell_table, feature_table, assay_doc = await asyncio.gather(
        read_stored_table(store, paths.cell_data),
        read_stored_table(store, paths.feature_data),
        store.get(join(paths.assay_group, "zarr.json"), default_buffer_prototype()),
    )
    attrs: Any = {}
    if assay_doc is not None:
        attrs = json.loads(assay_doc.to_bytes()).get("attributes", {})
    # in the order the table was written from (its frame's), not the listing's
    cells, features = (
        {
            name: table.columns[name]
            for name in ordered_names(list(table.columns), table.column_order)
        }
        for table in (cell_table, feature_table)
    )
    return SourceTables(
        source.name, source.info.shape, cells, features, attrs if isinstance(attrs, dict) else {}
    )


def _check_same_ids(source: str, read: Any, bound: Any, table: str) -> None:
    """The ids the element layer read must be the ones the source was bound with."""
    if not np.array_equal(np.asarray(read, dtype=str), np.asarray(bound, dtype=str)):
        raise IdentityMismatchError(
            f"source {source!r}: the {table} index changed while the composite was created "
            "(its table reads other ids than its counts were bound to); create it again"
        )


def read_source_tables(sources: Sequence[BoundSource]) -> list[SourceTables]:
    """Read the cell and feature tables of every source, concurrently.

    Each table costs one listing and two concurrent rounds (array documents,
    then chunks; a local source's listing and documents were read with its
    binding), and the tables of up to :data:`~..read.prefetch.MAX_IN_FLIGHT`
    sources are in flight at once, as many as the requests the sources'
    shared gate lets through: creation does not add a round trip per column
    or per source, and hundreds of sources do not queue at once.
    """

    async def read_all() -> list[SourceTables]:
        return await gather_bounded(_read_source, sources, MAX_IN_FLIGHT)

    return sync(read_all())


# ---------------------------------------------------------------- the rule


@dataclass(frozen=True, slots=True)
class _Piece:
    """Rows of one source's column that fill rows of the output column."""

    column: StoredColumn
    source_rows: npt.NDArray[np.int64]
    output_rows: npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Target:
    """The output type of a merged column."""

    dtype: np.dtype
    """Storage dtype; ``object`` while text is assembled."""
    categorical: bool


def _is_text(dtype: np.dtype) -> bool:
    return dtype.kind not in "biufcM"


def _target(columns: Sequence[StoredColumn], missing: bool) -> _Target:
    dtypes = [column.values.dtype for column in columns]
    categorical = all(column.categorical is not None for column in columns)
    if all(dtype.kind in "biufc" for dtype in dtypes):
        dtype = np.result_type(*dtypes)
        if missing:
            # a NaN needs a float; numpy's float64 holds every int32 exactly
            dtype = dtype if dtype.kind in "fc" else np.dtype(np.float64)
            categorical = False  # a categorical of numbers cannot mark a missing value
        return _Target(dtype, categorical)
    if all(dtype.kind == "M" for dtype in dtypes):
        return _Target(np.result_type(*dtypes), categorical and not missing)
    return _Target(np.dtype(object), categorical)


def _convert(values: npt.NDArray[Any], target: _Target) -> npt.NDArray[Any]:
    if _is_text(target.dtype):
        return np.asarray(values).astype(str).astype(object)
    return np.asarray(values).astype(target.dtype)


def _missing(target: _Target) -> Any:
    if _is_text(target.dtype):
        return ""
    if target.dtype.kind == "M":
        return "NaT"  # numpy parses it in the array's own unit
    return np.nan


def _assemble(
    pieces: Sequence[_Piece], length: int, target: _Target, *, missing: bool
) -> npt.NDArray[Any]:
    # without missing rows every row is assigned below (and an integer cannot hold NaN)
    out = (
        np.full(length, _missing(target), dtype=target.dtype)
        if missing or _is_text(target.dtype)
        else np.empty(length, dtype=target.dtype)
    )
    for piece in pieces:
        out[piece.output_rows] = _convert(piece.column.values[piece.source_rows], target)
    return out


def _json_value(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _categories(spec: dict[str, Any], stored: np.dtype) -> npt.NDArray[Any]:
    """A categorical record's categories in the stored column's dtype (a number's
    column holds its categories' type): numpy alone makes the JSON ``[1, 2**64 - 1]``
    float64, which rounds the latter. Text keeps numpy's own width, since a
    category may be longer than every stored value.

    >>> _categories({"categories": [1, 2**64 - 1]}, np.dtype(np.uint64)).tolist()
    [1, 18446744073709551615]
    """
    categories = spec["categories"]
    return np.asarray(categories, dtype=stored if stored.kind in "biuf" else None)


def _categorical_attrs(
    columns: Sequence[StoredColumn], values: npt.NDArray[Any], target: _Target
) -> dict[str, Any]:
    listed: list[Any] = []
    orders: list[list[Any]] = []
    for column in columns:
        spec = column.categorical
        assert spec is not None
        converted = _convert(_categories(spec, column.values.dtype), target).tolist()
        orders.append(converted)
        listed.extend(converted)
    # values not among the converted categories (the "" of missing rows, or a
    # float category whose text differs after the cast) are appended
    categories = list(dict.fromkeys([*listed, *pd.unique(values).tolist()]))
    ordered = all(
        column.categorical and column.categorical["ordered"] for column in columns
    ) and all(order == categories for order in orders)
    return {
        CATEGORICAL_ATTR: {
            "categories": [_json_value(v) for v in categories],
            "ordered": bool(ordered),
        }
    }


def _merge(
    pieces: Sequence[_Piece], length: int
) -> tuple[npt.NDArray[Any], dict[str, Any], _Target]:
    covered = np.zeros(length, dtype=bool)
    for piece in pieces:
        covered[piece.output_rows] = True
    missing = not covered.all()
    target = _target([piece.column for piece in pieces], missing)
    values = _assemble(pieces, length, target, missing=missing)
    attrs = (
        _categorical_attrs([piece.column for piece in pieces], values, target)
        if target.categorical
        else {}
    )
    if _is_text(target.dtype):
        values = values.astype(str) if length else np.array([], dtype="<U1")
    return values, attrs, target


def _usable(
    table: Mapping[str, StoredColumn], length: int, *, source: str, what: str
) -> dict[str, StoredColumn]:
    """The 1-D columns of ``length`` rows; others break the table convention and are skipped."""
    usable = {}
    for name, column in table.items():
        if column.values.shape != (length,):
            logger.warning(
                "source %r: %s column %r has shape %s, not (%d,); it is not carried",
                source,
                what,
                name,
                column.values.shape,
                length,
            )
            continue
        usable[name] = column
    return usable


def _is_default(name: str, column: StoredColumn, ids: StoredColumn | None) -> bool:
    """Whether ``column`` holds what ``write_counts`` writes as ``name`` from the index alone:
    ``names`` equal to the ids (``ids`` given: the cell table), ``I`` selecting every row."""
    if name == "I":
        return column.values.dtype == np.bool_ and bool(column.values.all())
    return (
        name == "names"
        and ids is not None
        and column.categorical is None
        and np.array_equal(column.values.astype(str), ids.values.astype(str))
    )


def _defaults_left_out(
    tables: Sequence[dict[str, StoredColumn]], ids: Sequence[StoredColumn | None]
) -> None:
    """Drop ``names`` and ``I`` from every source's columns when each source holding one
    holds the default (:func:`_is_default`): carried, they would be ``orig_names`` /
    ``orig_I`` columns of the ids and of ``True``, which no source's user wrote
    (``to_anndata`` of each source leaves them out too). One source with other
    values keeps the column for all, so no value is lost."""
    for name in ("names", "I"):
        held = [(own, own_ids) for own, own_ids in zip(tables, ids, strict=True) if name in own]
        if all(_is_default(name, own[name], own_ids) for own, own_ids in held):
            for own, _ in held:
                del own[name]


def _output_names(
    tables: Iterable[Mapping[str, StoredColumn]], reserved: set[str]
) -> dict[str, str]:
    """Source column name -> composite column name, in order of first appearance."""
    seen = list(dict.fromkeys(name for table in tables for name in table))
    taken = reserved | set(seen)
    return {name: free_column_name(name, taken) if name in reserved else name for name in seen}


def reserved_cell_columns(assay: str, assay_attrs: Iterable[Mapping[str, Any]]) -> set[str]:
    """Cell column names a source column may not take in the composite.

    The table's own ``ids``, ``names`` and ``I``; ``source`` and ``sourceId``;
    the assay's membership column ``{assay}_I``; and the assay's preparation
    metrics (``{assay}_nCounts``, ``{assay}_nFeatures`` and ``{assay}_{name}``
    for each name a source records in ``percentFeatures``), which describe a
    source's counts, not the composite's, and whose presence would mark the
    composite's assay as prepared.
    """
    reserved = {*RESERVED_COLUMNS, *COMPOSITE_CELL_COLUMNS}
    reserved |= {f"{assay}_I", f"{assay}_nCounts", f"{assay}_nFeatures"}
    for attrs in assay_attrs:
        percent = attrs.get("percentFeatures")
        if isinstance(percent, Mapping | list):
            reserved |= {f"{assay}_{name}" for name in percent if isinstance(name, str)}
    return reserved


def _membership(column: StoredColumn, assay: str, *, source: str) -> bool:
    """Whether ``{assay}_I`` of ``source`` is the assay's membership column (refusing a broken one)."""
    if column.attrs.get("role") != MEMBERSHIP_ROLE:
        return False
    if column.attrs.get("assay") != assay or column.values.dtype != np.bool_:
        raise ValueError(
            f"source {source!r}: cell column {assay}_I has role {MEMBERSHIP_ROLE!r} but "
            f"assay {column.attrs.get('assay')!r} and dtype {column.values.dtype}; a membership "
            f"column of assay {assay!r} is boolean and names it. Repair the source (drop the "
            "column, or rebuild the store) before composing it"
        )
    return True


def merge_cell_columns(
    tables: Sequence[SourceTables],
    row_sources: npt.NDArray[np.integer[Any]],
    source_rows: npt.NDArray[np.int64],
    *,
    assay: str,
) -> list[Column]:
    """The cell columns a composite carries from its sources, in output cell order.

    Parameters
    ----------
    tables
        Each source's tables, in mapping order.
    row_sources, source_rows
        Source index and source row of each output cell.
    assay
        The composed assay.

    Returns
    -------
    list of Column
        The membership column ``{assay}_I`` first when a source has one, then
        the carried columns in order of first appearance (sources in mapping
        order, each source's columns by name).
    """
    length = len(row_sources)
    reserved = reserved_cell_columns(assay, (table.assay_attrs for table in tables))
    membership_name = f"{assay}_I"
    ordinary: list[dict[str, StoredColumn]] = []
    memberships: list[StoredColumn | None] = []
    for table in tables:
        name = table.name
        usable = _usable(table.cells, table.shape[0], source=name, what="cell")
        own: dict[str, StoredColumn] = {}
        member: StoredColumn | None = None
        for key, column in usable.items():
            if key == "ids":
                continue  # the composite's sourceId column
            if key == membership_name and _membership(column, assay, source=name):
                member = column
            elif column.attrs.get("role") == MEMBERSHIP_ROLE:
                continue  # another assay's membership: not this composite's to carry
            else:
                own[key] = column
        ordinary.append(own)
        memberships.append(member)
    _defaults_left_out(ordinary, [table.cells.get("ids") for table in tables])
    outputs = [np.flatnonzero(row_sources == index) for index in range(len(tables))]
    columns: list[Column] = []
    if any(member is not None for member in memberships):
        # a source without the column measured every one of its cells
        measured = np.ones(length, dtype=bool)
        for member, out_rows in zip(memberships, outputs, strict=True):
            if member is not None:
                measured[out_rows] = member.values[source_rows[out_rows]]
        columns.append((membership_name, measured, {"role": MEMBERSHIP_ROLE, "assay": assay}))
    for key, out_name in _output_names(ordinary, reserved).items():
        pieces = [
            _Piece(own[key], source_rows[out_rows], out_rows)
            for own, out_rows in zip(ordinary, outputs, strict=True)
            if key in own
        ]
        values, attrs, _ = _merge(pieces, length)
        columns.append((out_name, values, attrs))
    return columns


def merge_feature_columns(
    tables: Sequence[SourceTables],
    feature_columns: npt.NDArray[np.int64],
    *,
    feature_ids: npt.NDArray[Any],
) -> list[Column]:
    """The feature columns of the chosen features, first source winning.

    Parameters
    ----------
    tables
        Each source's tables, in mapping order.
    feature_columns
        ``(n_sources, n_features)``: each output feature's column in each source, -1 = absent.
    feature_ids
        The output feature ids (for the conflict record).

    Returns
    -------
    list of Column
        In order of first appearance; a column where a later source holds
        another value for some feature carries ``cytearc:valueConflicts``
        (``{"features": count, "example": feature id}``).
    """
    length = feature_columns.shape[1]
    usable = [
        {
            key: column
            for key, column in _usable(
                table.features, table.shape[1], source=table.name, what="feature"
            ).items()
            if key not in ("ids", "names")  # the composite's own ids and names
        }
        for table in tables
    ]
    _defaults_left_out(usable, [None] * len(usable))
    columns: list[Column] = []
    for key, out_name in _output_names(usable, set(RESERVED_COLUMNS)).items():
        filled = np.zeros(length, dtype=bool)
        pieces: list[_Piece] = []
        later: list[_Piece] = []
        for own, mapped in zip(usable, feature_columns, strict=True):
            if key not in own:
                continue
            held = mapped >= 0
            fresh = np.flatnonzero(held & ~filled)
            again = np.flatnonzero(held & filled)
            pieces.append(_Piece(own[key], mapped[fresh], fresh))
            later.append(_Piece(own[key], mapped[again], again))
            filled |= held
        values, attrs, target = _merge(pieces, length)
        conflicting = np.zeros(length, dtype=bool)
        for piece in later:
            theirs = _convert(piece.column.values[piece.source_rows], target)
            ours = values[piece.output_rows]
            same = (ours == theirs) | (pd.isna(ours) & pd.isna(theirs))
            conflicting[piece.output_rows[~same]] = True
        if conflicting.any():
            first = int(np.flatnonzero(conflicting)[0])
            attrs[CONFLICTS_ATTR] = {
                "features": int(conflicting.sum()),
                "example": str(feature_ids[first]),
            }
            logger.warning(
                "feature column %r: %d feature(s) hold different values in different sources "
                "(e.g. %s); the first source in mapping order holding each feature wins",
                out_name,
                int(conflicting.sum()),
                feature_ids[first],
            )
        columns.append((out_name, values, attrs))
    return columns
