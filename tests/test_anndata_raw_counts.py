"""The raw counts of an AnnData (``raw/X``, features ``raw/var``), named ``"raw/X"``.

Many AnnData files (every CELLxGENE download) keep normalized values in ``X``
and the counts in ``raw.X``, whose ``raw.var`` may list more features than
``var``. ``"raw/X"`` selects them wherever a layer can be named: a composite
source (``source_layers``, ``--layer NAME=raw/X``) and ``write_counts``
(``layer=``, ``cytearc-vfs write --layer raw/X``). Everything is compared with
``AnnData(X=a.raw.X, obs=a.obs, var=a.raw.var)``, as anndata reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.anndata import AnnDataContainer
from s3_server import S3Server
from test_anndata_open_cost import FilesystemCalls
from test_anndata_sources import (
    GENES,
    FileReads,
    adata,
    check_fails_closed,
    dense,
    edit_first_value,
    rename_in_index,
    reverse_file,
    two_sources,
    upload,
    write,
)

import cytearc_vfs as cv
from cytearc_vfs.errors import IdentityMismatchError, UnsupportedSourceError
from cytearc_vfs.format.tables import read_table
from cytearc_vfs.read import anndata_identity

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def with_raw(
    n_cells: int, genes: list[str], prefix: str, *, seed: int, encoding: str = "csr"
) -> ad.AnnData:
    """An AnnData as CELLxGENE ships one: fractional values in ``X`` over every other
    gene, the whole counts in ``raw.X`` over all of ``genes`` (``raw.X`` encoded as
    ``encoding``), and a ``raw.var`` column that ``var`` does not have."""
    counts = adata(n_cells, genes, prefix, seed=seed, encoding=encoding)
    counts.var["symbol"] = [f"S-{gene}" for gene in genes]
    counts.obs["depth"] = np.arange(n_cells, dtype=np.float64)
    full = counts.copy()
    full.raw = counts
    kept = full[:, genes[::2]].copy()  # raw keeps every gene
    x = kept.X
    normalized = (x.toarray() if sp.issparse(x) else np.asarray(x)) * 0.5 + 0.25
    kept.X = sp.csr_matrix(normalized.astype(np.float32))
    kept.var["highly_variable"] = np.arange(kept.n_vars) % 2 == 0
    return kept


def raw_view(data: ad.AnnData) -> ad.AnnData:
    """What ``"raw/X"`` selects, as anndata reads it."""
    assert data.raw is not None
    return ad.AnnData(X=data.raw.X, obs=data.obs, var=data.raw.var)


@pytest.fixture(scope="module")
def raw_mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ad.AnnData]:
    """Five sources: raw counts in CSR v2, CSR v3, CSC v3 and dense v2, and a CyteArc store."""
    root = tmp_path_factory.mktemp("raw_mixed")
    parts = {
        "csr2": with_raw(120, GENES[:40], "a", seed=1),
        "csr3": with_raw(150, GENES[20:], "b", seed=2),
        "csc3": with_raw(90, GENES[10:50], "c", seed=3, encoding="csc"),
        "dense2": with_raw(60, GENES[5:35], "d", seed=4, encoding="dense"),
    }
    sources: dict[str, Any] = {
        name: write(data, root / f"{name}.zarr", int(name[-1])) for name, data in parts.items()
    }
    cytearc = adata(70, GENES[::3], "e", seed=5)
    cv.write_counts(root / "cytearc.zarr", cytearc)
    sources["cytearc"] = root / "cytearc.zarr"
    expected = ad.concat([*(raw_view(p) for p in parts.values()), cytearc], join="outer")
    return sources, expected


RAW_LAYERS = {name: "raw/X" for name in ("csr2", "csr3", "csc3", "dense2")}


def test_a_composite_over_raw_counts_equals_anndata_concat(tmp_path: Path, raw_mixed: Any) -> None:
    sources, expected = raw_mixed
    cv.create_composite(tmp_path / "c.zarr", sources, source_layers=RAW_LAYERS).close()
    store = cv.open_store(tmp_path / "c.zarr")
    reader = store.reader()
    features = list(reader.feature_ids)
    # raw.var lists every gene, var only every other one: the union is raw.var's
    assert sorted(features) == sorted(expected.var_names)
    assert list(reader.cell_ids) == list(expected.obs_names)
    truth = dense(expected, features)
    np.testing.assert_array_equal(reader.read(), truth)
    rng = np.random.default_rng(0)
    cells = rng.choice(len(truth), 120, replace=True)
    genes = rng.choice(len(features), 13, replace=True)
    np.testing.assert_array_equal(reader.read(cells, genes), truth[np.ix_(cells, genes)])
    np.testing.assert_array_equal(reader.read_sparse(cells).toarray(), truth[cells])
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/counts", mode="r")[:], truth)
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/countsT", mode="r")[:], truth.T)
    # the feature table carries raw.var's columns (not var's), the cell table obs's
    group = zarr.open_group(store, mode="r")
    table = read_table(group["RNA/featureData"])
    assert "symbol" in table.columns and "highly_variable" not in table.columns
    # every gene is in some source's raw.var, which names it S-{gene}
    assert list(table["symbol"]) == [f"S-{gene}" for gene in table.index]
    cells_table = read_table(group["cellData"])
    depth = expected.obs["depth"].to_numpy()
    np.testing.assert_array_equal(cells_table["depth"], depth)  # NaN for the CyteArc cells
    store.close()
    loaded = cv.to_anndata(tmp_path / "c.zarr", lazy=False)
    assert list(loaded.obs_names) == list(expected.obs_names)
    np.testing.assert_array_equal(
        np.asarray(loaded.X.toarray()), dense(expected, list(loaded.var_names))
    )


def test_the_command_line_composes_raw_counts(
    tmp_path: Path, raw_mixed: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytearc_vfs.cli import main

    sources, expected = raw_mixed
    arguments = [f"{name}={path}" for name, path in sources.items()]
    layers = [option for name in RAW_LAYERS for option in ("--layer", f"{name}=raw/X")]
    code = main(["composite", str(tmp_path / "cli.zarr"), *arguments, *layers])
    assert code == 0, capsys.readouterr()
    reader = cv.open_store(tmp_path / "cli.zarr").reader()
    np.testing.assert_array_equal(reader.read(), dense(expected, list(reader.feature_ids)))


def _legacy(path: Path, zarr_format: int) -> Path:
    """The layout of anndata 0.7, made from a current store: no root or ``raw``
    attributes, ``raw/X`` an ``h5sparse`` group, ``raw/var`` a dataframe without
    encoding attributes (only ``_index`` and ``column-order``)."""
    root = zarr.open_group(path, mode="r+", zarr_format=zarr_format, use_consolidated=False)
    for node in (root, root["raw"]):
        node.attrs.clear()
    x = root["raw/X"]
    shape = list(x.attrs["shape"])
    x.attrs.clear()
    x.attrs.update({"h5sparse_format": "csr", "h5sparse_shape": shape})
    var = root["raw/var"]
    kept = {key: var.attrs[key] for key in ("_index", "column-order")}
    var.attrs.clear()
    var.attrs.update(kept)
    if zarr_format == 3:
        zarr.consolidate_metadata(path)
    return path


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_raw_counts_of_the_legacy_layout_are_a_source(tmp_path: Path, zarr_format: int) -> None:
    data = with_raw(50, GENES[:20], "a", seed=6)
    path = _legacy(write(data, tmp_path / "old.zarr", zarr_format), zarr_format)
    assert AnnDataContainer.open(path).encoding_of("raw").legacy
    store = cv.create_composite(tmp_path / "c.zarr", {"old": path}, source_layers={"old": "raw/X"})
    reader = store.reader()
    assert list(reader.feature_ids) == GENES[:20]
    np.testing.assert_array_equal(reader.read(), dense(raw_view(data), GENES[:20]))
    table = read_table(zarr.open_group(store, mode="r")["RNA/featureData"])
    assert list(table["symbol"]) == [f"S-{gene}" for gene in GENES[:20]]
    store.close()
    written = cv.write_counts(tmp_path / "w.zarr", path, layer="raw/X")
    assert (
        written.dataset_fingerprint
        == cv.write_counts(tmp_path / "m.zarr", raw_view(data)).dataset_fingerprint
    )


def test_a_layer_named_raw_keeps_meaning_that_layer(tmp_path: Path) -> None:
    data = with_raw(40, GENES[:16], "a", seed=7)
    data.layers["raw"] = sp.csr_matrix(np.full(data.shape, 3, dtype=np.int32))
    path = write(data, tmp_path / "a.zarr", 3)
    store = cv.create_composite(tmp_path / "c.zarr", {"a": path}, source_layers={"a": "raw"})
    assert list(store.reader().feature_ids) == GENES[:16:2]
    np.testing.assert_array_equal(store.reader().read(), np.full(data.shape, 3))
    store.close()
    info = cv.write_counts(tmp_path / "w.zarr", path, layer="raw")
    np.testing.assert_array_equal(cv.VirtualArrayReader(info.location).read(), 3)


# ------------------------------------------------------------ refusals


def test_raw_counts_asked_of_a_store_without_raw_are_refused_naming_what_it_holds(
    tmp_path: Path,
) -> None:
    data = adata(30, GENES[:10], "a", seed=1)
    data.layers["counts"] = data.X.copy()
    path = write(data, tmp_path / "a.zarr", 2)
    with pytest.raises(
        UnsupportedSourceError,
        match=r"has no 'raw/X' \(the AnnData has no raw counts: no raw/X\); it holds X and the "
        r"layers 'counts'\. Name a layer with source_layers=\{'a': LAYER\}",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"a": path}, source_layers={"a": "raw/X"})
    with pytest.raises(KeyError, match=r"has no raw counts .*its layers are \['counts'\]"):
        cv.write_counts(tmp_path / "w.zarr", path, layer="raw/X")
    with pytest.raises(KeyError, match=r"adata.raw is None.*its layers are \['counts'\]"):
        cv.write_counts(tmp_path / "m.zarr", data, layer="raw/X")
    for leftover in ("c.zarr", "w.zarr", "m.zarr"):
        assert not (tmp_path / leftover).exists() or not any((tmp_path / leftover).iterdir())


def test_messages_name_raw_counts_among_the_choices(tmp_path: Path) -> None:
    data = with_raw(30, GENES[:10], "a", seed=2)
    path = write(data, tmp_path / "a.zarr", 3)
    # the fractional X of a CELLxGENE file: the remedy is the store's raw/X
    with pytest.raises(
        UnsupportedSourceError,
        match=r"X holds fractional float32 values.*source_layers=\{'a': 'raw/X'\}, or import",
    ):
        cv.create_composite(tmp_path / "c1.zarr", {"a": path})
    with pytest.raises(
        UnsupportedSourceError,
        match=r"has no 'layers/counts'; it holds X, raw/X and no layers\. .*"
        r"or source_layers=\{'a': 'raw/X'\} for the raw counts, "
        r"or leave out source_layers=\{'a': LAYER\} to read X",
    ):
        cv.create_composite(tmp_path / "c2.zarr", {"a": path}, source_layers={"a": "counts"})
    for counts in (path, data):
        with pytest.raises(KeyError, match=r"no layer 'counts'.*and its raw counts 'raw/X'"):
            cv.write_counts(tmp_path / "w.zarr", counts, layer="counts")
    with pytest.raises(ValueError, match=r"source_layers\['a'\]: 'raw/var' is not the name"):
        cv.create_composite(tmp_path / "c3.zarr", {"a": path}, source_layers={"a": "raw/var"})


@pytest.mark.parametrize("encoding", ["csr", "dense"])
def test_fractional_raw_counts_are_refused_as_a_fractional_x_is(
    tmp_path: Path, encoding: str
) -> None:
    data = with_raw(30, GENES[:10], "a", seed=3, encoding=encoding)
    raw = raw_view(data)
    raw.X = raw.X * 0.5 + 0.25 if encoding == "dense" else raw.X * 0.5
    data.raw = raw
    path = write(data, tmp_path / "a.zarr", 2)
    with pytest.raises(
        UnsupportedSourceError,
        match=r"source 'a' at .*: raw/X holds fractional float32 values; a composite composes "
        r"whole non-negative counts\. The store holds no raw/X or other layer to take them from",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"a": path}, source_layers={"a": "raw/X"})
    assert not (tmp_path / "c.zarr").exists() or not any((tmp_path / "c.zarr").iterdir())


# ------------------------------------------------------------ identity


@pytest.fixture(scope="module")
def raw_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("raw_two")
    write(with_raw(300, GENES[:30], "a", seed=8), root / "a.zarr", 3)
    write(with_raw(200, GENES[10:], "b", seed=9, encoding="csc"), root / "b.zarr", 2)
    return root


def _raw_sources(tmp_path: Path, written: Path) -> tuple[dict[str, Path], Path]:
    """A copy of the two sources, and a composite of their raw counts over it."""
    return two_sources(tmp_path, written, source_layers={"a": "raw/X", "b": "raw/X"})


def test_an_unchanged_raw_source_opens_at_the_cost_of_its_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_written: Path
) -> None:
    _, location = _raw_sources(tmp_path, raw_written)
    with monkeypatch.context() as patch:
        calls = FilesystemCalls(patch, tmp_path / "src")
        reads = FileReads(patch, tmp_path / "src")
        store = cv.open_store(location)
    assert reads.keys == [] and calls.listings == 0  # no file read, no directory listed
    # per source: documents + directories + at most SAMPLED_FILES chunk files per prefix
    assert calls.stats <= 2 * (40 + 3 * anndata_identity.SAMPLED_FILES)
    assert store.reader().read([0]).shape == (1, 60)
    store.close()
    # raw/X and raw/var are what is watched: the recorded entry names them
    payload = zarr.open_array(location, path="_composite/anndataSources", mode="r")[:]
    recorded = __import__("json").loads(bytes(np.asarray(payload)))
    assert recorded["a"]["element"] == "raw/X"
    assert recorded["a"]["varIndex"][0] == "raw/var/_index"
    assert recorded["a"]["prefixes"] == ["raw/X", "obs/_index", "raw/var/_index"]
    assert "raw/zarr.json" in recorded["a"]["documents"]
    assert "raw/var/zarr.json" in recorded["a"]["documents"]
    assert {"raw/.zgroup", "raw/var/.zattrs"} <= set(recorded["b"]["documents"])


def _edit_raw_data(sources: dict[str, Path]) -> None:
    edit_first_value(sources["a"], "raw/X/data")


def _edit_raw_var_index(sources: dict[str, Path]) -> None:
    rename_in_index(sources["b"], "raw/var/_index")


def _replace_raw_equal_size(sources: dict[str, Path]) -> None:
    reverse_file(sources["b"] / "raw" / "X" / "indices" / "0")


@pytest.mark.parametrize(
    ("edit", "part"),
    [
        (_edit_raw_data, r"\(the counts \(raw/X\): recorded sha256:\w+, now changed"),
        (_edit_raw_var_index, r"\(the raw/var index \(feature ids\): recorded sha256:\w+, now"),
        (_replace_raw_equal_size, r"\(the counts \(raw/X\): recorded sha256"),
    ],
)
def test_a_changed_raw_x_or_raw_var_fails_closed(
    tmp_path: Path, edit: Any, part: str, raw_written: Path
) -> None:
    sources, location = _raw_sources(tmp_path, raw_written)
    check_fails_closed(location, sources, edit, part)


def test_a_changed_raw_var_document_is_seen_and_costs_no_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_written: Path
) -> None:
    """raw/var's document is watched as var's is: a new attribute (as a new column
    rewrites it) sends the open to the documents, and no chunk is digested."""
    sources, location = _raw_sources(tmp_path, raw_written)
    raw_var = zarr.open_group(sources["a"] / "raw" / "var", mode="r+")
    raw_var.attrs["note"] = "a new raw/var attribute"
    reads = FileReads(monkeypatch, tmp_path / "src")
    store = cv.open_store(location)
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert "raw/var/zarr.json" in reads.keys
    assert [key for key in reads.keys if not key.endswith(documents)] == []
    store.close()


def test_a_changed_normalized_x_leaves_a_raw_source_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_written: Path
) -> None:
    """X is not what a raw/X source reads: rewriting it costs the open nothing."""
    sources, location = _raw_sources(tmp_path, raw_written)
    expected = cv.open_store(location).reader().read()
    group = zarr.open_group(sources["a"], mode="r+")
    data = group["X/data"]
    data[:] = data[:] * 2
    reads = FileReads(monkeypatch, tmp_path / "src")
    store = cv.open_store(location)
    assert reads.keys == []
    np.testing.assert_array_equal(store.reader().read(), expected)
    store.close()


# ------------------------------------------------------------ remote


@pytest.fixture
def remote_raw(s3_server: S3Server, tmp_path: Path) -> Iterator[dict[str, Any]]:
    from loopback_proxy import LoopbackProxy
    from obstore.store import from_url

    proxy = LoopbackProxy(s3_server.endpoint)
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **direct)
    parts = {
        "r3": with_raw(200, GENES[:40], "a", seed=11),
        "r2": with_raw(150, GENES[20:], "b", seed=12, encoding="csc"),
    }
    for name, data in parts.items():
        upload(raw, write(data, tmp_path / f"{name}.zarr", int(name[1])))
    try:
        yield {
            "sources": {name: f"s3://{bucket}/{name}.zarr" for name in parts},
            "options": {name: {**direct, "endpoint": proxy.endpoint} for name in parts},
            "expected": ad.concat([raw_view(p) for p in parts.values()], join="outer"),
            "proxy": proxy,
            "raw": raw,
        }
    finally:
        proxy.close()


@pytest.mark.remote
@pytest.mark.parametrize(
    ("replaced", "what"),
    [
        ("r3.zarr/raw/X/indices/", r"the counts \(raw/X\): recorded"),
        ("r2.zarr/raw/var/_index/", r"the raw/var index \(feature ids\): recorded"),
    ],
)
def test_remote_raw_sources_read_equal_open_with_one_listing_and_fail_closed(
    remote_raw: dict[str, Any], tmp_path: Path, replaced: str, what: str
) -> None:
    import obstore

    location = tmp_path / "c.zarr"
    options = remote_raw["options"]
    proxy = remote_raw["proxy"]
    layers = {name: "raw/X" for name in remote_raw["sources"]}
    cv.create_composite(
        location, remote_raw["sources"], source_layers=layers, source_storage_options=options
    ).close()
    proxy.take()
    store = cv.open_store(location, source_storage_options=options)
    seen = proxy.take()
    assert len(seen) == 2 and all("list-type" in request.path for request in seen)
    reader = store.reader()
    truth = dense(remote_raw["expected"], list(reader.feature_ids))
    np.testing.assert_array_equal(reader.read(), truth)
    np.testing.assert_array_equal(reader.read_sparse().toarray(), truth)
    store.close()
    # an object of raw/X or of raw/var's index replaced after creation (same size) fails closed
    found = [
        entry["path"]
        for batch in obstore.list(remote_raw["raw"], prefix=replaced)
        for entry in batch
        if not entry["path"].endswith(("zarr.json", ".zarray", ".zattrs", ".zgroup"))
    ]
    key = sorted(found)[0]
    original = bytes(obstore.get(remote_raw["raw"], key).bytes())
    obstore.put(remote_raw["raw"], key, bytes(reversed(original)))
    with pytest.raises(IdentityMismatchError, match=rf"source '{replaced[:2]}'.*{what}"):
        cv.open_store(location, source_storage_options=options)


# ------------------------------------------------------------ write_counts


@pytest.mark.parametrize("encoding", ["csr", "csc", "dense"])
def test_write_counts_of_raw_counts_equals_writing_the_raw_anndata(
    tmp_path: Path, encoding: str
) -> None:
    data = with_raw(120, GENES[:30], "a", seed=13, encoding=encoding)
    reference = cv.write_counts(tmp_path / "ref.zarr", raw_view(data))
    inputs: dict[str, Any] = {
        "memory": data,
        "zarr2": write(data, tmp_path / "a2.zarr", 2),
        "zarr3": write(data, tmp_path / "a3.zarr", 3),
    }
    data.write_h5ad(tmp_path / "a.h5ad")
    inputs["h5ad"] = tmp_path / "a.h5ad"
    for kind, counts in inputs.items():
        info = cv.write_counts(tmp_path / f"{kind}.zarr", counts, layer="raw/X")
        assert info.counts_fingerprint == reference.counts_fingerprint, kind
        assert info.dataset_fingerprint == reference.dataset_fingerprint, kind
        features = read_table(zarr.open_group(info.location, mode="r")["RNA/featureData"])
        assert list(features.index) == GENES[:30]
        assert list(features["symbol"]) == [f"S-{gene}" for gene in GENES[:30]]


@pytest.mark.remote
def test_write_counts_of_remote_raw_counts_equals_writing_the_raw_anndata(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """An AnnData Zarr store with raw on the loopback S3 server, given by its URL."""
    from obstore.store import S3Store

    data = with_raw(150, GENES[:25], "a", seed=19, encoding="csc")
    bucket = s3_server.new_bucket()
    upload(S3Store(bucket, **s3_server.storage_options()), write(data, tmp_path / "r.zarr", 3))
    streamed = cv.write_counts(
        tmp_path / "s.zarr",
        f"s3://{bucket}/r.zarr",
        layer="raw/X",
        source_storage_options=s3_server.storage_options(),
    )
    loaded = cv.write_counts(tmp_path / "l.zarr", raw_view(data))
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint


@pytest.mark.parametrize("kind", ["zarr", "h5ad"])
def test_write_counts_streams_raw_counts_in_bands(tmp_path: Path, kind: str) -> None:
    """A container's raw/X is read in the writer's row bands (counted by the element), never
    whole, as test_anndata_write_counts counts X's."""
    from test_anndata_write_counts import MEM_BUDGET, _band_rows, _largest_band

    data = with_raw(20_000, GENES, "a", seed=14)
    if kind == "zarr":
        path = write(data, tmp_path / "a.zarr", 3)
    else:
        path = tmp_path / "a.h5ad"
        data.write_h5ad(path)
    container = AnnDataContainer.open(path)
    info = cv.write_counts(
        tmp_path / "s.zarr",
        container,
        layer="raw/X",
        layout=(256 * 1024, 32 * 1024),
        mem_budget=MEM_BUDGET,
    )
    x = sp.csr_array(data.raw.X)
    bands = _band_rows(info, x.shape[1])
    assert max(bands) * 3 <= x.shape[0], "the matrix must be read in several bands"
    stats = container.matrix("raw/X").stats
    assert stats.largest_band_entries == max(_largest_band(x, rows) for rows in bands)
    assert stats.largest_band_entries * 3 <= x.nnz
    container.close()
    reference = cv.write_counts(tmp_path / "ref.zarr", raw_view(data))
    assert info.counts_fingerprint == reference.counts_fingerprint
    assert info.dataset_fingerprint == reference.dataset_fingerprint


