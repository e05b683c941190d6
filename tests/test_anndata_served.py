"""``serve --as-anndata`` and ``mount-fs --as-anndata``: any store as an AnnData Zarr store
over HTTP or as a directory, so every AnnData reader opens a composite with no copy.

Both present :func:`cv.anndata_view`. What they add over the view in memory,
and what these tests hold them to:

- the reads through HTTP and through the file system tree equal
  ``cv.to_anndata(lazy=False)`` of the store (``X``, ``obs``, ``var``);
- the tree sizes and times a chunk the view re-keys from the viewed store as
  that store's own file, and a composite's computed chunk is computed once
  per open file, not once per ranged read (the tree did both for the plain
  store only: a copy of the view took 4x as long as of the store);
- the server gives a re-keyed chunk its validators (a conditional GET
  answers ``304``), sizes a composite's re-keyed chunk without computing it
  and computes it once per GET, not once per 1 MiB piece sent;
- a view closes the store it opened itself, never one it was given;
- ``--assay`` without ``--as-anndata`` is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
from cytearc_vfs_adapters.serve.server import StoreServer
from cytearc_vfs_adapters.served_store import ServedStore
from interop.kinds import cli_server
from test_mount_fs import fuse_works, make_composite, mount_fs, read_through, value_of, walk
from test_serve import request
from zarr.storage import FsspecStore

import cytearc_vfs as cv

__all__ = ["fuse_works"]  # a fixture, imported for its use here


def _dense(matrix: Any) -> np.ndarray:
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def assert_same_anndata(found: ad.AnnData, location: Path) -> None:
    """``found`` holds what ``cv.to_anndata(location, lazy=False)`` holds."""
    expected = cv.to_anndata(location, lazy=False)
    assert found.shape == expected.shape
    assert np.array_equal(_dense(found.X), _dense(expected.X))
    for frame, reference in ((found.obs, expected.obs), (found.var, expected.var)):
        assert list(frame.index) == list(reference.index)
        assert list(frame.columns) == list(reference.columns)
        for column in reference.columns:
            assert frame[column].astype(str).tolist() == reference[column].astype(str).tolist()


def test_a_composite_served_as_anndata_reads_as_to_anndata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    with cli_server(["serve", str(composite.path), "--port", "0", "--as-anndata"]) as url:
        store = FsspecStore.from_url(url, read_only=True)
        assert_same_anndata(ad.read_zarr(store), composite.path)
        lazy = ad.experimental.read_lazy(store)
        assert np.array_equal(_dense(lazy.X[100:900].compute()), composite.dense[100:900])


def test_a_rekeyed_chunk_has_the_viewed_stores_validators(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(400, 60, density=0.1, seed=4))
    served = ServedStore.open(tmp_path / "a.zarr", as_anndata="RNA")
    plain = StoreServer.start(ServedStore.open(tmp_path / "a.zarr"))
    server = StoreServer.start(served)
    try:
        key = next(
            str(path.relative_to(tmp_path / "a.zarr" / "RNA" / "counts"))
            for path in sorted((tmp_path / "a.zarr" / "RNA" / "counts" / "c").rglob("*"))
            if path.is_file()
        )
        status, headers, body = request(server.url, "GET", f"/X/{key}")
        _, plain_headers, plain_body = request(plain.url, "GET", f"/RNA/counts/{key}")
        assert status == 200 and body == plain_body
        assert headers["etag"] == plain_headers["etag"]
        assert headers.get("last-modified") == plain_headers.get("last-modified")
        status, _, _ = request(
            server.url, "GET", f"/X/{key}", headers={"If-None-Match": headers["etag"]}
        )
        assert status == 304
        # the view's own documents are not the store's: no validators
        _, headers, _ = request(server.url, "GET", "/X/zarr.json")
        assert "etag" not in headers
    finally:
        server.close()
        plain.close()
        served.close()


def test_a_served_view_computes_a_chunk_once_per_get_and_never_for_a_head(
    tmp_path: Path,
) -> None:
    """A view's chunk re-keyed from a composite's computed one is sized from the
    composite's document and read whole: a HEAD computed it to size it, and a GET
    streamed in 1 MiB pieces computed it again for every piece (10.6 s for 1,000
    cells of a 100,000-cell composite, against 1.5 s through the mount)."""
    sources = {}
    for index in range(2):
        sources[f"s{index}"] = tmp_path / f"s{index}.zarr"
        cv.write_counts(
            sources[f"s{index}"],
            realistic_counts(3000, 400, density=0.05, seed=index),
            cells=[f"s{index}_{i}" for i in range(3000)],
        )
    cv.create_composite(tmp_path / "c.zarr", sources)
    served = ServedStore.open(tmp_path / "c.zarr", as_anndata="RNA")
    server = StoreServer.start(served)
    plain = cv.open_store(tmp_path / "c.zarr")
    try:
        inner = served.current.viewed_store  # type: ignore[attr-defined]
        assert isinstance(inner, cv.CompositeStore)
        expected = value_of(plain, "RNA/counts/c/0/0")
        assert len(expected) > 1 << 20
        status, headers, body = request(server.url, "HEAD", "/X/c/0/0")
        assert status == 200 and int(headers["content-length"]) == len(expected)
        assert inner.chunk_stats.reads == 0  # sized from the document
        status, _, body = request(server.url, "GET", "/X/c/0/0")
        assert status == 200 and body == expected
        once = inner.chunk_stats.reads
        before = plain.chunk_stats.reads  # type: ignore[attr-defined]
        value_of(plain, "RNA/counts/c/0/0")
        assert once == plain.chunk_stats.reads - before  # type: ignore[attr-defined]
    finally:
        server.close()
        served.close()
        plain.close()


def test_the_view_tree_sizes_rekeyed_chunks_without_computing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Walking the view of a composite computes nothing; reading a re-keyed computed
    chunk piece by piece computes it once; every size is its value's."""
    composite = make_composite(tmp_path, monkeypatch)
    view = cv.anndata_view(composite.path)
    inner = view.viewed_store
    assert isinstance(inner, cv.CompositeStore)
    operations = TreeOperations(StoreTree(view))
    files = walk(operations)
    assert inner.chunk_stats.requests == 0  # no count chunk computed to size X's files
    chunks = sorted(path for path in files if path.startswith("/X/c/"))
    assert len(chunks) >= 2, chunks
    computed_before = operations.computed_values
    assert read_through(operations, chunks[1], piece=1000) == value_of(view, chunks[1][1:])
    assert operations.computed_values == computed_before + 1  # one for the whole file
    for path, attributes in files.items():
        assert attributes["st_size"] == len(value_of(view, path[1:])), path
    view.close()


