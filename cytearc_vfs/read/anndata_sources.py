"""AnnData Zarr stores as composite sources: binding, identity and gather reads.

A composite reads the counts of an AnnData store (``X`` or a layer, encoded
``csr_matrix``, ``csc_matrix`` or a dense ``array``; Zarr v2 or v3) where
they are, through :class:`AnnDataCounts`:

* **CSR** (cell-major): a read of cells fetches the ``indptr`` entries of the
  selected rows and their successors (only the chunks holding them; decoded
  ``indptr`` chunks are kept), then the ``indices`` and ``data`` of those
  rows, in batches, decoding only the chunks holding them, each once;
* **CSC** (feature-major): the same along features;
* **dense**: the chunks the selected rows x columns touch, each once.

Chunks are decoded by :mod:`.direct_chunks` (one fetch and one decode per
touched chunk, only the wanted values copied out). An array whose codecs or
layout it does not decode is read through zarr's pipeline instead:
:func:`~.sparse_entries.read_ranges` for the sparse arrays, orthogonal
indexing for a dense one. :meth:`AnnDataCounts.read_rows` reads the rows of
a sparse read (``VirtualArrayReader.read_sparse``) without a dense block.

Each AnnData source has one orientation, so the reader's orientation choice
for it is its encoding's: a CSR source is cheap for cells, a CSC source for
features, a dense one by its chunks.

**Identity.** The record binds each source by a dataset and a counts
fingerprint. For an AnnData source they are digests of the stored bytes of
the objects that define the counts (every object under the matrix element)
and the ids (every object of the ``obs`` and ``var`` index columns). Creation
also records, per object, its size and version (the ETag on object storage,
the modification and change times of a local file), and the metadata
documents the element was opened from; a composite keeps them in
``_composite/anndataSources``. An open lists the objects (one listing, or a
``stat`` per local file: no file is read) and compares: unchanged, the
recorded fingerprints stand and the arrays open from the recorded
documents; changed, the digest of every group whose objects changed (element,
``obs`` index, ``var`` index) is computed again from the bytes and must
equal the record, or the open fails closed (:class:`IdentityMismatchError`).
A store that reports no versions (an in-memory Store) is digested at every
open. Versions and digests are computed by :mod:`.anndata_identity`.

**Counts dtype.** Integer counts are read in their dtype. Float counts are
accepted when every stored value is a finite non-negative whole number
(scanned at creation, streamed in blocks), and are read as the narrowest
unsigned dtype that holds the largest; any other float value is refused
with the remedy (a raw-counts layer through ``source_layers``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import StorePath

from ..errors import IdentityMismatchError, UnsupportedSourceError
from ..format.count_dtype import ValueRange, resolve_count_dtype, scan_values
from ..format.fingerprints import dataset_fingerprint_of
from ..format.paths import join
from ..remote.locations import Location
from .anndata_elements import (
    Documents,
    IndexElement,
    MatrixElement,
    anndata_format,
    document_keys,
    matrix_element,
    obs_var_index,
    open_element_array,
    read_index,
)
from .anndata_identity import GROUPS, fingerprints_of, listed_versions, pin_element
from .cell_plan import CellPlan
from .decode_threads import hand_over
from .direct_chunks import DirectChunks, direct_chunks_for
from .feature_plan import FeaturePlan
from .gather import as_slice, distinct_chunks
from .prefetch import PrefetchedStore
from .sparse_entries import read_ranges, scatter_entries
from .sparse_rows import SourceRows, sorted_rows

__all__ = [
    "AnnDataCounts",
    "AnnDataSpec",
    "bind_anndata",
    "is_anndata_root",
]

Indices = npt.NDArray[np.int64]
# Entries of a sparse read decoded and placed at once (a few MB of them).
ENTRY_BATCH = 1 << 20
# Values scanned per block when checking float counts at creation.
SCAN_BLOCK = 1 << 23


@dataclass(frozen=True, slots=True)
class AnnDataSpec:
    """How to bind an AnnData source: its element, and what creation recorded of it."""

    element: str = "X"
    """``X`` or ``layers/{name}``."""
    recorded: Mapping[str, Any] | None = None
    """The source's entry of ``_composite/anndataSources`` (at open), or ``None`` (creation)."""