def test_the_command_line_writes_raw_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytearc_vfs.cli import main

    data = with_raw(40, GENES[:12], "a", seed=15)
    data.write_h5ad(tmp_path / "a.h5ad")
    code = main(["write", str(tmp_path / "a.h5ad"), str(tmp_path / "w.zarr"), "--layer", "raw/X"])
    assert code == 0, capsys.readouterr()
    reader = cv.VirtualArrayReader(tmp_path / "w.zarr")
    assert list(reader.feature_ids) == GENES[:12]  # raw/var's, not var's (every other gene)
    np.testing.assert_array_equal(reader.read(), dense(raw_view(data), GENES[:12]))
    plain = adata(20, GENES[:5], "b", seed=16)
    plain.write_h5ad(tmp_path / "b.h5ad")
    capsys.readouterr()
    code = main(["write", str(tmp_path / "b.h5ad"), str(tmp_path / "x.zarr"), "--layer", "raw/X"])
    assert code == 2
    assert "has no raw counts (no raw/X" in capsys.readouterr().err
    assert "raw/X for its raw counts" in main_help("write")


def main_help(command: str) -> str:
    from cytearc_vfs.cli.parser import build_parser

    parser = build_parser()
    sub = next(action for action in parser._actions if getattr(action, "choices", None) is not None)
    return " ".join(str(sub.choices[command].format_help()).split())


