"""The open of a composite over a local AnnData source costs O(metadata).

Issue 16 asks for a source's identity "checked at every open at a cost
independent of the source's size": an open stats the watched directories,
the metadata documents and a bounded sample of chunk files, never one
``stat`` per chunk file (docs/composite.md, "Identity of an AnnData source").
Counted in filesystem calls, not time.
"""

from __future__ import annotations

import os
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
from cytearc_vfs.errors import IdentityMismatchError
from cytearc_vfs.read import anndata_identity


def _source(path: Path, chunk: int, *, compressed: bool = True) -> Path:
    """A CSR AnnData store (Zarr v3) whose ``X/data`` and ``X/indices`` are
    stored in chunks of ``chunk`` entries: about 3,000 / chunk files each (at 8,
    375 each: several times the files an open samples, and quick to write);
    uncompressed unless ``compressed``."""
    rng = np.random.default_rng(3)
    matrix = sp.random(300, 40, density=0.25, format="csr", random_state=rng, dtype=np.float32)
    matrix.data = rng.integers(1, 30, matrix.nnz).astype(np.int32)
    data = ad.AnnData(
        matrix.astype(np.int32),
        obs=pd.DataFrame(index=[f"c{i}" for i in range(300)]),
        var=pd.DataFrame(index=[f"g{j}" for j in range(40)]),
    )
    write_anndata_zarr(data, path, 3)
    group = zarr.open_group(path / "X", mode="r+", use_consolidated=False)
    for name in ("data", "indices"):
        values = group[name][:]  # type: ignore[index]
        del group[name]
        group.create_array(
            name,
            data=values,
            chunks=(chunk,),
            shards=None,
            compressors="auto" if compressed else None,
        )
    zarr.consolidate_metadata(path)
    return path


