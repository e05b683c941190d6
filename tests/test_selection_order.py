"""Selections in any order read in that order, from every kind of composite source.

API.md: ``cells`` / ``features`` accept integer arrays in any order, repeats
allowed, and the result follows the requested order. A dense AnnData ``X``
once read some unordered selections sorted: a permutation of consecutive
positions (``[0, 2, 1, 3]``: its span equals its length) was taken for the
slice ``0:4``. These property tests draw such selections (permutations of a
window, arbitrary lists with repeats and negatives) and compare every read
path of composites over dense (Zarr v2 and v3, chunked, sharded, through
zarr's own pipeline), CSR and CSC AnnData sources and CyteArc sources with
numpy's gather of the same reference matrix: ``read``, ``read_sparse``,
``reader[...]``, ``iter_cells`` and ``iter_features``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anndata as ad
import numcodecs
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from hypothesis import given
from hypothesis import strategies as st

import cytearc_vfs as cv

N_FEATURES = 7
FEATURE_IDS = [f"g{i}" for i in range(N_FEATURES)]

Indices = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Source:
    """One source: its location, its matrix, and the composite's use of it."""

    path: Path
    values: npt.NDArray[Any]
    """Dense values, rows = the source's cells, columns = ``features``."""
    features: list[str]
    cells: Indices | None
    """The composite's ``cells=`` for this source (any order), or all of them."""

    @property
    def rows(self) -> Indices:
        if self.cells is None:
            return np.arange(self.values.shape[0], dtype=np.int64)
        return self.cells


def _values(n_cells: int, n_features: int, seed: int) -> npt.NDArray[np.float32]:
    """Distinct whole counts (every cell tells rows and columns apart), some zeros."""
    rng = np.random.default_rng(seed)
    values = (rng.permutation(n_cells * n_features) + 1).reshape(n_cells, n_features)
    values[rng.random(values.shape) < 0.3] = 0
    return values.astype(np.float32)


def _adata(values: npt.NDArray[Any], name: str, features: list[str]) -> ad.AnnData:
    obs = pd.DataFrame(index=[f"{name}_c{i}" for i in range(values.shape[0])])
    return ad.AnnData(X=values, obs=obs, var=pd.DataFrame(index=features))


