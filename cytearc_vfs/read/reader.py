"""``VirtualArrayReader``: read only the selected values of any CyteArc count matrix.

One code path for ordinary stores and composites. A read resolves the
selected output cells to (source, row) pairs (from the composite's cell runs,
or the mapping windows it needs) and the selected features to source
columns. Then, per source and concurrently, it reads the unique rows it
needs from whichever of ``counts`` and ``countsT`` touches fewer chunk
bytes (``source_fill.py``; sparse reads: ``sparse_reads.py``); the shard
reader decodes each touched chunk once and a placement (``placement.py``)
writes the selected values straight into the output, in the requested
order. A feature a source lacks stays zero.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Self, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from ..format.gathering import gather_all
from ..format.source_store import read_contents, refuse_pending_assays
from ..remote.failures import names_backend_failures
from ..remote.locations import Location, describe_location, local_path, open_location
from .blockwise import batch_size, blocks_along, dask_array
from .cell_plan import CellPlan
from .count_mapping import CountMapping, IdentityMapping, ProvidesCountMapping
from .feature_plan import FeaturePlan
from .gather import sorted_unique
from .mapping_providers import mapping_provider_for
from .read_stats import ReadCounters, ReaderStats
from .selection import Selection, UnknownIdError, normalize_selection, split_key
from .source_fill import fill_from_source
from .sources import BoundSource, bind_source
from .sparse_reads import source_rows
from .sparse_rows import assemble

__all__ = ["Selection", "UnknownIdError", "VirtualArrayReader", "normalize_selection"]

Indices = npt.NDArray[np.int64]
# A reader keeps its last feature selection's plans up to this many
# (source, feature) entries.
FEATURE_PLAN_KEEP_ENTRIES = 1 << 22
# Cell selections up to this many cells keep their per-source plans.
CELL_PLAN_KEEP_CELLS = 1 << 21


def _by_source(codes: Indices, rows: Indices, n_sources: int) -> list[tuple[Indices, Indices]]:
    """(output positions, source rows) of each source's share of a read.

    Output cells are in source order, so a sorted selection has
    non-decreasing codes and each source's share is one stretch: found by
    binary search instead of one pass over the codes per source.
    """
    if n_sources == 1:
        return [(np.arange(len(codes), dtype=np.int64), rows)]
    if len(codes) < 2 or bool(np.all(codes[1:] >= codes[:-1])):
        bounds = np.searchsorted(codes, np.arange(n_sources + 1), side="left").tolist()
        return [
            (np.arange(start, stop, dtype=np.int64), rows[start:stop])
            for start, stop in itertools.pairwise(bounds)
        ]
    shares = []
    for index in range(n_sources):
        positions = np.flatnonzero(codes == index)
        shares.append((positions, rows[positions]))
    return shares


class VirtualArrayReader:
    """Reads selections of an assay's counts, composite or ordinary.

    Cells and features are selected by slices, integer positions (any order,
    repeats kept), boolean masks or ids (see :meth:`read`); ``reader[rows,
    cols]`` indexes like a numpy array (see :meth:`__getitem__`).

    Parameters
    ----------
    store
        A location or Store of an ordinary store, or a composite store.
    assay
        The assay to read.
    workspace
        Workspace of an ordinary store's assay.
    storage_options
        Backend options when ``store`` is a URL (of any store).
    source_storage_options
        Backend options of a composite's or mount's sources, when ``store``
        is given by location, as :func:`~cytearc_vfs.open_store` takes them
        (a composite: by source name; a mount: one mapping). Refused for an
        ordinary store.
    """

    @names_backend_failures("store")
    def __init__(
        self,
        store: Location | Store | ProvidesCountMapping,
        assay: str = "RNA",
        *,
        workspace: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        source_storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._counters = ReadCounters()
        self._kept_plans: tuple[Indices, list[FeaturePlan]] | None = None
        self._kept_cells: tuple[Indices, list[CellPlan | None]] | None = None
        self._ids: dict[str, pd.Index] = {}
        if not isinstance(store, ProvidesCountMapping):
            backend = open_location(store, read_only=True, storage_options=storage_options)
            where = describe_location(store)
            contents = read_contents(backend, where=where)
            opener = mapping_provider_for(contents.root_attrs)
            if opener is not None:
                # a composite or mount given by location: open it verified
                refuse_pending_assays(backend, contents, where=where)
                store = cast("ProvidesCountMapping", opener(backend, where, source_storage_options))
            elif source_storage_options:
                raise ValueError(
                    f"{where} is an ordinary store; source_storage_options apply to "
                    "composites and mounts only (use storage_options for the store itself)"
                )
        if isinstance(store, ProvidesCountMapping):
            self._mapping: CountMapping = store.count_mapping(
                assay, self._counters, workspace=workspace
            )
        else:
            source = bind_source(
                "store", backend, assay, workspace=workspace, counters=self._counters
            )
            # the ids arrays' documents were fetched with the source's verification
            view = source.view if source.view is not None else backend
            root = zarr.open_group(view, mode="r", zarr_format=3)
            cells = root[source.info.paths.cell_data + "/ids"]
            features = root[source.info.paths.feature_data + "/ids"]
            assert isinstance(cells, zarr.Array) and isinstance(features, zarr.Array)
            self._mapping = IdentityMapping(source, cells, features)
        self.assay = assay
        self._where = (
            describe_location(store) if not isinstance(store, ProvidesCountMapping) else str(store)
        )
        # What a worker process needs to rebuild this reader (see to_dask): a local
        # path made absolute, since a worker may run in another working directory.
        path = None if isinstance(store, (Store, ProvidesCountMapping)) else local_path(store)
        located = store if path is None else str(path.absolute())
        # ... and what it must find there: a store replaced since then refuses
        # rather than give some blocks of the old store and some of the new
        self._recipe: tuple[Any, ...] = (
            located,
            assay,
            workspace,
            dict(storage_options or {}),
            self._identity(),
        )

    @classmethod
    def from_mapping(
        cls, mapping: CountMapping, counters: ReadCounters, where: str, assay: str = "RNA"
    ) -> Self:
        """A reader over an already-bound mapping (used by stores that serve chunks)."""
        reader = cls.__new__(cls)
        reader._counters = counters
        reader._kept_plans = None
        reader._kept_cells = None
        reader._ids = {}
        reader._mapping = mapping
        reader.assay = assay
        reader._where = where
        reader._recipe = ()
        return reader

    # ------------------------------------------------------------------ facts

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features) of the matrix."""
        return self._mapping.shape

    @property
    def dtype(self) -> np.dtype:
        """dtype of the values read."""
        return self._mapping.dtype

    @property
    def ndim(self) -> int:
        """2: cells and features."""
        return 2

    def __len__(self) -> int:
        """The number of cells, as ``len`` of a numpy array counts rows."""
        return self.shape[0]

    @property
    def cell_ids(self) -> pd.Index:
        """Cell ids in output order (read when first asked, then kept)."""
        # one Index per reader: pandas keeps its id lookup table with the object
        if "cells" not in self._ids:
            self._ids["cells"] = self._mapping.cell_ids()
        return self._ids["cells"]

    @property
    def feature_ids(self) -> pd.Index:
        """Feature ids in output order (read when first asked, then kept)."""
        if "features" not in self._ids:
            self._ids["features"] = self._mapping.feature_ids()
        return self._ids["features"]

    def _identity(self) -> str:
        """One fingerprint of what this reader reads: its shape, dtype and its
        verified sources' dataset fingerprints in output order."""
        parts = [repr(self.shape), str(self.dtype)]
        parts.extend(source.info.dataset_fingerprint for source in self._mapping.sources)
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def stats(self) -> ReaderStats:
        """Source chunks decoded, bytes read and requests issued since creation or reset."""
        return self._counters.snapshot()

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._counters.reset()

    # ------------------------------------------------------------------ reads

    def read(self, cells: Selection = None, features: Selection = None) -> npt.NDArray[Any]:
        """The dense block of the selected cells x features, in requested order.

        Parameters
        ----------
        cells, features
            ``None`` (all), a slice (any step), integer positions (any
            order, repeats and negatives allowed), a boolean mask (numpy or
            a pandas Index of bools, by position; a pandas Series of bools,
            by its index when that holds the ids or positions in another
            order, as pandas selects), or ids:
            a sequence of strings (list, numpy array of str or object dtype,
            ``pandas.Index``), looked up in :attr:`cell_ids` /
            :attr:`feature_ids`. A single string is one id. Ids and
            positions cannot be mixed in one selection.

        Returns
        -------
        numpy.ndarray
            ``(n_cells, n_features)`` of :attr:`dtype`, rows and columns in
            the requested order; always 2-D.

        Raises
        ------
        UnknownIdError
            A ``KeyError``: ids not on the axis; the message names the
            first few and how many there are.
        IndexError
            Positions out of range, a mask of the wrong length, or a
            selection of another kind.

        Examples
        --------
        ``reader.read(["c7", "c2"], ["CD3E", "MS4A1"])`` is the same block as
        ``reader.read([7, 2], [10, 4])`` when those are their positions.
        """
        return sync(
            self._gather(self._positions(cells, "cells"), self._positions(features, "features"))
        )

    def read_sparse(self, cells: Selection = None, features: Selection = None) -> sp.csr_matrix:
        """The selected cells x features as a canonical ``scipy.sparse.csr_matrix``.

        Takes the selections :meth:`read` takes, with the same order, repeats
        and errors, and holds the same values: ``read_sparse(c, f).toarray()``
        equals ``read(c, f)``. The matrix is canonical (column indices sorted
        within each row, no stored zeros, no duplicates) and of :attr:`dtype`.

        Sparse sources are read sparse: an AnnData source's CSR rows or CSC
        columns become rows without a dense block. A CyteArc source read
        cell-major makes each decoded strip CSR where it is decoded; others
        (read feature-major, dense AnnData arrays) are read in bands of
        rows (:data:`~.sparse_reads.SPARSE_BAND_BYTES` of dense values), so
        memory holds the result's entries and a band or two
        (:mod:`.sparse_reads`).

        Raises
        ------
        UnknownIdError, IndexError
            As :meth:`read`.
        """
        return sync(
            self._gather_sparse(
                self._positions(cells, "cells"), self._positions(features, "features")
            )
        )

    async def read_async(
        self, cells: Selection = None, features: Selection = None
    ) -> npt.NDArray[Any]:
        """:meth:`read` for callers already on an event loop (composite chunks)."""
        if _whole_or_slice(cells) and _whole_or_slice(features):
            return await self._gather(
                self._positions(cells, "cells"), self._positions(features, "features")
            )
        # ids may have to be read first, with zarr's blocking calls, which
        # must not run on the event loop that serves them
        cell_positions, feature_positions = await asyncio.to_thread(
            lambda: (self._positions(cells, "cells"), self._positions(features, "features"))
        )
        return await self._gather(cell_positions, feature_positions)

    def _positions(self, selection: Selection, axis: str) -> Indices:
        """Positions of ``selection`` on ``axis`` (``"cells"`` or ``"features"``)."""
        if axis == "cells":
            length, ids = self.shape[0], lambda: self.cell_ids
        else:
            length, ids = self.shape[1], lambda: self.feature_ids
        owner = "store" if isinstance(self._mapping, IdentityMapping) else "composite"
        return normalize_selection(selection, length, axis=axis, ids=ids, owner=owner)

    def __getitem__(self, key: Any) -> Any:
        """``reader[rows, cols]``: numpy indexing, read at once.

        Each axis takes what :meth:`read` takes, and an integer (a single
        id) selects one cell or feature and drops that axis, so the result
        has numpy's shape for the same key on the dense matrix:
        ``reader[0]`` is a row, ``reader[5, 3]`` a scalar of :attr:`dtype`,
        ``reader[:, ["CD3E", "MS4A1"]]`` a ``(n_cells, 2)`` block and
        ``reader[..., 3]`` a column (and ``reader[5, ..., 3]`` a 0-d array,
        as numpy gives with an ellipsis). Negative steps and negative
        positions work as in numpy.

        Two arrays select **orthogonally** (every listed cell x every listed
        feature, as zarr's ``oindex`` and AnnData do): ``reader[[1, 2],
        [3, 4]]`` has shape ``(2, 2)``, where numpy's fancy indexing would
        pair the positions into 2 values.

        Raises
        ------
        IndexError
            An integer out of range (naming the axis), more than two
            indices, ``None`` (``numpy.newaxis``) or a bool scalar.
        UnknownIdError
            Ids not on the axis.
        """
        rows, cols = split_key(key, ("cells", "features"))
        block = self.read(rows.selection, cols.selection)
        # an integer or single id gave a length-1 axis: index it away, as numpy
        # would; with an ellipsis in the key numpy gives a 0-d array, not a scalar
        ellipsis = (...,) if isinstance(key, tuple) and any(p is Ellipsis for p in key) else ()
        return block[
            (0 if rows.scalar else slice(None), 0 if cols.scalar else slice(None), *ellipsis)
        ]

    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        """Rows (cells) in order, as iterating a numpy array does, read in batches."""
        for _, block in self.iter_cells():
            yield from block

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        """The whole matrix in one read, so ``numpy.asarray(reader)`` does not read row by row."""
        if copy is False:
            raise ValueError("a reader cannot give its values without copying them")
        values = self.read()
        return values if dtype is None else values.astype(dtype, copy=False)

    async def _gather(self, cells: Indices, features: Indices) -> npt.NDArray[Any]:
        out = np.zeros((len(cells), len(features)), dtype=self.dtype)
        self._counters.add(reads=1)
        if out.size == 0:
            return out
        cell_plans = await self._cell_plans(cells)
        plans = await self._feature_plans(features)
        tasks = [
            self._read_source(self._mapping.sources[index], out, cell_plan, plans[index])
            for index, cell_plan in enumerate(cell_plans)
            if cell_plan is not None and not plans[index].empty
        ]
        await gather_all(*tasks)
        return out

    async def _gather_sparse(self, cells: Indices, features: Indices) -> sp.csr_matrix:
        self._counters.add(reads=1)
        # sources read each selected feature once, in ascending order; the
        # requested order and repeats are one column selection at the end
        unique, inverse = sorted_unique(features)
        if len(cells) == 0 or len(unique) == 0:
            return sp.csr_matrix((len(cells), len(features)), dtype=self.dtype)
        cell_plans = await self._cell_plans(cells)
        plans = await self._feature_plans(unique)
        shares = await gather_all(
            *(
                source_rows(
                    self._mapping.sources[index],
                    cell_plan,
                    plans[index],
                    self.dtype,
                    self._read_source,
                    self._counters,
                )
                for index, cell_plan in enumerate(cell_plans)
                if cell_plan is not None and not plans[index].empty
            )
        )
        matrix = assemble((len(cells), len(unique)), self.dtype, list(shares))
        if len(unique) != len(features) or not bool(np.all(unique == features)):
            matrix = matrix[:, inverse]
            matrix.sort_indices()
        return matrix

    async def _cell_plans(self, cells: Indices) -> list[CellPlan | None]:
        """Each source's plan for ``cells`` (``None``: no cells of it); the last
        selection's are kept for reuse."""
        kept = self._kept_cells
        if kept is not None and np.array_equal(kept[0], cells):
            return kept[1]
        codes, rows = await self._mapping.cells(cells)
        plans = [
            CellPlan(out_rows, source_rows) if len(out_rows) else None
            for out_rows, source_rows in _by_source(codes, rows, len(self._mapping.sources))
        ]
        # kept while small: they hold a few arrays of the selected cells
        if len(cells) <= CELL_PLAN_KEEP_CELLS:
            self._kept_cells = (cells.copy(), plans)
        return plans

    async def _feature_plans(self, features: Indices) -> list[FeaturePlan]:
        """Each source's plan for ``features``; the last selection's are kept for reuse."""
        kept = self._kept_plans
        if kept is not None and np.array_equal(kept[0], features):
            return kept[1]
        columns = await self._mapping.features(features)
        plans = [FeaturePlan(columns[index]) for index in range(len(self._mapping.sources))]
        # kept while small: they hold a few arrays of sources x selected features
        if columns.size <= FEATURE_PLAN_KEEP_ENTRIES:
            self._kept_plans = (features.copy(), plans)
        return plans

    async def _read_source(
        self, source: BoundSource, out: npt.NDArray[Any], cells: CellPlan, plan: FeaturePlan
    ) -> None:
        """Fill ``out`` from ``source``: rows as ``cells``, columns as ``plan`` say."""
        self._counters.add(chunks=await fill_from_source(source, out, cells, plan))

    # ---------------------------------------------------------------- streams

    def iter_features(
        self,
        batch: int | None = None,
        *,
        cells: Selection = None,
        mem_budget: int | str | None = None,
    ) -> Iterator[tuple[slice, npt.NDArray[Any]]]:
        """Yield ``(feature_slice, block[n_cells, k])`` in feature order.

        Adjacent features are batched into one read as far as ``mem_budget``
        allows, so a source chunk is decoded once per batch. ``cells`` takes
        what :meth:`read` takes, ids included.
        """
        cell_positions = self._positions(cells, "cells")
        size = batch_size(batch, mem_budget, len(cell_positions), self.dtype.itemsize)
        yield from blocks_along(
            self.shape[1], size, lambda features: sync(self._gather(cell_positions, features))
        )

    def iter_cells(
        self,
        batch: int | None = None,
        *,
        features: Selection = None,
        mem_budget: int | str | None = None,
    ) -> Iterator[tuple[slice, npt.NDArray[Any]]]:
        """Yield ``(cell_slice, block[k, n_features])`` in cell order.

        ``features`` takes what :meth:`read` takes, ids included.
        """
        feature_positions = self._positions(features, "features")
        size = batch_size(batch, mem_budget, len(feature_positions), self.dtype.itemsize)
        yield from blocks_along(
            self.shape[0], size, lambda cells: sync(self._gather(cells, feature_positions))
        )

    # ------------------------------------------------------------------ dask

    def to_dask(self, chunks: tuple[int | None, int | None] | None = None) -> Any:
        """A lazy ``dask.array`` of the matrix; each block is one gather read.

        Blocks run anywhere, including worker processes of a
        ``dask.distributed`` cluster: they carry the store (a composite
        pickles without writing credentials anywhere) and rebuild one reader
        per process. ``chunks`` (cells, features; -1 or None: the whole axis)
        defaults to whole rows of 64 MiB dense a block; a block is read
        dense, so size it by memory.
        A store replaced since this call is refused by the blocks
        (``IdentityMismatchError``). Needs ``dask[array]``.
        """
        return dask_array(
            VirtualArrayReader,
            self._recipe,
            self.shape,
            self.dtype,
            chunks,
            # a fresh name per array: dask merges graphs by key, and a name
            # reused (another reader at a freed address, other chunks of this
            # one) would compute one array's blocks in place of the other's
            name=f"cytearc-read-{uuid.uuid4().hex}",
            kept=self if self._recipe else None,
        )

    def __repr__(self) -> str:
        return f"VirtualArrayReader({self._where!r}, assay={self.assay!r}, shape={self.shape}, dtype={self.dtype})"


def _whole_or_slice(selection: Selection) -> bool:
    return selection is None or isinstance(selection, slice)
