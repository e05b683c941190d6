"""The AnnData element layer reads every element of the element table, modern and legacy.

Modern containers (written by anndata, Zarr v2 and v3, and h5ad) must read
exactly as anndata reads them. Legacy containers (anndata 0.7.x layouts,
written by hand in ``anndata_fixtures``) must read as the element
specification describes them, and as anndata reads them where it still can.
Malformed elements fail with an error naming the element and the fault.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_fixtures import (
    N_OBS,
    N_VAR,
    counts,
    legacy_expected,
    modern_adata,
    write_awkward,
    write_legacy,
    write_modern,
)
from cytearc_vfs_adapters.anndata import (
    AnnDataContainer,
    AwkwardArrayInfo,
    MalformedElementError,
    NotAnnDataError,
    SparseMatrixElement,
    UnsupportedElementError,
    classify,
)

FORMATS = [2, 3]


def assert_same(mine: Any, theirs: Any, where: str = "") -> None:
    """Equal values, as anndata's and ours should be (recursing into dicts)."""
    if isinstance(theirs, dict):
        assert isinstance(mine, dict), where
        assert sorted(mine) == sorted(theirs), where
        for key in theirs:
            assert_same(mine[key], theirs[key], f"{where}/{key}")
    elif isinstance(theirs, pd.DataFrame):
        pd.testing.assert_frame_equal(mine, theirs, check_index_type=False, obj=where)
        assert list(mine.index) == list(theirs.index), where
    elif isinstance(mine, SparseMatrixElement):
        loaded = mine.to_scipy()
        assert loaded.format == theirs.format, where
        np.testing.assert_array_equal(loaded.toarray(), theirs.toarray(), err_msg=where)
    elif isinstance(theirs, (pd.Categorical, pd.api.extensions.ExtensionArray)):
        pd.testing.assert_extension_array_equal(mine, theirs, obj=where)
    elif isinstance(theirs, np.ndarray):
        assert isinstance(mine, np.ndarray), where
        if theirs.dtype.kind in "OTU":
            assert [str(v) for v in mine.ravel()] == [str(v) for v in theirs.ravel()], where
        else:
            assert mine.dtype == theirs.dtype, where
            np.testing.assert_array_equal(mine, theirs, err_msg=where)
    else:
        assert mine == theirs and type(mine) is type(theirs), f"{where}: {mine!r} != {theirs!r}"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """``write_modern(path, zarr_format, awkward=False)``, written once per format for the
    module and only read: anndata's readable twin of each container, the source the
    damaging and editing tests copy, and the remote upload (a write is about 1.3 s)."""
    written: dict[int, Path] = {}

    def get(zarr_format: int) -> Path:
        if zarr_format not in written:
            path = tmp_path_factory.mktemp(f"plain-v{zarr_format}") / "modern.zarr"
            write_modern(path, zarr_format, awkward=False)
            written[zarr_format] = path
        return written[zarr_format]

    return get


# The containers are only read: made once for the module.
@pytest.fixture(scope="module", params=FORMATS, ids=lambda f: f"v{f}")
def modern(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    plain: Callable[[int], Path],
) -> tuple[AnnDataContainer, Path, int]:
    zarr_format = request.param
    path = tmp_path_factory.mktemp("modern") / "modern.zarr"
    # write_modern(path, zarr_format) is anndata's write (the plain twin's, copied here
    # rather than written again), then the awkward array and consolidation, as below
    shutil.copytree(plain(zarr_format), path)
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    write_awkward(root["uns"], "ragged")  # type: ignore[arg-type]
    if zarr_format == 3 or (path / ".zmetadata").exists():
        zarr.consolidate_metadata(path, zarr_format=zarr_format)
    return AnnDataContainer.open(path), path, zarr_format


