"""KeyboardInterrupt in the caller's thread stops the writer's work before it reaches the caller.

In-process and fast: the destination is a store whose writes each wait in a
thread before they store (a file write under way), and SIGINT raises
``KeyboardInterrupt`` in this thread right after the n-th write has
started (``tests/test_interrupt_sweeps.py`` sends real
signals to child processes, locally and on S3).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from zarr.abc.store import Store
from zarr.core.buffer import Buffer
from zarr.core.sync import sync
from zarr.storage import MemoryStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.errors import IncompleteStoreError
from cytearc_vfs.write.stopping import finish_sent, owned_work, stop_work

#: Seconds each write waits in its thread before it stores.
IN_FLIGHT = 0.03


class SlowWrites(WrapperStore[Store]):
    """Writes that store from a thread after a wait, logged in one order with ``mark()``."""

    def __init__(self, store: Store, interrupt_at: int = 0) -> None:
        super().__init__(store)
        self.log: list[tuple[str, str]] = []
        self.started = 0
        self.interrupt_at = interrupt_at
        self._lock = threading.Lock()

    def _with_store(self, store: Store) -> SlowWrites:
        view = SlowWrites(store, self.interrupt_at)
        view.log, view._lock = self.log, self._lock  # one log for every view
        return view

    def mark(self) -> None:
        with self._lock:
            self.log.append(("returned", ""))

    def late(self) -> list[tuple[str, str]]:
        with self._lock:
            kinds = [kind for kind, _ in self.log]
            return self.log[kinds.index("returned") + 1 :] if "returned" in kinds else []

    async def _slow(self, key: str, operation: Any) -> None:
        with self._lock:
            self.started += 1
            self.log.append(("start", key))
            if self.started == self.interrupt_at:
                os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt in the caller's thread
        loop = asyncio.get_running_loop()

        def store() -> None:
            time.sleep(IN_FLIGHT)  # under way: a cancelled awaiter does not stop it
            asyncio.run_coroutine_threadsafe(operation, loop).result()
            with self._lock:
                self.log.append(("end", key))

        await asyncio.to_thread(store)

    async def set(self, key: str, value: Buffer) -> None:
        await self._slow(key, self._store.set(key, value))

    async def delete(self, key: str) -> None:
        await self._slow(key, self._store.delete(key))


def test_finish_sent_outlives_the_cancel() -> None:
    """A cancelled task that awaits a sent write ends only after the write."""
    events: list[str] = []

    async def write() -> None:
        await asyncio.sleep(0.05)
        events.append("stored")

    async def scenario() -> None:
        task = asyncio.ensure_future(finish_sent(write()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events.append("cancelled")

    sync(scenario())
    assert events == ["stored", "cancelled"]


def test_stop_work_cancels_only_its_own_tasks() -> None:
    """A stop cancels the tasks started in its work, not another caller's."""
    from zarr.core.sync import _get_loop

    loop = _get_loop()
    outside = asyncio.run_coroutine_threadsafe(asyncio.sleep(30), loop)
    with owned_work() as work:
        inside = asyncio.run_coroutine_threadsafe(asyncio.sleep(30), loop)
    stop_work(work)
    assert inside.cancelled()
    assert not outside.done()
    outside.cancel()


@pytest.mark.parametrize("point", [1, 3, 6, 10, 14, 18])
def test_interrupted_write_counts_leaves_nothing_running(point: int) -> None:
    counts = realistic_counts(400, 60, seed=5)
    full = SlowWrites(MemoryStore())
    cv.write_counts(full, counts)
    if point > full.started:
        pytest.skip(f"the write makes {full.started} writes")
    store = SlowWrites(MemoryStore(), interrupt_at=point)
    with pytest.raises(KeyboardInterrupt):
        cv.write_counts(store, counts)
    store.mark()
    time.sleep(10 * IN_FLIGHT)  # anything still running gets its chance to write
    assert store.late() == []
    with pytest.raises(IncompleteStoreError):
        cv.open_store(store)
    cv.write_counts(store, counts, overwrite=True)  # the same process goes on
    assert cv.open_store(store)


@pytest.mark.parametrize("point", [2, 4, 7])
def test_interrupted_artifact_block_leaves_nothing_running(point: int) -> None:
    """KeyboardInterrupt while a band is written: the group is deleted after the last write."""
    inner = MemoryStore()
    zarr.create_group(inner, zarr_format=3)  # a datastore root: its "artifacts" root exists
    store = SlowWrites(inner, interrupt_at=point)
    provenance = {"operation": "normalize", "parameters": {}, "inputs": {"counts": "RNA"}}
    values = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    started: list[Any] = []

    def publish() -> None:
        with cv.publish_artifact(store, "artifacts", "normalized", provenance=provenance) as art:
            started.append(art)
            band = art.create_array("values", (64, 8), "float32", chunks=(8, 8))
            for start in range(0, 64, 16):
                band.write(values[start : start + 16])

    with pytest.raises(KeyboardInterrupt):
        publish()
    store.mark()
    time.sleep(10 * IN_FLIGHT)  # anything still running gets its chance to write
    assert store.late() == []

    async def keys() -> list[str]:
        return [
            key async for key in store.list_prefix(f"artifacts/normalized/{started[0].artifact_id}")
        ]

    assert sync(keys()) == []  # deleted, and nothing landed after the deletion
