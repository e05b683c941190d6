"""What an import from an AnnData leaves out is said, by name: ``WriteInfo.not_imported``,
``cytearc-vfs write``'s note line on stderr (piped and in a terminal) and its
``--json`` field ``notImported``.

The write kept X (or a layer) with obs and var and dropped ``obsm``, ``varm``,
``obsp``, ``varp``, ``uns``, the other layers and ``raw`` without a word: a
user learned it only from docs/anndata.md.
"""

from __future__ import annotations

import collections
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cli_harness import run_in_terminal, run_main
from zarr.abc.store import Store
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv

N_CELLS, N_GENES = 10, 6


def analysed() -> ad.AnnData:
    """An AnnData as an analysis leaves it: embeddings, graphs, layers, uns, raw."""
    x = sp.csr_matrix(np.arange(N_CELLS * N_GENES).reshape(N_CELLS, N_GENES) % 4)
    adata = ad.AnnData(
        X=x,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(N_CELLS)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(N_GENES)]),
    )
    adata.varm["PCs"] = np.zeros((N_GENES, 2))
    adata.raw = adata.copy()  # X, var and varm as they are now
    adata.layers["spliced"] = x.copy()
    adata.obsm["X_pca"] = np.zeros((N_CELLS, 2))
    adata.obsm["X_umap"] = np.zeros((N_CELLS, 2))
    adata.obsp["distances"] = sp.csr_matrix((N_CELLS, N_CELLS))
    adata.uns.update({f"key{i:02d}": i for i in range(12)})
    return adata


