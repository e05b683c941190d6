"""AnnData Zarr stores as composite sources, read where they are (issue 16 part 2).

Sources are written by anndata itself (Zarr v2 and v3; X as CSR, CSC or
dense; a layer), beside CyteArc stores. Every read equals
``anndata.concat(join="outer")`` of the same AnnData objects; identity checks
fail closed and cost, when nothing changed, no file read and one listing per
remote source; a CSR read of some cells touches only their chunks.
"""

from __future__ import annotations

import collections
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.composite.anndata_records import ANNDATA_SOURCES_PATH
from cytearc_vfs.errors import IdentityMismatchError, RecordShapeError, UnsupportedSourceError
from cytearc_vfs.format.tables import read_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

GENES = [f"g{i:03d}" for i in range(60)]


def adata(
    n_cells: int, genes: list[str], prefix: str, *, seed: int, encoding: str = "csr"
) -> ad.AnnData:
    """An AnnData of integral float32 counts, X encoded as ``encoding``."""
    matrix = realistic_counts(n_cells, len(genes), density=0.15, seed=seed)
    x: Any = {"csr": sp.csr_matrix, "csc": sp.csc_matrix}.get(encoding, lambda m: m.toarray())(
        matrix
    )
    result = ad.AnnData(X=x)
    result.obs_names = [f"{prefix}{i}" for i in range(n_cells)]
    result.var_names = genes
    return result


write = write_anndata_zarr


def dense(data: ad.AnnData, features: list[str]) -> np.ndarray:
    x = data[:, features].X
    return np.asarray(x.toarray() if sp.issparse(x) else x)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ad.AnnData]:
    """Five sources: CSR v3, CSC v2, dense v3, a CSR v2 layer, a CyteArc store.

    Written once for the module: the tests only read them (each composite goes to
    the test's own directory), and ``expected`` is only indexed."""
    tmp_path = tmp_path_factory.mktemp("mixed")
    parts = {
        "csr3": adata(300, GENES[:40], "a", seed=1),
        "csc2": adata(200, GENES[20:], "b", seed=2, encoding="csc"),
        "dense3": adata(150, GENES[10:50], "c", seed=3, encoding="dense"),
        "layer2": adata(120, GENES[5:45], "d", seed=4),
        "cytearc": adata(100, GENES[::2], "e", seed=5),
    }
    layered = parts["layer2"].copy()
    layered.layers["counts"] = layered.X.copy()
    layered.X = layered.X * 0.5  # fractional X: only the layer holds counts
    sources: dict[str, Any] = {
        "csr3": write(parts["csr3"], tmp_path / "csr3.zarr", 3),
        "csc2": write(parts["csc2"], tmp_path / "csc2.zarr", 2),
        "dense3": write(parts["dense3"], tmp_path / "dense3.zarr", 3),
        "layer2": write(layered, tmp_path / "layer2.zarr", 2),
    }
    cv.write_counts(tmp_path / "cytearc.zarr", parts["cytearc"])
    sources["cytearc"] = tmp_path / "cytearc.zarr"
    expected = ad.concat(list(parts.values()), join="outer")
    return sources, expected


def create(tmp_path: Path, sources: dict[str, Any], **options: Any) -> cv.CompositeStore:
    return cv.create_composite(
        tmp_path / "comp.zarr", sources, source_layers={"layer2": "counts"}, **options
    )


# ------------------------------------------------------------ equal values