def is_anndata_root(root_document: bytes | None) -> bool:
    """Whether a root ``zarr.json`` is absent (maybe a v2 AnnData store) or an AnnData root."""
    if root_document is None:
        return True
    try:
        attrs = json.loads(root_document).get("attributes", {})
    except (ValueError, AttributeError):
        return False
    return isinstance(attrs, dict) and attrs.get("encoding-type") == "anndata"


class _DocumentReader:
    """Fetches documents once, keeps their bytes (``None``: absent) for the record."""

    def __init__(self, store: Store, held: Mapping[str, bytes | None] | None = None) -> None:
        self._store = store
        self.fetched: dict[str, bytes | None] = dict(held or {})

    async def fetch(self, keys: list[str]) -> None:
        missing = [key for key in keys if key not in self.fetched]
        buffers = await asyncio.gather(
            *(self._store.get(key, default_buffer_prototype()) for key in missing)
        )
        for key, buffer in zip(missing, buffers, strict=True):
            self.fetched[key] = None if buffer is None else buffer.to_bytes()

    async def __call__(self, key: str) -> Any:
        await self.fetch([key])
        data = self.fetched[key]
        return None if data is None else json.loads(data)


# ------------------------------------------------------------------ binding


@dataclass(frozen=True)
class _Layout:
    """Where an AnnData source's counts and ids are, and what defines each group."""

    zarr_format: int
    element: MatrixElement
    obs_index: IndexElement
    var_index: IndexElement

    def documents(self) -> list[str]:
        """The documents opening the element and the indexes reads."""
        fmt = self.zarr_format
        keys = [*document_keys("", fmt), *document_keys("obs", fmt), *document_keys("var", fmt)]
        if self.element.path.startswith("layers/"):
            keys += document_keys("layers", fmt)
        keys += document_keys(self.element.path, fmt, array=self.element.encoding == "array")
        for array in self.element.arrays:
            keys += document_keys(array, fmt, array=True)
        for index in (self.obs_index, self.var_index):
            if index.nullable:
                keys += document_keys(index.path, fmt)
                keys += document_keys(join(index.path, "mask"), fmt, array=True)
            keys += document_keys(index.values_path, fmt, array=True)
        return list(dict.fromkeys(keys))

    def prefixes(self) -> dict[str, list[str]]:
        """The object prefixes each fingerprint covers."""
        return {
            "counts": [self.element.path],
            "cells": [self.obs_index.path],
            "features": [self.var_index.path],
        }

    def watched(self) -> tuple[list[str], list[str]]:
        """(prefixes, documents) whose versions the open compares."""
        prefixes = [p for group in self.prefixes().values() for p in group]
        return prefixes, self.documents()


async def _layout(documents: Documents, element: str, *, where: str) -> _Layout | None:
    fmt = await anndata_format(documents)
    if fmt is None:
        return None
    matrix, obs, var = await asyncio.gather(
        matrix_element(documents, element, fmt, where=where),
        obs_var_index(documents, "obs", fmt, where=where),
        obs_var_index(documents, "var", fmt, where=where),
    )
    return _Layout(fmt, matrix, obs, var)


class _EntryBatch(NamedTuple):
    """The entries of some consecutive majors of a sparse read."""

    first: int
    """Position of the first major in the read's majors."""
    stop: int
    """Position after the last."""
    lengths: Indices
    """Entries of each major."""
    minor: npt.NDArray[Any]
    """Minor index of each entry, majors in order."""
    values: npt.NDArray[Any]
    """Value of each entry."""
    chunks: int
    """Chunks decoded for this batch."""


