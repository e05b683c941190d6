"""Property tests: any composite reads exactly what numpy gathers from its sources.

Each example writes 1-6 small sources (random shapes, dtypes, layout policies,
root or workspace layout, feature ids drawn from one shared pool so overlaps
vary), composes them with a random feature choice and random per-source cell
selections, and compares every read path with a dense numpy reference: the
reader with random selections and streams, plain zarr on the computed
``counts``/``countsT`` arrays, the composite's count summaries, its ids, and a
reopened composite.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.storage import MemoryStore

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_module
import cytearc_vfs.read.placement as placement
import cytearc_vfs.read.strip_assembly as strip_assembly
from cytearc_vfs.format.count_dtype import summary_dtype

#: Kinds of source values: whole counts in float32, uint8, ints of the uint16
#: range, and float64 fractions.
KINDS = ("float32_counts", "uint8", "uint16_range", "float64_fraction")
#: Where a source is written. A plain ``zarr.storage.MemoryStore()`` is not
#: here: a composite over one fails (test_plain_memory_store_sources).
SOURCE_STORAGE = ("dir", "memory_url")
#: Where the composite is written; a plain MemoryStore reopens as the same object.
DESTINATION_STORAGE = ("dir", "memory_url", "memory_store")
FEATURE_POOL = [f"g{i:02d}" for i in range(32)]
WORKSPACE = "ws"

Selection = slice | npt.NDArray[Any] | None


@dataclass(frozen=True)
class SourceCase:
    """One generated source and how the composite uses it."""

    name: str
    values: npt.NDArray[Any]
    """Dense values in the dtype given to the writer."""
    sparse_input: bool
    cell_ids: list[str] | None
    """Explicit cell ids, or ``None`` for the writer's generated ``cell_{i}``."""
    feature_ids: list[str]
    policy: cv.LayoutPolicy
    workspace: str | None
    storage: str
    cells: npt.NDArray[Any] | None
    """What ``cells=`` passes for this source (bool mask or integer rows), or nothing."""

    @property
    def ids(self) -> list[str]:
        if self.cell_ids is not None:
            return self.cell_ids
        return [f"cell_{i}" for i in range(self.values.shape[0])]

    @property
    def rows(self) -> npt.NDArray[np.int64]:
        """Source rows in output order."""
        if self.cells is None:
            return np.arange(self.values.shape[0], dtype=np.int64)
        if self.cells.dtype == np.bool_:
            return np.flatnonzero(self.cells).astype(np.int64)
        return self.cells.astype(np.int64)


@dataclass(frozen=True)
class CompositeCase:
    assay: str
    sources: tuple[SourceCase, ...]
    features: str | tuple[str, ...]
    destination: str
    virtual_chunk_bytes: int | None
    """Patched target size of a computed chunk (``None``: the default), so small
    composites also span several computed chunks with a partial edge chunk."""


# ----------------------------------------------------------------- strategies


def _values(draw: st.DrawFn, n_cells: int, n_features: int, kind: str) -> npt.NDArray[Any]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
    mask = rng.random((n_cells, n_features)) < density
    shape = mask.shape
    values: npt.NDArray[Any]
    if kind == "float32_counts":
        top = draw(st.sampled_from([3, 300, 70_000]))
        values = rng.integers(1, top + 1, shape).astype(np.float32)
    elif kind == "uint8":
        values = rng.integers(1, 256, shape).astype(np.uint8)
    elif kind == "uint16_range":
        top = draw(st.sampled_from([200, 65_535]))
        values = rng.integers(1, top + 1, shape).astype(np.int64)
    else:
        values = rng.random(shape) * draw(st.sampled_from([1.0, 50.0]))
    return np.where(mask, values, values.dtype.type(0))


def _cell_selection(draw: st.DrawFn, n_cells: int) -> npt.NDArray[Any] | None:
    form = draw(st.sampled_from(["all", "mask", "rows"]))
    if form == "all":
        return None
    if form == "mask":
        return np.asarray(draw(st.lists(st.booleans(), min_size=n_cells, max_size=n_cells)), bool)
    rows = draw(st.permutations(range(n_cells)))
    keep = draw(st.integers(0, n_cells))
    return np.asarray(rows[:keep], dtype=draw(st.sampled_from([np.int64, np.int32, np.uint16])))


policies = st.builds(
    lambda unit_exp, ratio_exp: cv.LayoutPolicy(2**unit_exp, 2 ** max(3, unit_exp - ratio_exp)),
    st.integers(8, 15),
    st.integers(0, 6),
)