def test_a_mixed_composite_equals_anndata_concat(tmp_path: Path, mixed: Any) -> None:
    sources, expected = mixed
    create(tmp_path, sources).close()
    store = cv.open_store(tmp_path / "comp.zarr")
    reader = store.reader()
    features = list(reader.feature_ids)
    assert sorted(features) == sorted(expected.var_names)
    assert list(reader.cell_ids) == list(expected.obs_names)
    truth = dense(expected, features)
    assert reader.dtype == np.uint8  # float32 sources holding small whole counts
    np.testing.assert_array_equal(reader.read(), truth)
    rng = np.random.default_rng(0)
    cells = rng.choice(len(truth), 200, replace=True)  # any order, repeats
    genes = rng.choice(len(features), 17, replace=True)
    np.testing.assert_array_equal(reader.read(cells), truth[cells])
    np.testing.assert_array_equal(reader.read(None, genes), truth[:, genes])
    np.testing.assert_array_equal(reader.read(cells, genes), truth[np.ix_(cells, genes)])
    np.testing.assert_array_equal(reader.read(slice(250, 700), slice(3, 40)), truth[250:700, 3:40])
    # plain zarr over the computed chunks, both orientations
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/counts", mode="r")[:], truth)
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/countsT", mode="r")[:], truth.T)
    store.close()


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("encoding", ["csr", "csc", "dense"])
def test_every_encoding_in_both_formats(tmp_path: Path, encoding: str, zarr_format: int) -> None:
    data = adata(80, GENES[:25], "a", seed=9, encoding=encoding)
    data.X = data.X.astype(np.int32)  # integer counts are read in their dtype
    path = write(data, tmp_path / "a.zarr", zarr_format)
    store = cv.create_composite(tmp_path / "c.zarr", {"a": path})
    reader = store.reader()
    assert reader.dtype == np.int32
    truth = dense(data, list(reader.feature_ids))
    np.testing.assert_array_equal(reader.read(), truth)
    np.testing.assert_array_equal(
        reader.read([70, 3, 3], [24, 0]), truth[np.ix_([70, 3, 3], [24, 0])]
    )
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/countsT", mode="r")[:], truth.T)
    store.close()


def test_a_legacy_sparse_group_is_read(tmp_path: Path) -> None:
    """anndata 0.7 wrote sparse X with ``h5sparse_format``/``h5sparse_shape``, no root attributes."""
    data = adata(40, GENES[:12], "a", seed=10)
    path = write(data, tmp_path / "a.zarr", 2)
    root = zarr.open_group(path, mode="r+", zarr_format=2)
    root.attrs.clear()
    x = root["X"]
    x.attrs.clear()
    x.attrs.update({"h5sparse_format": "csr", "h5sparse_shape": list(data.shape)})
    store = cv.create_composite(tmp_path / "c.zarr", {"a": path})
    np.testing.assert_array_equal(store.reader().read(), dense(data, GENES[:12]))
    store.close()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_the_legacy_layout_is_a_source_in_both_formats(tmp_path: Path, zarr_format: int) -> None:
    """A root without attributes holding obs: what ``anndata ls`` and ``write`` read as the
    legacy layout in either format (v3 was taken for a CyteArc store: "assay 'RNA' does not
    exist")."""
    from anndata_fixtures import legacy_expected, write_legacy

    write_legacy(tmp_path / "old.zarr", zarr_format)
    store = cv.create_composite(tmp_path / "c.zarr", {"old": tmp_path / "old.zarr"})
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(), legacy_expected()["X"])
    assert list(reader.cell_ids) == list(legacy_expected()["obs"].index)
    store.close()


def test_the_composite_records_anndata_sources_beside_the_record(
    tmp_path: Path, mixed: Any
) -> None:
    sources, _ = mixed
    store = create(tmp_path, sources)
    record = store.record
    assert {s.name for s in record.sources} == set(sources)
    root = zarr.open_group(tmp_path / "comp.zarr", mode="r")
    entries = __import__("json").loads(bytes(np.asarray(root[ANNDATA_SOURCES_PATH][:])))
    assert set(entries) == {"csr3", "csc2", "dense3", "layer2"}
    assert entries["layer2"]["element"] == "layers/counts"
    assert [entries[n]["encoding"] for n in ("csr3", "csc2", "dense3")] == [
        "csr_matrix",
        "csc_matrix",
        "array",
    ]
    assert entries["csc2"]["zarrFormat"] == 2
    # summaries were computed by reading the AnnData sources
    values = store.reader().read()
    summaries = root["RNA/countSummaries"]
    np.testing.assert_array_equal(summaries["rowSums"][:], values.sum(axis=1))
    np.testing.assert_array_equal(summaries["rowPositive"][:], (values > 0).sum(axis=1))
    np.testing.assert_array_equal(summaries["columnPositive"][:], (values > 0).sum(axis=0))
    store.close()


def test_intersection_and_cell_selection(tmp_path: Path, mixed: Any) -> None:
    sources, expected = mixed
    store = create(tmp_path, sources, features="intersection", cells={"csr3": [5, 1, 200]})
    reader = store.reader()
    features = list(reader.feature_ids)
    common = set(GENES[20:40]) & set(GENES[::2])
    assert set(features) == common
    kept = [n for n in expected.obs_names if not n.startswith("a")]
    keep = ["a5", "a1", "a200", *kept]
    np.testing.assert_array_equal(reader.read(), dense(expected[keep], features))
    store.close()