@pytest.fixture(scope="module", params=FORMATS, ids=lambda f: f"v{f}")
def legacy(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[AnnDataContainer, Path, int]:
    path = tmp_path_factory.mktemp("legacy") / "legacy.zarr"
    write_legacy(path, request.param)
    return AnnDataContainer.open(path), path, request.param


@pytest.fixture(scope="module")
def pristine(plain: Callable[[int], Path]) -> Path:
    """A modern v3 container without awkward arrays, copied by each test that damages it."""
    return plain(3)


MODERN_ELEMENTS = [
    "obs",
    "var",
    "X",
    "layers/csc",
    "layers/dense",
    "obsm/X_pca",
    "obsm/frame",
    "varm/loadings",
    "obsp/distances",
    "varp/corr",
    "raw/X",
    "raw/var",
]


def test_modern_elements_read_as_anndata_reads_them(
    modern: tuple[AnnDataContainer, Path, int], plain: Callable[[int], Path]
) -> None:
    container, _, zarr_format = modern
    # anndata reads awkward arrays only with the awkward package; read a twin without it
    theirs = ad.read_zarr(plain(zarr_format))
    assert container.zarr_format == zarr_format
    assert container.shape == theirs.shape == (N_OBS, N_VAR)
    assert list(container.obs_names()) == list(theirs.obs_names)
    assert list(container.var_names()) == list(theirs.var_names)
    assert container.encoding.type == "anndata" and not container.encoding.legacy
    reference = {
        "obs": theirs.obs,
        "var": theirs.var,
        "X": theirs.X,
        "layers/csc": theirs.layers["csc"],
        "layers/dense": theirs.layers["dense"],
        "obsm/X_pca": theirs.obsm["X_pca"],
        "obsm/frame": theirs.obsm["frame"],
        "varm/loadings": theirs.varm["loadings"],
        "obsp/distances": theirs.obsp["distances"],
        "varp/corr": theirs.varp["corr"],
        "raw/X": theirs.raw.X,
        "raw/var": theirs.raw.var,
    }
    for path_inside in MODERN_ELEMENTS:
        assert_same(container.read(path_inside), reference[path_inside], path_inside)
    uns = container.read("uns")
    ragged = uns.pop("ragged")
    assert_same(uns, theirs.uns, "uns")
    assert ragged == AwkwardArrayInfo("uns/ragged", 3, ragged.form, ("node0-offsets", "node1-data"))
    assert ragged.form is not None and "ListOffsetArray" in ragged.form


def test_modern_values_are_the_written_ones(modern: tuple[AnnDataContainer, Path, int]) -> None:
    container, _, _ = modern
    original = modern_adata()
    obs = container.obs()
    assert list(obs.index) == list(original.obs_names)
    assert obs["cell_type"].cat.ordered and list(obs["cell_type"]) == list(
        original.obs["cell_type"]
    )
    assert obs["batch"].isna().tolist() == original.obs["batch"].isna().tolist()
    assert obs["maybe_int"].dtype == "Int64"
    assert obs["maybe_int"].isna().sum() == 3
    assert obs["maybe_bool"].dtype == "boolean"
    np.testing.assert_array_equal(container.matrix().to_scipy().toarray(), counts().toarray())
    assert container.read("uns/nothing") is None
    assert container.read("uns/title") == "an atlas"
    assert container.read("uns/n_neighbors") == 15


def test_missing_value_semantics_of_nullable_strings(
    modern: tuple[AnnDataContainer, Path, int],
) -> None:
    container, _, _ = modern
    frame = container.read("obsm/frame")
    assert container.encoding_of("obsm/frame/note_na").type == "nullable-string-array"
    na, nan = frame["note_na"], frame["note_nan"]
    # "NA" propagates missingness through comparisons; "NaN" compares False
    assert (na == "x").iloc[1] is pd.NA
    assert not bool((nan == "x").iloc[1])
    assert na.isna().tolist() == nan.isna().tolist() == [False, True] + [False] * 10


def test_legacy_elements_read_as_the_specification_describes(
    legacy: tuple[AnnDataContainer, Path, int],
) -> None:
    container, _, _ = legacy
    expected = legacy_expected()
    assert container.encoding.type == "anndata" and container.encoding.legacy
    assert not container.encoding.declared
    assert container.shape == (N_OBS, N_VAR)
    assert list(container.obs_names()) == list(expected["obs"].index)
    assert list(container.var_names()) == list(expected["var"].index)
    for name in ("obs", "var"):
        pd.testing.assert_frame_equal(
            getattr(container, name)(), expected[name], check_index_type=False, obj=name
        )
    assert_same(container.matrix(), sp.csr_matrix(expected["X"]), "X")
    for path_inside, value in expected.items():
        if path_inside in ("obs", "var", "X"):
            continue
        assert_same(container.read(path_inside), value, path_inside)
    # the labels' ordered flag sits on the __categories array in 0.1.0
    assert container.obs()["cell_type"].cat.ordered
    assert not container.obs()["batch"].cat.ordered


@pytest.mark.filterwarnings("ignore:.*without encoding metadata")
@pytest.mark.parametrize("zarr_format", FORMATS)
def test_legacy_as_anndata_reads_it_where_it_can(zarr_format: int, tmp_path: Path) -> None:
    """anndata still reads a 0.7 file's obs (dataframe 0.1.0, relative label paths), X,
    layers and obsm; it reads var (no encoding attributes) and uns' attribute-less
    categorical and nullable groups as plain mappings, where the specification's
    structural rules (followed here) say dataframe, categorical and nullable."""
    path = tmp_path / "legacy.zarr"
    write_legacy(path, zarr_format, absolute=False)
    theirs = ad.read_zarr(path)
    container = AnnDataContainer.open(path)
    assert_same(container.obs(), theirs.obs, "obs")
    assert_same(container.matrix(), theirs.X, "X")
    assert_same(container.read("layers/counts"), theirs.layers["counts"], "layers/counts")
    assert_same(container.read("obsm/X_pca"), theirs.obsm["X_pca"], "obsm/X_pca")
    for key in ("title", "colors", "params", "declared"):
        assert_same(container.read(f"uns/{key}"), theirs.uns[key], f"uns/{key}")


def test_h5ad_reads_as_anndata_reads_it(tmp_path: Path) -> None:
    original = modern_adata()
    with ad.settings.override(allow_write_nullable_strings=True):
        original.write_h5ad(tmp_path / "a.h5ad")
    theirs = ad.read_h5ad(tmp_path / "a.h5ad")
    with AnnDataContainer.open(tmp_path / "a.h5ad") as container:
        assert container.storage == "hdf5" and container.zarr_format is None
        assert container.shape == theirs.shape
        assert_same(container.obs(), theirs.obs, "obs")
        assert_same(container.var(), theirs.var, "var")
        assert_same(container.read("X"), theirs.X, "X")
        assert_same(container.read("layers/csc"), theirs.layers["csc"], "layers/csc")
        assert_same(container.read("layers/dense"), theirs.layers["dense"], "layers/dense")
        assert_same(container.read("uns"), theirs.uns, "uns")
        assert_same(container.read("raw/var"), theirs.raw.var, "raw/var")


def test_h5ad_legacy_categories_by_object_reference(tmp_path: Path) -> None:
    """anndata 0.7 h5ad: a categorical column's ``categories`` attribute is an HDF5 reference."""
    import h5py

    with h5py.File(tmp_path / "old.h5ad", "w") as f:
        obs = f.create_group("obs")
        obs.attrs.update(
            {
                "_index": "_index",
                "column-order": np.array(["kind"], dtype=h5py.string_dtype()),
                "encoding-type": "dataframe",
                "encoding-version": "0.1.0",
            }
        )
        obs.create_dataset("_index", data=np.array([b"c0", b"c1", b"c2"]))
        labels = obs.create_group("__categories").create_dataset(
            "kind", data=np.array(["x", "y"], dtype=h5py.string_dtype())
        )
        labels.attrs["ordered"] = False
        codes = obs.create_dataset("kind", data=np.array([1, 0, 1], dtype=np.int8))
        codes.attrs["categories"] = labels.ref
        var = f.create_group("var")
        var.attrs.update(
            {"_index": "_index", "column-order": np.array([], dtype=h5py.string_dtype())}
        )
        var.create_dataset("_index", data=np.array([b"g0", b"g1"]))
        f.create_dataset("X", data=np.arange(6, dtype=np.float32).reshape(3, 2))
    with AnnDataContainer.open(tmp_path / "old.h5ad") as container:
        obs = container.obs()
        assert list(obs.index) == ["c0", "c1", "c2"]
        assert list(obs["kind"]) == ["y", "x", "y"]
        assert container.shape == (3, 2)
        np.testing.assert_array_equal(
            container.matrix().to_scipy().toarray(), np.arange(6).reshape(3, 2)
        )


def test_listing_names_every_element(legacy: tuple[AnnDataContainer, Path, int]) -> None:
    container, _, _ = legacy
    listed = {element.path: element for element in container.elements()}
    assert "obs/__categories" not in listed  # shown with its columns, not as a mapping
    assert listed["obs"].encoding_version == "0.1.0" and listed["obs"].legacy
    assert listed["obs/batch"].encoding_type == "categorical" and listed["obs/batch"].legacy
    assert "/obs/__categories/batch" in listed["obs/batch"].note
    assert listed["var"].encoding_type == "dataframe" and not listed["var"].declared
    assert listed["X"].shape == (N_OBS, N_VAR) and not listed["X"].legacy
    assert listed["uns/declared"].declared and listed["uns/declared"].encoding_type == "dict"
    assert listed["uns/cats"].encoding_type == "categorical"
    assert listed["uns/maybe"].encoding_type == "nullable-integer"
    assert listed["uns/maybe_bool"].encoding_type == "nullable-boolean"
    assert listed["uns/title"].encoding_type == "string" and listed["uns/title"].shape == ()
    assert listed["uns/flag"].encoding_type == "numeric-scalar"
    assert listed["layers/counts"].shape == (N_OBS, N_VAR)


def test_listing_of_a_modern_container(modern: tuple[AnnDataContainer, Path, int]) -> None:
    container, _, _ = modern
    listed = {element.path: element for element in container.elements()}
    expected = {
        "": "anndata",
        "raw": "raw",
        "uns": "dict",
        "obs": "dataframe",
        "X": "csr_matrix",
        "layers/csc": "csc_matrix",
        "layers/dense": "array",
        "obs/cell_type": "categorical",
        "obs/maybe_int": "nullable-integer",
        "obs/maybe_bool": "nullable-boolean",
        "obsm/frame/note_na": "nullable-string-array",
        "uns/n_neighbors": "numeric-scalar",
        "uns/title": "string",
        "uns/nothing": "null",
        "uns/colors": "string-array",
        "uns/ragged": "awkward-array",
    }
    for path_inside, kind in expected.items():
        assert listed[path_inside].encoding_type == kind, path_inside
        assert listed[path_inside].declared and not listed[path_inside].legacy
    assert listed["uns/ragged"].shape == (3,) and "not read" in listed["uns/ragged"].note
    assert not any(path.startswith("uns/ragged/") for path in listed)


# --- structural classification ------------------------------------------------------------


def test_structure_classifies_only_without_a_declared_encoding() -> None:
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=3)
    group = root.create_group("g")
    group.create_array("codes", data=np.array([0], dtype=np.int8))
    group.create_array("categories", shape=(1,), dtype=str)
    assert classify(group, "g").type == "categorical"
    group.attrs.update({"encoding-type": "dict", "encoding-version": "0.1.0"})
    assert classify(group, "g").type == "dict"  # a declared encoding always wins
    frame = root.create_group("f", attributes={"_index": "ix"})
    assert classify(frame, "f").type == "dataframe"
    assert classify(root.create_group("m"), "m").type == "dict"
    text = root.create_array("t", shape=(), dtype=str)
    assert classify(text, "t").type == "string"
    assert classify(root.create_array("n", shape=(), dtype="i4"), "n").type == "numeric-scalar"
    assert classify(root.create_array("a", shape=(2,), dtype="f4"), "a").type == "array"