@dataclass
class AnnDataCounts:
    """A bound AnnData matrix element, read into composite reads."""

    element: MatrixElement
    """The element read."""
    dtype: np.dtype
    """The integer dtype values are read as."""
    arrays: dict[str, AsyncArray[Any]]
    """``indptr``/``indices``/``data``, or ``dense``."""
    index_arrays: tuple[zarr.Array[Any], zarr.Array[Any]]
    """The obs and var index values (for readers that look ids up)."""
    entry: dict[str, Any]
    """What the composite records of this source (``_composite/anndataSources``)."""
    cell_ids: npt.NDArray[Any] | None = None
    """The obs index, when read (at creation)."""
    feature_ids: npt.NDArray[Any] | None = None
    """The var index, when read (at creation)."""
    fingerprints: dict[str, str] = field(default_factory=dict)
    """``counts``, ``cells`` and ``features`` fingerprints."""
    pointers: dict[int, Indices] = field(default_factory=dict, repr=False)
    """Decoded ``indptr`` chunks, by chunk, kept for the element's lifetime (shared
    by its counting views: the source's identity was checked at open)."""
    direct: dict[str, DirectChunks | None] = field(init=False, repr=False)
    """Direct chunk decoders of the arrays (``None``: read through zarr's pipeline)."""

    def __post_init__(self) -> None:
        self.direct = {name: direct_chunks_for(array) for name, array in self.arrays.items()}

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features)."""
        return self.element.shape

    def on(self, store: Store) -> AnnDataCounts:
        """The same element read through ``store`` (a counting view); no I/O."""
        arrays = {
            name: AsyncArray(
                metadata=array.metadata, store_path=StorePath(store, array.store_path.path)
            )
            for name, array in self.arrays.items()
        }
        return replace(self, arrays=arrays)

    async def read_into(self, out: npt.NDArray[Any], cells: CellPlan, plan: FeaturePlan) -> int:
        """Place the selected values into ``out``; returns the chunks decoded.

        Rows repeated by the cell selection are the caller's to copy (as for
        every source); repeated feature columns are copied here.
        """
        unique_rows, first_rows, _ = cells.firsts()
        unique_cols, first_cols, repeated_cols = plan.feature_major()
        encoding = self.element.encoding
        direct = self.direct.get("dense")
        if direct is not None:
            chunks = await direct.read_block(unique_rows, unique_cols, out, first_rows, first_cols)
        elif encoding == "array":
            dense = self.arrays["dense"]
            block = np.asarray(
                await dense.get_orthogonal_selection((as_slice(unique_rows), as_slice(unique_cols)))
            )
            out[np.ix_(first_rows, first_cols)] = block
            chunk_rows, chunk_cols = dense.chunks
            chunks = len(distinct_chunks(unique_rows, chunk_rows)) * len(
                distinct_chunks(unique_cols, chunk_cols)
            )
        else:
            cell_major = encoding == "csr_matrix"
            if cell_major:
                majors, out_majors = unique_rows, first_rows
                minors, out_minors, n_minor = unique_cols, first_cols, self.shape[1]
            else:
                majors, out_majors = unique_cols, first_cols
                minors, out_minors, n_minor = unique_rows, first_rows, self.shape[0]
            # output position of each minor index (-1: not selected), by one
            # lookup per entry: cheaper than a search when entries are many
            lookup: Indices | None = None
            if len(minors) != n_minor or not bool(np.all(out_minors == np.arange(n_minor))):
                lookup = np.full(n_minor, -1, dtype=np.int64)
                lookup[minors] = out_minors
            chunks = 0
            async for batch in self._entry_batches(majors):
                chunks += batch.chunks
                if len(batch.minor):
                    scatter_entries(
                        out,
                        cell_major,
                        out_majors[batch.first : batch.stop],
                        np.cumsum(batch.lengths) - batch.lengths,
                        batch.minor,
                        batch.values,
                        lookup,
                    )
        if len(repeated_cols):
            out[np.ix_(first_rows, repeated_cols[:, 0])] = out[
                np.ix_(first_rows, repeated_cols[:, 1])
            ]
        return chunks

    async def read_rows(
        self, cells: CellPlan, plan: FeaturePlan, idx: np.dtype
    ) -> tuple[SourceRows, int]:
        """The selected rows as CSR, and the chunks decoded: sparse-native.

        Rows are the plan's sorted unique rows; columns are output columns
        of ``plan``, whose features must be unique (the reader reads unique
        features and repeats columns itself). Stored zeros are dropped.
        Only for ``csr_matrix`` and ``csc_matrix`` elements: a dense array is
        read in bands by the caller (:func:`~.sparse_rows.dense_rows`).
        """
        unique_rows, _, _ = cells.firsts()
        unique_cols, first_cols, repeated = plan.feature_major()
        assert not len(repeated), "a sparse read selects unique features"
        n_out = len(plan.columns)
        cell_major = self.element.encoding == "csr_matrix"
        majors = unique_rows if cell_major else unique_cols
        n_minor = self.shape[1] if cell_major else self.shape[0]
        if cell_major:
            wanted, places = unique_cols, first_cols
        else:
            wanted, places = unique_rows, np.arange(len(unique_rows))
        # output position of each minor index (-1: not selected); a CSC's
        # minors are rows, placed by their rank among the selected rows
        lookup: npt.NDArray[Any] | None = None
        if len(wanted) != n_minor or not bool(np.all(places == np.arange(n_minor))):
            lookup = np.full(n_minor, -1, dtype=idx)
            lookup[wanted] = places
        # source columns in output order: rows come out sorted without a sort
        monotone = len(first_cols) < 2 or bool(np.all(first_cols[1:] > first_cols[:-1]))
        counts: list[Indices] = []
        sorts: list[asyncio.Future[None]] = []
        kept_minor: list[npt.NDArray[Any]] = []
        kept_values: list[npt.NDArray[Any]] = []
        chunks = 0
        async for batch in self._entry_batches(majors):
            chunks += batch.chunks
            minor = batch.minor.astype(idx, copy=False) if lookup is None else lookup[batch.minor]
            keep = batch.values != 0
            if lookup is not None:
                keep &= minor >= 0
            lengths = batch.lengths
            if not bool(keep.all()):
                owner = np.repeat(np.arange(len(lengths)), lengths)
                lengths = np.bincount(owner[keep], minlength=len(lengths))
                minor, values = minor[keep], batch.values[keep]
            else:
                values = batch.values
            values = values.astype(self.dtype, copy=False)
            counts.append(lengths)
            if cell_major and not monotone:
                # each batch sorted on a decoding thread, while the next batch
                # is decoded and mapped here: numpy's sort runs without the
                # GIL (scipy's sort_indices holds it), so batches sort in parallel
                bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
                np.cumsum(lengths, out=bounds[1:])
                sorts.append(
                    hand_over(_sort_rows, bounds, kept_minor, kept_values, len(kept_minor), n_out)
                )
            kept_minor.append(minor)
            kept_values.append(values)
        await asyncio.gather(*sorts)
        per_major = np.concatenate(counts) if counts else np.zeros(len(majors), dtype=np.int64)
        indptr = np.zeros(len(majors) + 1, dtype=np.int64)
        np.cumsum(per_major, out=indptr[1:])
        if not kept_minor:
            kept_minor, kept_values = [np.zeros(0, dtype=idx)], [np.zeros(0, dtype=self.dtype)]
        if cell_major:
            return SourceRows(indptr, kept_minor, kept_values), chunks
        # CSC: columns of the selected features; transposed into rows, whose
        # column indices (the features' ranks) come out sorted
        by_rows = sp.csc_matrix(
            (np.concatenate(kept_values), np.concatenate(kept_minor), indptr),
            shape=(len(unique_rows), len(unique_cols)),
        ).tocsr()
        indices = first_cols.astype(idx)[by_rows.indices]
        row_indptr = by_rows.indptr.astype(np.int64, copy=False)
        if not monotone:
            return sorted_rows(row_indptr, indices, by_rows.data, n_out), chunks
        return SourceRows(row_indptr, [indices], [by_rows.data]), chunks

    async def _entry_batches(self, majors: Indices) -> AsyncIterator[_EntryBatch]:
        """The entries of the sorted unique ``majors`` in batches of about
        :data:`ENTRY_BATCH` entries: the decoded entries stay small (a band of
        all cells is not held whole, twice, before it is placed). The next
        batch is read while the caller works on this one. The first batch
        also counts the ``indptr`` chunks decoded."""
        starts, ends, chunks = await self._ranges(majors)
        ends_cum = np.cumsum(ends - starts)
        cuts = [0]
        while cuts[-1] < len(majors):
            first = cuts[-1]
            done = int(ends_cum[first - 1]) if first else 0
            cuts.append(max(first + 1, int(np.searchsorted(ends_cum, done + ENTRY_BATCH, "right"))))

        async def read(first: int, stop: int) -> tuple[tuple[npt.NDArray[Any], int], ...]:
            more = stop < len(majors)  # the next batch starts in this one's last chunk
            return await asyncio.gather(
                self._read_ranges("indices", starts[first:stop], ends[first:stop], more),
                self._read_ranges("data", starts[first:stop], ends[first:stop], more),
            )

        pending = asyncio.ensure_future(read(cuts[0], cuts[1]))
        try:
            for number, (first, stop) in enumerate(itertools.pairwise(cuts)):
                (minor, n_minor_chunks), (values, n_value_chunks) = await pending
                if stop < len(majors):
                    pending = asyncio.ensure_future(read(stop, cuts[number + 2]))
                chunks += n_minor_chunks + n_value_chunks
                lengths = ends[first:stop] - starts[first:stop]
                yield _EntryBatch(first, stop, lengths, minor, values, chunks)
                chunks = 0
        finally:
            if not pending.done():
                pending.cancel()

    async def _read_ranges(
        self, name: str, starts: Indices, ends: Indices, more: bool
    ) -> tuple[npt.NDArray[Any], int]:
        """``name``'s entries in the ranges (directly decoded when the array allows);
        ``more``: a next batch follows, which may start in the last chunk."""
        direct = self.direct[name]
        if direct is not None:
            return await direct.read_ranges(starts, ends, keep_last=more)
        if not bool(np.any(ends > starts)):
            return np.zeros(0, dtype=self.arrays[name].dtype), 0
        return await read_ranges(self.arrays[name], starts, ends)

    async def _ranges(self, majors: Indices) -> tuple[Indices, Indices, int]:
        """Where the entries of the sorted unique ``majors`` (rows of a CSR, columns
        of a CSC) are: (starts, ends, ``indptr`` chunks decoded), from the
        ``indptr`` entries of the majors and their successors only. Decoded
        ``indptr`` chunks are kept, so a stream of reads decodes each once."""
        bounds = np.unique(np.concatenate([majors, majors + 1]))
        direct = self.direct["indptr"]
        if direct is None:
            indptr = self.arrays["indptr"]
            pointers = np.asarray(
                await indptr.get_orthogonal_selection((as_slice(bounds),)), dtype=np.int64
            )
            decoded = len(distinct_chunks(bounds, indptr.chunks[0]))
        else:
            pointers, decoded = await self._pointers(direct, bounds)
        starts = pointers[np.searchsorted(bounds, majors)]
        ends = pointers[np.searchsorted(bounds, majors + 1)]
        return starts, ends, decoded

    async def _pointers(self, direct: DirectChunks, bounds: Indices) -> tuple[Indices, int]:
        """``indptr`` at the sorted ``bounds``, and the chunks decoded for them (those
        not kept from an earlier read)."""
        size = direct.size
        needed = distinct_chunks(bounds, size)
        missing = np.asarray([c for c in needed.tolist() if c not in self.pointers], dtype=np.int64)
        if len(missing):
            decoded: dict[int, Indices] = {}

            def keep(position: int, values: npt.NDArray[Any] | None) -> None:
                chunk = int(missing[position])
                stop = min(size, direct.length - chunk * size)
                # a copy: ``values`` is the decoding thread's buffer
                decoded[chunk] = (
                    np.zeros(stop, dtype=np.int64) if values is None else values.astype(np.int64)
                )

            await direct.read_chunks(missing, keep)
            self.pointers.update(decoded)
        pointers = np.empty(len(bounds), dtype=np.int64)
        cuts = np.searchsorted(bounds, needed * size)
        for chunk, lo, hi in zip(
            needed.tolist(), cuts.tolist(), [*cuts[1:].tolist(), len(bounds)], strict=True
        ):
            pointers[lo:hi] = self.pointers[chunk][bounds[lo:hi] - chunk * size]
        return pointers, len(missing)


def _sort_rows(
    bounds: Indices,
    minor: list[npt.NDArray[Any]],
    values: list[npt.NDArray[Any]],
    position: int,
    n_cols: int,
) -> None:
    """Sort the entries of part ``position`` of ``minor``/``values`` within each row
    (rows start at ``bounds``), in place of the part: one stable numpy sort of
    (row, column) keys, which runs without the GIL."""
    rows = np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))
    rows *= n_cols
    rows += minor[position]
    order = np.argsort(rows, kind="stable")
    minor[position] = minor[position][order]
    values[position] = values[position][order]


async def _scan_dtype(
    arrays: dict[str, AsyncArray[Any]], element: MatrixElement, *, name: str, where: str
) -> np.dtype:
    """The dtype the element's values are read as; float values must all be whole counts."""
    values = arrays["dense"] if element.encoding == "array" else arrays["data"]
    dtype = np.dtype(values.dtype)
    if dtype.kind in "iu":
        return dtype
    if dtype.kind != "f":
        raise UnsupportedSourceError(
            f"source {name!r} at {where}: {element.path} holds {dtype} values, not counts; "
            "give a layer of integer counts with source_layers"
        )
    scanned: ValueRange | None = None
    step = max(1, SCAN_BLOCK // max(1, int(np.prod(values.shape[1:]))))
    for start in range(0, values.shape[0], step):
        block = np.asarray(await values.getitem(slice(start, start + step)))
        part = scan_values(block, where=f"{element.path} of source {name!r}")
        scanned = part if scanned is None else scanned.merge(part)
        if not scanned.integral or scanned.minimum < 0:
            break
    if scanned is None or (scanned.integral and scanned.minimum >= 0):
        return resolve_count_dtype(scanned) if scanned is not None else np.dtype(np.uint8)
    what = "fractional" if not scanned.integral else "negative"
    raise UnsupportedSourceError(
        f"source {name!r} at {where}: {element.path} holds {what} {dtype} values; a composite "
        "composes whole non-negative counts. Give the raw-counts layer with "
        f"source_layers={{{name!r}: 'counts'}} (or the layer that holds them), or write the "
        "counts with cv.write_counts"
    )


async def bind_anndata(
    name: str,
    location: Location,
    backend: Store,
    spec: AnnDataSpec,
    *,
    where: str,
) -> AnnDataCounts | None:
    """Bind the AnnData source at ``backend``: check its identity against
    ``spec.recorded`` (at open) or fingerprint it, read its ids and check its
    dtype (at creation). ``None`` when, at creation, the store is no AnnData store."""
    recorded = spec.recorded
    if recorded is not None:
        held = {k: (None if v is None else v.encode()) for k, v in recorded["documents"].items()}
        prefixes, documents = recorded["prefixes"], list(held)
        versions = await listed_versions(backend, location, prefixes, documents)
        if (
            versions is not None
            and versions == recorded["objects"]
            and all(entry[1] is not None for entry in versions.values())
        ):
            # unchanged since creation: the recorded fingerprints stand and the
            # element opens from the recorded documents, without reading a file
            pin_element(backend, versions, recorded["element"])
            return await _open(
                backend, held, dict(recorded), dict(recorded["fingerprints"]), where=where
            )
    reader = _DocumentReader(backend)
    layout = await _layout(reader, spec.element, where=where)
    if layout is None:
        if recorded is None:
            return None
        raise IdentityMismatchError(
            f"source {name!r} at {where} is no longer an AnnData store (its root has no "
            "encoding-type 'anndata'); restore the source, or recreate the composite"
        )
    await reader.fetch(layout.documents())
    prefixes, documents = layout.watched()
    versions = await listed_versions(backend, location, prefixes, documents)
    if versions is not None:
        pin_element(backend, versions, layout.element.path)
    fingerprints = await fingerprints_of(backend, layout.prefixes(), versions, recorded)
    if recorded is not None:
        changed = [g for g in GROUPS if fingerprints[g] != recorded["fingerprints"][g]]
        if changed or layout.element.path != recorded["element"]:
            raise IdentityMismatchError(
                f"source {name!r} at {where}: the AnnData store changed after the composite was "
                f"created ({', '.join(changed) or 'element'} differ: {fingerprints}); restore the "
                "source, or recreate the composite"
            )
        entry = dict(recorded)
        return await _open(backend, reader.fetched, entry, fingerprints, where=where)
    entry = {
        "element": layout.element.path,
        "encoding": layout.element.encoding,
        "zarrFormat": layout.zarr_format,
        "shape": list(layout.element.shape),
        "obsIndex": [
            layout.obs_index.path,
            layout.obs_index.values_path,
            layout.obs_index.nullable,
        ],
        "varIndex": [
            layout.var_index.path,
            layout.var_index.values_path,
            layout.var_index.nullable,
        ],
        "prefixes": prefixes,
        "documents": {
            k: (None if v is None else v.decode())
            for k, v in reader.fetched.items()
            if k in documents
        },
        "objects": versions if versions is not None else {},
        "fingerprints": fingerprints,
        "dtype": "",
    }
    counts = await _open(backend, reader.fetched, entry, fingerprints, where=where)
    dtype = await _scan_dtype(counts.arrays, counts.element, name=name, where=where)
    entry["dtype"] = dtype.name
    obs = IndexElement(*entry["obsIndex"])
    var = IndexElement(*entry["varIndex"])
    view = PrefetchedStore(backend, reader.fetched)
    cell_ids, feature_ids = await asyncio.gather(
        read_index(view, obs, layout.zarr_format, where=where),
        read_index(view, var, layout.zarr_format, where=where),
    )
    shape = layout.element.shape
    if (len(cell_ids), len(feature_ids)) != shape:
        raise UnsupportedSourceError(
            f"source {name!r} at {where}: {layout.element.path} is {shape[0]} x {shape[1]} but obs "
            f"and var index {len(cell_ids)} and {len(feature_ids)} names; the store is not a "
            "valid AnnData"
        )
    return replace(counts, dtype=dtype, cell_ids=cell_ids, feature_ids=feature_ids)


async def _open(
    backend: Store,
    documents: Mapping[str, bytes | None],
    entry: dict[str, Any],
    fingerprints: dict[str, str],
    *,
    where: str,
) -> AnnDataCounts:
    """The element's arrays, opened from ``documents`` (no document is read again)."""
    fmt = int(entry["zarrFormat"])
    shape = (int(entry["shape"][0]), int(entry["shape"][1]))
    element = MatrixElement(entry["element"], entry["encoding"], shape, fmt)
    view = PrefetchedStore(backend, documents)
    names = ["dense"] if element.encoding == "array" else ["indptr", "indices", "data"]
    opened = await asyncio.gather(
        *(open_element_array(view, path, fmt) for path in element.arrays),
        open_element_array(view, entry["obsIndex"][1], fmt),
        open_element_array(view, entry["varIndex"][1], fmt),
    )
    arrays = dict(zip(names, opened[: len(names)], strict=True))
    # read through the store underneath: the documents are done with
    arrays = {
        name: AsyncArray(
            metadata=array.metadata, store_path=StorePath(backend, array.store_path.path)
        )
        for name, array in arrays.items()
    }
    if element.encoding == "array" and tuple(arrays["dense"].shape) != shape:
        raise UnsupportedSourceError(
            f"{element.path} of {where} changed shape; recreate the composite"
        )
    dtype = np.dtype(entry["dtype"]) if entry.get("dtype") else np.dtype(np.int64)
    cells, features = (zarr.Array(array) for array in opened[len(names) :])
    return AnnDataCounts(
        element, dtype, arrays, (cells, features), entry, fingerprints=fingerprints
    )


def dataset_fingerprint(fingerprints: Mapping[str, str]) -> str:
    """The dataset fingerprint an AnnData source is recorded with."""
    return dataset_fingerprint_of(
        fingerprints["counts"], fingerprints["cells"], fingerprints["features"]
    )