def test_the_command_line_composes_anndata_sources(
    tmp_path: Path, mixed: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytearc_vfs.cli import main

    sources, expected = mixed
    arguments = [f"{name}={path}" for name, path in sources.items()]
    code = main(["composite", str(tmp_path / "cli.zarr"), *arguments, "--layer", "layer2=counts"])
    assert code == 0, capsys.readouterr()
    reader = cv.open_store(tmp_path / "cli.zarr").reader()
    np.testing.assert_array_equal(reader.read(), dense(expected, list(reader.feature_ids)))
    assert (
        main(["composite", str(tmp_path / "x.zarr"), str(sources["csr3"]), "--layer", "x=y"]) == 2
    )


# ------------------------------------------------------------ refusals


def test_fractional_counts_are_refused_naming_the_layer_remedy(tmp_path: Path) -> None:
    data = adata(30, GENES[:10], "a", seed=1)
    counts = data.X.copy()
    data.X = data.X * 0.5
    write(data, tmp_path / "a.zarr", 3)
    # no layer to take counts from: the remedy was --layer a=counts, a layer it lacks
    with pytest.raises(
        UnsupportedSourceError,
        match=r"fractional .*The store holds no raw/X or other layer to take them from: "
        r"import counts from elsewhere with cv\.write_counts",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    assert not (tmp_path / "c.zarr").exists() or not any((tmp_path / "c.zarr").iterdir())
    # the store's own layers are the choices, named as they are
    data.layers["spliced"] = counts
    data.layers["raw_counts"] = counts
    write(data, tmp_path / "b.zarr", 3)
    with pytest.raises(
        UnsupportedSourceError,
        match=r"fractional .*Give the one of 'raw_counts', 'spliced' that holds its raw "
        r"counts, with source_layers=\{'b': 'raw_counts'\}, or import",
    ):
        cv.create_composite(tmp_path / "d.zarr", {"b": tmp_path / "b.zarr"})


@pytest.mark.parametrize("axis", ["var", "obs"])
def test_repeated_ids_in_an_anndata_source_are_refused_by_name(tmp_path: Path, axis: str) -> None:
    """anndata writes repeated var (or obs) names; a composite would keep one column of each."""
    data = adata(30, GENES[:10], "a", seed=1)
    if axis == "var":
        data.var_names = [GENES[0], *GENES[:9]]  # g000 twice
    else:
        data.obs_names = ["a0", *[f"a{i}" for i in range(29)]]  # a0 twice
    write(data, tmp_path / "a.zarr", 3)
    what, repeated = ("feature", "g000") if axis == "var" else ("cell", "a0")
    with pytest.raises(
        ValueError,
        match=rf"source 'a': 1 {what} id\(s\) repeat \(first: '{repeated}'\).*"
        rf"{axis}_names_make_unique",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    assert not (tmp_path / "c.zarr").exists() or not any((tmp_path / "c.zarr").iterdir())


def test_layer_options_are_checked(tmp_path: Path, mixed: Any) -> None:
    sources, _ = mixed
    with pytest.raises(UnsupportedSourceError, match="has no 'layers/raw'"):
        cv.create_composite(
            tmp_path / "c1.zarr", {"a": sources["csr3"]}, source_layers={"a": "raw"}
        )
    with pytest.raises(ValueError, match="CyteArc store, not an AnnData"):
        cv.create_composite(
            tmp_path / "c2.zarr", {"e": sources["cytearc"]}, source_layers={"e": "counts"}
        )
    with pytest.raises(ValueError, match=r"source_layers names unknown source\(s\) \['b'\]"):
        cv.create_composite(tmp_path / "c3.zarr", {"a": sources["csr3"]}, source_layers={"b": "x"})


# ------------------------------------------------------------ identity


class FileReads:
    """Counts LocalStore reads below ``root`` (the files an open reads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.keys: list[str] = []
        original = LocalStore.get
        prefix = str(root.resolve())

        async def get(store: LocalStore, key: str, *args: Any, **kwargs: Any) -> Any:
            if str(Path(store.root).resolve()).startswith(prefix):
                self.keys.append(key)
            return await original(store, key, *args, **kwargs)

        monkeypatch.setattr(LocalStore, "get", get)


@pytest.fixture(scope="module")
def two_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two AnnData sources of ``two_sources``, written by anndata once for the
    module; no test opens them, each copies them."""
    root = tmp_path_factory.mktemp("two")
    write(adata(400, GENES[:30], "a", seed=1), root / "a.zarr", 3)
    write(adata(300, GENES[10:], "b", seed=2, encoding="csc"), root / "b.zarr", 2)
    return root


def two_sources(tmp_path: Path, written: Path, **options: Any) -> tuple[dict[str, Path], Path]:
    """A copy of the sources ``written`` in ``tmp_path / "src"`` (the tests edit, move
    or count reads of it), and a composite over the copy, created after it (with
    ``options`` of ``create_composite``)."""
    shutil.copytree(written, tmp_path / "src")
    sources = {"a": tmp_path / "src" / "a.zarr", "b": tmp_path / "src" / "b.zarr"}
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, sources, **options).close()
    return sources, location


def check_fails_closed(location: Path, sources: dict[str, Path], edit: Any, part: str) -> None:
    """After ``edit(sources)``, the open of the composite at ``location`` fails closed,
    its message naming only what changed (``part``), in AnnData's words."""
    edit(sources)
    with pytest.raises(
        IdentityMismatchError, match=rf"changed after the composite was created {part}.*recreate"
    ):
        cv.open_store(location)


def test_an_unchanged_source_opens_without_reading_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_written: Path
) -> None:
    _, location = two_sources(tmp_path, two_written)
    reads = FileReads(monkeypatch, tmp_path / "src")
    store = cv.open_store(location)
    assert reads.keys == []  # stats of directories, documents and a sample; no read
    store.reader().read([0, 500])
    assert reads.keys  # reads do read the sources
    store.close()


def test_a_touched_but_equal_source_is_digested_again_and_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_written: Path
) -> None:
    sources, location = two_sources(tmp_path, two_written)
    chunk = next(
        p for p in (sources["a"] / "X" / "data").rglob("*") if p.is_file() and p.name != "zarr.json"
    )
    chunk.write_bytes(chunk.read_bytes())  # same bytes, new version
    reads = FileReads(monkeypatch, tmp_path / "src")
    store = cv.open_store(location)
    assert any(key.startswith("X/data/") for key in reads.keys)  # recomputed from the bytes
    store.close()


