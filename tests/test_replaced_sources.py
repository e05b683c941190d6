"""A local source replaced while a composite, mount or store reading it is open.

The open compares a source with its recorded fingerprints; the reads keep
shard indexes from their first read. A source rewritten afterwards must be
refused with an ``IdentityMismatchError`` naming the source, the file and the
remedy: never read at stale offsets (reported as damage or truncation), and
never returned as the new source's values. Real stores in temporary
directories, replaced the way a user would: ``write_counts(overwrite=True)``,
or a shard file written again in place.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from read_paths import PATHS, Read, gather, plain_zarr
from store_copies import copy_stores

import cytearc_vfs as cv

SMALL = cv.LayoutPolicy(64 * 1024, 4096)  # 400 x 60 int64: several row shards
CELLS = {"a": 400, "b": 300}
FEATURES = 60
REMEDY = "Reopen the composite, whose open compares the source with the fingerprints it recorded"


def counts_of(name: str, *, seed: int, density: float = 0.05) -> sp.csr_array:
    return realistic_counts(CELLS[name], FEATURES, seed=seed, density=density, dtype="int64")


def write(path: Path, counts: sp.csr_array, *, overwrite: bool = False) -> None:
    name = path.name.removesuffix(".zarr")
    cells = pd.DataFrame(index=[f"{name}-cell{i}" for i in range(counts.shape[0])])
    features = pd.DataFrame(index=[f"gene{i}" for i in range(FEATURES)])
    cv.write_counts(path, counts, cells=cells, features=features, layout=SMALL, overwrite=overwrite)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sources, a composite of both and a mount of ``a``, built once."""
    root = tmp_path_factory.mktemp("replaced")
    made = {}
    for seed, name in enumerate(CELLS):
        made[name] = root / f"{name}.zarr"
        write(made[name], counts_of(name, seed=seed))
    cv.create_composite(root / "comp.zarr", made).close()
    cv.mount_datastore(made["a"], root / "mount.zarr").close()
    return root


@pytest.fixture
def copied(pristine: Path, tmp_path: Path) -> Path:
    """A copy of ``pristine`` whose records name the copied sources: tests replace them."""
    return copy_stores(pristine, tmp_path)


def expected() -> npt.NDArray[np.int64]:
    """The composite's values as created: ``a``'s rows, then ``b``'s."""
    return np.vstack([counts_of(name, seed=seed).toarray() for seed, name in enumerate(CELLS)])


def rewrite_bigger(a: Path) -> None:
    write(a, counts_of("a", seed=5, density=0.4) * 100, overwrite=True)


def rewrite_smaller(a: Path) -> None:
    write(a, counts_of("a", seed=5, density=0.005), overwrite=True)


def rewrite_same_size(a: Path) -> None:
    # the same values written again: every file of the same size, but a new file
    write(a, counts_of("a", seed=0), overwrite=True)


def rewrite_in_place(a: Path) -> None:
    # every count shard written again in place with its own bytes: the same
    # inode and size, other times (what an editor or a sync tool does)
    for shard in (
        *(a / "RNA" / "counts" / "c").iterdir(),
        *(a / "RNA" / "countsT" / "c").iterdir(),
    ):
        data = (shard / "0").read_bytes()
        with open(shard / "0", "r+b") as handle:
            handle.write(data)


REPLACEMENTS: dict[str, Callable[[Path], None]] = {
    "bigger": rewrite_bigger,
    "smaller": rewrite_smaller,
    "same size": rewrite_same_size,
}


FIRST = np.arange(0, 12)  # rows of a's first shard
LATER = np.arange(330, 345)  # rows of a's last shard, not read before


def refused(read: Callable[[], Any], source: Path) -> None:
    """``read()`` must raise the replaced-source error naming ``source`` and the remedy."""
    with pytest.raises(cv.IdentityMismatchError) as caught:
        read()
    message = str(caught.value)
    assert f"source 'a' at {source}" in message
    assert f"the file {source}/RNA/" in message
    assert "since the source was opened" in message
    assert REMEDY in message and "a source restored from a copy" in message


