"""AnnData sources that are valid but unusual: every read equals what anndata reads.

Each input is written by anndata itself (its sparse arrays stored as given:
unsorted, with repeated or zero entries, 64-bit indices), composed, and read
through the reader (dense and sparse), plain zarr and ``write_counts``; the
reference is ``anndata.read_zarr`` of the same store.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.errors import UnsupportedSourceError, VfsWarning
from cytearc_vfs.format.tables import read_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

N_CELLS, N_GENES = 40, 12


def named(x: Any) -> ad.AnnData:
    data = ad.AnnData(X=x)
    data.obs_names = [f"c{i}" for i in range(data.n_obs)]
    data.var_names = [f"g{i}" for i in range(data.n_vars)]
    return data


def base() -> sp.csr_matrix:
    rng = np.random.default_rng(0)
    matrix = sp.random(N_CELLS, N_GENES, density=0.3, format="csr", random_state=1)
    matrix.data = rng.integers(1, 20, matrix.nnz).astype(np.float32)
    return matrix


def shuffled(matrix: Any) -> Any:
    """The same matrix, each major's entries in a random order (flagged unsorted)."""
    matrix = matrix.copy()
    rng = np.random.default_rng(2)
    for major in range(len(matrix.indptr) - 1):
        lo, hi = matrix.indptr[major], matrix.indptr[major + 1]
        order = lo + rng.permutation(hi - lo)
        matrix.indices[lo:hi], matrix.data[lo:hi] = matrix.indices[order], matrix.data[order]
    matrix.has_sorted_indices = False
    return matrix


def repeated(kind: type) -> Any:
    """A matrix with repeated entries in some majors (scipy and anndata sum them)."""
    data = np.array([1, 2, 3, 4, 5, 6], dtype=np.float32)
    indices = np.array([0, 0, 3, 3, 1, 3])
    majors = N_CELLS if kind is sp.csr_matrix else N_GENES
    indptr = np.array([0, 2, 4] + [6] * (majors - 2))
    return kind((data, indices, indptr), shape=(N_CELLS, N_GENES))


def explicit_zeros() -> sp.csr_matrix:
    matrix = base()
    matrix.data[::3] = 0
    return matrix


def wide_indices() -> sp.csr_matrix:
    matrix = base()
    matrix.indptr = matrix.indptr.astype(np.int64)
    matrix.indices = matrix.indices.astype(np.int64)
    return matrix


CASES: dict[str, Callable[[], Any]] = {
    "unsorted-csr": lambda: shuffled(base()),
    "unsorted-csc": lambda: shuffled(sp.csc_matrix(base())),
    "repeated-csr": lambda: repeated(sp.csr_matrix),
    "repeated-csc": lambda: repeated(sp.csc_matrix),
    "explicit-zeros": explicit_zeros,
    "int64-indices": wide_indices,
    "no-entries": lambda: sp.csr_matrix((N_CELLS, N_GENES), dtype=np.float32),
}


