"""Writers whose destination fails part-way: the error, what lands after it, and the rerun.

A real ``LocalStore`` is wrapped by :class:`FullDisk`, which answers the
``n``-th write with ``OSError(ENOSPC)`` as a full disk would, and records
every write it stores. The write-behind store's own rules are in
``tests/test_write_behind.py``.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from test_write_behind import PROTO, _buffer, _destination
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.errors import IncompleteStoreError
from cytearc_vfs.write.write_behind import WriteBehindStore


class FullDisk(WrapperStore[LocalStore]):
    """A LocalStore whose ``fail_at``-th write (counting from 1) finds the disk full."""

    def __init__(self, store: LocalStore, fail_at: int | None = None) -> None:
        super().__init__(store)
        self.fail_at = fail_at
        self.writes = 0
        self.stored: list[str] = []
        self.closed = False  # set by the test once the writer returned
        self.late: list[str] = []
        """Keys stored after ``closed`` was set."""

    async def set(self, key: str, value: Buffer) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        await self._store.set(key, value)
        self.stored.append(key)
        if self.closed:
            self.late.append(key)


def _full_disk(path: Path, fail_at: int | None) -> FullDisk:
    return FullDisk(LocalStore(path), fail_at)


@pytest.mark.parametrize("fail_at", [2, 5, 12, 25])
def test_write_counts_on_a_full_disk_refuses_to_open_and_reruns(
    tmp_path: Path, counts: sp.csr_array, fail_at: int
) -> None:
    destination = tmp_path / "d.zarr"
    store = _full_disk(destination, fail_at)
    with pytest.raises(OSError) as raised:
        cv.write_counts(store, counts)
    store.closed = True
    message = str(raised.value)
    assert "No space left" in message and str(destination) in message and "writing '" in message
    assert store.late == []
    with pytest.raises(IncompleteStoreError):
        cv.open_store(destination)
    cv.write_counts(destination, counts, overwrite=True)
    assert cv.open_store(destination) is not None


def _value(size: int) -> Buffer:
    return default_buffer_prototype().buffer.from_bytes(b"x" * size)


async def test_a_failure_names_its_key_and_destination(tmp_path: Path) -> None:
    disk = _full_disk(tmp_path / "d", fail_at=2)
    behind = WriteBehindStore(disk, absent_unless_written=True)
    await behind.set("a/c/0", _value(10))
    await behind.set("a/c/1", _value(10))  # goes out behind, and fails
    with pytest.raises(OSError, match=r"writing 'a/c/1' to .*/d failed .*No space left"):
        await behind.flush()


async def test_a_large_write_that_fails_stops_every_later_write(tmp_path: Path) -> None:
    # a value above max_bytes is written before set returns; its failure, like
    # one behind, must refuse later writes (a writer's other coroutines go on)
    disk = _full_disk(tmp_path / "d", fail_at=1)
    behind = WriteBehindStore(disk, absent_unless_written=True, max_bytes=100)
    with pytest.raises(OSError, match=r"writing 'a/c/0' to .*/d failed .*No space left"):
        await behind.set("a/c/0", _value(1000))
    with pytest.raises(OSError, match="'a/c/0'"):
        await behind.set("a/c/1", _value(10))
    await behind.settle()
    assert disk.stored == []


def test_a_repack_whose_source_fails_leaves_no_copy_running(
    tmp_path: Path, counts: sp.csr_array
) -> None:
    """One key's read fails while other copies wait on theirs: repack returns with none alive.

    The copies run concurrently; the first failure must cancel the others
    and wait for them, or they go on writing into the destination after
    repack raised (and into a rerun's destination).
    """
    cv.write_counts(tmp_path / "s.zarr", counts, layout=("32K", "8K"))
    destination = tmp_path / "d.zarr"
    release = threading.Event()
    state = {"armed": False, "failed": False, "waiting": 0, "late": 0}

    class Failing(WrapperStore[Store]):
        async def get(
            self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
        ) -> Buffer | None:
            if state["armed"] and "/c/" in key and byte_range is None:
                if not state["failed"]:
                    state["failed"] = True
                    raise OSError(errno.EIO, f"the source could not read {key}")
                state["waiting"] += 1
                try:
                    while not release.is_set():
                        await asyncio.sleep(0.005)
                finally:
                    state["waiting"] -= 1
            return await self._store.get(key, prototype, byte_range)

    class Arming(WrapperStore[Store]):
        async def set(self, key: str, value: Buffer) -> None:
            await self._store.set(key, value)
            if release.is_set():
                state["late"] += 1
            state["armed"] = True  # the destination exists: fail the next chunk read

        async def set_if_not_exists(self, key: str, value: Buffer) -> None:
            await self._store.set_if_not_exists(key, value)  # the root marker
            state["armed"] = True

    source = Failing(LocalStore(tmp_path / "s.zarr", read_only=True))
    with pytest.raises(OSError, match="could not read"):
        cv.repack(source, Arming(LocalStore(destination)), mem_budget="64MiB")
    assert state["failed"]
    assert state["waiting"] == 0  # no copy still waiting on its read
    release.set()
    sync(asyncio.sleep(0.2))  # a copy left running would store its value now
    assert state["late"] == 0
    with pytest.raises(IncompleteStoreError):
        cv.open_store(destination)
    cv.repack(tmp_path / "s.zarr", destination, overwrite=True)
    assert cv.open_store(destination) is not None


async def test_a_document_read_while_an_older_value_goes_out_is_the_newest() -> None:
    behind, _ = await _destination(delay=0.05)
    await behind.set("a/zarr.json", _buffer(b'{"v": 1}'))
    flushing = asyncio.ensure_future(behind.flush())
    await asyncio.sleep(0)  # the flush sends v1
    await behind.set("a/zarr.json", _buffer(b'{"v": 2}'))
    read = await behind.get("a/zarr.json", PROTO)
    assert read is not None and read.to_bytes() == b'{"v": 2}'
    await flushing


async def test_writes_and_deletes_of_a_key_keep_their_order() -> None:
    # set, delete, set (the delete waits for the first set): the second set stands
    behind, timed = await _destination(delay=0.05)
    await behind.set("a/c/0", _buffer(b"1"))
    deleting = asyncio.ensure_future(behind.delete("a/c/0"))
    await asyncio.sleep(0)
    await behind.set("a/c/0", _buffer(b"2"))
    assert await behind.exists("a/c/0")
    await deleting
    await behind.flush()
    stored = await timed._store.get("a/c/0", PROTO)
    assert stored is not None and stored.to_bytes() == b"2"
    await behind.delete("a/c/0")
    assert await timed._store.get("a/c/0", PROTO) is None
    assert not await behind.exists("a/c/0")


def _write_with(kind: str, sources: Path, destination: Store | Path, overwrite: bool) -> None:
    if kind == "composite":
        paths = {"a": sources / "a.zarr", "b": sources / "b.zarr"}
        cv.create_composite(destination, paths, overwrite=overwrite).close()
    elif kind == "write":
        cv.write_counts(destination, realistic_counts(600, 80, seed=3), overwrite=overwrite)
    elif kind == "mount":
        cv.mount_datastore(sources / "a.zarr", destination, overwrite=overwrite)
    else:
        cv.repack(sources / "a.zarr", destination, overwrite=overwrite)


@pytest.fixture(scope="module")
def pristine_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sources a.zarr and b.zarr, written once and never opened after."""
    root = tmp_path_factory.mktemp("sources")
    cv.write_counts(root / "a.zarr", realistic_counts(600, 80, seed=3))
    cv.write_counts(root / "b.zarr", realistic_counts(400, 80, seed=4))
    return root


@pytest.mark.parametrize("kind", ["write", "composite", "mount", "repack"])
@pytest.mark.parametrize("fail_at", [2, 6, 15, -1, 0])
def test_every_writer_on_a_full_disk_refuses_to_open_and_reruns(
    pristine_sources: Path, tmp_path: Path, kind: str, fail_at: int
) -> None:
    """``fail_at`` counts writes from the first, or (0, -1) from the commit, the last."""
    # copies of the sources, not new writes (two stores a case, 20 cases)
    for name in ("a.zarr", "b.zarr"):
        shutil.copytree(pristine_sources / name, tmp_path / name)
    if fail_at <= 0:
        counted = _full_disk(tmp_path / "counted.zarr", None)
        _write_with(kind, tmp_path, counted, overwrite=False)
        fail_at += counted.writes
    destination = tmp_path / "d.zarr"
    store = _full_disk(destination, fail_at)
    with pytest.raises(
        OSError, match=r"writing '.+' to .*d\.zarr failed .*No space left"
    ) as raised:
        _write_with(kind, tmp_path, store, overwrite=False)
    store.closed = True
    assert "overwrite=True" in str(raised.value)
    assert store.late == []
    with pytest.raises(IncompleteStoreError):
        cv.open_store(destination)
    _write_with(kind, tmp_path, destination, overwrite=True)
    assert cv.open_store(destination) is not None


@pytest.mark.parametrize("workspace", [None, "ws"])
def test_an_overwrite_leaves_only_the_new_tree(tmp_path: Path, workspace: str | None) -> None:
    """The write-behind store takes the emptied destination as known: nothing old may survive."""
    destination = tmp_path / "d.zarr"
    old = realistic_counts(700, 90, seed=5)
    cv.write_counts(destination, old, assay="ADT", workspace="old")  # other paths, other keys
    # a write that died part-way left a pending root over the old tree's files
    store = _full_disk(destination, fail_at=9)
    with pytest.raises(OSError, match="No space left"):
        cv.write_counts(store, old, workspace=workspace, overwrite=True)
    new = realistic_counts(500, 60, seed=6)
    fresh = tmp_path / "fresh.zarr"
    cv.write_counts(fresh, new, workspace=workspace)
    cv.write_counts(destination, new, workspace=workspace, overwrite=True)

    def tree(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

    assert tree(destination) == tree(fresh)
    read = cv.open_store(destination)
    assert read is not None
    if workspace is None:
        np.testing.assert_array_equal(cv.VirtualArrayReader(destination).read(), new.toarray())
