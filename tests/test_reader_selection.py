"""The reader's selections (positions, masks, ids) and numpy indexing, against numpy.

A small ordinary store and a small union composite (sources with overlapping
features, one with a cell mask) are read with every kind of selection, drawn
by hypothesis, and compared with a dense numpy reference indexed the same
way: ``read`` with ``numpy.ix_``, ``reader[key]`` with numpy's own indexing
of the same key wherever numpy's indexing is orthogonal (at most one array in
the key), and with ``numpy.ix_`` plus dropped axes otherwise. The union of the
two real datasets is read by ids and by numpy keys and compared with
``anndata.concat(join="outer")`` indexed by the same ids, and the examples of
``docs/composite.md`` run on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anndata as ad
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs import realdata
from cytearc_vfs.read.reader import UnknownIdError

#: Small chunks, so a few dozen cells span several shards and inner chunks.
LAYOUT = cv.LayoutPolicy(1024, 128)
DOCS = Path(__file__).resolve().parent.parent / "docs"

Part = tuple[Any, Any]
"""One axis of a selection: (what the reader is given, what numpy is given)."""


@dataclass(frozen=True)
class Case:
    """A reader and the dense matrix it must read."""

    reader: cv.VirtualArrayReader
    dense: npt.NDArray[Any]
    cell_ids: list[str]
    feature_ids: list[str]
    owner: str
    """What the error messages call it: ``store`` or ``composite``."""


def _values(rng: np.random.Generator, n_cells: int, n_features: int) -> npt.NDArray[np.uint16]:
    """Counts up to 300 (stored as uint16), about a third of them zero."""
    values = rng.integers(1, 301, (n_cells, n_features)).astype(np.uint16)
    return np.where(rng.random(values.shape) < 0.35, 0, values).astype(np.uint16)


def _store_case(folder: Path) -> Case:
    rng = np.random.default_rng(11)
    values = _values(rng, 37, 23)
    cells = [f"c{i}" for i in range(37)]
    features = [f"g{i}" for i in range(23)]
    cv.write_counts(folder / "store.zarr", values, cells=cells, features=features, layout=LAYOUT)
    reader = cv.VirtualArrayReader(folder / "store.zarr")
    return Case(reader, values, cells, features, "store")


def _composite_case(folder: Path) -> Case:
    rng = np.random.default_rng(12)
    # features overlap and come in another order in each source
    specs = {
        "a": (15, [f"g{i}" for i in range(10)]),
        "b": (12, [f"g{i}" for i in rng.permutation(np.arange(5, 17))]),
        "c": (10, [f"g{i}" for i in range(22, 11, -1)]),
    }
    keep_b = rng.random(12) < 0.7
    frames = []
    for name, (n_cells, features) in specs.items():
        values = _values(rng, n_cells, len(features))
        cells = [f"{name}{i}" for i in range(n_cells)]
        cv.write_counts(
            folder / f"{name}.zarr", values, cells=cells, features=features, layout=LAYOUT
        )
        frame = pd.DataFrame(values, index=cells, columns=features)
        frames.append(frame[keep_b] if name == "b" else frame)
    comp = cv.create_composite(
        folder / "composite.zarr",
        {name: folder / f"{name}.zarr" for name in specs},
        features="union",
        cells={"b": keep_b},
    )
    union = list(dict.fromkeys(f for _, features in specs.values() for f in features))
    dense = pd.concat(frames).reindex(columns=union).fillna(0).to_numpy(np.uint16)
    cells = [cell for frame in frames for cell in frame.index]
    return Case(comp.reader(), dense, cells, union, "composite")


@pytest.fixture(scope="module", params=["store", "composite"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    folder = tmp_path_factory.mktemp(f"reader-selection-{request.param}")
    built = _store_case(folder) if request.param == "store" else _composite_case(folder)
    assert built.reader.shape == built.dense.shape
    assert built.reader.dtype == built.dense.dtype
    assert list(built.reader.cell_ids) == built.cell_ids
    assert list(built.reader.feature_ids) == built.feature_ids
    return built


# ----------------------------------------------------------------- strategies


def axis_parts(n: int, ids: list[str], *, scalars: bool) -> st.SearchStrategy[Part]:
    """Every kind of selection of an axis of ``n`` entries named ``ids``, with
    the numpy key that selects the same entries of a dense array."""
    bound = max(n, 1)
    slices = st.builds(
        slice,
        st.none() | st.integers(-bound - 2, bound + 2),
        st.none() | st.integers(-bound - 2, bound + 2),
        st.none() | st.integers(-3, 3).filter(lambda step: step != 0),
    )
    masks = st.tuples(
        st.lists(st.booleans(), min_size=n, max_size=n),
        st.sampled_from([np.asarray, list, pd.Series, pd.Index]),
    ).map(lambda pair: (pair[1](np.asarray(pair[0], bool)), np.asarray(pair[0], bool)))
    options: list[st.SearchStrategy[Part]] = [
        st.just((slice(None), slice(None))),
        slices.map(lambda s: (s, s)),
        masks,
    ]
    if n:
        positions = st.lists(st.integers(-n, n - 1), max_size=2 * n + 2)
        as_ints = st.sampled_from(
            [list, lambda v: np.asarray(v, np.int64), lambda v: np.asarray(v, np.int32), pd.Index]
        )
        options.append(
            st.tuples(positions, as_ints).map(
                lambda pair: (pair[1](pair[0]), np.asarray(pair[0], np.int64))
            )
        )
        # ids in any order, with repeats, as a list, numpy str / object arrays or an Index
        as_ids = st.sampled_from(
            [list, lambda v: np.asarray(v, str), lambda v: np.asarray(v, object), pd.Index]
        )
        picks = st.lists(st.integers(0, n - 1), max_size=2 * n + 2)
        options.append(
            st.tuples(picks, as_ids).map(
                lambda pair: (pair[1]([ids[i] for i in pair[0]]), np.asarray(pair[0], np.int64))
            )
        )
        if scalars:
            index = st.integers(-n, n - 1)
            options.append(index.map(lambda i: (i, i)))
            options.append(index.map(lambda i: (np.int64(i), i)))
            options.append(st.integers(0, n - 1).map(lambda i: (ids[i], i)))
    return st.one_of(options)


def positions(numpy_part: Any, n: int) -> npt.NDArray[np.int64]:
    """The positions numpy selects with ``numpy_part`` on an axis of ``n``."""
    return np.atleast_1d(np.arange(n, dtype=np.int64)[numpy_part])


def draw_parts(case: Case, data: st.DataObject, *, scalars: bool) -> tuple[Part, Part]:
    """A cell and a feature selection of ``case``, each with its numpy key."""
    n_cells, n_features = case.dense.shape
    cells = data.draw(axis_parts(n_cells, case.cell_ids, scalars=scalars), "cells")
    features = data.draw(axis_parts(n_features, case.feature_ids, scalars=scalars), "features")
    return cells, features


def both_positions(
    case: Case, numpy_cells: Any, numpy_features: Any
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    n_cells, n_features = case.dense.shape
    return positions(numpy_cells, n_cells), positions(numpy_features, n_features)


def is_scalar(numpy_part: Any) -> bool:
    return isinstance(numpy_part, int | np.integer)


# ----------------------------------------------------------------------- read


@given(st.data())
def test_read_equals_numpy(case: Case, data: st.DataObject) -> None:
    (cells, numpy_cells), (features, numpy_features) = draw_parts(case, data, scalars=True)
    block = case.reader.read(cells=cells, features=features)
    rows, cols = both_positions(case, numpy_cells, numpy_features)
    expected = case.dense[np.ix_(rows, cols)]
    assert block.dtype == case.reader.dtype
    assert block.shape == expected.shape
    np.testing.assert_array_equal(block, expected)


@given(st.data())
def test_streams_take_ids(case: Case, data: st.DataObject) -> None:
    (cells, numpy_cells), (features, numpy_features) = draw_parts(case, data, scalars=False)
    batch = data.draw(st.integers(1, 9), "batch")
    rows, cols = both_positions(case, numpy_cells, numpy_features)
    for where, block in case.reader.iter_features(batch, cells=cells):
        np.testing.assert_array_equal(block, case.dense[rows][:, where])
    for where, block in case.reader.iter_cells(batch, features=features):
        np.testing.assert_array_equal(block, case.dense[where][:, cols])


# ------------------------------------------------------------------- indexing

KEY_FORMS = ("row", "row tuple", "pair", "ellipsis first", "ellipsis last", "ellipsis between")


def _keys(form: str, rows: Part, cols: Part) -> tuple[Any, Any, Part, Part]:
    """(reader key, numpy key, row part used, column part used) of a key form."""
    whole = (slice(None), slice(None))
    if form == "row":
        return rows[0], rows[1], rows, whole
    if form == "row tuple":
        return (rows[0],), (rows[1],), rows, whole
    if form == "pair":
        return (rows[0], cols[0]), (rows[1], cols[1]), rows, cols
    if form == "ellipsis first":
        return (..., cols[0]), (..., cols[1]), whole, cols
    if form == "ellipsis last":
        return (rows[0], ...), (rows[1], ...), rows, whole
    return (rows[0], ..., cols[0]), (rows[1], ..., cols[1]), rows, cols


@given(st.data())
def test_indexing_equals_numpy(case: Case, data: st.DataObject) -> None:
    rows, cols = draw_parts(case, data, scalars=True)
    form = data.draw(st.sampled_from(KEY_FORMS), "form")
    key, numpy_key, used_rows, used_cols = _keys(form, rows, cols)
    result = case.reader[key]

    # orthogonal selection, then integers drop their axes
    outer = case.dense[np.ix_(*both_positions(case, used_rows[1], used_cols[1]))]
    expected = outer[
        0 if is_scalar(used_rows[1]) else slice(None),
        0 if is_scalar(used_cols[1]) else slice(None),
    ]
    assert np.shape(result) == np.shape(expected)
    np.testing.assert_array_equal(result, expected)
    assert result.dtype == case.reader.dtype

    # where numpy's own indexing is orthogonal, it is the same result, down to
    # a scalar versus a 0-d array (numpy's answer to an ellipsis in the key)
    parts = numpy_key if isinstance(numpy_key, tuple) else (numpy_key,)
    if sum(isinstance(part, np.ndarray) for part in parts) <= 1:
        numpy_result = case.dense[numpy_key]
        assert np.shape(result) == np.shape(numpy_result)
        assert type(result) is type(numpy_result)
        np.testing.assert_array_equal(result, numpy_result)


def test_two_arrays_select_orthogonally(case: Case) -> None:
    block = case.reader[[1, 2, 1], [3, 0]]
    assert block.shape == (3, 2)
    np.testing.assert_array_equal(block, case.dense[np.ix_([1, 2, 1], [3, 0])])
    ids = case.reader[case.cell_ids[1:3], case.feature_ids[3:5]]
    np.testing.assert_array_equal(ids, case.dense[1:3, 3:5])


def test_array_protocols(case: Case) -> None:
    reader = case.reader
    assert len(reader) == case.dense.shape[0]
    assert reader.ndim == 2
    np.testing.assert_array_equal(np.asarray(reader), case.dense)
    assert np.asarray(reader, dtype=np.float64).dtype == np.float64
    rows = list(reader)
    assert len(rows) == case.dense.shape[0]
    np.testing.assert_array_equal(np.stack(rows), case.dense)


def test_ids_are_read_once_per_reader(case: Case) -> None:
    # the same Index object each time: pandas keeps its lookup table with it
    assert case.reader.cell_ids is case.reader.cell_ids
    assert case.reader.feature_ids is case.reader.feature_ids


# --------------------------------------------------------------------- errors


def test_unknown_ids_name_the_first_few_and_the_axis(case: Case) -> None:
    features = [case.feature_ids[0], "FOO", "BAR", "BAZ", "FOO", "QUX"]
    expected = (
        f"4 feature ids are not in this {case.owner}'s features: 'FOO', 'BAR', 'BAZ', ...; "
        "reader.feature_ids lists them"
    )
    with pytest.raises(UnknownIdError) as caught:
        case.reader.read(features=features)
    assert str(caught.value) == expected
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, cv.VfsError)
    single = f"1 cell id is not in this {case.owner}'s cells: 'nope'; reader.cell_ids lists them"
    for attempt in (
        lambda: case.reader.read(cells="nope"),
        lambda: case.reader["nope"],
        lambda: case.reader[pd.Index([case.cell_ids[0], "nope"]), :3],
        lambda: next(case.reader.iter_features(cells=np.asarray(["nope"]))),
    ):
        with pytest.raises(KeyError) as caught:
            attempt()
        assert str(caught.value) == single
    with pytest.raises(KeyError, match="feature ids are not"):
        next(case.reader.iter_cells(features=["FOO", "BAR"]))
    for batch in (2.5, "3", True):
        with pytest.raises(TypeError, match="batch must be a whole number"):
            next(case.reader.iter_cells(batch))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="batch must be a whole number"):
            next(case.reader.iter_features(batch))  # type: ignore[arg-type]
    assert sum(len(block) for _, block in case.reader.iter_cells(np.int64(2))) == len(case.cell_ids)


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ([1, "c1"], "mixes ids \\(str\\) and positions \\(int\\)"),
        (np.asarray([1, "c1"], dtype=object), "mixes ids"),
        ([0.5, 1.0], "not float64 values"),
        ([[0, 1]], "one-dimensional"),
        (np.ones(3, dtype=bool), "boolean cells mask has length 3"),
        (pd.Series([True, None], dtype="boolean"), "missing values"),
        ([10_000], "cells index 10000 is out of range"),
        # unsigned and huge positions are checked before any cast to int64: a -1
        # cast to uint64 read the last cell, 2**63 was named as -2**63, and a
        # Python int past int64 raised OverflowError
        (np.asarray([2**64 - 1], dtype=np.uint64), "cells index 18446744073709551615 is out"),
        (np.asarray([2**63], dtype=np.uint64), "cells index 9223372036854775808 is out"),
        (pd.Series([2**64 - 1], dtype="UInt64"), "cells index 18446744073709551615 is out"),
        ([2**63], "cells index 9223372036854775808 is out"),
        ([2**64], "cells index 18446744073709551616 is out of range"),
    ],
)
def test_refused_selections(case: Case, selection: Any, message: str) -> None:
    with pytest.raises(IndexError, match=message):
        case.reader.read(cells=selection)


def test_a_boolean_series_selects_by_its_index_as_pandas_does(case: Case) -> None:
    """A mask taken from a table in another order (sorted, shuffled) was applied
    by position: it selected other cells than the ones it labels, without a word."""
    n_cells = len(case.cell_ids)
    rng = np.random.default_rng(5)
    keep = rng.random(n_cells) < 0.4
    order = rng.permutation(n_cells)
    table = pd.DataFrame({"keep": keep}, index=case.cell_ids)
    shuffled = table.iloc[order]["keep"]  # labelled by cell id, in another order
    expected = case.dense[keep]
    np.testing.assert_array_equal(case.reader.read(cells=shuffled), expected)
    np.testing.assert_array_equal(case.reader[shuffled.to_numpy()[np.argsort(order)]], expected)
    assert pd.DataFrame(expected).equals(pd.DataFrame(case.reader[shuffled]))
    # labelled by position: a table with a default index, sorted
    by_position = pd.Series(keep).iloc[order]
    np.testing.assert_array_equal(case.reader.read(cells=by_position), expected)
    # positional still, when asked for so
    np.testing.assert_array_equal(
        case.reader.read(cells=shuffled.to_numpy()), case.dense[shuffled.to_numpy()]
    )
    # labels that are neither ids nor positions are refused, with the remedy
    foreign = pd.Series(keep, index=[f"x{i}" for i in range(n_cells)])
    with pytest.raises(IndexError, match=r"selects cells by its index .* mask\.to_numpy\(\)"):
        case.reader.read(cells=foreign)


def test_refused_keys(case: Case) -> None:
    n_cells, n_features = case.dense.shape
    refusals: list[tuple[Any, str]] = [
        (n_cells, f"cells index {n_cells} is out of range for {n_cells} cells"),
        (-n_cells - 1, "cells index .* is out of range"),
        ((0, n_features), f"features index {n_features} is out of range"),
        ((slice(None), np.int64(-n_features - 1)), "features index .* is out of range"),
        ((0, 0, 0), "too many indices: the reader has 2 axes \\(cells, features\\), but 3"),
        ((..., ...), "single ellipsis"),
        (None, "numpy.newaxis"),
        ((0, None), "numpy.newaxis"),
        (True, "a bool is not an index"),
        (np.uint64(2**64 - 1), "cells index 18446744073709551615 is out of range"),
        (2**64, "cells index 18446744073709551616 is out of range"),
    ]
    for key, message in refusals:
        with pytest.raises(IndexError, match=message):
            case.reader[key]


# ------------------------------------------------------------------ real data


@dataclass(frozen=True)
class RealUnion:
    store: cv.CompositeStore
    concat: ad.AnnData
    """``anndata.concat(join="outer")`` of the two sources, zeros where a source lacks a gene."""
    matrix: sp.csr_array


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealUnion:
    folder = tmp_path_factory.mktemp("reader-selection-real")
    data = {"wu": realdata.wu2020(), "ct": realdata.celltypist_sample()}
    for name, adata in data.items():
        cv.write_counts(folder / f"{name}.zarr", adata)
    store = cv.create_composite(
        folder / "union.zarr", {name: folder / f"{name}.zarr" for name in data}, features="union"
    )
    concat = ad.concat(list(data.values()), join="outer", fill_value=0)
    return RealUnion(store, concat, sp.csr_array(cast(Any, concat.X)))


def _by_ids(real: RealUnion, cells: Any, features: Any) -> npt.NDArray[Any]:
    """The concat's values of these cell and feature ids, in their order."""
    rows = real.concat.obs_names.get_indexer(pd.Index(np.atleast_1d(cells)))
    cols = real.concat.var_names.get_indexer(pd.Index(np.atleast_1d(features)))
    assert (rows >= 0).all() and (cols >= 0).all()
    return real.matrix[rows][:, cols].toarray()