def test_raw_var_may_list_features_var_lacks(tmp_path: Path) -> None:
    """The raw counts' features are raw/var's: more than var's, in raw's order."""
    data = with_raw(25, GENES[:9], "a", seed=17)
    assert data.n_vars < data.raw.n_vars
    frame = pd.Index(data.raw.var_names)
    path = write(data, tmp_path / "a.zarr", 3)
    info = cv.write_counts(tmp_path / "w.zarr", path, layer="raw/X")
    features = read_table(zarr.open_group(info.location, mode="r")["RNA/featureData"])
    assert list(features.index) == list(frame)


# ------------------------------------------------------------ real data


def test_real_pbmc68k_raw_is_refused_as_fractional_and_its_recovered_counts_compose(
    tmp_path: Path,
) -> None:
    """scanpy's PBMC 68k reduced, as published: scaled values in X, log-normalized
    values in raw.X (Wu 2020, the other real file with AnnData elements, has no raw).
    Its raw/X is refused as a fractional X is, and the refusal of its X names raw/X;
    with raw.X replaced by the counts the loader recovers (real counts, real X and
    var beside them), the raw/X source reads exactly those counts."""
    from cytearc_vfs import realdata

    published = ad.read_h5ad(realdata.fetch("pbmc68k_reduced"))
    assert published.raw is not None
    path = write(published, tmp_path / "pbmc.zarr", 3)
    with pytest.raises(
        UnsupportedSourceError,
        match=r"raw/X holds fractional float32 values.*holds no raw/X or other layer",
    ):
        cv.create_composite(tmp_path / "c1.zarr", {"p": path}, source_layers={"p": "raw/X"})
    with pytest.raises(UnsupportedSourceError, match=r"X holds .*source_layers=\{'p': 'raw/X'\}"):
        cv.create_composite(tmp_path / "c2.zarr", {"p": path})
    # write_counts stores float raw counts by the spec's rule, as from the AnnData
    streamed = cv.write_counts(
        tmp_path / "s.zarr", realdata.fetch("pbmc68k_reduced"), layer="raw/X"
    )
    loaded = cv.write_counts(tmp_path / "l.zarr", raw_view(published))
    assert streamed.dataset_fingerprint == loaded.dataset_fingerprint

    counts = realdata.pbmc68k_reduced()
    published.raw = ad.AnnData(X=counts.X, obs=published.obs, var=published.raw.var)
    recovered = write(published, tmp_path / "recovered.zarr", 2)
    store = cv.create_composite(
        tmp_path / "c3.zarr", {"p": recovered}, source_layers={"p": "raw/X"}
    )
    reader = store.reader()
    assert list(reader.feature_ids) == list(counts.var_names)
    np.testing.assert_array_equal(reader.read(), counts.X.toarray())
    store.close()


def test_a_partial_copy_of_raw_counts_is_refused_naming_the_chunk(tmp_path: Path) -> None:
    """A chunk of raw/X/data missing (zarr would read zeros): refused by both paths."""
    from cytearc_vfs.errors import MissingChunkError

    data = with_raw(40, GENES[:12], "a", seed=18)
    path = write(data, tmp_path / "a.zarr", 2)
    (path / "raw" / "X" / "data" / "0").unlink()
    match = r"the AnnData element 'raw/X' lacks the chunk 'raw/X/data/0'"
    with pytest.raises(MissingChunkError, match=match):
        cv.create_composite(tmp_path / "c.zarr", {"a": path}, source_layers={"a": "raw/X"})
    with pytest.raises(MissingChunkError, match=r"raw/X/data/0"):
        cv.write_counts(tmp_path / "w.zarr", path, layer="raw/X")
