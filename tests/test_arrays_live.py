"""A resize live in another process: every other operation refuses, writes nothing.

The child process resizes a ``LocalStore`` array through a wrapper that
stops before its n-th write (set or delete) until the test lets it go. While
it waits, with the journal written and the chunks half-moved, this process
calls ``read``, ``ArrayWriter``, ``resize`` and ``promote`` on a handle it
opened before the resize (zarr does not refuse that one): each must refuse
with the remedy and leave every file as it was, and the child must then
finish with exactly the expected values. (Before, ``read`` ran its own
recovery against the live operation and corrupted the array.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from array_helpers import leftovers
from zarr.storage import LocalStore

from cytearc_vfs import IncompleteStoreError
from cytearc_vfs.arrays import ArrayWriter, promote, read, resize

CHILD = """
import asyncio, sys, zarr
from pathlib import Path
from zarr.storage import LocalStore, WrapperStore
from cytearc_vfs.arrays import resize
where, pause_at = Path(sys.argv[1]), int(sys.argv[2])

class Pausing(WrapperStore):
    writes = 0
    async def _write(self):
        Pausing.writes += 1
        if Pausing.writes == pause_at:
            (where.parent / "paused").touch()
            while not (where.parent / "go").exists():
                await asyncio.sleep(0.01)
    async def set(self, key, value):
        await self._write()
        await self._store.set(key, value)
    async def delete(self, key):
        await self._write()
        await self._store.delete(key)

resize(zarr.open_array(Pausing(LocalStore(where)), path="a", mode="r+"), low=[4])
print("done")
"""


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("pause_at", [2, 3, 6, 9])  # journal only; marked; renames under way
def test_operations_refuse_a_live_resize_of_another_process(tmp_path: Path, pause_at: int) -> None:
    where = tmp_path / "s.zarr"
    values = np.arange(1, 9, dtype="i4")
    array = zarr.create_array(
        LocalStore(where), name="a", shape=(8,), chunks=(1,), dtype="i4", fill_value=0
    )
    array[:] = values
    mine = zarr.open_array(LocalStore(where), path="a", mode="r+")  # before the resize
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(where), str(pause_at)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "paused").exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        snapshot = _files(where)
        for attempt in (
            lambda: read(mine),
            lambda: ArrayWriter(mine),
            lambda: resize(mine, high=[1]),
            lambda: promote(mine, 0),
        ):
            with pytest.raises(IncompleteStoreError, match=r"under way.*wait for it to finish"):
                attempt()
        assert _files(where) == snapshot  # nothing written, deleted or renamed
    finally:
        (tmp_path / "go").touch()
        out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out.strip() == "done"
    got = zarr.open_array(LocalStore(where), path="a", mode="r")[...]
    assert np.array_equal(got, np.concatenate([np.zeros(4, "i4"), values]))
    assert leftovers(LocalStore(where)) == []