def test_a_changed_obs_document_costs_no_digest_of_x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_written: Path
) -> None:
    sources, location = two_sources(tmp_path, two_written)
    obs = zarr.open_group(sources["a"] / "obs", mode="r+")
    obs.attrs["note"] = "a new obs attribute (as a new column rewrites obs's document)"
    reads = FileReads(monkeypatch, tmp_path / "src")
    store = cv.open_store(location)
    # the documents are read again to parse the element; no chunk is digested
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert reads.keys
    assert [key for key in reads.keys if not key.endswith(documents)] == []
    store.close()


def edit_first_value(store: Path, array: str) -> None:
    """Add one to the first value of ``array`` (``X/data``) of the AnnData store at
    ``store``, through zarr (its chunk is rewritten, resized)."""
    values = zarr.open_group(store, mode="r+")[array]
    assert isinstance(values, zarr.Array)
    stored = values[:]
    stored[0] += 1
    values[:] = stored


def rename_in_index(store: Path, index: str) -> None:
    """Rename the fourth id of the index column ``index`` (``obs/_index``) of the Zarr v2
    AnnData store at ``store`` (a string array, or a nullable one's ``values``)."""
    column = zarr.open_group(store, mode="r+", zarr_format=2)[index]
    values = column["values"] if isinstance(column, zarr.Group) else column
    assert isinstance(values, zarr.Array)
    names = values[:]
    names[3] = "renamed"
    values[:] = names


def reverse_file(path: Path) -> None:
    """Replace the file at ``path`` by its bytes reversed: same size, other bytes."""
    path.write_bytes(bytes(reversed(path.read_bytes())))


def _edit_data(sources: dict[str, Path]) -> None:
    edit_first_value(sources["a"], "X/data")


def _edit_obs_index(sources: dict[str, Path]) -> None:
    rename_in_index(sources["b"], "obs/_index")


def _replace_equal_size(sources: dict[str, Path]) -> None:
    # a chunk of b's indices (Zarr v2) replaced by a file of the same size
    reverse_file(sources["b"] / "X" / "indices" / "0")


