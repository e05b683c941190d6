"""The cell and feature columns of an AnnData source: its ``obs`` and ``var``.

A composite carries every column of its sources' tables (:mod:`.columns`).
An AnnData source keeps them as dataframe elements (``obs``, and ``var``, or
``raw/var`` for a source read from its raw counts ``raw/X``) in
any encoding the AnnData specification has had: categorical 0.2.0 and both
legacy layouts, nullable integers and booleans, string arrays. The element
layer that reads all of them lives above the core, in
``cytearc_vfs_adapters.anndata``; it registers a reader under the entry
point group :data:`ANNDATA_TABLES_ENTRY_POINTS`, found here at run time, so
the core does not import the adapters.

The dataframes become stored columns by the rule that composes columns
(missing values by :func:`~cytearc_vfs.format.tables.fill_missing`), and
every warning and refusal names the table as anndata does (``obs``, ``var``,
``raw/var``: :mod:`~cytearc_vfs.format.table_names`):

- the index holds the ids, checked as an import checks them
  (:func:`~cytearc_vfs.format.tables.checked_ids`): one no table stores is
  refused naming the source, its index and the position;

- a categorical keeps its categories; its missing values are ``""`` (the
  merge appends ``""`` as the last category, as for a source that lacks
  the column); a categorical of numbers with missing values becomes
  ``float64`` with NaN;
- nullable integers and booleans with missing values become ``float64``
  with NaN, without missing values their numpy type;
- text keeps its values, ``""`` for a missing one; any other object is
  written as its ``str``;
- a column whose name cannot be a Zarr array name, or whose values are not
  one value per row, is not carried (with a warning, as for a CyteArc
  source); so is a column the element layer cannot read (an awkward array,
  a nested dataframe, a 2-D array, an unknown encoding, a length other
  than the index's), with a warning naming the source, the column and why:
  one odd column does not cost the whole source;
- a column named ``I`` (the reserved live selection) is carried as the
  source's selection (``orig_I``, as a CyteArc source's is) when it is
  boolean without missing values, as an import would store it; any other
  is refused, as ``write_counts`` refuses it;
- the column that ``uns["cytearc"]["assayMembership"]`` declares for the
  composite's assay becomes the membership column ``{assay}_I``, as an
  import of the AnnData would store it (:mod:`~cytearc_vfs.write.membership`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from zarr.abc.store import Store

from ..errors import UnsupportedSourceError
from ..format.column_names import column_name_problem, free_column_name
from ..format.live_selection import live_selection_problem
from ..format.store_keys import key_problem
from ..format.table_names import OBS, TableName, anndata_table
from ..format.tables import (
    CATEGORICAL_ATTR,
    StoredColumn,
    checked_ids,
    column_values,
    fill_missing,
)
from ..read.anndata_tree import fetched, walk_tree
from ..read.prefetch import MAX_IN_FLIGHT, PrefetchedStore
from ..remote.pinned_store import pinned_store_of
from ..write.membership import split_membership

__all__ = [
    "ANNDATA_TABLES_ENTRY_POINTS",
    "AnnDataTables",
    "anndata_columns",
    "frame_columns",
    "tables_prefetched",
]

logger = logging.getLogger(__name__)

#: Entry point group of the reader of an AnnData store's ``obs`` and ``var``.
ANNDATA_TABLES_ENTRY_POINTS = "cytearc_vfs.anndata_tables"


class AnnDataTables(NamedTuple):
    """What the registered reader returns for one AnnData store."""

    obs: pd.DataFrame
    """The cell table (index: the cell ids)."""
    var: pd.DataFrame
    """The feature table (index: the feature ids): ``var``, or ``raw/var``."""
    membership: Mapping[str, Any] | None
    """``uns["cytearc"]["assayMembership"]``, or ``None``."""
    skipped: tuple[tuple[str, str], ...] = ()
    """Columns of ``obs`` and ``var`` that could not be read, left out of the
    frames: ``(element path, reason)`` each."""


#: ``reader(store, features)``: ``features`` names the dataframe of the feature
#: table, ``var`` or ``raw/var``.
TablesReader = Callable[[Store, str], AnnDataTables]

_reader: TablesReader | None = None
_reader_found = False
_reader_lock = threading.Lock()
_threads: ThreadPoolExecutor | None = None
#: Sources whose tables are read at once (the rest wait for a thread).
TABLE_READING_THREADS = 4


def _reading_threads() -> ThreadPoolExecutor:
    global _threads
    with _reader_lock:
        if _threads is None:
            _threads = ThreadPoolExecutor(
                TABLE_READING_THREADS, thread_name_prefix="cytearc-anndata-tables"
            )
        return _threads


def _tables_reader() -> TablesReader | None:
    global _reader, _reader_found
    with _reader_lock:
        if not _reader_found:
            from importlib.metadata import entry_points

            found = sorted(entry_points(group=ANNDATA_TABLES_ENTRY_POINTS), key=lambda e: e.name)
            _reader = found[0].load() if found else None
            _reader_found = True
        return _reader


def _text_or_value(series: pd.Series) -> pd.Series:
    """Object columns as text: ``str`` of each value that is not a string already."""
    if series.dtype != object:
        return series
    return series.map(lambda value: value if isinstance(value, str) else str(value))


def frame_columns(frame: pd.DataFrame, *, table: TableName, source: str) -> dict[str, StoredColumn]:
    """The columns of ``frame`` (the source's ``table``: ``obs``, ``var`` or ``raw/var``)
    as a composite reads a source's table: ``ids`` from the index, the others converted
    by the rule of the module; warnings and refusals name ``table`` as anndata does.

    Ids no table stores (the empty string, a NUL, a lone surrogate, too long) are
    refused as an import refuses them, by their position in the source's index:
    the composite's own table would refuse them by a position in the composite
    (or, for a trailing NUL, which fixed-width text drops, change them).
    """
    try:
        ids = checked_ids(frame.index, table=table)
    except ValueError as exc:
        raise ValueError(f"source {source!r}: {exc}") from None
    columns = {"ids": StoredColumn(ids, {})}
    names = {str(name) for name in frame.columns}
    for position, name in enumerate(frame.columns):
        if name == "ids":
            # "ids" is the index here: a column of that name is carried as the
            # composite carries every name it reserves, prefixed (orig_ids)
            name = free_column_name(name, {*names, "ids"})
        problem = column_name_problem(name) or ("it repeats" if name in columns else None)
        if problem is not None:
            logger.warning(
                "source %r: %s cannot be a Zarr array name (%s); it is not carried",
                source,
                table.column(name, stored=True),
                problem,
            )
            continue
        given = frame.iloc[:, position]
        if name == "I":
            # the reserved live selection: carried as the source's (orig_I), as a
            # CyteArc source's is, only when an import would store it so; write_counts
            # refuses any other, and a composite over the AnnData must hold what one
            # over its import does (a column of numbers or text would be orig_I here
            # and an import's refusal there)
            problem = live_selection_problem(given)
            if problem is not None:
                raise UnsupportedSourceError(
                    f"source {source!r}: {table.column(name, stored=True)} {problem}; the name "
                    "is reserved, and write_counts refuses such a column too. Rename it in the "
                    # in place: adata.raw.var cannot be assigned
                    f"AnnData ({table.python}.rename(columns={{'I': 'NEW_NAME'}}, inplace=True) "
                    "and write it again), then create the composite"
                )
        series = _text_or_value(fill_missing(given.reset_index(drop=True)))
        try:
            values, attrs = column_values(series.rename(name), table=table)
        except ValueError as exc:
            logger.warning("source %r: %s; it is not carried", source, exc)
            continue
        if values.dtype == object:
            values = values.astype(str) if len(values) else np.array([], dtype="<U1")
        if CATEGORICAL_ATTR in attrs:
            # stored columns hold a categorical's values, its record beside them
            attrs = {CATEGORICAL_ATTR: attrs[CATEGORICAL_ATTR]}
        columns[name] = StoredColumn(values, attrs)
    if "I" not in columns:
        # what an import stores without an I column, beside its ids: every row
        # selected (a source whose I is all true adds no orig_I column; beside one
        # that selects fewer, its rows read true, as over the imports, not missing)
        selected = StoredColumn(np.ones(len(ids), dtype=bool), {})
        columns = {"ids": columns.pop("ids"), "I": selected, **columns}
    return columns


#: What the tables reader reads: the root's documents (either Zarr format) and
#: everything under these prefixes (the membership declaration lives in uns/cytearc),
#: and under the features' dataframe (``var/`` or ``raw/var/``).
_ROOT_DOCUMENTS = ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")
_TABLE_PREFIXES = ("obs/", "uns/cytearc/")
_RAW_DOCUMENTS = ("raw/zarr.json", "raw/.zgroup", "raw/.zattrs")


async def tables_prefetched(store: Store, features: str = "var") -> PrefetchedStore:
    """``store`` with the objects the tables reader reads fetched concurrently
    (``features``: the dataframe of the feature table, ``var`` or ``raw/var``).

    The element layer reads a dataframe column by column through zarr's
    synchronous API, one request after another: Wu 2020's 45 ``obs`` columns
    took some 300 sequential requests on object storage (15 s on the
    loopback S3 server). Listed under :data:`_TABLE_PREFIXES` and fetched
    with :data:`MAX_IN_FLIGHT` requests in flight, they cost a few round trips.

    Where the listing is refused (credentials that may read but not list: S3
    without ``s3:ListBucket``), the tables are fetched by path, a level at a
    time (:func:`~..read.anndata_tree.walk_tree`: a dataframe's ``column-order``
    names every column, a column's encoding its arrays, an array's grid its
    chunks): a few more round trips, the same objects read.
    """
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    pinned = pinned_store_of(store)
    if pinned is not None and pinned.listing_refused is not None:
        # refused once, refused again: not asked
        root = await fetched(store, _ROOT_DOCUMENTS, gate)
        return await _tables_by_path(store, features, root, gate)
    complete = (*_TABLE_PREFIXES, f"{features}/")

    async def listed() -> list[str] | None:
        try:
            prefixes = await asyncio.gather(*(_listed(store, prefix) for prefix in complete))
        except PermissionError:
            return None
        return [key for keys in prefixes for key in keys]

    # the root's documents beside the listings: where they are refused, the walk by
    # path starts from them
    keys, root = await asyncio.gather(listed(), fetched(store, _ROOT_DOCUMENTS, gate))
    if keys is None:
        return await _tables_by_path(store, features, root, gate)
    # A key no store of the package takes (a column named 'CD4%2fCD8') is left
    # out: its column reads as absent, and is reported and not carried.
    wanted = [key for key in keys if key_problem(key) is None]
    # raw/var is reached through the raw group's documents
    raw = _RAW_DOCUMENTS if features != "var" else ()
    documents = {**root, **await fetched(store, [*raw, *wanted], gate)}
    # a key under the prefixes that was not listed is absent (zarr and the element
    # layer probe for optional arrays, such as a nullable column's mask)
    return PrefetchedStore(store, documents, complete=complete)


async def _tables_by_path(
    store: Store, features: str, root: dict[str, bytes | None], gate: asyncio.Semaphore
) -> PrefetchedStore:
    """``store`` with the tables' objects fetched by path from the ``root`` documents
    (see :func:`tables_prefetched`); any other key, and one the walk could not name,
    is read from ``store`` as asked."""
    raw = ("raw",) if features != "var" else ()
    # uns/cytearc: the reader reads its assayMembership only
    members = ("obs", *raw, features, "uns/cytearc/assayMembership")
    await walk_tree(store, root, {"": members}, listed=False, chunks=True, limit=gate)
    return PrefetchedStore(store, root)


async def _listed(store: Store, prefix: str) -> list[str]:
    return [key async for key in store.list_prefix(prefix)]


async def anndata_columns(
    store: Store, *, assay: str, source: str, features: str = "var"
) -> tuple[dict[str, StoredColumn], dict[str, StoredColumn]] | None:
    """The cell and feature columns of the AnnData store ``store`` (the feature
    columns from the dataframe ``features``: ``var``, or ``raw/var`` for a source
    read from ``raw/X``), or ``None`` when no reader is registered (the adapters
    are not installed)."""
    reader = _tables_reader()
    if reader is None:
        return None
    view = await tables_prefetched(store, features)
    # The element layer reads through zarr's synchronous API, so it runs off the
    # event loop, on threads of its own: each waits for coroutines that need the
    # loop's default executor (zarr decodes there), and readers holding every
    # thread of that executor would wait for each other forever.
    tables = await asyncio.get_running_loop().run_in_executor(
        _reading_threads(), reader, view, features
    )
    for path, reason in tables.skipped:
        table, _, column = path.rpartition("/")
        logger.warning(
            "source %r: %s column %r cannot be read, it is not carried (the counts and the "
            "other columns are): %s",
            source,
            table,
            column,
            reason,
        )
    obs, restored = split_membership(tables.obs, tables.membership, assay)
    cells = frame_columns(obs, table=OBS, source=source)
    if restored is not None:
        name, values, attrs = restored
        cells[name] = StoredColumn(values, attrs)
    return cells, frame_columns(tables.var, table=anndata_table(features), source=source)