# --- malformed elements ---------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    if how == "sparse without indptr":
        del root["X/indptr"]
    elif how == "sparse shape attribute":
        root["X"].attrs["shape"] = [N_OBS]
    elif how == "indptr length":
        indptr = root["X/indptr"][:]
        del root["X/indptr"]
        root["X"].create_array("indptr", data=indptr[:-1])
    elif how == "column length":
        del root["obs/score"]
        root["obs"].create_array("score", data=np.zeros(N_OBS - 1))
    elif how == "missing index":
        del root["obs/_index"]
    elif how == "codes out of range":
        del root["obs/cell_type/codes"]
        root["obs/cell_type"].create_array("codes", data=np.full(N_OBS, 7, dtype=np.int8))
    elif how == "unknown encoding":
        root["uns/params"].attrs["encoding-type"] = "tensor"
    elif how == "unknown version":
        root["obs"].attrs["encoding-version"] = "0.9.0"
    elif how == "mask not boolean":
        del root["obs/maybe_int/mask"]
        root["obs/maybe_int"].create_array("mask", data=np.zeros(N_OBS, dtype=np.int8))
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "read", "error", "message"),
    [
        (
            "sparse without indptr",
            "X",
            MalformedElementError,
            r"element X: a csr_matrix needs an array 'indptr', which is missing",
        ),
        (
            "sparse shape attribute",
            "X",
            MalformedElementError,
            r"element X: .*'shape' attribute of two",
        ),
        ("indptr length", "X", MalformedElementError, r"element X: indptr has shape \(12,\)"),
        ("column length", "obs", MalformedElementError, r"element obs: column 'score' has 11 rows"),
        (
            "missing index",
            "obs",
            MalformedElementError,
            r"element obs: the index '_index' .* missing",
        ),
        (
            "codes out of range",
            "obs",
            MalformedElementError,
            r"element obs/cell_type: categorical codes .* outside",
        ),
        (
            "unknown encoding",
            "uns",
            UnsupportedElementError,
            r"element uns/params: unknown encoding-type 'tensor'",
        ),
        (
            "unknown version",
            "obs",
            UnsupportedElementError,
            r"element obs: dataframe encoding-version '0.9.0'",
        ),
        (
            "mask not boolean",
            "obs",
            MalformedElementError,
            r"element obs/maybe_int: .*boolean mask",
        ),
    ],
)
def test_malformed_elements_are_named(
    pristine: Path, tmp_path: Path, how: str, read: str, error: type[Exception], message: str
) -> None:
    path = tmp_path / "bad.zarr"
    shutil.copytree(pristine, path)
    _damage(path, how)
    container = AnnDataContainer.open(path)

    def read_whole() -> None:
        value = container.read(read)
        if isinstance(value, SparseMatrixElement):
            value.to_scipy()

    with pytest.raises(error, match=message):
        read_whole()