@pytest.mark.parametrize(
    ("edit", "part"),
    [
        # resized objects: the digest cannot match, so none is computed
        (_edit_data, r"\(the counts \(X\): recorded sha256:\w+, now changed: 1 object"),
        (_edit_obs_index, r"\(the obs index \(cell ids\): recorded sha256:\w+, now changed"),
        (_replace_equal_size, r"\(the counts \(X\): recorded"),
    ],
)
def test_a_changed_anndata_source_fails_closed(
    tmp_path: Path, edit: Any, part: str, two_written: Path
) -> None:
    sources, location = two_sources(tmp_path, two_written)
    check_fails_closed(location, sources, edit, part)


def test_a_resized_object_fails_closed_without_reading_the_element(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_written: Path
) -> None:
    """An object of X added, removed or resized cannot give the recorded digest (it
    covers every key and length): the open fails from the listing and the
    documents, whatever the size of X."""
    sources, location = two_sources(tmp_path, two_written)
    _edit_data(sources)
    reads = FileReads(monkeypatch, tmp_path / "src")
    with pytest.raises(IdentityMismatchError, match=r"'X/data/c/0' \(\d+ -> \d+ bytes\)"):
        cv.open_store(location)
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert [key for key in reads.keys if not key.endswith(documents)] == []


def test_an_edited_anndata_record_is_refused(tmp_path: Path, two_written: Path) -> None:
    _, location = two_sources(tmp_path, two_written)
    array = zarr.open_array(location, path=ANNDATA_SOURCES_PATH, mode="r+")
    values = array[:]
    values[-2] = ord(" ")
    array[:] = values
    with pytest.raises((IdentityMismatchError, RecordShapeError), match="anndataSources"):
        cv.open_store(location)


# ------------------------------------------------------------ costs


