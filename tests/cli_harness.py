"""Running the installed ``cytearc-vfs`` as a person does: in a terminal, or interrupted.

CI has no terminal, which is how a crash of the progress bars once reached
users: these helpers give the command a real pseudo-terminal (with a window
size, as a terminal emulator sets one) so the terminal path runs in CI.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import scipy.sparse as sp


def cli_executable() -> str:
    """The ``cytearc-vfs`` script of this environment (what a user runs)."""
    beside = Path(sys.executable).parent / "cytearc-vfs"
    found = str(beside) if beside.exists() else shutil.which("cytearc-vfs")
    assert found, "the cytearc-vfs entry point is not installed in this environment"
    return found


@dataclass(frozen=True)
class TerminalRun:
    """What a command printed to its terminal, and how it ended."""

    returncode: int
    output: str


def run_in_terminal(args: list[str], *, timeout: float = 300, columns: int = 100) -> TerminalRun:
    """Run ``cytearc-vfs ARGS`` with stdin, stdout and stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [cli_executable(), *args], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif process.poll() is not None:
                break
        else:
            process.kill()
            raise AssertionError(f"cytearc-vfs {' '.join(args)} did not finish in {timeout} s")
        returncode = process.wait(timeout=30)
    finally:
        os.close(master)
    return TerminalRun(returncode, b"".join(chunks).decode("utf-8", errors="replace"))


def tree_digest(root: Path) -> str:
    """One hash of every file's path and bytes under ``root`` (empty string when absent)."""
    if not root.exists():
        return ""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def write_h5ad(path: Path, counts: sp.csr_array, *, seed: int = 0) -> anndata.AnnData:
    """An h5ad file of ``counts`` with a batch column, as users bring them."""
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame(
        {"batch": rng.choice(["a", "b"], counts.shape[0])},
        index=[f"cell{i}" for i in range(counts.shape[0])],
    )
    var = pd.DataFrame(index=[f"gene{i}" for i in range(counts.shape[1])])
    adata = anndata.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var)
    adata.write_h5ad(path)
    return adata
