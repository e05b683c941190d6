"""Reads of a bound AnnData matrix element: dense blocks and CSR rows.

:class:`ElementReads` holds the reads of :class:`~.anndata_sources.AnnDataCounts`
(which binds the element and checks its identity):

* :meth:`~ElementReads.read_into` places the selected cells x features into
  a dense output: a CSR element's rows (a CSC element's columns) are read as
  entries, in batches, and scattered; a dense element's touched chunks are
  decoded into the output;
* :meth:`~ElementReads.read_rows` gives the selected rows of a CSR or CSC
  element as CSR (a sparse read, ``VirtualArrayReader.read_sparse``),
  without a dense block.

The ``indptr`` entries of the selected majors are read first (decoded
``indptr`` chunks are kept), then the ``indices`` and ``data`` of those
majors in batches of about :data:`ENTRY_BATCH` entries, the next batch read
while the last is placed. Chunks are decoded by :mod:`.direct_chunks` (one
fetch and one decode per touched chunk); an array whose codecs or layout it
does not decode is read through zarr's pipeline instead
(:func:`~.sparse_entries.read_ranges` for the sparse arrays, orthogonal
indexing for a dense one).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from zarr.core.array import AsyncArray

from ..errors import RecordShapeError, UnsupportedSourceError
from ..format.gathering import gather_all
from .anndata_elements import MatrixElement
from .cell_plan import CellPlan
from .decode_threads import hand_over
from .direct_chunks import DirectChunks
from .feature_plan import FeaturePlan
from .gather import distinct_chunks
from .placement import as_slice
from .sparse_entries import canonical_entries, read_ranges, scatter_entries
from .sparse_rows import SourceRows, sorted_rows

__all__ = ["ENTRY_BATCH", "ElementReads"]

Indices = npt.NDArray[np.int64]
# Entries of a sparse read decoded and placed at once (a few MB of them).
ENTRY_BATCH = 1 << 20


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


class ElementReads:
    """The reads of a bound AnnData matrix element (a base of ``AnnDataCounts``,
    whose fields these are)."""

    element: MatrixElement
    source: str
    dtype: np.dtype
    arrays: dict[str, AsyncArray[Any]]
    pointers: dict[int, Indices]
    direct: dict[str, DirectChunks | None]

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features)."""
        return self.element.shape

    async def read_into(self, out: npt.NDArray[Any], cells: CellPlan, plan: FeaturePlan) -> int:
        """Place the selected values into ``out``; returns the chunks decoded.

        Rows repeated by the cell selection are the caller's to copy (as for
        every source); repeated feature columns are copied here.
        """
        unique_rows, first_rows, _ = cells.firsts()
        unique_cols, first_cols, repeated_cols = plan.feature_major()
        encoding = self.element.encoding
        if encoding == "array":
            chunks = await self._read_dense(out, unique_rows, unique_cols, first_rows, first_cols)
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
            # each batch is placed on a decoding thread while the next is
            # decoded (the compiled scatter runs without the GIL); batches
            # write to distinct majors
            placing: list[asyncio.Future[None]] = []
            async for batch in self._entry_batches(majors):
                chunks += batch.chunks
                if len(batch.minor):
                    placing.append(
                        hand_over(
                            self._scatter,
                            out,
                            cell_major,
                            out_majors[batch.first : batch.stop],
                            np.cumsum(batch.lengths) - batch.lengths,
                            batch.minor,
                            batch.values,
                            lookup,
                        )
                    )
            await gather_all(*placing)
        if len(repeated_cols):
            out[np.ix_(first_rows, repeated_cols[:, 0])] = out[
                np.ix_(first_rows, repeated_cols[:, 1])
            ]
        return chunks

    def _scatter(self, out: npt.NDArray[Any], *args: Any) -> None:
        """:func:`~.sparse_entries.scatter_entries`, an index outside the element
        named as the damage it is."""
        try:
            scatter_entries(out, *args)
        except IndexError as exc:
            raise self._damaged() from exc

    def _damaged(
        self, what: str = "has an entry whose index lies outside its shape"
    ) -> RecordShapeError:
        """The refusal of a damaged element: names the source, the element, what is
        wrong and the remedy."""
        element = self.element
        return RecordShapeError(
            f"{self.source}: the AnnData element {element.path!r} ({element.encoding}, shape "
            f"{element.shape}) {what}: the source is damaged. Write it again with anndata, or "
            "restore it, then recreate the composite"
        )

    def _check_ranges(self, majors: Indices, starts: Indices, ends: Indices) -> None:
        """Refuse ``indptr`` entries that are no range of stored entries: a decreasing
        ``indptr`` or one past the entries stored would otherwise read another
        major's entries, or fail in numpy with a message that names nothing.

        Only the majors read are checked (a read never decodes all of ``indptr``);
        creation reads every major for the summaries, so a composite over a
        damaged source is never made.
        """
        stored = min(int(self.arrays["indices"].shape[0]), int(self.arrays["data"].shape[0]))
        bad = (starts < 0) | (ends < starts) | (ends > stored)
        if len(majors) and int(majors[0]) == 0:
            bad[0] |= bool(starts[0] != 0)
        if not bool(bad.any()):
            return
        at = int(np.argmax(bad))
        major = int(majors[at])
        axis = "row" if self.element.encoding == "csr_matrix" else "column"
        raise self._damaged(
            f"has an indptr that is no range of its {stored} stored entries: "
            f"indptr[{major}:{major + 2}] = {int(starts[at])}, {int(ends[at])} for {axis} "
            f"{major} (indptr must start at 0, never decrease and end at most at {stored})"
        )

    async def _read_dense(
        self,
        out: npt.NDArray[Any],
        rows: Indices,
        cols: Indices,
        out_rows: Indices,
        out_cols: Indices,
    ) -> int:
        """A dense element's ``rows`` x ``cols`` (sorted unique) into ``out``; returns
        the chunks decoded."""
        direct = self.direct.get("dense")
        if direct is not None:
            return await direct.read_block(rows, cols, out, out_rows, out_cols)
        dense = self.arrays["dense"]
        block = np.asarray(await dense.get_orthogonal_selection((as_slice(rows), as_slice(cols))))
        out[np.ix_(out_rows, out_cols)] = block
        chunk_rows, chunk_cols = dense.chunks
        return len(distinct_chunks(rows, chunk_rows)) * len(distinct_chunks(cols, chunk_cols))

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
            if (
                len(batch.minor)
                and not 0 <= int(batch.minor.min()) <= int(batch.minor.max()) < n_minor
            ):
                raise self._damaged()
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
        await gather_all(*sorts)
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
            return tuple(
                await gather_all(
                    self._read_ranges("indices", starts[first:stop], ends[first:stop], more),
                    self._read_ranges("data", starts[first:stop], ends[first:stop], more),
                )
            )

        pending = asyncio.ensure_future(read(cuts[0], cuts[1]))
        try:
            for number, (first, stop) in enumerate(itertools.pairwise(cuts)):
                (minor, n_minor_chunks), (values, n_value_chunks) = await pending
                if stop < len(majors):
                    pending = asyncio.ensure_future(read(stop, cuts[number + 2]))
                chunks += n_minor_chunks + n_value_chunks
                lengths = ends[first:stop] - starts[first:stop]
                lengths, minor, values = self._canonical(majors[first:stop], lengths, minor, values)
                yield _EntryBatch(first, stop, lengths, minor, values, chunks)
                chunks = 0
        finally:
            if not pending.done():
                pending.cancel()

    def _canonical(
        self, majors: Indices, lengths: Indices, minor: npt.NDArray[Any], values: npt.NDArray[Any]
    ) -> tuple[Indices, npt.NDArray[Any], npt.NDArray[Any]]:
        """The batch's entries sorted within each major, repeated indices summed
        (anndata reads a non-canonical CSR/CSC as scipy sums it): placed as they
        are, a repeat would overwrite its twin and a sparse read would carry
        unsorted rows flagged sorted. A sum the read dtype cannot hold is refused."""
        canonical = canonical_entries(lengths, minor, values)
        summed = canonical[2]
        if summed is values or not len(summed) or self.dtype.kind not in "iu":
            return canonical
        largest = summed.max()
        if largest > np.iinfo(self.dtype).max or summed.min() < np.iinfo(self.dtype).min:
            element = self.element
            at = int(np.argmax(summed))
            major = int(majors[np.searchsorted(np.cumsum(canonical[0]), at, side="right")])
            axis = "row" if element.encoding == "csr_matrix" else "column"
            raise UnsupportedSourceError(
                f"the AnnData element {element.path!r} stores repeated entries (a non-canonical "
                f"{element.encoding}) whose sum {largest} in {axis} {major} does not fit {self.dtype}, "
                "the dtype it is read as. Store it canonical (matrix.sum_duplicates(), then write "
                "the AnnData again) and recreate the composite, or import it with cv.write_counts"
            )
        return canonical

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
        self._check_ranges(majors, starts, ends)
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