def test_not_an_anndata_is_refused_by_name(tmp_path: Path) -> None:
    import cytearc_vfs as cv

    cv.write_counts(tmp_path / "cytearc.zarr", sp.csr_array(np.eye(3, dtype=np.int32)))
    with pytest.raises(NotAnnDataError, match=r"cytearc.zarr is not an AnnData container"):
        AnnDataContainer.open(tmp_path / "cytearc.zarr")
    with pytest.raises(FileNotFoundError, match=r"nowhere.zarr does not exist"):
        AnnDataContainer.open(tmp_path / "nowhere.zarr")


def test_an_unknown_layer_names_the_layers(modern: tuple[AnnDataContainer, Path, int]) -> None:
    container, _, _ = modern
    with pytest.raises(KeyError, match=r"no layer 'spliced'; its layers are \['csc', 'dense'\]"):
        container.matrix("spliced")
    from cytearc_vfs_adapters.anndata.matrices import matrix_element

    with pytest.raises(MalformedElementError, match=r"element uns/colors: a count matrix"):
        matrix_element(
            container.root["uns/colors"], "uns/colors", container.encoding_of("uns/colors")
        )


# --- bands --------------------------------------------------------------------------------


@pytest.mark.parametrize("layer", [None, "csc", "dense"])
def test_row_and_column_bands_equal_the_matrix(
    modern: tuple[AnnDataContainer, Path, int], layer: str | None
) -> None:
    container, _, _ = modern
    matrix = container.matrix(layer)
    expected = counts().toarray()
    rows = [band.toarray() for _, _, band in matrix.iter_bands("rows", 5)]
    np.testing.assert_array_equal(np.vstack(rows), expected)
    columns = [band.toarray() for _, _, band in matrix.iter_bands("columns", 2)]
    np.testing.assert_array_equal(np.hstack(columns), expected)
    np.testing.assert_array_equal(matrix[3:7].toarray(), expected[3:7])