@pytest.mark.parametrize("case", list(CASES))
def test_odd_sparse_matrices_read_as_anndata_reads_them(tmp_path: Path, case: str) -> None:
    source = write_anndata_zarr(named(CASES[case]()), tmp_path / "s.zarr", 3)
    expected = np.asarray(ad.read_zarr(source).X.toarray())
    store = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(), expected)
    cells = [5, 0, 2, 39, 1]
    np.testing.assert_array_equal(reader.read(cells, [3, 0, 1]), expected[np.ix_(cells, [3, 0, 1])])
    for selection in ({}, {"features": [3, 1, 0]}, {"cells": cells}):
        matrix = reader.read_sparse(**selection)
        canonical = matrix.copy()
        canonical.sum_duplicates()  # a no-op only when the flags tell the truth
        assert matrix.has_canonical_format
        np.testing.assert_array_equal(canonical.indices, matrix.indices)
        np.testing.assert_array_equal(matrix.toarray(), reader.read(**selection))
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/counts", mode="r")[:], expected)
    summaries = zarr.open_group(store, path="RNA/countSummaries", mode="r")
    np.testing.assert_array_equal(summaries["rowSums"][:], expected.sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"][:], (expected > 0).sum(axis=0))
    store.close()
    cv.write_counts(tmp_path / "w.zarr", source)
    written = cv.open_store(tmp_path / "w.zarr")
    np.testing.assert_array_equal(cv.VirtualArrayReader(written, assay="RNA").read(), expected)
    written.close()


def test_repeated_entries_whose_sum_outgrows_the_read_dtype_are_refused(tmp_path: Path) -> None:
    """Float counts read as the narrowest dtype of the largest stored value: a sum of
    repeats beyond it is refused by name at creation, and nothing is left behind."""
    x = sp.csr_matrix(
        (np.array([200, 200, 5], np.float32), np.array([1, 1, 2]), np.array([0, 2, 3, 3])),
        shape=(3, 4),
    )
    data = ad.AnnData(X=x)
    data.obs_names, data.var_names = ["a", "b", "c"], ["w", "x", "y", "z"]
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    with pytest.raises(UnsupportedSourceError, match=r"sum 400.* row 0 .*uint8.*sum_duplicates"):
        cv.create_composite(tmp_path / "c.zarr", {"s": source})
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("with_x", [True, False])
def test_a_missing_matrix_is_refused_listing_what_the_source_holds(
    tmp_path: Path, with_x: bool
) -> None:
    """X absent (anndata writes such a store) or a layer that is not there: the
    message names the source and lists its layers, before anything is written."""
    counts = base()
    data = named(counts) if with_x else ad.AnnData(layers={"counts": counts})
    data.obs_names = [f"c{i}" for i in range(N_CELLS)]
    data.var_names = [f"g{i}" for i in range(N_GENES)]
    data.layers["counts"] = data.layers["spliced"] = counts
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 2)
    holds = "X and the layers 'counts', 'spliced'" if with_x else "the layers 'counts', 'spliced'"
    if not with_x:
        with pytest.raises(
            UnsupportedSourceError, match=f"source 'one' .* no 'X'; it holds {holds}"
        ):
            cv.create_composite(tmp_path / "c.zarr", {"one": source})
    with pytest.raises(
        UnsupportedSourceError,
        match=f"no 'layers/unspliced'; it holds {holds}.*source_layers=\\{{'one': LAYER\\}}",
    ):
        cv.create_composite(
            tmp_path / "c.zarr", {"one": source}, source_layers={"one": "unspliced"}
        )
    assert not (tmp_path / "c.zarr").exists()
    with pytest.raises(KeyError, match="no layer 'unspliced'; its layers are") as caught:
        cv.write_counts(tmp_path / "w.zarr", source, layer="unspliced")
    assert ("give no layer to use X" in str(caught.value)) == with_x
    assert not (tmp_path / "w.zarr").exists()
    store = cv.create_composite(
        tmp_path / "c.zarr", {"one": source}, source_layers={"one": "spliced"}
    )
    np.testing.assert_array_equal(store.reader().read(), counts.toarray())
    store.close()


@pytest.mark.parametrize("axis", ["obs", "var"])
def test_a_categorical_index_is_refused_with_the_remedy(tmp_path: Path, axis: str) -> None:
    """anndata writes a CategoricalIndex as a categorical ``_index``; the composite
    refuses it up front, naming the fix; write_counts imports it."""
    data = named(base())
    names = data.obs_names if axis == "obs" else data.var_names
    getattr(data, axis).index = pd.CategoricalIndex(names)
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    remedy = f"adata.{axis}_names = adata.{axis}_names.astype\\(str\\)"
    with pytest.raises(
        UnsupportedSourceError, match=f"'{axis}/_index' is encoded 'categorical'.*{remedy}"
    ):
        cv.create_composite(tmp_path / "c.zarr", {"s": source})
    assert not (tmp_path / "c.zarr").exists()
    cv.write_counts(tmp_path / "w.zarr", source)
    written = cv.VirtualArrayReader(cv.open_store(tmp_path / "w.zarr"), assay="RNA")
    assert list(written.cell_ids if axis == "obs" else written.feature_ids) == list(names)


# ------------------------------------------------ obs columns the layer cannot read


def _array(group: zarr.Group, name: str, values: Any, encoding: str | None = "array") -> None:
    attrs = {"encoding-type": encoding, "encoding-version": "0.2.0"} if encoding else {}
    group.create_array(name, data=values, attributes=attrs)