def test_a_csr_read_of_some_cells_touches_only_their_chunks(tmp_path: Path) -> None:
    n_cells = 20_000
    data = adata(n_cells, GENES, "a", seed=7)
    path = write(data, tmp_path / "a.zarr", 2)
    # small chunks, so a selection touches few of many
    group = zarr.open_group(path, mode="r")
    chunk = {name: group[f"X/{name}"].chunks[0] for name in ("indptr", "indices", "data")}
    nnz = group["X/data"].shape[0]
    cv.create_composite(tmp_path / "c.zarr", {"a": path}).close()
    # opened afresh: a reader keeps the indptr chunks it decoded (creation read them all)
    store = cv.open_store(tmp_path / "c.zarr")
    reader = store.reader()
    rng = np.random.default_rng(3)
    cells = np.sort(rng.choice(n_cells, 1000, replace=False))
    reader.reset_stats()
    block = reader.read(cells)
    np.testing.assert_array_equal(block, dense(data, list(reader.feature_ids))[cells])
    indptr = data.X.indptr
    bounds = np.unique(np.concatenate([cells, cells + 1]))
    positions = np.concatenate([np.arange(indptr[c], indptr[c + 1]) for c in cells])
    expected = (
        len(np.unique(bounds // chunk["indptr"]))
        + len(np.unique(positions // chunk["indices"]))
        + len(np.unique(positions // chunk["data"]))
    )
    stats = reader.stats
    assert stats.chunks_decoded == expected
    assert stats.requests == expected  # one file per touched chunk, nothing else
    whole = 3 * -(-nnz // chunk["data"]) + -(-(n_cells + 1) // chunk["indptr"])
    assert expected <= whole
    store.close()


# ------------------------------------------------------------ remote


def remote_parts() -> dict[str, ad.AnnData]:
    """The two AnnData sources the remote tests upload (zarr v3 CSR, v2 CSC), with obs
    and var columns: here and in ``test_anndata_remote_faults``."""
    parts = {
        "r3": adata(500, GENES[:40], "a", seed=11),
        "r2": adata(300, GENES[20:], "b", seed=12, encoding="csc"),
    }
    rng = np.random.default_rng(13)
    parts["r3"].obs["kind"] = pd.Categorical(rng.choice(["t", "b", "nk"], 500))
    parts["r3"].obs["depth"] = rng.random(500)
    parts["r2"].obs["depth"] = rng.random(300)
    parts["r2"].var["symbol"] = [f"S{i}" for i in range(parts["r2"].n_vars)]
    return parts


def upload(bucket: Any, local: Path) -> None:
    """Put every file of the store at ``local`` into ``bucket`` (an obstore store) under
    the store's name."""
    import obstore

    for file in local.rglob("*"):
        if file.is_file():
            obstore.put(
                bucket, f"{local.name}/{file.relative_to(local).as_posix()}", file.read_bytes()
            )


@pytest.fixture
def remote_anndata(s3_server: S3Server, tmp_path: Path) -> Iterator[dict[str, Any]]:
    from obstore.store import from_url

    proxy = LoopbackProxy(s3_server.endpoint)
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **direct)
    parts = remote_parts()
    for name, data in parts.items():
        upload(raw, write(data, tmp_path / f"{name}.zarr", int(name[1])))
    try:
        yield {
            "sources": {name: f"s3://{bucket}/{name}.zarr" for name in parts},
            "options": {name: {**direct, "endpoint": proxy.endpoint} for name in parts},
            "expected": ad.concat(list(parts.values()), join="outer"),
            "proxy": proxy,
            "raw": raw,
            "bucket": bucket,
        }
    finally:
        proxy.close()


@pytest.mark.remote
def test_remote_anndata_sources_read_equal_and_open_with_one_listing(
    remote_anndata: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore

    from cytearc_vfs.composite import anndata_columns

    location = tmp_path / "c.zarr"
    options = remote_anndata["options"]
    proxy = remote_anndata["proxy"]

    def table_requests(destination: Path) -> list[str]:
        proxy.take()
        cv.create_composite(
            destination, remote_anndata["sources"], source_storage_options=options
        ).close()
        seen = proxy.take()
        return [r.path.split("?")[0] for r in seen if "/obs/" in r.path or "/var/" in r.path]

    # the obs and var columns are carried: reading them costs at most one GET per
    # object under obs/ and var/ (fetched concurrently; some documents and the
    # indexes the binding read are held), every column chunk among them, nothing else
    with monkeypatch.context() as patch:
        patch.setattr(anndata_columns, "_tables_reader", lambda: None)
        without = table_requests(tmp_path / "without.zarr")
    with_tables = table_requests(location)
    raw = remote_anndata["raw"]
    objects = [
        f"/{remote_anndata['bucket']}/{entry['path']}"
        for prefix in ("r3.zarr/obs/", "r3.zarr/var/", "r2.zarr/obs/", "r2.zarr/var/")
        for batch in obstore.list(raw, prefix=prefix)
        for entry in batch
    ]
    extra = collections.Counter(with_tables) - collections.Counter(without)
    assert set(extra) <= set(objects) and set(extra.values()) == {1}
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    columns = [key for key in objects if not key.endswith(documents) and "/_index/" not in key]
    assert columns and set(columns) <= set(extra)
    opened = cv.open_store(location, source_storage_options=options)
    table = read_table(zarr.open_group(opened, mode="r")["cellData"])
    opened.close()
    expected_obs = remote_anndata["expected"].obs
    assert table["kind"].tolist() == expected_obs["kind"].astype(object).fillna("").tolist()
    np.testing.assert_allclose(table["depth"], expected_obs["depth"])
    proxy.take()
    store = cv.open_store(location, source_storage_options=options)
    seen = proxy.take()
    assert len(seen) == 2 and all("list-type" in request.path for request in seen)
    reader = store.reader()
    truth = dense(remote_anndata["expected"], list(reader.feature_ids))
    np.testing.assert_array_equal(reader.read(), truth)
    cells = np.random.default_rng(1).choice(len(truth), 50, replace=False)
    np.testing.assert_array_equal(reader.read(cells, [0, 5, 9]), truth[np.ix_(cells, [0, 5, 9])])
    np.testing.assert_array_equal(reader.read_sparse().toarray(), truth)
    np.testing.assert_array_equal(reader.read_sparse(cells).toarray(), truth[cells])
    store.close()
    # an object replaced after creation (same size) fails closed
    raw = remote_anndata["raw"]
    key = "r3.zarr/X/indices/zarr.json"
    document = bytes(obstore.get(raw, key).bytes())
    obstore.put(raw, key, document.replace(b'"fill_value": 0', b'"fill_value": 1'))
    with pytest.raises(IdentityMismatchError, match="'r3'"):
        cv.open_store(location, source_storage_options=options)


def test_sources_copy_elsewhere_still_open(tmp_path: Path, two_written: Path) -> None:
    """A copy keeps the bytes: versions differ, the digests match, the open succeeds."""
    _, location = two_sources(tmp_path, two_written)
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "src", moved)
    shutil.rmtree(tmp_path / "src")
    os.rename(moved, tmp_path / "src")
    store = cv.open_store(location)
    assert store.reader().read([1, 2]).shape == (2, len(store.reader().feature_ids))
    store.close()