@st.composite
def source_cases(draw: st.DrawFn, index: int) -> SourceCase:
    name = f"s{index}"
    n_cells = draw(st.integers(0, 40))
    feature_ids = draw(
        st.lists(st.sampled_from(FEATURE_POOL), min_size=1, max_size=25, unique=True)
    )
    kind = draw(st.sampled_from(KINDS))
    values = _values(draw, n_cells, len(feature_ids), kind)
    explicit_ids = draw(st.booleans())
    return SourceCase(
        name=name,
        values=values,
        sparse_input=draw(st.booleans()),
        cell_ids=[f"{name}_c{i}" for i in range(n_cells)] if explicit_ids else None,
        feature_ids=feature_ids,
        policy=draw(policies),
        workspace=draw(st.sampled_from([None, WORKSPACE])),
        storage=draw(st.sampled_from(SOURCE_STORAGE)),
        cells=_cell_selection(draw, n_cells),
    )


@st.composite
def composite_cases(draw: st.DrawFn) -> CompositeCase:
    n_sources = draw(st.integers(1, 6))
    sources = tuple(draw(source_cases(index)) for index in range(n_sources))
    choice = draw(st.sampled_from(["union", "intersection", "explicit"]))
    features: str | tuple[str, ...] = choice
    if choice == "explicit":
        present = sorted({f for source in sources for f in source.feature_ids})
        features = tuple(draw(st.permutations(present))[: draw(st.integers(1, len(present)))])
    return CompositeCase(
        assay=draw(st.sampled_from(["RNA", "RNA", "ADT"])),
        sources=sources,
        features=features,
        destination=draw(st.sampled_from(DESTINATION_STORAGE)),
        virtual_chunk_bytes=draw(st.sampled_from([None, 1, 40, 300])),
    )


def selections(length: int) -> st.SearchStrategy[Selection]:
    """Everything the reader accepts on one axis of ``length`` entries."""
    bound = max(length, 1)
    slices = st.builds(
        slice,
        st.none() | st.integers(-bound - 2, bound + 2),
        st.none() | st.integers(-bound - 2, bound + 2),
        st.none() | st.integers(-3, 3).filter(lambda step: step != 0),
    )
    options: list[st.SearchStrategy[Selection]] = [
        st.none(),
        slices,
        st.lists(st.booleans(), min_size=length, max_size=length).map(
            lambda flags: np.asarray(flags, dtype=bool)
        ),
        indices(length, max_size=2 * length + 2),
    ]
    return st.one_of(options)


def indices(length: int, max_size: int = 8) -> st.SearchStrategy[npt.NDArray[np.int64]]:
    """Integer positions on an axis of ``length``: any order, repeats, negatives."""
    if length == 0:
        return st.just(np.zeros(0, dtype=np.int64))
    return st.lists(st.integers(-length, length - 1), max_size=max_size).map(
        lambda values: np.asarray(values, dtype=np.int64)
    )


# ------------------------------------------------------------------ reference


def stored_dtype(values: npt.NDArray[Any]) -> np.dtype:
    """The spec's count dtype of non-negative values: narrowest unsigned if whole."""
    if values.size == 0 or np.all(np.floor(values) == values):
        top = values.max() if values.size else 0
        for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
            if top <= np.iinfo(dtype).max:
                return np.dtype(dtype)
    return np.dtype(np.float32) if values.dtype.itemsize <= 4 else np.dtype(np.float64)


def output_features(case: CompositeCase) -> list[str]:
    if case.features == "union":
        return list(dict.fromkeys(f for source in case.sources for f in source.feature_ids))
    if case.features == "intersection":
        common = set.intersection(*(set(source.feature_ids) for source in case.sources))
        return [f for f in case.sources[0].feature_ids if f in common]
    return list(case.features)


def reference(case: CompositeCase) -> tuple[npt.NDArray[Any], list[str], list[str]]:
    """(dense counts, cell ids, feature ids) the composite must read."""
    features = output_features(case)
    dtype = np.result_type(*(stored_dtype(source.values) for source in case.sources))
    blocks = []
    ids: list[str] = []
    names: list[str] = []
    for source in case.sources:
        rows = source.rows
        block = np.zeros((len(rows), len(features)), dtype=dtype)
        column_of = {f: i for i, f in enumerate(source.feature_ids)}
        for j, feature in enumerate(features):
            if feature in column_of:
                block[:, j] = source.values[rows, column_of[feature]]
        blocks.append(block)
        ids.extend(source.ids[r] for r in rows)
        names.extend([source.name] * len(rows))
    if len(set(ids)) != len(ids):
        ids = [f"{name}-{cell}" for name, cell in zip(names, ids, strict=True)]
    return np.concatenate(blocks), ids, features


def positions(selection: Selection, length: int) -> npt.NDArray[np.int64]:
    """numpy's reading of ``selection`` as positions on an axis of ``length``."""
    everything = np.arange(length, dtype=np.int64)
    if selection is None:
        return everything
    return everything[selection]


