"""Running the installed ``cytearc-vfs`` as a person does: in a terminal, or interrupted.

CI has no terminal, which is how a crash of the progress bars once reached
users: these helpers give the command a real pseudo-terminal (with a window
size, as a terminal emulator sets one) so the terminal path runs in CI.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anndata
import numpy as np
import pandas as pd
import scipy.sparse as sp


def readable(source: Any, timeout: float) -> bool:
    """Whether ``source`` (a file descriptor or an object with ``fileno``) has data to
    read within ``timeout`` seconds.

    ``poll``, not ``select``: a test process with many sockets open (loopback
    servers, clients' connection pools) has descriptors past ``select``'s
    1,024, where it raises "filedescriptor out of range".
    """
    poller = select.poll()
    poller.register(source, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0.0, timeout) * 1000))


def run_main(*args: str) -> subprocess.CompletedProcess[str]:
    """``cytearc-vfs ARGS`` run in this process: its exit code, stdout and stderr, as
    ``subprocess.run`` gives them. For commands that end by themselves (refusals,
    exports), where a new interpreter would cost a second or more of imports each;
    tests of the program itself (signals, terminals, exit paths) run the executable."""
    from cytearc_vfs.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def stop_process(process: subprocess.Popen[Any], signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to a command still running and wait for it; killed if it will not end."""
    if process.poll() is not None:
        return
    process.send_signal(signum)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


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


def run_in_terminal(
    args: list[str],
    *,
    timeout: float = 300,
    columns: int = 100,
    program: list[str] | None = None,
) -> TerminalRun:
    """Run ``cytearc-vfs ARGS`` (or ``program ARGS``) with stdin, stdout and stderr on a
    pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [*(program or [cli_executable()]), *args], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready = readable(master, 0.5)
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


class TerminalSession:
    """A long-running ``cytearc-vfs`` command on a pseudo-terminal that is its controlling
    terminal, so typing Ctrl-C reaches it as SIGINT, as it does for a person."""

    def __init__(self, args: list[str], *, columns: int = 100) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["TERM"] = "xterm-256color"

        def take_terminal() -> None:
            # a new session whose controlling terminal is the pty (job control, ^C)
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            [cli_executable(), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=take_terminal,
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []

    @property
    def output(self) -> str:
        """Everything the command printed so far."""
        return b"".join(self._chunks).decode("utf-8", errors="replace")

    def _pump(self, wait: float) -> bool:
        ready = readable(self._master, wait)
        if not ready:
            return True
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # the child closed the terminal
            return False
        self._chunks.append(chunk)
        return bool(chunk)

    def read_until(self, text: str, *, timeout: float = 120) -> str:
        """Read until ``text`` appears (or the command ends); the output so far."""
        deadline = time.monotonic() + timeout
        while text not in self.output and time.monotonic() < deadline:
            if not self._pump(0.2) and self.process.poll() is not None:
                break
        return self.output

    def type(self, keys: bytes) -> None:
        """Type ``keys`` into the terminal (``b"\\x03"`` is Ctrl-C)."""
        os.write(self._master, keys)

    def finish(self, *, timeout: float = 60) -> TerminalRun:
        """Wait for the command to end; its whole output and exit status."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._pump(0.2)
        if self.process.poll() is None:
            self.process.kill()
        returncode = self.process.wait(timeout=30)
        # what it printed last is still in the terminal's buffer
        while readable(self._master, 0.1) and self._pump(0):
            pass
        os.close(self._master)
        return TerminalRun(returncode, self.output)