def _odd_columns(obs: zarr.Group) -> dict[str, str]:
    """Columns anndata's writer never makes, written into ``obs`` by hand: name -> the
    reason the warning must give."""
    n = N_CELLS
    _array(obs, "twod", np.zeros((n, 2), np.float32))
    _array(obs, "future", np.arange(n), "future-thing")
    _array(obs, "short", np.arange(n - 1))
    nested = obs.create_group(
        "nested",
        attributes={"encoding-type": "dataframe", "encoding-version": "0.2.0"}
        | {"_index": "_index", "column-order": ["a"]},
    )
    _array(nested, "_index", np.arange(n))
    _array(nested, "a", np.arange(n))
    form = {"class": "NumpyArray", "primitive": "int64", "form_key": "node0"}
    awkward = obs.create_group(
        "awk",
        attributes={"encoding-type": "awkward-array", "encoding-version": "0.1.0"}
        | {"length": n, "form": json.dumps(form)},
    )
    awkward.create_array("node0-data", data=np.arange(n))
    reasons = {
        "twod": "one-dimensional, found shape",
        "future": "unknown encoding-type 'future-thing'",
        "short": f"has {n - 1} rows but the index",
        "nested": "a dataframe nested in the dataframe",
        "awk": "an awkward array",
    }
    obs.attrs["column-order"] = [*obs.attrs["column-order"], *reasons]
    return reasons


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_columns_that_cannot_be_read_are_skipped_with_a_warning(
    tmp_path: Path,
    zarr_format: int,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An obs holding columns no reader can take (anndata fails on each) still gives
    a composite and an import: the counts and the readable columns, and one
    warning per skipped column naming the source, the column and why."""
    data = named(base())
    data.obs["kind"] = pd.Categorical(np.where(np.arange(N_CELLS) % 2, "t", "b"))
    source = write_anndata_zarr(data, tmp_path / "s.zarr", zarr_format)
    reasons = _odd_columns(zarr.open_group(source, mode="r+", use_consolidated=False)["obs"])
    zarr.consolidate_metadata(source)
    store = cv.create_composite(tmp_path / "c.zarr", {"odd": source})
    np.testing.assert_array_equal(store.reader().read(), data.X.toarray())
    cells = read_table(zarr.open_group(store, mode="r")["cellData"])
    assert cells["kind"].tolist() == data.obs["kind"].tolist()
    assert not set(reasons) & set(cells.columns)
    store.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for column, reason in reasons.items():
        assert [m for m in warned if f"source 'odd': obs column {column!r}" in m and reason in m]
    # the command line shows each as one warning line, and succeeds
    assert main(["composite", str(tmp_path / "cli.zarr"), f"odd={source}", "--json"]) == 0
    err = capsys.readouterr().err
    for column in reasons:
        assert f"cytearc-vfs composite: warning: source 'odd': obs column {column!r}" in err
    # write_counts imports the rest, one VfsWarning per column, before writing
    with pytest.warns(VfsWarning) as caught:
        cv.write_counts(tmp_path / "w.zarr", source)
    messages = [str(w.message) for w in caught if issubclass(w.category, VfsWarning)]
    # each names the line that asked for it, not a line inside the package
    assert {w.filename for w in caught if issubclass(w.category, VfsWarning)} == {__file__}
    for column, reason in reasons.items():
        assert [m for m in messages if f"column 'obs/{column}'" in m and reason in m]
    written = read_table(zarr.open_group(cv.open_store(tmp_path / "w.zarr"), mode="r")["cellData"])
    assert written["kind"].tolist() == data.obs["kind"].tolist()


def test_a_remote_h5ad_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """h5py reads local files only: a remote .h5ad is refused by name, with the
    remedy, before any request or write."""
    with pytest.raises(ValueError, match=r"\.h5ad files are read from local paths only; download"):
        cv.write_counts(tmp_path / "w.zarr", "s3://no-such-bucket/atlas.h5ad")
    assert not (tmp_path / "w.zarr").exists()
    assert main(["write", "s3://no-such-bucket/atlas.h5ad", str(tmp_path / "c.zarr")]) == 2
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize(
    ("stored", "read_as"),
    [
        ("int8", "int8"),
        ("int32", "int32"),
        ("int64", "int64"),
        ("uint32", "uint32"),
        ("uint64", "uint64"),
        ("float64", "uint8"),  # whole counts: the narrowest unsigned dtype of the largest
        ("bool", "uint8"),  # presence counts, as write_counts stores them
    ],
)
@pytest.mark.parametrize("encoding", ["csr", "dense"])
def test_count_dtypes_read_as_anndata_reads_them(
    tmp_path: Path, stored: str, read_as: str, encoding: str
) -> None:
    matrix = base().astype(stored)
    data = named(matrix if encoding == "csr" else matrix.toarray())
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 2 if encoding == "dense" else 3)
    expected = ad.read_zarr(source).X
    expected = np.asarray(expected.toarray() if sp.issparse(expected) else expected)
    store = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    reader = store.reader()
    assert reader.dtype == np.dtype(read_as)
    np.testing.assert_array_equal(reader.read(), expected.astype(read_as))
    np.testing.assert_array_equal(reader.read_sparse().toarray(), expected.astype(read_as))
    store.close()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        pytest.param("ü" * 200, "400 bytes long in UTF-8, over the 255", id="400-bytes"),
        pytest.param("CD4%2fCD8", "URL-decodes to 'CD4/CD8'", id="escaped-slash"),
        pytest.param("note\x07", "control character", id="control"),
        pytest.param(" ", "dots and spaces only", id="spaces"),
    ],
)
def test_a_column_name_a_store_cannot_take(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, reason: str
) -> None:
    """Object storage holds a column named in 400 UTF-8 bytes; a local destination
    cannot (a column is a directory, names stop at 255 bytes). No store of the
    package takes a key with a URL escape of '/', a control character or a
    segment of spaces only (anndata writes them). write_counts refuses such a
    name before writing; a composite skips the column with a warning giving the
    reason (both had failed half-way through: 'File name too long', or the
    store's key refusal). A ':' stays a plain name."""
    from cytearc_vfs.remote.locations import open_location

    data = named(base())
    data.obs[name] = 1.0
    data.obs["a:b"] = 2.0
    with pytest.raises(ValueError, match=rf"cannot be a Zarr array name.*{reason}.*rename it"):
        cv.write_counts(tmp_path / "w.zarr", data)
    assert not (tmp_path / "w.zarr").exists()
    location = f"memory://odd-names-{tmp_path.name}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.write_zarr(open_location(location, read_only=False))
    store = cv.create_composite(tmp_path / "c.zarr", {"s": location})
    cells = read_table(zarr.open_group(store, mode="r")["cellData"])
    assert "a:b" in cells.columns and name not in cells.columns
    store.close()
    assert [r for r in caplog.records if repr(name) in r.getMessage() and reason in r.getMessage()]


def test_write_counts_reads_each_column_document_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On object storage every document read is a round trip: the shape needs the
    index only, and the table reads each column's document once (109 requests
    for a 75-object store on the loopback S3 server before, 85 now)."""
    import collections

    from zarr.storage import LocalStore

    data = named(base())
    for number in range(6):
        data.obs[f"col{number}"] = pd.Categorical(np.arange(N_CELLS) % (number + 2))
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    reads: collections.Counter[str] = collections.Counter()
    original = LocalStore.get

    async def get(store: LocalStore, key: str, *args: Any, **kwargs: Any) -> Any:
        if Path(store.root) == source:
            reads[key] += 1
        return await original(store, key, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "get", get)
    cv.write_counts(tmp_path / "w.zarr", source)
    columns = {key: count for key, count in reads.items() if key.startswith("obs/col")}
    assert columns and set(columns.values()) == {1}, columns


def test_unusual_columns_and_ids_are_carried_by_the_rule(tmp_path: Path) -> None:
    """Columns anndata writes and reads but rarely sees, compared with what
    ``anndata.read_zarr`` gives, by the composite's missing-value rule (missing
    text is "", missing numbers NaN)."""
    n = 6
    first = named(base()[:n])
    first.obs_names = [str(i) for i in range(n)]  # integers as strings
    first.obs["empty_categories"] = pd.Categorical([None] * n, categories=[])
    first.obs["all_missing"] = pd.Categorical([None] * n, categories=["a", "b"])
    first.obs["no_ints"] = pd.array([None] * n, dtype="Int64")
    first.obs["no_bools"] = pd.array([None] * n, dtype="boolean")
    first.obs["mixed"] = pd.Series(
        [1, "a", 2.5, None, True, "b"], dtype=object, index=first.obs_names
    )
    first.obs["Zelltyp_细胞_🧬"] = pd.Categorical(["T-Zelle", "B细胞", "🧬", "T-Zelle", "é", "ß"])
    first.var["feature_name"] = pd.Categorical([f"n{i % 3}" for i in range(N_GENES)])
    second = named(base()[n : 2 * n])
    second.obs_names = first.obs_names  # the same ids in both sources
    sources = {
        "one": write_anndata_zarr(first, tmp_path / "one.zarr", 3),
        "two": write_anndata_zarr(second, tmp_path / "two.zarr", 2),
    }
    back = ad.read_zarr(sources["one"])
    store = cv.create_composite(tmp_path / "c.zarr", sources)
    group = zarr.open_group(store, mode="r")
    cells = read_table(group["cellData"]).iloc[:n]
    features = read_table(group["RNA/featureData"])
    # repeated ids across sources are prefixed with the source, as index_unique does
    assert list(store.reader().cell_ids) == [f"{s}-{i}" for s in ("one", "two") for i in range(n)]
    assert cells["sourceId"].tolist() == list(back.obs_names)
    for name in ("empty_categories", "all_missing"):
        assert cells[name].tolist() == [""] * n
    for name in ("no_ints", "no_bools"):
        assert cells[name].dtype == np.float64 and bool(cells[name].isna().all())
    assert cells["mixed"].tolist() == back.obs["mixed"].astype(str).tolist()
    assert cells["Zelltyp_细胞_🧬"].tolist() == back.obs["Zelltyp_细胞_🧬"].tolist()
    assert features["feature_name"].tolist() == back.var["feature_name"].tolist()
    store.close()


def test_a_stale_consolidated_copy_inside_a_group_is_not_read(tmp_path: Path) -> None:
    """zarr's ``del group[name]`` through a consolidated root leaves a copy of the
    group's members inline in its own ``zarr.json``, which a later
    ``consolidate_metadata`` of the root does not refresh. Here that copy lacks
    ``X/indices`` (swapped to int64 through the consolidated open) and records
    ``X/indptr`` as int32 (rewritten as int64 in place): each member is
    read from its own document, so every reader sees what anndata sees."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer

    source = write_anndata_zarr(named(base()), tmp_path / "s.zarr", 3)
    x = zarr.open_group(source, mode="a")["X"]  # zarr's default open: consolidated
    indices = x["indices"][:]
    del x["indices"]
    x.create_array("indices", data=indices.astype(np.int64))
    indptr = zarr.open_array(source / "X" / "indptr", mode="r")[:]
    # rewritten where it is, as a tool that knows nothing of X's copy would
    zarr.create_array(source / "X" / "indptr", data=indptr.astype(np.int64), overwrite=True)
    zarr.consolidate_metadata(source)
    inline = json.loads((source / "X" / "zarr.json").read_text())["consolidated_metadata"]
    assert set(inline["metadata"]) == {"data", "indptr"}  # the stale copy the test is about
    assert inline["metadata"]["indptr"]["data_type"] == "int32"
    expected = np.asarray(ad.read_zarr(source).X.toarray())
    with AnnDataContainer.open(source) as container:
        matrix = container.matrix()
        assert matrix.nnz == int(np.count_nonzero(expected))
        np.testing.assert_array_equal(matrix.row_band(0, N_CELLS).toarray(), expected)
        documents = container.identity()["documents"]
        assert documents["X/indices"]["dtype"] == documents["X/indptr"]["dtype"] == "int64"
    cv.write_counts(tmp_path / "w.zarr", source)
    written = cv.open_store(tmp_path / "w.zarr")
    np.testing.assert_array_equal(cv.VirtualArrayReader(written, assay="RNA").read(), expected)
    written.close()
    store = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    np.testing.assert_array_equal(store.reader().read(), expected)
    store.close()
