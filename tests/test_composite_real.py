"""Composites of real data: Wu 2020 and the CellTypist sample, which share 20,408 genes.

The union and the intersection read exactly what ``anndata.concat`` gives for
the same two matrices (outer and inner join, compared by feature id), and their
summaries are numpy's on that concat. The reader's cost is checked against the
sources' layout records: a read decodes, in each source, exactly the inner
chunks of the orientation that touches fewer chunk bytes, each once per read
or stream batch. ``reader.stats`` reports it, and an independent count of the
zstd decodes of source inner chunks (count chunks are the only zstd chunks of
those shapes) confirms the chunks were decoded, and decoded once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal, cast
from unittest import mock

import anndata as ad
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs import realdata
from cytearc_vfs.format.records import COUNT_LAYOUT_ATTR, ArrayGeometry, CountLayout
from cytearc_vfs.read.chunk_decoding import ChunkDecoder
from cytearc_vfs.read.gather import touched_chunks
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters

#: A small policy, so both sources span many shards and inner chunks in both orientations.
LAYOUT = cv.LayoutPolicy(256 * 1024, 16 * 1024)
UNION_FEATURES = 43_105
SHARED_FEATURES = 20_408
N_CELLS = 200 + 559

Indices = npt.NDArray[np.int64]


@dataclass(frozen=True)
class RealSource:
    """One written source: its data, where it is and its layout record."""

    name: str
    adata: ad.AnnData
    path: Path
    layout: CountLayout
    itemsize: int
    first_row: int
    """Its first row in the composite (all its cells are used, in order)."""

    @property
    def matrix(self) -> sp.csr_array:
        return sp.csr_array(cast(Any, self.adata.X))

    @property
    def rows(self) -> slice:
        return slice(self.first_row, self.first_row + self.adata.n_obs)


@dataclass(frozen=True)
class RealComposites:
    sources: tuple[RealSource, ...]
    union: cv.CompositeStore
    intersection: cv.CompositeStore
    paths: dict[str, Path]


def _layout_record(path: Path) -> tuple[CountLayout, int]:
    """The source's verified layout record, checked against its live arrays."""
    store = cv.open_store(path)
    group = zarr.open_group(store, path="RNA", mode="r")
    layout = CountLayout.from_json(group.attrs[COUNT_LAYOUT_ATTR], where=f"{path}/RNA")
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    counts_t = zarr.open_array(store, path="RNA/countsT", mode="r")
    assert layout.counts_t is not None
    assert tuple(counts.chunks) == layout.counts.chunks
    assert tuple(counts_t.chunks) == layout.counts_t.chunks
    return layout, counts.dtype.itemsize


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealComposites:
    folder = tmp_path_factory.mktemp("real-composites")
    data = {"wu": realdata.wu2020(), "ct": realdata.celltypist_sample()}
    sources = []
    first_row = 0
    for name, adata in data.items():
        path = folder / f"{name}.zarr"
        cv.write_counts(path, adata, layout=LAYOUT)
        layout, itemsize = _layout_record(path)
        sources.append(RealSource(name, adata, path, layout, itemsize, first_row))
        first_row += adata.n_obs
    locations = {source.name: source.path for source in sources}
    paths = {"union": folder / "union.zarr", "intersection": folder / "intersection.zarr"}
    return RealComposites(
        sources=tuple(sources),
        union=cv.create_composite(paths["union"], locations, features="union"),
        intersection=cv.create_composite(paths["intersection"], locations, features="intersection"),
        paths=paths,
    )


# ------------------------------------------------------------------ helpers


def _concat(real: RealComposites, join: Literal["inner", "outer"]) -> ad.AnnData:
    return ad.concat([source.adata for source in real.sources], join=join)


def _reindexed(concat: ad.AnnData, feature_ids: pd.Index) -> sp.csr_array:
    """The concat's counts with its features in the composite's order."""
    order = concat.var_names.get_indexer(feature_ids)
    assert (order >= 0).all()
    return sp.csr_array(sp.csr_array(cast(Any, concat.X))[:, order])