def test_real_union_reads_by_id_as_anndata_concat(real: RealUnion) -> None:
    reader = real.store.reader()
    assert len(reader) == real.concat.n_obs
    wu, ct = realdata.wu2020(), realdata.celltypist_sample()
    rng = np.random.default_rng(5)
    only_wu = list(wu.var_names.difference(ct.var_names)[:7])
    only_ct = list(ct.var_names.difference(wu.var_names)[:7])
    shared = ["CD3E", "MS4A1", "LYZ", "NKG7", "CD14"]
    drawn = list(rng.choice(np.asarray(real.concat.var_names), 30))
    features = [*shared, *only_ct, *drawn, *only_wu, "CD3E"]
    # cells of both sources, shuffled, with repeats
    cells = list(rng.choice(np.asarray(real.concat.obs_names), 60))
    expected = _by_ids(real, cells, features)
    for given_cells, given_features in [
        (cells, features),
        (np.asarray(cells), np.asarray(features, dtype=object)),
        (pd.Index(cells), pd.Index(features)),
    ]:
        np.testing.assert_array_equal(reader.read(given_cells, given_features), expected)
        np.testing.assert_array_equal(reader[given_cells, given_features], expected)

    # a pandas boolean Series selects the Wu cells (their patient is known)
    wu_cells = real.concat.obs["patient"].notna()
    assert isinstance(wu_cells, pd.Series) and wu_cells.sum() == wu.n_obs
    np.testing.assert_array_equal(
        reader.read(wu_cells, shared), _by_ids(real, real.concat.obs_names[wu_cells], shared)
    )

    # numpy keys
    np.testing.assert_array_equal(
        reader[:, ["CD3E", "MS4A1"]], _by_ids(real, real.concat.obs_names, ["CD3E", "MS4A1"])
    )
    value = reader["Cell_5", "CD3E"]
    assert isinstance(value, np.generic) and value.dtype == reader.dtype
    assert value == _by_ids(real, "Cell_5", "CD3E")[0, 0]
    row = reader[cells[0]]
    np.testing.assert_array_equal(row, _by_ids(real, cells[0], reader.feature_ids)[0])
    np.testing.assert_array_equal(
        reader[::-7, "LYZ"], _by_ids(real, real.concat.obs_names[::-7], "LYZ")[:, 0]
    )

    # streams over all features for the selected cells
    streamed = np.concatenate(
        [block for _, block in reader.iter_features(5_000, cells=cells)], axis=1
    )
    np.testing.assert_array_equal(streamed, _by_ids(real, cells, reader.feature_ids))

    # on zarr's event loop (as computed chunks are served), a fresh reader
    # reads its ids off the loop
    fresh = real.store.reader()
    np.testing.assert_array_equal(
        sync(fresh.read_async(cells[:5], shared)), _by_ids(real, cells[:5], shared)
    )

    with pytest.raises(KeyError) as caught:
        reader.read(features=["CD3E", "NOT_A_GENE"])
    assert str(caught.value) == (
        "1 feature id is not in this composite's features: 'NOT_A_GENE'; "
        "reader.feature_ids lists them"
    )