@pytest.mark.parametrize("replace", REPLACEMENTS.values(), ids=REPLACEMENTS.keys())
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_a_source_replaced_before_the_first_read_is_refused(
    copied: Path, replace: Callable[[Path], None], path: Callable[[Any], Read]
) -> None:
    read = path(cv.open_store(copied / "comp.zarr"))
    replace(copied / "a.zarr")
    refused(lambda: read(FIRST), copied / "a.zarr")
    refused(lambda: read(LATER), copied / "a.zarr")
    # the other source still reads
    if path is gather:  # (plain zarr reads the composite's chunks: one spans both sources here)
        np.testing.assert_array_equal(read(np.arange(600, 610)), expected()[600:610])
    # and a reopen says what changed, as before
    if replace is not rewrite_same_size:
        with pytest.raises(cv.IdentityMismatchError, match="fingerprint"):
            cv.open_store(copied / "comp.zarr")


@pytest.mark.parametrize("replace", REPLACEMENTS.values(), ids=REPLACEMENTS.keys())
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_a_source_replaced_after_a_first_read_is_refused(
    copied: Path, replace: Callable[[Path], None], path: Callable[[Any], Read]
) -> None:
    read = path(cv.open_store(copied / "comp.zarr"))
    np.testing.assert_array_equal(read(FIRST), expected()[FIRST])
    replace(copied / "a.zarr")
    # the shard whose index is kept (its file is another now), and a shard read first now
    refused(lambda: read(FIRST), copied / "a.zarr")
    refused(lambda: read(LATER), copied / "a.zarr")
    if path is gather:  # (plain zarr reads the composite's chunks: one spans both sources here)
        np.testing.assert_array_equal(read(np.arange(600, 610)), expected()[600:610])


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_a_shard_written_again_in_place_after_its_index_was_read_is_refused(
    copied: Path, path: Callable[[Any], Read]
) -> None:
    read = path(cv.open_store(copied / "comp.zarr"))
    np.testing.assert_array_equal(read(FIRST), expected()[FIRST])
    rewrite_in_place(copied / "a.zarr")
    with pytest.raises(cv.IdentityMismatchError, match="was rewritten in place") as caught:
        read(FIRST)
    assert f"{copied}/a.zarr/RNA/counts" in str(caught.value)


def test_a_replaced_source_is_refused_on_every_orientation(copied: Path) -> None:
    # a column read of every cell is served by countsT
    reader = cv.open_store(copied / "comp.zarr").reader()
    np.testing.assert_array_equal(reader.read(features=[3]), expected()[:, [3]])
    rewrite_bigger(copied / "a.zarr")
    refused(lambda: reader.read(features=[3]), copied / "a.zarr")
    refused(lambda: reader.read(features=[7]), copied / "a.zarr")


def test_a_reader_made_after_the_replacement_is_refused_too(copied: Path) -> None:
    # the open's record is what counts, not the reader's making
    store = cv.open_store(copied / "comp.zarr")
    rewrite_bigger(copied / "a.zarr")
    refused(lambda: store.reader().read(cells=FIRST), copied / "a.zarr")


def test_a_mounted_source_replaced_while_open_is_refused(copied: Path) -> None:
    mount = cv.open_store(copied / "mount.zarr")
    reader = mount.reader()
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    rewrite_bigger(copied / "a.zarr")
    for rows in (FIRST, LATER):
        with pytest.raises(cv.IdentityMismatchError) as caught:
            reader.read(cells=rows)
        message = str(caught.value)
        assert f"the mount's source at {copied}/a.zarr: the file {copied}/a.zarr/RNA/" in message
        assert "Reopen the mount, whose open compares its source" in message


def test_a_store_read_directly_and_replaced_is_refused(copied: Path) -> None:
    reader = cv.VirtualArrayReader(copied / "a.zarr")
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    rewrite_smaller(copied / "a.zarr")
    with pytest.raises(cv.IdentityMismatchError, match="Open the store again") as caught:
        reader.read(cells=FIRST)
    assert f"the file {copied}/a.zarr/RNA/counts/c/0/0 was replaced" in str(caught.value)


