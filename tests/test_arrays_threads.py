"""One ``ArrayWriter`` shared by threads: no write is lost to a flush running beside it.

A flush used to read a unit's edits, write them, then forget the unit: edits
made to it by another thread in between were forgotten unwritten (a quarter
to a half of the rows, in the first test, before the fix).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import Buffer
from zarr.storage import LocalStore, MemoryStore, WrapperStore

from cytearc_vfs.arrays import ArrayWriter


def test_rows_written_by_threads_while_another_flushes_are_all_stored(tmp_path: Any) -> None:
    rows, width = 128, 64
    array = zarr.create_array(
        LocalStore(tmp_path / "s.zarr"), shape=(rows, width), chunks=(rows, width), dtype="i4"
    )
    writer = ArrayWriter(array)
    done = threading.Event()

    def flush_until_done() -> None:
        while not done.is_set():
            writer.flush()

    def write_rows(first: int) -> None:
        for row in range(first, rows, 4):
            writer.write(np.full(width, row + 1), (row,))

    flusher = threading.Thread(target=flush_until_done)
    flusher.start()
    writers = [threading.Thread(target=write_rows, args=(first,)) for first in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    flusher.join()
    writer.flush()
    expected = np.repeat(np.arange(1, rows + 1, dtype="i4")[:, None], width, axis=1)
    assert np.array_equal(array[...], expected)
    assert writer.stale_units == 0 and writer.stale_bytes == 0


class _FailingOnce(WrapperStore[Store]):
    """A store whose first chunk write waits for ``go``, then fails."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.writing = threading.Event()
        self.go = threading.Event()
        self.failed = False

    async def set(self, key: str, value: Buffer) -> None:
        if "/c/" in f"/{key}" and not self.failed:
            self.failed = True
            self.writing.set()
            self.go.wait(10)
            raise OSError("disk full (test)")
        await self._store.set(key, value)


def test_a_failed_flush_keeps_its_edits_under_those_written_meanwhile() -> None:
    store = _FailingOnce(MemoryStore())
    array = zarr.create_array(store, shape=(4,), chunks=(4,), dtype="i4", fill_value=0)
    writer = ArrayWriter(array)
    writer.write([1, 1, 1], [range(0, 3)])
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            writer.flush()
        except OSError as exc:
            errors.append(exc)

    flushing = threading.Thread(target=flush)
    flushing.start()
    assert store.writing.wait(10)
    writer.write([2, 2], [range(1, 3)])  # the same unit, while its first write is failing
    store.go.set()
    flushing.join()
    assert len(errors) == 1 and writer.stale_units == 1
    assert writer.flush() == 1
    assert array[...].tolist() == [1, 2, 2, 0]


class _PausedRead(WrapperStore[Store]):
    """A store whose first chunk read, once read, waits (up to 2 s) for ``go``."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.reading = threading.Event()
        self.go = threading.Event()

    async def get(self, key: str, *args: Any, **kwargs: Any) -> Buffer | None:
        value = await self._store.get(key, *args, **kwargs)
        if "/c/" in f"/{key}" and not self.reading.is_set():
            self.reading.set()
            # in a thread: zarr's I/O of every writer runs on one event loop
            await asyncio.to_thread(self.go.wait, 2)
        return value


def test_two_writers_of_one_array_keep_each_others_cells(tmp_path: Any) -> None:
    """Each writer reads the chunk, lays its cells over it and writes it whole.

    Writer one is held in its read; writer two used to read, write and
    return meanwhile, and writer one then wrote the chunk back as it had
    read it, without writer two's cells. Writes of one array's units are
    now one at a time in a process, whatever object they come through.
    """
    store = _PausedRead(LocalStore(tmp_path / "s.zarr"))
    zarr.create_array(store, name="a", shape=(8,), chunks=(8,), dtype="i4", fill_value=-1)[:] = 0
    one, two = (ArrayWriter(zarr.open_array(store, path="a", mode="r+")) for _ in range(2))
    one.write([1, 1, 1, 1], [range(0, 4)])
    two.write([2, 2, 2, 2], [range(4, 8)])
    first = threading.Thread(target=one.flush)
    first.start()
    assert store.reading.wait(10)
    second = threading.Thread(target=two.flush)
    second.start()
    second.join(1)  # returns at once without the lock; waits for writer one with it
    store.go.set()
    first.join()
    second.join()
    stored = zarr.open_array(LocalStore(tmp_path / "s.zarr"), path="a", mode="r")[:]
    assert stored.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]


def test_a_resize_waits_for_a_flush_of_the_same_array(tmp_path: Any) -> None:
    """A resize used to move the chunks between a flush's check and its writes.

    The flush had checked zarr.json and read the unit to merge into; the
    resize then renamed every chunk one position on, and the flush wrote
    its unit back at the old key: the edit landed in the new first chunk
    (which must read as missing) and the row it was for lost it. The flush
    now holds the array's lock from its check to its last unit, and a
    resize or promote takes the same lock.
    """
    from cytearc_vfs.arrays import read, resize

    store = _PausedRead(LocalStore(tmp_path / "s.zarr"))
    array = zarr.create_array(store, name="a", shape=(6,), chunks=(2,), dtype="i4", fill_value=-1)
    array[:] = np.arange(6)
    writer = ArrayWriter(zarr.open_array(store, path="a", mode="r+"))
    writer.write([100], [range(0, 1)])  # a partial unit: read, merged, written
    flushing = threading.Thread(target=writer.flush)
    flushing.start()
    assert store.reading.wait(10)
    resizing = threading.Thread(target=resize, args=(array,), kwargs={"low": [2]})
    resizing.start()
    resizing.join(1)  # finishes at once without the lock; waits for the flush with it
    store.go.set()
    flushing.join()
    resizing.join()
    reopened = zarr.open_array(LocalStore(tmp_path / "s.zarr"), path="a", mode="r")
    assert read(reopened, raw=True).tolist() == [-1, -1, 100, 1, 2, 3, 4, 5]


def test_recover_waits_for_a_flush_of_the_same_array() -> None:
    """recover() took no part in the array's lock: a recovery run while a flush of the
    array was between its check and its writes could move chunks under the flush."""
    import time

    from cytearc_vfs.arrays import recover
    from cytearc_vfs.arrays.documents import array_lock

    store = MemoryStore()
    array = zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="i4")
    lock = array_lock(array.store_path.store, "a")
    finished: list[float] = []
    with lock:  # a flush of the array in flight
        worker = threading.Thread(
            target=lambda: (recover(array), finished.append(time.monotonic()))
        )
        worker.start()
        worker.join(0.3)
        assert not finished  # waiting for the flush
        released = time.monotonic()
    worker.join(5)
    assert finished and finished[0] >= released
