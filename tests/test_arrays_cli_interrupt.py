"""``cytearc-vfs array resize`` stopped by SIGTERM names the command that finishes it.

The interrupt's report said "cytearc-vfs array recover LOCATION PATH
finishes it", placeholders the user had to fill in; it now gives the
command for this array, which then finishes it.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr

from cytearc_vfs.arrays import read


def test_an_interrupted_resize_names_its_own_recover_command(tmp_path: Path) -> None:
    location = tmp_path / "big store.zarr"  # a space: the command must quote it
    rows = 3000
    array = zarr.create_array(
        str(location), name="x", shape=(rows, 4), chunks=(1, 4), dtype="i2", fill_value=0
    )
    array[:1] = 7
    chunk = (location / "x" / "c" / "0" / "0").read_bytes()
    for row in range(1, rows):  # the same bytes: faster than zarr encoding each
        folder = location / "x" / "c" / str(row)
        folder.mkdir()
        (folder / "0").write_bytes(chunk)
    argv = ["array", "resize", str(location), "x", "--low=1,0"]
    child = subprocess.Popen(
        [sys.executable, "-m", "cytearc_vfs.cli", *argv],
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = location / "x" / "cytearc.journal.json"
    deadline = time.monotonic() + 60
    while not journal.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0, "the resize ended before the signal: make the array larger"
    command = f"cytearc-vfs array recover {shlex.quote(str(location))} x"
    assert f"finish it with: {command}" in err
    recover = shlex.split(command)[1:]
    subprocess.run([sys.executable, "-m", "cytearc_vfs.cli", *recover], check=True)
    after = zarr.open_array(str(location), path="x", mode="r")
    assert after.shape == (rows + 1, 4)
    assert np.array_equal(read(after, raw=True)[1:], np.full((rows, 4), 7, dtype="i2"))