def test_a_source_given_by_a_relative_path_is_checked_after_a_change_of_directory(
    copied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open notes the source's files by the path it was given; a relative one
    is resolved when the store opens, so a process that changes its working
    directory later (a notebook's os.chdir) still has its replaced source refused,
    never read as the new values."""
    monkeypatch.chdir(copied)
    composite = cv.create_composite(
        "again.zarr", {"a": "a.zarr", "b": "b.zarr"}, overwrite=True
    ).reader()
    store = cv.VirtualArrayReader("a.zarr")
    monkeypatch.chdir(copied.parent)
    rewrite_bigger(copied / "a.zarr")
    for read in (lambda: composite.read(cells=FIRST), lambda: store.read(cells=FIRST)):
        with pytest.raises(cv.IdentityMismatchError) as caught:
            read()
        assert f"the file {copied}/a.zarr/RNA/counts" in str(caught.value)


def test_an_unchanged_source_reads_with_no_extra_request(copied: Path) -> None:
    reader = cv.open_store(copied / "comp.zarr").reader()
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    first = reader.stats
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    again = reader.stats
    # the second read: the chunks only, the kept index not read again
    assert again.requests - first.requests == 1
    np.testing.assert_array_equal(reader.read(cells=None), expected())


def test_a_damaged_chunk_of_an_unreplaced_source_is_still_damage(copied: Path) -> None:
    for array in ("counts", "countsT"):  # a flipped byte in a chunk of each orientation
        shard = copied / "a.zarr" / "RNA" / array / "c" / "0" / "0"
        stat = shard.stat()
        at = stat.st_size // 3  # among the chunks, before the index at the end
        with open(shard, "r+b") as handle:
            byte = os.pread(handle.fileno(), 1, at)
            os.pwrite(handle.fileno(), bytes([byte[0] ^ 0xFF]), at)
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # bit rot moves no time
    store = cv.open_store(copied / "comp.zarr")
    for path in (gather, plain_zarr):
        with pytest.raises(cv.RecordShapeError, match="damaged") as caught:
            path(store)(np.arange(CELLS["a"]))
        assert not isinstance(caught.value, cv.IdentityMismatchError)


def test_a_process_reopens_a_kept_dask_reader_that_refuses(copied: Path) -> None:
    """Dask blocks keep one reader per process (``blockwise._PROCESS_READERS``). A
    source replaced under a kept reader makes the next block open the store anew,
    once: an array made from the composite recreated at the same path reads its
    new values instead of a kept reader refusing every block of the process,
    and the array made before refuses (it never mixes old and new values)."""
    pytest.importorskip("dask")
    from cytearc_vfs.read import blockwise

    composite, a, b = copied / "comp.zarr", copied / "a.zarr", copied / "b.zarr"
    before = dict(blockwise._PROCESS_READERS)  # other tests' readers, of other stores
    lazy = cv.VirtualArrayReader(composite).to_dask()
    np.testing.assert_array_equal(lazy[:20].compute(scheduler="sync"), expected()[:20])
    kept = {
        key: reader
        for key, reader in blockwise._PROCESS_READERS.items()
        if before.get(key) is not reader
    }
    assert kept
    new_a = counts_of("a", seed=5, density=0.4) * 100
    write(a, new_a, overwrite=True)
    shutil.rmtree(composite)  # no writer replaces a composite
    cv.create_composite(composite, {"a": a, "b": b}).close()
    again = cv.VirtualArrayReader(composite).to_dask()
    np.testing.assert_array_equal(again[:20].compute(scheduler="sync"), new_a.toarray()[:20])
    # the new array reads through a reader of its own, not a kept one
    assert any(
        reader not in kept.values() and before.get(key) is not reader
        for key, reader in blockwise._PROCESS_READERS.items()
    )
    # the array made from the old composite refuses: its store changed since
    # to_dask, and its blocks would mix the old values with the new
    with pytest.raises(cv.IdentityMismatchError):
        lazy[20:].compute(scheduler="sync")
    # the source replaced again: the kept reader refuses, the composite opened
    # anew refuses too (the source differs from its record), naming the source
    # and the remedy, every time
    write(a, counts_of("a", seed=6), overwrite=True)
    for _ in range(2):
        with pytest.raises(cv.IdentityMismatchError, match=r"source 'a'.*recreate the composite"):
            again[:20].compute(scheduler="sync")