def test_a_csr_row_band_reads_only_its_entries(tmp_path: Path) -> None:
    x = counts(400, 30, seed=5)
    adata = ad.AnnData(X=x)
    adata.write_zarr(tmp_path / "big.zarr")
    matrix = AnnDataContainer.open(tmp_path / "big.zarr").matrix()
    band = matrix.row_band(100, 120)
    assert matrix.stats.largest_band_entries == band.nnz == x[100:120].nnz
    assert matrix.stats.entries_read == band.nnz


def test_csc_row_bands_come_from_a_bounded_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = counts(400, 30, seed=6)
    adata = ad.AnnData(X=sp.csc_matrix(x))
    adata.write_zarr(tmp_path / "csc.zarr")
    monkeypatch.setenv("CYTEARC_ANNDATA_PIECE_ENTRIES", "200")
    matrix = AnnDataContainer.open(tmp_path / "csc.zarr").matrix()
    assert isinstance(matrix, SparseMatrixElement) and matrix.format == "csc"
    bands = [band for _, _, band in matrix.iter_bands("rows", 50)]
    np.testing.assert_array_equal(sp.vstack(bands).toarray(), x.toarray())
    # the transpose read pieces of at most ~200 entries (or one column), never the matrix
    most_per_column = int(np.diff(sp.csc_matrix(x).indptr).max())
    largest_row_band = max(band.nnz for band in bands)
    assert matrix.stats.largest_band_entries <= max(200, most_per_column, largest_row_band)
    assert matrix.stats.largest_band_entries < x.nnz // 4
    for band in bands:  # the spill keeps each row's columns sorted
        assert band.has_sorted_indices


