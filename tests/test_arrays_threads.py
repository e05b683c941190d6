"""One ``ArrayWriter`` shared by threads: no write is lost to a flush running beside it.

A flush used to read a unit's edits, write them, then forget the unit: edits
made to it by another thread in between were forgotten unwritten (a quarter
to a half of the rows, in the first test, before the fix).
"""

from __future__ import annotations

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