EXPECTED = (
    "layers/spliced",
    "obsm/X_pca",
    "obsm/X_umap",
    "varm/PCs",
    "obsp/distances",
    *(f"uns/key{i:02d}" for i in range(12)),
    "raw",
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("not-imported")
    adata = analysed()
    adata.write_h5ad(root / "a.h5ad")
    return {
        "v2": write_anndata_zarr(adata, root / "v2.zarr", 2),
        "v3": write_anndata_zarr(adata, root / "v3.zarr", 3),
        "h5ad": root / "a.h5ad",
    }


@pytest.mark.parametrize("kind", ["v2", "v3", "h5ad", "memory"])
def test_write_counts_names_what_it_left_out(
    inputs: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    given = analysed() if kind == "memory" else inputs[kind]
    info = cv.write_counts(tmp_path / "x.zarr", given)
    assert info.not_imported == EXPECTED
    # a layer chosen: X is left out instead of it; raw/X: var (X's features) and raw's rest
    spliced = cv.write_counts(tmp_path / "s.zarr", given, layer="spliced")
    assert spliced.not_imported == ("X", *EXPECTED[1:])
    raw = cv.write_counts(tmp_path / "r.zarr", given, layer="raw/X")
    assert raw.not_imported == ("X", "var", *EXPECTED[:-1], "raw/varm/PCs")


def test_counts_without_an_anndata_leave_nothing_out(tmp_path: Path) -> None:
    info = cv.write_counts(tmp_path / "x.zarr", sp.csr_array(np.eye(3, dtype=np.uint8)))
    assert info.not_imported == ()


def test_empty_mappings_and_the_membership_declaration_are_not_listed(tmp_path: Path) -> None:
    """anndata writes empty obsm/varm/... groups; uns['cytearc'] holds the membership
    declaration (cytearc-vfs export writes it), which the import reads: neither is left out."""
    plain = analysed()
    for mapping in (plain.obsm, plain.varm, plain.obsp):
        mapping.clear()
    del plain.layers["spliced"]
    plain.uns.clear()
    plain.raw = None
    path = write_anndata_zarr(plain, tmp_path / "plain.zarr", 3)
    assert cv.write_counts(tmp_path / "p.zarr", path).not_imported == ()
    # what cytearc-vfs export writes when an assay measures only some cells
    plain.obs["RNA_I"] = np.arange(N_CELLS) % 2 == 0
    plain.uns["cytearc"] = {"assayMembership": {"RNA": "RNA_I"}}
    declared = write_anndata_zarr(plain, tmp_path / "declared.zarr", 3)
    assert cv.write_counts(tmp_path / "d.zarr", declared).not_imported == ()
    plain.uns["cytearc"]["note"] = "mine"
    noted = write_anndata_zarr(plain, tmp_path / "noted.zarr", 2)
    assert cv.write_counts(tmp_path / "n.zarr", noted).not_imported == ("uns/cytearc/note",)
    assert cv.write_counts(tmp_path / "m.zarr", plain).not_imported == ("uns/cytearc/note",)


def test_the_command_says_it_in_one_line_and_in_json(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    done = run_main("write", str(inputs["v3"]), str(tmp_path / "x.zarr"))
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "not imported" in line]
    assert len(notes) == 1, done.stderr
    note = notes[0]
    assert note.startswith("cytearc-vfs write: note: not imported from ")
    assert "layers: spliced; obsm: X_pca, X_umap; varm: PCs; obsp: distances" in note
    assert "uns: 12 keys (key00, key01, key02, ...); raw;" in note
    assert "artifact" in note and "beside" in note
    assert "not imported" not in done.stdout
    as_json = run_main("write", str(inputs["h5ad"]), str(tmp_path / "j.zarr"), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["notImported"] == list(EXPECTED)
    assert "not imported" in as_json.stderr
    plain = sp.csr_matrix(np.eye(3, dtype=np.uint8))
    bare = ad.AnnData(X=plain)
    bare.obs_names = ["a", "b", "c"]
    bare.var_names = ["x", "y", "z"]
    bare.write_h5ad(tmp_path / "bare.h5ad")
    quiet = run_main("write", str(tmp_path / "bare.h5ad"), str(tmp_path / "q.zarr"), "--json")
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout)["notImported"] == []
    assert "not imported" not in quiet.stderr


def test_the_note_reaches_a_terminal(inputs: dict[str, Path], tmp_path: Path) -> None:
    terminal = run_in_terminal(["write", str(inputs["v2"]), str(tmp_path / "t.zarr")])
    assert terminal.returncode == 0, terminal.output
    assert "note: not imported from" in terminal.output
    assert "obsm: X_pca, X_umap" in terminal.output


def with_stray_files(store: Path) -> Path:
    """``store`` with what a desktop or a user leaves beside the nodes: files at the root
    and in a mapping, and a directory at the root that is no Zarr node."""
    for stray in (".DS_Store", "notes.txt", "obsm/.DS_Store", "uns/notes.txt"):
        (store / stray).write_text("not a Zarr node\n")
    (store / "backup").mkdir()
    (store / "backup" / "old.txt").write_text("not a Zarr node either\n")
    return store


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_stray_files_are_not_elements(tmp_path: Path, zarr_format: int) -> None:
    """A file beside the nodes (.DS_Store, notes.txt) was reported as an element left
    out; only Zarr nodes (groups and arrays) are elements."""
    store = write_anndata_zarr(analysed(), tmp_path / "a.zarr", zarr_format)
    with_stray_files(store)
    (store / "extra").mkdir()
    zarr.create_array(store / "extra" / "values", shape=(2,), dtype="i4", zarr_format=zarr_format)
    zarr.open_group(store / "extra", mode="a", zarr_format=zarr_format)
    info = cv.write_counts(tmp_path / "x.zarr", store)
    # a node the spec does not name is still reported: it is an element left out
    assert info.not_imported == (*EXPECTED, "extra")


@pytest.mark.remote
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_on_object_storage_the_report_costs_a_few_listings_and_no_read(
    s3_server: Any, s3_proxy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int
) -> None:
    """The root and each group the report looks into are listed, concurrently; no
    document is read for it (opening each group cost up to three reads in Zarr v2)."""
    from cytearc_vfs_adapters.anndata import counts
    from obstore.store import from_url
    from test_anndata_missing_chunks import _upload

    bucket = s3_server.new_bucket()
    raw = from_url(f"s3://{bucket}", **s3_server.storage_options())
    local = with_stray_files(write_anndata_zarr(analysed(), tmp_path / "a.zarr", zarr_format))
    (local / "backup" / "old.txt").unlink()  # an empty directory is no prefix of an object store
    (local / "backup").rmdir()
    _upload(raw, local, "a.zarr")
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}

    def requests(destination: str) -> collections.Counter[str]:
        s3_proxy.take()
        info = cv.write_counts(
            tmp_path / destination, f"s3://{bucket}/a.zarr", source_storage_options=options
        )
        assert info.not_imported == (EXPECTED if destination == "with.zarr" else ())
        return collections.Counter(f"{r.method} {r.path}" for r in s3_proxy.take())

    reported = requests("with.zarr")
    monkeypatch.setattr(counts, "not_imported_from_container", lambda root, layer: ())
    extra = reported - requests("without.zarr")
    assert all("list-type=2" in request for request in extra), extra
    # the root, layers, obsm, varm, obsp, varp, uns and raw; the stray files at the root
    # and in obsm and uns are told from the nodes by those listings, without a request
    assert sum(extra.values()) == 8, extra


def test_a_normalized_x_is_noted_with_the_counts_left_behind(tmp_path: Path) -> None:
    """A log-normalized X beside a ``counts`` layer (or raw counts) was imported as
    float32 without a word: the newcomer's store held no counts."""
    counts = sp.random(40, 15, density=0.3, format="csr", random_state=2, dtype=np.float32)
    counts.data = np.ceil(counts.data * 6)
    normalized = counts.copy()
    normalized.data = np.log1p(normalized.data)
    adata = ad.AnnData(X=normalized, layers={"counts": counts})
    adata.obs_names = [f"c{i}" for i in range(40)]
    adata.var_names = [f"g{i}" for i in range(15)]
    adata.raw = ad.AnnData(X=counts, obs=adata.obs, var=adata.var)
    adata.write_h5ad(tmp_path / "lognorm.h5ad")
    done = run_main("write", str(tmp_path / "lognorm.h5ad"), str(tmp_path / "x.zarr"))
    assert done.returncode == 0, done.stderr
    (note,) = [line for line in done.stderr.splitlines() if "whole numbers" in line]
    assert note == (
        f"cytearc-vfs write: note: X of {tmp_path / 'lognorm.h5ad'} holds values that are not "
        "whole numbers, stored as float32 (normalized data rather than counts?); its counts "
        "may be what --layer counts or --layer raw/X imports instead (again with --overwrite)"
    )
    assert "whole numbers" not in done.stdout
    # the remedy it names imports the counts, as whole numbers, and says nothing more
    again = run_main(
        "write",
        str(tmp_path / "lognorm.h5ad"),
        str(tmp_path / "x.zarr"),
        "--layer",
        "counts",
        "--overwrite",
    )
    assert again.returncode == 0, again.stderr
    assert "whole numbers" not in again.stderr and "(uint8)" in again.stdout
    raw = run_main(
        "write", str(tmp_path / "lognorm.h5ad"), str(tmp_path / "r.zarr"), "--layer", "raw/X"
    )
    assert raw.returncode == 0 and "whole numbers" not in raw.stderr, raw.stderr


class _Unlisted(WrapperStore[LocalStore]):
    """A real local store whose backend cannot list, as zarr's contract allows
    (``supports_listing`` false): its keys are read one by one, never listed."""

    @property
    def supports_listing(self) -> bool:
        return False


class _ListsNothing(WrapperStore[LocalStore]):
    """A backend whose listings come back empty (an HTTP file system against a server
    without index pages): not even the root's own metadata document is listed."""

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in ():
            yield name


def _unlisted(url: str, read_only: bool, options: Any) -> Store:
    return _Unlisted(LocalStore("/" + url.split("://", 1)[1], read_only=read_only))


def test_a_store_that_cannot_list_says_so_rather_than_nothing(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Without listings the import's report was ``()``, which reads as "nothing was left
    out" while obsm, layers, uns and raw were: it is now ``None``, "not known"."""
    for wrapper in (_Unlisted, _ListsNothing):
        source = wrapper(LocalStore(inputs["v3"], read_only=True))
        info = cv.write_counts(tmp_path / f"{wrapper.__name__}.zarr", source)
        assert info.not_imported is None, wrapper
        assert cv.open_store(tmp_path / f"{wrapper.__name__}.zarr")
    # a store that lists keeps its report
    listed = LocalStore(inputs["v3"], read_only=True)
    assert cv.write_counts(tmp_path / "listed.zarr", listed).not_imported == EXPECTED


def test_the_command_says_the_elements_could_not_be_listed(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    """``cytearc-vfs write`` from a backend that cannot list (here one registered for
    the scheme ``unlisted://``): the note and ``notImported`` said nothing was left out."""
    from cytearc_vfs.remote.locations import register_backend

    register_backend("unlisted", _unlisted)
    url = f"unlisted:/{inputs['v3']}"
    done = run_main("write", url, str(tmp_path / "x.zarr"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["notImported"] is None
    (note,) = [line for line in done.stderr.splitlines() if "note:" in line]
    assert note.startswith(f"cytearc-vfs write: note: what else {url} holds could not be listed")
    assert "obsm" in note and "keep the AnnData beside the store" in note, note
    text = run_main("write", url, str(tmp_path / "t.zarr"))
    assert text.returncode == 0 and "could not be listed" in text.stderr, text.stderr
    # a layer is still found (read by its path, not listed), and a missing one refused
    layer = run_main("write", url, str(tmp_path / "l.zarr"), "--layer", "spliced")
    assert layer.returncode == 0, layer.stderr
    missing = run_main("write", url, str(tmp_path / "m.zarr"), "--layer", "nope")
    assert missing.returncode == 2 and "has no layer 'nope'" in missing.stderr, missing.stderr
    assert "its layers cannot be listed" in missing.stderr, missing.stderr
    # anndata ls lists elements: refused, naming the store and why, not zarr's words
    ls = run_main("anndata", "ls", url)
    assert ls.returncode == 2, ls.stderr
    assert f"{url}: its store cannot list its keys" in ls.stderr, ls.stderr
    assert "list_dir" not in ls.stderr


class _ListingRefused(WrapperStore[LocalStore]):
    """A backend whose credentials may read keys but not list them (S3 without
    ``s3:ListBucket``): every listing raises ``PermissionError``, as the obstore
    adapter translates a refused listing."""

    async def list(self) -> AsyncIterator[str]:
        raise PermissionError("listing refused (403 AccessDenied)")
        yield ""  # pragma: no cover - makes this an async generator

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        raise PermissionError("listing refused (403 AccessDenied)")
        yield ""  # pragma: no cover

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        raise PermissionError("listing refused (403 AccessDenied)")
        yield ""  # pragma: no cover


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_read_access_without_listing_still_imports(
    inputs: dict[str, Path], tmp_path: Path, zarr_format: int
) -> None:
    """The import reads what it needs by path; only its chunk check and this report
    listed, and a refused listing failed the whole write. The chunks are now asked
    one by one, and what else the container holds is "not known" (``None``)."""
    source = _ListingRefused(LocalStore(inputs[f"v{zarr_format}"], read_only=True))
    info = cv.write_counts(tmp_path / "out.zarr", source)
    assert info.not_imported is None
    expected = ad.read_zarr(inputs[f"v{zarr_format}"])
    counts = zarr.open_array(cv.open_store(tmp_path / "out.zarr"), path="RNA/counts", mode="r")[:]
    np.testing.assert_array_equal(counts, expected.X.toarray())