def test_composite_doc_examples_run_and_show_what_they_say(real: RealUnion) -> None:
    text = (DOCS / "composite.md").read_text()
    section = text.split("### Selecting cells and features", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    namespace: dict[str, Any] = {"store": real.store}
    exec(compile(code, "composite.md", "exec"), namespace)
    n_cells, n_features = real.concat.shape
    shapes = {
        "genes": (n_cells, 2),
        "some": (3, 1),
        "row": (n_features,),
        "value": (),
        "column": (n_cells,),
        "first": (10, 2),
        "backwards": (n_cells,),
        "block": (2, 2),
    }
    for name, shape in shapes.items():
        assert np.shape(namespace[name]) == shape, name
    reader = namespace["reader"]
    assert shapes["row"] == (len(reader.feature_ids),) == (43_105,)
    np.testing.assert_array_equal(
        namespace["genes"], _by_ids(real, real.concat.obs_names, ["CD3E", "MS4A1"])
    )
    some_cells = reader.cell_ids[[4, 0, 4]]
    np.testing.assert_array_equal(namespace["some"], _by_ids(real, some_cells, "CD3E"))
    assert namespace["value"] == _by_ids(real, reader.cell_ids[5], "CD3E")[0, 0]
    np.testing.assert_array_equal(
        namespace["backwards"], _by_ids(real, reader.cell_ids[::-1], reader.feature_ids[3])[:, 0]
    )


def test_an_id_the_composite_prefixed_is_named_with_its_prefixed_forms(tmp_path: Path) -> None:
    """Two stores of the same barcodes (one file imported twice, or two runs of
    one library) compose with every cell id prefixed by its source; the barcode a
    user reads by was "not in this composite's cells", with nothing more."""
    counts = sp.random(30, 12, density=0.3, format="csr", random_state=3, dtype=np.float32)
    counts.data = np.ceil(counts.data * 4)
    barcodes = [f"AAAC{i:03d}-1" for i in range(30)]
    adata = ad.AnnData(counts, obs=pd.DataFrame(index=barcodes))
    adata.var_names = ["HLA-A", *(f"G{i}" for i in range(11))]
    cv.write_counts(tmp_path / "run1.zarr", adata)
    cv.write_counts(tmp_path / "run2.zarr", adata)
    store = cv.create_composite(
        tmp_path / "both.zarr", {"run1": tmp_path / "run1.zarr", "run2": tmp_path / "run2.zarr"}
    )
    reader = store.reader()
    assert reader.cell_ids[0] == "run1-AAAC000-1" and reader.cell_ids[30] == "run2-AAAC000-1"
    with pytest.raises(UnknownIdError) as caught:
        reader.read(cells=["AAAC007-1", "nope"])
    assert str(caught.value) == (
        "2 cell ids are not in this composite's cells: 'AAAC007-1', 'nope'; reader.cell_ids "
        "lists them (this composite has 'run1-AAAC007-1' or 'run2-AAAC007-1': cell ids that "
        "repeat across its sources are prefixed with the source's name)"
    )
    # what the hint names reads, and an id with no prefixed form gets no hint
    assert np.array_equal(reader.read(cells=["run2-AAAC007-1"]), counts[[7]].toarray())
    with pytest.raises(UnknownIdError) as caught:
        reader.read(cells=["nope"])
    assert "prefixed" not in str(caught.value)
    # features are matched by id, never prefixed: 'A' is no hint of 'HLA-A'
    with pytest.raises(UnknownIdError) as caught:
        reader.read(features=["A"])
    assert "prefixed" not in str(caught.value)