def _assert_equal_sparse(dense: npt.NDArray[Any], expected: sp.csr_array) -> None:
    """``dense`` holds exactly the values of ``expected`` (whole counts in any dtype)."""
    assert dense.shape == expected.shape
    ours = sp.csr_array(dense)
    theirs = sp.csr_array(expected, copy=True)
    theirs.eliminate_zeros()
    theirs.sort_indices()
    np.testing.assert_array_equal(ours.indptr, theirs.indptr)
    np.testing.assert_array_equal(ours.indices, theirs.indices)
    np.testing.assert_array_equal(ours.data, theirs.data)


def _columns(reader: cv.VirtualArrayReader, source: RealSource) -> Indices:
    """Column of each output feature in ``source`` (-1: the source lacks it)."""
    positions = pd.Index(source.adata.var_names).get_indexer(reader.feature_ids)
    return np.asarray(positions, dtype=np.int64)


def _decoded_bytes(rows: Indices, cols: Indices, geometry: ArrayGeometry, itemsize: int) -> int:
    """Bytes a read decodes: its blocks of rows (the fewest rows making 8 KiB) across
    its column chunks."""
    chunk_rows, chunk_cols = geometry.chunks
    block = min(chunk_rows, -(-8192 // (chunk_cols * itemsize)))
    blocks = len(np.unique(np.asarray(rows) // block))
    return blocks * block * len(np.unique(np.asarray(cols) // chunk_cols)) * chunk_cols * itemsize


def _cheapest(source: RealSource, rows: Indices, cols: Indices) -> tuple[str, int]:
    """(orientation, inner chunks) of the layout's minimum-bytes read of ``rows`` x ``cols``."""
    layout = source.layout
    assert layout.counts_t is not None
    counts = touched_chunks(rows, cols, layout.counts)
    counts_t = touched_chunks(cols, rows, layout.counts_t)
    counts_bytes = _decoded_bytes(rows, cols, layout.counts, source.itemsize)
    t_bytes = _decoded_bytes(cols, rows, layout.counts_t, source.itemsize)
    return ("countsT", counts_t) if t_bytes < counts_bytes else ("counts", counts)


def _stored_touched(source: RealSource, rows: Indices, cols: Indices, orientation: str) -> int:
    """Touched inner chunks that hold a non-zero: zarr stores (and decodes) only those."""
    coo = source.matrix.tocoo()
    coo_rows, coo_cols = coo.row.astype(np.int64), coo.col.astype(np.int64)
    geometry: ArrayGeometry
    if orientation == "counts":
        geometry, major, minor, wanted = source.layout.counts, coo_rows, coo_cols, (rows, cols)
    else:
        assert source.layout.counts_t is not None
        geometry, major, minor, wanted = source.layout.counts_t, coo_cols, coo_rows, (cols, rows)
    width = 1 << 32
    stored = np.unique(major // geometry.chunks[0] * width + minor // geometry.chunks[1])
    touched = (
        np.unique(wanted[0] // geometry.chunks[0])[:, None] * width
        + np.unique(wanted[1] // geometry.chunks[1])[None, :]
    )
    return int(np.isin(touched.ravel(), stored).sum())


def _direct_bytes(source: RealSource, orientation: str, selection: tuple[Any, Any]) -> int:
    """Bytes a plain zarr orthogonal read of the source array fetches."""
    counters = ReadCounters()
    store = CountingStore(LocalStore(source.path, read_only=True), counters)
    array = zarr.open_array(store, path=f"RNA/{orientation}", mode="r")
    counters.reset()
    array.get_orthogonal_selection(selection)
    return counters.snapshot().bytes_read


@contextmanager
def count_decodes(shapes: set[tuple[int, ...]]) -> Iterator[Counter[tuple[int, ...]]]:
    """Count zstd decodes of chunks of ``shapes``, by zarr or by the direct shard reader."""
    decoded: Counter[tuple[int, ...]] = Counter()
    lock = threading.Lock()
    original = ZstdCodec._decode_sync

    def counting(self: ZstdCodec, chunk_bytes: Any, chunk_spec: Any) -> Any:
        shape = tuple(chunk_spec.shape)
        if shape in shapes:
            with lock:
                decoded[shape] += 1
        return original(self, chunk_bytes, chunk_spec)

    original_direct = ChunkDecoder.decode

    def counting_direct(self: ChunkDecoder, data: bytes, *args: Any) -> Any:
        # the gather reader decodes the chunks of its own layout without zarr
        if tuple(self.chunks) in shapes:
            with lock:
                decoded[tuple(self.chunks)] += 1
        return original_direct(self, data, *args)

    original_frames = ChunkDecoder.decode_frames

    def counting_frames(self: ChunkDecoder, frames: Any, n_chunks: int, *args: Any) -> Any:
        # the wanted rows' frames of n_chunks chunks, read by the compiled loop
        if tuple(self.chunks) in shapes:
            with lock:
                decoded[tuple(self.chunks)] += n_chunks
        return original_frames(self, frames, n_chunks, *args)

    with (
        mock.patch.object(ZstdCodec, "_decode_sync", counting),
        mock.patch.object(ChunkDecoder, "decode", counting_direct),
        mock.patch.object(ChunkDecoder, "decode_frames", counting_frames),
    ):
        yield decoded


def _source_chunk_shapes(real: RealComposites) -> set[tuple[int, ...]]:
    shapes: set[tuple[int, ...]] = set()
    for source in real.sources:
        assert source.layout.counts_t is not None
        shapes |= {source.layout.counts.chunks, source.layout.counts_t.chunks}
    return shapes


# -------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("features", "join", "n_features"),
    [("union", "outer", UNION_FEATURES), ("intersection", "inner", SHARED_FEATURES)],
)
def test_composite_equals_anndata_concat(
    real: RealComposites, features: str, join: Literal["inner", "outer"], n_features: int
) -> None:
    comp = getattr(real, features)
    reader = comp.reader()
    concat = _concat(real, join)
    assert reader.shape == (N_CELLS, n_features) == concat.shape
    assert reader.dtype == np.uint16  # both sources store uint16 counts
    assert list(reader.cell_ids) == list(concat.obs_names)
    wu, ct = (source.adata for source in real.sources)
    wu_ids, ct_ids = set(wu.var_names), set(ct.var_names)
    if features == "union":
        expected_order = list(wu.var_names) + [f for f in ct.var_names if f not in wu_ids]
    else:
        expected_order = [f for f in wu.var_names if f in ct_ids]
    assert list(reader.feature_ids) == expected_order
    assert set(reader.feature_ids) == set(concat.var_names)

    expected = _reindexed(concat, reader.feature_ids)
    dense = reader.read()
    _assert_equal_sparse(dense, expected)

    summaries = {
        name: zarr.open_array(comp, path=f"RNA/countSummaries/{name}", mode="r")[:]
        for name in ("rowSums", "rowPositive", "columnPositive")
    }
    np.testing.assert_array_equal(
        summaries["rowSums"], expected.astype(np.float64).sum(axis=1).astype(np.uint64)
    )
    np.testing.assert_array_equal(summaries["rowPositive"], (expected > 0).sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"], (expected > 0).sum(axis=0))

    # plain zarr, across computed-chunk edges and the boundary between the sources
    counts = zarr.open_array(comp, path="RNA/counts", mode="r")
    edge = counts.chunks[0]
    assert edge < N_CELLS  # several computed chunks, the last one partial
    np.testing.assert_array_equal(counts[edge - 5 : edge + 5], dense[edge - 5 : edge + 5])
    np.testing.assert_array_equal(counts[190:210], dense[190:210])
    np.testing.assert_array_equal(counts[-5:], dense[-5:])
    # countsT: a few features of the first computed chunk and of the partial last one
    counts_t = zarr.open_array(comp, path="RNA/countsT", mode="r")
    assert counts_t.chunks[0] < n_features and n_features % counts_t.chunks[0]
    rng = np.random.default_rng(7)
    some = rng.permutation(
        np.concatenate(
            [
                rng.choice(counts_t.chunks[0], 5),
                rng.choice(np.arange(n_features - 9, n_features), 5),
            ]
        )
    )
    np.testing.assert_array_equal(counts_t.oindex[some, :], dense[:, some].T)
    np.testing.assert_array_equal(counts_t[n_features - 3 :], dense[:, n_features - 3 :].T)

    reopened = cv.open_store(real.paths[features])
    assert isinstance(reopened, cv.CompositeStore)
    np.testing.assert_array_equal(reopened.reader().read(slice(190, 210)), dense[190:210])


@pytest.mark.parametrize("name", ["wu", "ct"])
def test_feature_read_decodes_the_minimum_chunks(real: RealComposites, name: str) -> None:
    source = next(s for s in real.sources if s.name == name)
    reader = real.union.reader()
    columns = _columns(reader, source)
    held = np.flatnonzero(columns >= 0)
    features = np.random.default_rng(3).choice(held, 50, replace=False)  # any order
    rows = np.arange(source.adata.n_obs, dtype=np.int64)
    cols = np.unique(columns[features])
    orientation, minimum = _cheapest(source, rows, cols)
    assert orientation == "countsT"

    reader.reset_stats()
    with count_decodes(_source_chunk_shapes(real)) as decoded:
        block = reader.read(source.rows, features)
    np.testing.assert_array_equal(block, source.matrix[:, columns[features]].toarray())
    # stats count chunks actually decoded: the touched ones that are stored
    # (all-zero chunks are not stored), never more than the minimum touched
    assert (
        reader.stats.chunks_decoded == _stored_touched(source, rows, cols, orientation) <= minimum
    )
    assert sum(decoded.values()) == _stored_touched(source, rows, cols, orientation)
    # it read countsT: at most the bytes a plain zarr read of that selection
    # fetches (whole chunks), fewer where it reads only the wanted rows' frames
    # (tests/test_frame_reads.py counts those exactly)
    assert 0 < reader.stats.bytes_read <= _direct_bytes(source, "countsT", (cols, slice(None)))
    assert reader.stats.bytes_read < _direct_bytes(source, "counts", (slice(None), cols))


@pytest.mark.parametrize("name", ["wu", "ct"])
def test_cell_read_chooses_counts(real: RealComposites, name: str) -> None:
    source = next(s for s in real.sources if s.name == name)
    reader = real.union.reader()
    columns = _columns(reader, source)
    picked = np.array([150, 3, 51, 50, 199], dtype=np.int64)  # any order
    rows = np.unique(picked)
    cols = np.unique(columns[columns >= 0])
    orientation, minimum = _cheapest(source, rows, cols)
    assert orientation == "counts"

    reader.reset_stats()
    with count_decodes(_source_chunk_shapes(real)) as decoded:
        block = reader.read(source.first_row + picked, None)
    expected = np.zeros((len(picked), reader.shape[1]), dtype=block.dtype)
    expected[:, columns >= 0] = source.matrix[picked][:, columns[columns >= 0]].toarray()
    np.testing.assert_array_equal(block, expected)
    # stats count chunks actually decoded: the touched ones that are stored
    # (all-zero chunks are not stored), never more than the minimum touched
    assert (
        reader.stats.chunks_decoded == _stored_touched(source, rows, cols, orientation) <= minimum
    )
    assert sum(decoded.values()) == _stored_touched(source, rows, cols, orientation)
    assert reader.stats.bytes_read == _direct_bytes(source, "counts", (rows, slice(None)))
    assert reader.stats.bytes_read < _direct_bytes(source, "countsT", (slice(None), rows))


@pytest.mark.parametrize("budget", ["1G", "16M"])
def test_feature_stream_decodes_each_chunk_once_per_batch(
    real: RealComposites, budget: str
) -> None:
    reader = real.union.reader()
    columns = {source.name: _columns(reader, source) for source in real.sources}
    concat = _reindexed(_concat(real, "outer"), reader.feature_ids)

    reader.reset_stats()
    with count_decodes(_source_chunk_shapes(real)) as decoded:
        batches = []
        for where, block in reader.iter_features(mem_budget=budget):
            assert isinstance(where, slice)
            _assert_equal_sparse(block, sp.csr_array(concat[:, where]))
            batches.append(where)
    assert batches[0].start == 0 and batches[-1].stop == reader.shape[1]
    assert all(a.stop == b.start for a, b in pairwise(batches))
    assert (len(batches) == 1) == (budget == "1G")

    expected_chunks = expected_stored = 0
    for where in batches:
        for source in real.sources:
            batch_columns = columns[source.name][where]
            cols = np.unique(batch_columns[batch_columns >= 0])
            if len(cols) == 0:
                continue
            rows = np.arange(source.adata.n_obs, dtype=np.int64)
            orientation, chunks = _cheapest(source, rows, cols)
            expected_chunks += chunks
            expected_stored += _stored_touched(source, rows, cols, orientation)
    assert reader.stats.chunks_decoded == expected_stored <= expected_chunks
    assert reader.stats.reads == len(batches)
    assert sum(decoded.values()) == expected_stored