# ---------------------------------------------------------------------- setup


@contextmanager
def locations() -> Iterator[Any]:
    """Hands out fresh local paths or ``memory://`` URLs and removes them afterwards."""
    # imported after cytearc_vfs: importing the adapters package first is circular
    from cytearc_vfs_adapters.backends import forget_memory

    memory: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cytearc-composite-") as folder:

        def location(storage: str, name: str) -> str | MemoryStore:
            if storage == "dir":
                return str(Path(folder) / f"{name}.zarr")
            if storage == "memory_store":
                return MemoryStore()
            key = f"composite-props-{uuid.uuid4().hex}"
            memory.append(key)
            return f"memory://{key}"

        try:
            yield location
        finally:
            for key in memory:
                forget_memory(key)


def write_source(source: SourceCase, assay: str, location: str) -> cv.WriteInfo:
    values = sp.csr_array(source.values) if source.sparse_input else source.values
    return cv.write_counts(
        location,
        values,
        assay=assay,
        cells=source.cell_ids,
        features=source.feature_ids,
        workspace=source.workspace,
        layout=source.policy,
        mem_budget="1G",
    )


def build(case: CompositeCase, location: Any) -> tuple[cv.CompositeStore, Any]:
    sources: dict[str, str] = {}
    for source in case.sources:
        sources[source.name] = location(source.storage, source.name)
        info = write_source(source, case.assay, sources[source.name])
        assert info.dtype == stored_dtype(source.values)
    destination = location(case.destination, "composite")
    patch = (
        nullcontext()
        if case.virtual_chunk_bytes is None
        else mock.patch.object(composite_module, "VIRTUAL_CHUNK_BYTES", case.virtual_chunk_bytes)
    )
    with patch:
        comp = cv.create_composite(
            destination,
            sources,
            assay=case.assay,
            features=case.features if isinstance(case.features, str) else list(case.features),
            cells={s.name: s.cells for s in case.sources if s.cells is not None},
            source_workspaces={s.name: WORKSPACE for s in case.sources if s.workspace},
        )
    assert isinstance(comp, cv.CompositeStore)
    return comp, destination


def read_summaries(store: Any, assay: str) -> dict[str, npt.NDArray[Any]]:
    """The countSummaries arrays of ``assay``, read with plain zarr."""
    return {
        name: np.asarray(zarr.open_array(store, path=f"{assay}/countSummaries/{name}", mode="r")[:])
        for name in ("rowSums", "rowPositive", "columnPositive")
    }