def test_an_ordinary_stores_view_tree_shows_its_files_times(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(300, 40, density=0.1, seed=6))
    view = cv.anndata_view(tmp_path / "a.zarr")
    operations = TreeOperations(StoreTree(view))
    files = walk(operations)
    stored = tmp_path / "a.zarr" / "RNA" / "counts"
    rekeyed = [path for path in files if path.startswith("/X/c/")]
    assert rekeyed
    for path in rekeyed:
        source = stored / path.removeprefix("/X/")
        assert files[path]["st_size"] == source.stat().st_size
        assert files[path]["st_mtime"] == source.stat().st_mtime_ns  # ns: the binding's use_ns
    view.close()


def test_a_view_closes_the_store_it_opened_and_not_one_it_was_given(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(50, 10, seed=1))
    cv.create_composite(tmp_path / "c.zarr", {"s": tmp_path / "s.zarr"})
    opened_here = cv.anndata_view(tmp_path / "c.zarr")
    inner = opened_here.viewed_store
    assert inner is not None and inner._is_open
    opened_here.close()
    assert not inner._is_open
    given = cv.open_store(tmp_path / "c.zarr")
    view = cv.anndata_view(given)
    view.close()
    assert given._is_open
    given.close()


def test_a_served_view_of_a_composite_can_reopen_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The served store's sources are the composite's: a source that comes back after
    a failed read is reopened, as for the composite served as it is."""
    composite = make_composite(tmp_path, monkeypatch)
    served = ServedStore.open(composite.path, as_anndata="RNA")
    try:
        assert served.reopenable
    finally:
        served.close()


def test_mount_fs_as_anndata_reads_as_to_anndata_and_copies(
    fuse_works: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    with mount_fs(composite.path, tmp_path / "mp", "--as-anndata") as mounted:
        assert_same_anndata(ad.read_zarr(mounted.mountpoint), composite.path)
        subprocess.run(
            ["cp", "-r", str(mounted.mountpoint), str(tmp_path / "copy.zarr")], check=True
        )
        code, _, err = mounted.stop()
    assert code == 0, err
    assert_same_anndata(ad.read_zarr(tmp_path / "copy.zarr"), composite.path)


@pytest.mark.parametrize("command", ["serve", "mount-fs"])
def test_an_assay_without_as_anndata_is_refused(tmp_path: Path, command: str) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(20, 5, seed=2))
    (tmp_path / "mp").mkdir()
    places = [str(tmp_path / "a.zarr")] + ([str(tmp_path / "mp")] if command == "mount-fs" else [])
    run = subprocess.run(
        [sys.executable, "-m", "cytearc_vfs.cli", command, *places, "--assay", "ADT"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert "--assay ADT applies only with --as-anndata" in run.stderr
