"""Artifact groups a producer left unpublished: it was killed inside its ``with`` block.

A real producer in a process of its own, ended by ``os._exit`` before its
publishing write, as a killed job ends: its groups keep ``complete=False``,
arrays and all. (Abandoning a writer inside the test process instead leaves
its pending work to be collected at an arbitrary later point, in another test.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any


def killed_producer(
    location: Path | str,
    groups: list[tuple[str, str]],
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """The paths of the groups (``(root, kind)`` each) a producer left when it was
    killed before publishing them, opened with ``cv.open_store`` (a mount's go to its
    target)."""
    script = textwrap.dedent(
        f"""
        import os, numpy as np, cytearc_vfs as cv
        store = cv.open_store({str(location)!r}, mode="r+", storage_options={storage_options!r})
        for root, kind in {groups!r}:
            writer = cv.publish_artifact(store, root, kind, provenance={{
                "operation": kind + ".running", "parameters": {{}}, "inputs": {{}}}})
            art = writer.__enter__()
            art.write_array("data", np.ones((3, 2)))
            print(art.path, flush=True)
        os._exit(9)  # killed before any publishing write
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 9, done.stderr
    return done.stdout.split()