def check_summaries(comp: cv.CompositeStore, assay: str, expected: npt.NDArray[Any]) -> None:
    summaries = read_summaries(comp, assay)
    sums = expected.sum(axis=1, dtype=summary_dtype(expected.dtype))
    row_sums = summaries["rowSums"]
    assert row_sums.dtype == sums.dtype
    if expected.dtype.kind == "f":  # float sums depend on summation order
        np.testing.assert_allclose(row_sums, sums, rtol=1e-12)
    else:
        np.testing.assert_array_equal(row_sums, sums)
    np.testing.assert_array_equal(summaries["rowPositive"], (expected > 0).sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"], (expected > 0).sum(axis=0))


def check_zarr_arrays(
    comp: cv.CompositeStore,
    assay: str,
    expected: npt.NDArray[Any],
    data: st.DataObject,
) -> None:
    counts = zarr.open_array(comp, path=f"{assay}/counts", mode="r")
    assert counts.shape == expected.shape and counts.dtype == expected.dtype
    np.testing.assert_array_equal(counts[:], expected)
    # listing shows every computed chunk, and only those
    assert counts.nchunks_initialized == counts.nchunks
    n_cells, n_features = expected.shape
    rows = data.draw(indices(n_cells), label="zarr rows")
    cols = data.draw(indices(n_features), label="zarr columns")
    np.testing.assert_array_equal(counts.oindex[rows, cols], expected[np.ix_(rows, cols)])
    if n_features:  # zarr 3.4 cannot index an empty axis with an empty mask
        flags = st.lists(st.booleans(), min_size=n_features, max_size=n_features)
        mask = np.asarray(data.draw(flags, label="zarr feature mask"), dtype=bool)
        np.testing.assert_array_equal(counts.oindex[rows, mask], expected[rows][:, mask])
    points = min(len(rows), len(cols))
    np.testing.assert_array_equal(
        counts.vindex[rows[:points], cols[:points]], expected[rows[:points], cols[:points]]
    )
    window = (
        slice(data.draw(st.integers(0, n_cells)), None, data.draw(st.integers(1, 4))),
        slice(None, data.draw(st.integers(0, n_features)), data.draw(st.integers(1, 3))),
    )
    np.testing.assert_array_equal(counts[window], expected[window])

    group = zarr.open_group(comp, path=assay, mode="r")
    if assay == "RNA":
        counts_t = zarr.open_array(comp, path=f"{assay}/countsT", mode="r")
        assert counts_t.shape == expected.T.shape and counts_t.dtype == expected.dtype
        assert counts_t.attrs["complete"] is True
        np.testing.assert_array_equal(counts_t[:], expected.T)
        assert counts_t.nchunks_initialized == counts_t.nchunks
        np.testing.assert_array_equal(counts_t.oindex[cols, rows], expected.T[np.ix_(cols, rows)])
    else:
        assert "countsT" not in group


# ----------------------------------------------------------------------- tests


@given(composite_cases(), st.data())
def test_composite_reads_equal_the_numpy_reference(
    case: CompositeCase, data: st.DataObject
) -> None:
    expected, cell_ids, feature_ids = reference(case)
    if case.features == "intersection" and not feature_ids:
        # sources that share no feature id: refused, not a composite of no features
        with locations() as location, pytest.raises(ValueError, match="share no feature id"):
            build(case, location)
        return
    # how the shard reader places values: column maps by slice copies or by one
    # gather, strips of a few chunks or of one
    copy_runs = data.draw(st.sampled_from([placement.MAX_COPY_RUNS, 0]), label="copy runs")
    strip_bytes = data.draw(st.sampled_from([strip_assembly.STRIP_BATCH_BYTES, 1]), label="strip")
    with (
        locations() as location,
        mock.patch.object(placement, "MAX_COPY_RUNS", copy_runs),
        mock.patch.object(strip_assembly, "STRIP_BATCH_BYTES", strip_bytes),
    ):
        comp, destination = build(case, location)
        reader = comp.reader()
        assert reader.shape == expected.shape
        assert reader.dtype == expected.dtype
        assert list(reader.cell_ids) == cell_ids
        assert list(reader.feature_ids) == feature_ids
        np.testing.assert_array_equal(reader.read(), expected)

        for _ in range(4):
            cells = data.draw(selections(expected.shape[0]), label="cells")
            features = data.draw(selections(expected.shape[1]), label="features")
            block = reader.read(cells, features)
            rows, cols = positions(cells, expected.shape[0]), positions(features, expected.shape[1])
            assert block.dtype == expected.dtype
            np.testing.assert_array_equal(block, expected[np.ix_(rows, cols)])

        batch = data.draw(st.integers(1, 8), label="batch")
        cells = data.draw(selections(expected.shape[0]), label="stream cells")
        rows = positions(cells, expected.shape[0])
        streamed = list(reader.iter_features(batch, cells=cells))
        assert [piece.shape[1] for _, piece in streamed] == [
            min(batch, expected.shape[1] - start) for start in range(0, expected.shape[1], batch)
        ]
        for where, piece in streamed:
            np.testing.assert_array_equal(piece, expected[rows][:, where])
        for where, piece in reader.iter_cells(batch):
            np.testing.assert_array_equal(piece, expected[where])

        check_zarr_arrays(comp, case.assay, expected, data)
        check_summaries(comp, case.assay, expected)
        stored_ids = zarr.open_array(comp, path="cellData/ids", mode="r")[:]
        assert list(np.asarray(stored_ids).astype(str)) == cell_ids

        again = cv.open_store(destination)
        assert isinstance(again, cv.CompositeStore)
        np.testing.assert_array_equal(again.reader().read(), expected)
        np.testing.assert_array_equal(
            zarr.open_array(again, path=f"{case.assay}/counts", mode="r")[:], expected
        )


def test_plain_memory_store_sources_are_refused_before_writing(tmp_path: Path) -> None:
    # An anonymous MemoryStore cannot be reopened from a record: refused up front.
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    source = MemoryStore()
    cv.write_counts(source, values, features=["a", "b", "c", "d"])
    destination = tmp_path / "composite.zarr"
    with pytest.raises(ValueError, match="record cannot reopen"):
        cv.create_composite(destination, {"s": source})
    assert not destination.exists()


def test_empty_row_list_keeps_no_cells_of_that_source(tmp_path: Path) -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    cv.write_counts(tmp_path / "a.zarr", values, cells=["a0", "a1", "a2"])
    cv.write_counts(tmp_path / "b.zarr", values + 1, cells=["b0", "b1", "b2"])
    comp = cv.create_composite(
        tmp_path / "composite.zarr",
        {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"},
        cells={"a": []},
    )
    reader = comp.reader()
    assert list(reader.cell_ids) == ["b0", "b1", "b2"]
    np.testing.assert_array_equal(reader.read(), values + 1)