def test_remote_container_over_s3(pristine: Path, s3_server: Any) -> None:
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from cytearc_vfs.remote.locations import open_location

    local = pristine  # only read: uploaded, and read by anndata
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/modern.zarr"
    options = s3_server.storage_options()
    store = open_location(url, read_only=False, storage_options=options)
    for file in local.rglob("*"):
        if file.is_file():
            key = file.relative_to(local).as_posix()
            sync(store.set(key, default_buffer_prototype().buffer.from_bytes(file.read_bytes())))
    container = AnnDataContainer.open(url, storage_options=options)
    assert container.shape == (N_OBS, N_VAR)
    assert_same(container.obs(), ad.read_zarr(local).obs, "obs")
    np.testing.assert_array_equal(container.matrix("csc")[0:N_OBS].toarray(), counts().toarray())


def test_identity_reads_metadata_only_and_changes_with_it(pristine: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    shutil.copytree(pristine, path)  # edited below
    first = AnnDataContainer.open(path).identity()
    again = AnnDataContainer.open(path).identity()
    assert first["digest"] == again["digest"] and first["zarrFormat"] == 3
    assert "X/indptr" in first["documents"] and "obs/_index" in first["documents"]
    assert AnnDataContainer.open(path).identity("csc")["digest"] != first["digest"]
    root = zarr.open_group(path, mode="r+", use_consolidated=False)
    root["X"].attrs["shape"] = [N_OBS, N_VAR]  # same value: same identity
    assert AnnDataContainer.open(path).identity()["digest"] == first["digest"]
    root["obs"].attrs["note"] = "edited"
    assert AnnDataContainer.open(path).identity()["digest"] != first["digest"]


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
@pytest.mark.parametrize("zarr_format", FORMATS)
def test_legacy_text_forms_and_labels_without_a_pointer(tmp_path: Path, zarr_format: int) -> None:
    """Fixed-width text (``<U``, ``|S``) reads as str; a 0.1.0 column whose labels sit in
    ``__categories/<column>`` but lost its ``categories`` attribute is still categorical."""
    root = zarr.open_group(tmp_path / "t.zarr", mode="w", zarr_format=zarr_format)
    obs = root.create_group("obs")
    obs.attrs.update(
        {
            "_index": "_index",
            "column-order": ["kind"],
            "encoding-type": "dataframe",
            "encoding-version": "0.1.0",
        }
    )
    obs.create_array("_index", data=np.array(["c0", "c1", "c2"], dtype="<U2"))
    obs.create_array("kind", data=np.array([1, 0, 1], dtype=np.int8))
    obs.create_group("__categories").create_array("kind", data=np.array(["x", "y"], dtype="<U1"))
    var = root.create_group("var", attributes={"_index": "_index", "column-order": []})
    var.create_array("_index", data=np.array([b"g0", b"g1"], dtype="S2"))
    root.create_array("X", data=np.zeros((3, 2), dtype=np.float32))
    uns = root.create_group("uns")
    title = uns.create_array("title", shape=(), dtype="<U9")
    title[()] = "fixed-len"
    title.attrs.update({"encoding-type": "string", "encoding-version": "0.2.0"})
    container = AnnDataContainer.open(tmp_path / "t.zarr")
    obs_frame = container.obs()
    assert list(obs_frame.index) == ["c0", "c1", "c2"]
    assert list(obs_frame["kind"]) == ["y", "x", "y"]
    assert list(container.var().index) == ["g0", "g1"]
    assert container.read("uns/title") == "fixed-len"
    assert container.shape == (3, 2)


def test_docstring_examples_of_the_element_layer() -> None:
    import doctest
    import importlib
    import pkgutil

    import cytearc_vfs_adapters.anndata as package

    for info in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
        result = doctest.testmod(importlib.import_module(info.name))
        assert result.failed == 0, info.name