def _write_anndata(
    data: ad.AnnData, path: Path, zarr_format: int, chunks: tuple[int, int] | None
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's format-setting deprecation
        previous = ad.settings.zarr_write_format
        ad.settings.zarr_write_format = zarr_format
        try:
            data.write_zarr(path, chunks=chunks, consolidate_metadata=False)
        finally:
            ad.settings.zarr_write_format = previous


def _rewrite_x(path: Path, **create: Any) -> None:
    """Store the dense ``X`` again with other chunks or codecs, its attributes kept."""
    group = zarr.open_group(path, mode="r+")
    old = group["X"]
    assert isinstance(old, zarr.Array)
    values, attributes = old[...], dict(old.attrs)
    del group["X"]
    new = group.create_array("X", shape=values.shape, dtype=values.dtype, **create)
    new[...] = values
    new.attrs.update(attributes)


# Dense X stored in the ways the reader takes different paths for: decoded
# chunk by chunk (v2, v3, v3 sharded), or through zarr's pipeline (a v2
# compressor the direct decoder does not know); chunks of several rows and
# columns, so that a permuted window falls in one chunk (the shortcut that
# once sorted it looked at a chunk's positions at a time).
DENSE_KINDS: dict[str, tuple[tuple[int, int] | None, Callable[[Path], None]]] = {
    "dense_v2": ((6, 4), lambda path: None),
    "dense_v3": (None, lambda path: None),  # anndata's default: one chunk
    "dense_v3_sharded": (None, lambda path: _rewrite_x(path, chunks=(4, 4), shards=(8, 8))),
    "dense_v2_zarr_pipeline": (
        None,
        lambda path: _rewrite_x(path, chunks=(5, 3), compressors=numcodecs.LZ4()),
    ),
}


def _write_source(kind: str, root: Path, name: str, seed: int) -> tuple[Path, Source]:
    """A source of ``kind`` with 11 cells and its features in a shuffled order."""
    rng = np.random.default_rng(seed)
    features = [FEATURE_IDS[i] for i in rng.permutation(N_FEATURES)[: N_FEATURES - seed % 2]]
    values = _values(11, len(features), seed)
    path = root / f"{name}.zarr"
    if kind in DENSE_KINDS:
        zarr_format = 2 if kind.startswith("dense_v2") else 3
        chunks, restore = DENSE_KINDS[kind]
        _write_anndata(_adata(values, name, features), path, zarr_format, chunks=chunks)
        restore(path)
    elif kind in ("csr", "csc"):
        matrix = sp.csr_matrix(values) if kind == "csr" else sp.csc_matrix(values)
        _write_anndata(_adata(matrix, name, features), path, 3, chunks=None)  # type: ignore[arg-type]
    else:
        obs = pd.DataFrame(index=[f"{name}_c{i}" for i in range(values.shape[0])])
        cv.write_counts(
            path,
            sp.csr_matrix(values),
            cells=obs,
            features=pd.DataFrame(index=features),
            layout=cv.LayoutPolicy(256, 8),
        )
    return path, Source(path, values, features, None)


SOURCE_KINDS = [*DENSE_KINDS, "csr", "csc", "cytearc"]


@dataclass(frozen=True)
class Case:
    reader: cv.VirtualArrayReader
    expected: npt.NDArray[Any]


def _composite(
    root: Path, name: str, sources: dict[str, Source], features: str | list[str]
) -> Case:
    store = cv.create_composite(
        root / f"{name}.zarr",
        {n: s.path for n, s in sources.items()},
        features=features,
        cells={n: s.cells for n, s in sources.items() if s.cells is not None},
    )
    reader = store.reader("RNA")
    out_features = list(reader.feature_ids)
    if features != "union":
        assert out_features == list(features)
    blocks = []
    for source in sources.values():
        block = np.zeros((len(source.rows), len(out_features)), dtype=np.float64)
        for j, feature in enumerate(out_features):
            if feature in source.features:
                block[:, j] = source.values[source.rows, source.features.index(feature)]
        blocks.append(block)
    return Case(reader, np.concatenate(blocks))


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """One single-source composite per source kind, and a mixed one over all kinds
    with per-source cells in shuffled order and features in an explicit order."""
    root = tmp_path_factory.mktemp("selection_order")
    made: dict[str, Case] = {}
    mixed: dict[str, Source] = {}
    for seed, kind in enumerate(SOURCE_KINDS):
        path, source = _write_source(kind, root, f"src_{kind}", seed)
        made[kind] = _composite(root, f"one_{kind}", {"s": source}, "union")
        cells = np.random.default_rng(seed).permutation(11)[: 6 + seed % 5].astype(np.int64)
        mixed[kind] = Source(path, source.values, source.features, cells)
    explicit = [FEATURE_IDS[i] for i in (3, 0, 6, 1, 5, 2, 4)]
    made["mixed"] = _composite(root, "mixed", mixed, explicit)
    return made


CASE_NAMES = [*SOURCE_KINDS, "mixed"]


def selections(length: int) -> st.SearchStrategy[Indices]:
    """Integer positions on an axis of ``length``: permutations of a window of
    consecutive positions (span equal to count, the case once read sorted), and
    any lists with repeats and negative positions."""
    windows = st.integers(0, length - 1).flatmap(
        lambda start: st.integers(1, length - start).flatmap(
            lambda size: st.permutations(range(start, start + size))
        )
    )
    anything = st.lists(st.integers(-length, length - 1), min_size=1, max_size=2 * length)
    return st.one_of(windows, anything).map(lambda values: np.asarray(values, dtype=np.int64))


def _draw(data: st.DataObject, case: Case) -> tuple[Indices, Indices, int]:
    """A cell selection, a feature selection and a batch size for the streams."""
    n_cells, n_features = case.expected.shape
    cells = data.draw(selections(n_cells), label="cells")
    features = data.draw(selections(n_features), label="features")
    return cells, features, data.draw(st.integers(1, 5), label="batch")


@pytest.mark.parametrize("name", CASE_NAMES)
@given(data=st.data())
def test_read_follows_the_requested_order(
    cases: dict[str, Case], name: str, data: st.DataObject
) -> None:
    case = cases[name]
    cells, features, _ = _draw(data, case)
    expected = case.expected[np.ix_(cells, features)]
    reader = case.reader
    np.testing.assert_array_equal(reader.read(cells=cells, features=features), expected)
    np.testing.assert_array_equal(reader.read_sparse(cells, features).toarray(), expected)
    np.testing.assert_array_equal(reader[cells, features], expected)
    # one axis ordered, the other not; and a single position (an axis dropped)
    np.testing.assert_array_equal(reader.read(cells=cells), case.expected[cells])
    np.testing.assert_array_equal(reader.read(features=features), case.expected[:, features])
    np.testing.assert_array_equal(reader[cells, int(features[0])], expected[:, 0])
    np.testing.assert_array_equal(reader[int(cells[0]), features], expected[0])


@pytest.mark.parametrize("name", CASE_NAMES)
@given(data=st.data())
def test_streams_follow_the_requested_order(
    cases: dict[str, Case], name: str, data: st.DataObject
) -> None:
    case = cases[name]
    cells, features, batch = _draw(data, case)
    reader = case.reader
    by_cells = [block for _, block in reader.iter_cells(batch, features=features)]
    np.testing.assert_array_equal(np.concatenate(by_cells), case.expected[:, features])
    by_features = [block for _, block in reader.iter_features(batch, cells=cells)]
    np.testing.assert_array_equal(np.concatenate(by_features, axis=1), case.expected[cells])


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_audited_selections(cases: dict[str, Case], name: str) -> None:
    """The audit's examples: a permuted window of cells or features reads in its order."""
    case = cases[name]
    reader, expected = case.reader, case.expected
    window = np.array([0, 2, 1, 3])
    np.testing.assert_array_equal(
        reader.read(cells=[0], features=window), expected[np.ix_([0], window)]
    )
    np.testing.assert_array_equal(
        reader.read(cells=window, features=[0]), expected[np.ix_(window, [0])]
    )
    np.testing.assert_array_equal(reader[window, 0], expected[window, 0])
    swapped = np.array([0, 4, 3, 6])
    np.testing.assert_array_equal(reader.read(cells=swapped), expected[swapped])
    by_cells = [block for _, block in reader.iter_cells(3, features=window)]
    np.testing.assert_array_equal(np.concatenate(by_cells), expected[:, window])
    by_features = [block for _, block in reader.iter_features(3, cells=window)]
    np.testing.assert_array_equal(np.concatenate(by_features, axis=1), expected[window])
