"""``to_anndata``: any CyteArc store as an ``anndata.AnnData``, its ``X`` lazy.

``X`` is a dask array of ``scipy.sparse.csr_matrix`` blocks: each block is
one gather read of its cells and features (at most 4,096 features and 8 MiB
dense, see :func:`block_shape`), converted to CSR as it is read. Sparse
blocks, because count matrices are mostly zeros and anything computed from
``X`` (``.compute()``, a subset, ``anndata.concat``) keeps the sparse type a
loaded count matrix has; a block is dense only while it is read. ``obs`` and
``var`` are read from the tables at once (they are small beside the counts)
by the rule of :mod:`.columns`. With ``lazy=False`` ``X`` is a CSR matrix
filled band by band, so the dense matrix is never in memory, and refused up
front when it would not fit (:mod:`.loading`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
from zarr.abc.store import Store
from zarr.core.sync import sync

from cytearc_vfs.errors import IdentityMismatchError, SourceGoneError
from cytearc_vfs.format.flags import check_flag
from cytearc_vfs.format.tables import StoredTable, read_stored_table
from cytearc_vfs.read.blockwise import (
    deferred,
    keep_reader,
    kept_reader,
    recipe_key,
    require_identity,
)
from cytearc_vfs.read.blockwise import opened as opened_store
from cytearc_vfs.read.reader import VirtualArrayReader
from cytearc_vfs.remote.locations import Location

from .columns import (
    ExportedColumn,
    categorical_codes,
    exported_columns,
    index_name,
    membership_column,
    membership_uns,
    nullable_values,
    with_source_categories,
)
from .export_budget import shard_aligned
from .loading import loaded_counts
from .opened import OpenedAssay, open_assay

__all__ = ["band_rows", "cell_bands", "read_frames", "to_anndata"]

#: Dense bytes of one band of cells read for a block or a band of an export.
BAND_BYTES = 64 << 20


def _anndata() -> Any:
    try:
        import anndata
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError(
            "AnnData output needs anndata, an optional extra: pip install 'cytearc-vfs[anndata]'"
        ) from exc
    return anndata


def band_rows(n_features: int, itemsize: int, band_bytes: int = BAND_BYTES) -> int:
    """Cells per band so a dense band of every feature fits ``band_bytes``.

    >>> band_rows(1_000, 4, band_bytes=4_000_000)
    1000
    >>> band_rows(10**9, 8)
    1
    """
    return max(1, band_bytes // max(1, n_features * itemsize))


def cell_bands(
    opened: OpenedAssay, band_bytes: int | None = None
) -> Iterator[tuple[slice, sp.csr_matrix]]:
    """``(cells, CSR block)`` of consecutive bands of cells (``band_bytes`` dense bytes
    at most, :data:`BAND_BYTES` by default), each read once (sparse); a band of a
    shard or more ends on a shard boundary, so each shard is read by one band."""
    n_cells, n_features = opened.shape
    dense = BAND_BYTES if band_bytes is None else band_bytes
    rows = band_rows(n_features, opened.reader.dtype.itemsize, dense)
    if rows < n_cells:
        rows = shard_aligned(0, rows, opened.shard_cells(), n_cells)
    for start in range(0, n_cells, rows):
        cells = slice(start, min(n_cells, start + rows))
        yield cells, opened.reader.read_sparse(cells, None)


def _frame(
    stored: StoredTable, assay: str, *, table: str, sources: Sequence[str] | None = None
) -> tuple[pd.DataFrame, list[ExportedColumn]]:
    columns = stored.columns
    if "ids" not in columns:
        raise ValueError(f"the {table} table has no ids column; the store is damaged")
    kept = exported_columns(
        {name: column.values.dtype for name, column in columns.items()},
        with_source_categories({n: c.attrs for n, c in columns.items()}, sources),
        assay,
        lambda name: columns[name].values,
        stored.column_order,
    )
    data = {column.name: _series_values(columns[column.name].values, column) for column in kept}
    name = index_name(stored.index_name, [column.name for column in kept])
    index = pd.Index(columns["ids"].values.astype(str).tolist(), dtype="str", name=name)
    return pd.DataFrame(data, index=index), kept


def _series_values(values: npt.NDArray[Any], column: ExportedColumn) -> Any:
    if column.kind == "categorical":
        return pd.Categorical.from_codes(
            categorical_codes(values, column),
            categories=pd.Index(list(column.categories)),
            ordered=column.ordered,
        )
    if column.kind == "text":
        return pd.array(values.astype(str).tolist(), dtype="str")
    if column.kind == "nullable":
        return nullable_values(values)
    return values


def read_frames(opened: OpenedAssay) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """``obs``, ``var`` and ``uns`` of the assay, by the rule of :mod:`.columns`."""
    cells = sync(read_stored_table(opened.store, opened.paths.cell_data))
    features = sync(read_stored_table(opened.store, opened.paths.feature_data))
    obs, _ = _frame(cells, opened.assay, table="cell", sources=opened.source_names)
    var, _ = _frame(features, opened.assay, table="feature")
    membership = membership_column({n: c.attrs for n, c in cells.columns.items()}, opened.assay)
    return obs, var, membership_uns(membership, opened.assay)


class SparseCounts:
    """The counts as an array-like whose ``[rows, cols]`` is a CSR block: dask's source.

    dask slices it per block (``da.from_array``), so a block reads exactly its
    cells and features through the gather reader, which picks ``counts`` or
    ``countsT`` for the block's shape. Pickled (for ``dask.distributed``
    workers), it carries the store and rebuilds one reader per process.
    """

    ndim = 2

    def __init__(self, opened: OpenedAssay, workspace: str | None = None) -> None:
        self.shape = opened.shape
        self.dtype = opened.reader.dtype
        self._reader: VirtualArrayReader | None = opened.reader
        # the reader's identity too: a worker's reader of a store replaced since
        # refuses rather than mix the old store's blocks with the new one's
        # a composite or mount deferred: opened by the task that reads, once a process
        self._recipe = (
            deferred(opened.store),
            opened.assay,
            workspace,
            opened.reader._identity(),
        )
        self._key = recipe_key(self._recipe)

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        rows, cols = key
        reader = self._reader
        if reader is not None:
            return reader.read_sparse(rows, cols)
        reader = self._reader = _process_reader(self._recipe, self._key)
        try:
            return reader.read_sparse(rows, cols)
        except (IdentityMismatchError, SourceGoneError):
            # a reader this process kept refuses a source changed since it was
            # opened: open anew, once (the open says what changed), rather than
            # refuse every later block of this process
            keep_reader(_PROCESS_READERS, self._key, None)
            reader = self._reader = _process_reader(self._recipe, self._key)
            return reader.read_sparse(rows, cols)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (self.shape, self.dtype, self._recipe, self._key))


#: Readers rebuilt in this process (a dask worker's), by their recipe's key
#: (at most blockwise.KEPT_READERS, least recently used dropped first).
_PROCESS_READERS: dict[str, VirtualArrayReader] = {}
_open_lock = threading.Lock()


def _process_reader(recipe: tuple[Any, ...], key: str) -> VirtualArrayReader:
    reader: VirtualArrayReader | None = kept_reader(_PROCESS_READERS, key)
    if reader is not None:
        return reader
    with _open_lock:  # a worker's threads open the store once, not each
        reader = kept_reader(_PROCESS_READERS, key)
        if reader is None:
            store, assay, workspace, identity = recipe
            reader = VirtualArrayReader(opened_store(store), assay, workspace=workspace)
            require_identity(reader, identity, "to_anndata")
            keep_reader(_PROCESS_READERS, key, reader)
    return reader


def _rebuilt(
    shape: tuple[int, int], dtype: np.dtype, recipe: tuple[Any, ...], key: str
) -> SparseCounts:
    counts = SparseCounts.__new__(SparseCounts)
    counts.shape, counts.dtype = shape, dtype
    counts._reader, counts._recipe, counts._key = None, recipe, key
    return counts


def block_shape(shape: tuple[int, int], itemsize: int) -> tuple[int, int]:
    """Cells x features of a lazy ``X`` block: at most 4,096 features and 8 MiB dense.

    Feature blocks let a selection of a few genes read only their blocks
    (dask prunes blocks, it does not push a gene list into one).

    >>> block_shape((100_000, 30_000), 4)
    (512, 4096)
    >>> block_shape((300, 40), 1)
    (300, 40)
    """
    features = max(1, min(shape[1], BLOCK_FEATURES))
    cells = max(1, min(shape[0], BLOCK_BYTES // (features * itemsize)))
    return cells, features


#: Features of one block of a lazy ``X``, and its dense bytes.
BLOCK_FEATURES = 4096
BLOCK_BYTES = 8 << 20


def lazy_counts(opened: OpenedAssay, workspace: str | None = None) -> Any:
    """``X`` as a dask array of CSR blocks, each one gather read of its cells and features."""
    import uuid

    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError(
            "to_anndata(lazy=True) needs dask, an optional extra: pip install "
            "'cytearc-vfs[dask]' (or pass lazy=False to load X)"
        ) from exc

    source = SparseCounts(opened, workspace)
    meta = sp.csr_matrix((0, 0), dtype=opened.reader.dtype)
    return da.from_array(  # type: ignore[no-untyped-call]
        source,
        chunks=block_shape(opened.shape, opened.reader.dtype.itemsize),
        asarray=False,
        fancy=False,
        meta=meta,
        # a fresh name: hashing the source would pickle it
        name=f"cytearc-counts-{uuid.uuid4().hex}",
    )


def to_anndata(
    location: Location | Store,
    assay: str = "RNA",
    *,
    lazy: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    workspace: str | None = None,
) -> Any:
    """An ``anndata.AnnData`` of one assay of any CyteArc store.

    Parameters
    ----------
    location
        An ordinary store, a composite or a mount: a path, a URL or a Store.
    assay
        The assay whose counts become ``X``.
    lazy
        ``True``: ``X`` is a dask array of ``scipy.sparse.csr_matrix`` blocks
        read through the gather reader when computed. ``False``: ``X`` is a
        ``csr_matrix``, read band by band.
    storage_options
        Backend options of a URL ``location``.
    source_storage_options
        Per-source backend options of a composite's or mount's sources
        (``{source name: options}``); never written anywhere.
    workspace
        Workspace of an ordinary store's assay (workspace layout).

    Returns
    -------
    anndata.AnnData
        ``obs`` and ``var`` from the cell and feature tables (categoricals
        restored; see ``docs/anndata-out.md`` for which columns), the
        assay's membership column as an ordinary ``obs`` column declared in
        ``uns["cytearc"]["assayMembership"]``.

    Raises
    ------
    LoadTooLargeError
        ``lazy=False`` where the loaded ``X`` would not fit in the memory
        available (a ``MemoryError``), before it is read.

    Examples
    --------
    >>> adata = cv.to_anndata("pbmc.zarr")  # doctest: +SKIP
    >>> adata[adata.obs["cell_type"] == "B", ["CD79A", "MS4A1"]].X.compute()  # doctest: +SKIP
    """
    check_flag(lazy, "lazy")
    anndata = _anndata()
    opened = open_assay(
        location,
        assay,
        workspace=workspace,
        storage_options=storage_options,
        source_storage_options=source_storage_options,
        # a loaded X is read in one go: each document, listing and ids chunk once (a
        # lazy X keeps the store, which then reads them anew)
        once=not lazy,
    )
    obs, var, uns = read_frames(opened)
    counts = lazy_counts(opened, workspace) if lazy else loaded_counts(opened, cell_bands(opened))
    return anndata.AnnData(X=counts, obs=obs, var=var, uns=uns)