class FilesystemCalls:
    """Counts ``os.stat`` and ``os.scandir`` calls on paths below ``root``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.stats = 0
        self.listings = 0
        prefix = os.fspath(root)
        stat, scandir = os.stat, os.scandir

        def counted_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if os.fspath(path).startswith(prefix):
                self.stats += 1
            return stat(path, *args, **kwargs)

        def counted_scandir(path: Any = ".") -> Any:
            if os.fspath(path).startswith(prefix):
                self.listings += 1
            return scandir(path)

        monkeypatch.setattr(os, "stat", counted_stat)
        monkeypatch.setattr(os, "scandir", counted_scandir)


def _files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def _open_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> tuple[int, int]:
    source = _source(tmp_path / f"src{chunk}" / "a.zarr", chunk)
    location = tmp_path / f"comp{chunk}.zarr"
    cv.create_composite(location, {"a": source}).close()
    with monkeypatch.context() as patch:
        calls = FilesystemCalls(patch, source.parent)
        cv.open_store(location).close()
    assert calls.listings == 0  # no directory of the source is listed
    return calls.stats, _files(source)


def test_an_open_stats_a_bounded_set_whatever_the_number_of_chunk_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    few, few_files = _open_calls(tmp_path, monkeypatch, 4_000)
    many, many_files = _open_calls(tmp_path, monkeypatch, 8)
    assert few_files < 40 and many_files > 700
    # documents + directories + at most SAMPLED_FILES chunk files per prefix
    bound = 40 + 3 * anndata_identity.SAMPLED_FILES
    assert few <= bound and many <= bound, (few, many)


def test_an_object_rewritten_through_zarr_fails_closed_in_a_large_source(
    tmp_path: Path,
) -> None:
    """zarr writes each object by an atomic rename: its directory's times move,
    so a rewritten chunk is seen even when no sampled file is the one edited."""
    source = _source(tmp_path / "src" / "a.zarr", 8)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    data = zarr.open_array(source / "X" / "data", mode="r+")
    data[801] = int(data[801]) + 1  # one chunk of about 375 rewritten, same size
    with pytest.raises(IdentityMismatchError, match=r"the counts \(X\): recorded"):
        cv.open_store(location)


def test_a_deleted_chunk_or_a_replaced_source_fails_closed(tmp_path: Path) -> None:
    source = _source(tmp_path / "src" / "a.zarr", 8)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    (source / "X" / "indices" / "c" / "300").unlink()
    with pytest.raises(IdentityMismatchError, match=r"'X/indices/c/300' \(removed\)"):
        cv.open_store(location)
    other = _source(tmp_path / "other" / "a.zarr", 8)
    # a different source moved into its place (equal bytes but for one value)
    zarr.open_array(other / "X" / "data", mode="r+")[5] = 999
    os.rename(source, tmp_path / "old.zarr")
    os.rename(other, source)
    with pytest.raises(IdentityMismatchError):
        cv.open_store(location)


def _rewrite_in_place(path: Path) -> None:
    """Change one byte of ``path`` without a rename (no directory's times move) and
    keep its size, as a raw write into the file would."""
    with open(path, "r+b") as file:
        first = file.read(1)
        file.seek(0)
        file.write(bytes([first[0] ^ 0xFF]))


def test_a_chunk_file_edited_in_place_is_refused_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit in place that the open's sample missed is refused by the read of
    that chunk (checked against the record from the stat the read makes), not
    read as other values (the chunks are uncompressed: the changed byte would
    decode); rows in other chunks still read."""
    source = _source(tmp_path / "src" / "a.zarr", 50, compressed=False)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    expected = cv.open_store(location).reader().read()
    edited = "X/data/c/30"
    monkeypatch.setattr(anndata_identity, "SAMPLED_FILES", 0)  # the sample misses it
    _rewrite_in_place(source / edited)
    store = cv.open_store(location)
    reader = store.reader()
    indptr = zarr.open_array(source / "X" / "indptr", mode="r")[:]
    row = int(np.searchsorted(indptr, 30 * 50, side="right")) - 1  # holds entry 1,500
    with pytest.raises(IdentityMismatchError, match=rf"the chunk file {edited} was rewritten in"):
        reader.read([row])
    with pytest.raises(IdentityMismatchError, match="restore the source, or recreate"):
        reader.read_sparse(cells=[row])
    far = 0 if row > 10 else 299
    np.testing.assert_array_equal(reader.read([far]), expected[[far]])
    store.close()


def test_a_chunk_file_deleted_after_the_open_is_refused_not_read_as_zeros(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path / "src" / "a.zarr", 50)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    store = cv.open_store(location)
    reader = store.reader()
    (source / "X" / "data" / "c" / "0").unlink()
    # a SourceGoneError (exit 4), as for a CyteArc source's deleted files and as
    # errors.md says; it was an IdentityMismatchError (exit 3), which
    # `except FileNotFoundError` and `except cv.SourceGoneError` missed
    with pytest.raises(cv.SourceGoneError, match=r"the chunk file X/data/c/0 is gone") as raised:
        reader.read([0])
    assert "source 'a' at" in str(raised.value) and "restore the source" in str(raised.value)
    assert not isinstance(raised.value, IdentityMismatchError)
    store.close()


def test_a_sharded_source_rewritten_in_place_is_refused_when_read(tmp_path: Path) -> None:
    """Shards are read through their kept index: a shard rewritten after the open
    is refused before its index is used."""
    source = _source(tmp_path / "src" / "a.zarr", 50)
    group = zarr.open_group(source / "X", mode="r+", use_consolidated=False)
    values = group["data"][:]  # type: ignore[index]
    del group["data"]
    group.create_array("data", data=values, chunks=(8,), shards=(800,))
    zarr.consolidate_metadata(source)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    store = cv.open_store(location)
    reader = store.reader()
    expected = reader.read()
    _rewrite_in_place(source / "X" / "data" / "c" / "0")
    with pytest.raises(IdentityMismatchError, match=r"the chunk file X/data/c/0 was rewritten"):
        reader.read([0, 1])
    np.testing.assert_array_equal(reader.read([299]), expected[[299]])
    store.close()


def test_files_rewritten_with_their_own_bytes_still_read(tmp_path: Path) -> None:
    """Every chunk file rewritten with the same bytes (new times, same digests): the
    open digests them again and passes, and the reads check the files as they are
    now, not as recorded at creation."""
    source = _source(tmp_path / "src" / "a.zarr", 400)
    location = tmp_path / "comp.zarr"
    cv.create_composite(location, {"a": source}).close()
    expected = cv.open_store(location).reader().read()
    for path in (source / "X").rglob("*"):
        if path.is_file() and path.name != "zarr.json":
            path.write_bytes(path.read_bytes())
    store = cv.open_store(location)
    np.testing.assert_array_equal(store.reader().read(), expected)
    np.testing.assert_array_equal(store.reader().read_sparse().toarray(), expected)
    store.close()
