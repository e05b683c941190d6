"""SIGINT and SIGTERM at random moments of write, composite, repack and mount.

Afterwards the destination is either absent (this command created it and
removed it) or a complete store (the command had finished); the source is
byte-identical; the output holds one line, no traceback and no asyncio
"Task was destroyed" noise; and a rerun succeeds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_harness import cli_executable, run_main, tree_digest, write_h5ad
from conftest import realistic_counts

import cytearc_vfs as cv

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Moments after the start: the handlers are installed about 0.1 s in (the
# package imports nothing heavy first); later moments fall inside the work.
DELAYS = (0.3, 0.6, 1.0, 1.6)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("interrupts")
    counts = realistic_counts(20_000, 1_500, seed=11, density=0.06)
    write_h5ad(root / "big.h5ad", counts)
    cv.write_counts(root / "a.zarr", counts)
    cv.write_counts(root / "b.zarr", realistic_counts(5_000, 1_500, seed=12))
    return {"h5ad": root / "big.h5ad", "a": root / "a.zarr", "b": root / "b.zarr"}


def _command(kind: str, inputs: dict[str, Path], destination: Path) -> list[str]:
    return {
        "write": ["write", str(inputs["h5ad"]), str(destination)],
        "composite": ["composite", str(destination), str(inputs["a"]), str(inputs["b"])],
        "repack": ["repack", str(inputs["a"]), str(destination)],
        "mount": ["mount", str(inputs["a"]), str(destination)],
    }[kind]


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: /proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone, or no /proc: nothing to wait for
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return True


def _wait_for_handler(process: subprocess.Popen[str], signum: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while process.poll() is None and not _catches(process.pid, signum):
        if time.monotonic() > deadline:
            raise AssertionError(f"the command installed no handler for {signum} in {timeout} s")
        time.sleep(0.02)


def _interrupt(args: list[str], delay: float, signum: int) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [cli_executable(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(delay)
    # On a loaded machine the imports can outlast the delay: a signal before
    # the command's handlers exist meets Python's start-up (a SIGTERM kills
    # the process by default, a SIGINT raises KeyboardInterrupt inside the
    # interpreter's own imports), before anything was written, which is not
    # what these tests are about. Wait for them. Python catches SIGINT from
    # its start, so the command's SIGTERM handler, installed with its SIGINT
    # one, says when they exist. (A Ctrl-C while the command line's modules
    # load is the entry point's one line, tested below.)
    _wait_for_handler(process, signal.SIGTERM)
    if process.poll() is None:
        process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["write", "composite", "repack", "mount"])
def test_interrupt_at_random_moments(kind: str, inputs: dict[str, Path], tmp_path: Path) -> None:
    sources = {name: tree_digest(path) for name, path in inputs.items() if path.is_dir()}
    h5ad_bytes = inputs["h5ad"].read_bytes()
    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    outcomes: dict[str, int] = {"removed": 0, "finished": 0}
    # one trial per signal: tests/test_interrupt_sweeps.py interrupts the command
    # line at set points of its writes (locally and on S3); these are the moments
    # it does not choose (imports, reads, cleanup)
    trials = [
        (signum, float(rng.choice(DELAYS)) + float(rng.uniform(0, 0.3))) for signum in SIGNALS
    ]
    for trial, (signum, delay) in enumerate(trials):  # a trial appended below runs too
        destination = tmp_path / f"{kind}-{trial}.zarr"
        result = _interrupt(_command(kind, inputs, destination), delay, signum)
        assert "Traceback" not in result.stderr, result.stderr
        assert "Task was destroyed" not in result.stderr, result.stderr
        if result.returncode == 0:
            outcomes["finished"] += 1
            assert cv.open_store(destination)
        else:
            expected = 130 if signum == signal.SIGINT else 143
            assert result.returncode == expected, result.stderr
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, result.stderr
            assert "interrupted" in lines[0]
            assert not destination.exists(), f"{lines[0]}: {sorted(destination.rglob('*'))[:5]}"
            outcomes["removed"] += 1
        # the sources are untouched, and the same command succeeds afterwards
        assert {n: tree_digest(p) for n, p in inputs.items() if p.is_dir()} == sources
        assert inputs["h5ad"].read_bytes() == h5ad_bytes
        if result.returncode != 0:
            # the removed destination leaves nothing in the way of the same command
            rerun = run_main(*_command(kind, inputs, destination))
            assert rerun.returncode == 0, rerun.stderr
            assert cv.open_store(destination)
        if trial == len(SIGNALS) - 1 and not outcomes["removed"]:
            # on a quiet machine a command can finish before both random moments:
            # one more trial at the earliest (as soon as its handlers exist)
            trials.append((signal.SIGTERM, 0.0))
    # at least one trial must have stopped the command mid-way, or the test saw nothing
    assert outcomes["removed"] >= 1, outcomes


def test_interrupt_of_an_overwrite_leaves_a_named_state(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    """A destination that existed is not removed; info names what is there, --overwrite replaces it."""
    destination = tmp_path / "again.zarr"
    subprocess.run(
        [cli_executable(), *_command("write", inputs, destination)], check=True, capture_output=True
    )
    # The signal must land while the replacement is being written: after the
    # command has started (later under load), before it has finished.
    for delay in (1.2, 1.8, 2.6, 3.6, 5.0):
        result = _interrupt(
            [*_command("write", inputs, destination), "--overwrite"], delay, signal.SIGINT
        )
        if result.returncode == 130 and "existed before" in result.stderr:
            break
        assert result.returncode in (0, 130), result.stderr
    else:
        pytest.skip("no signal landed while the replacement was being written")
    info = run_main("info", str(destination))
    assert "Traceback" not in info.stderr
    assert info.returncode in (0, 2, 3)
    if info.returncode == 0:
        assert "unfinished" in info.stdout or "cells x" in info.stdout
    # the line says which of the two states the destination is in
    if "was being replaced" in result.stderr:
        assert info.returncode == 3 and "unfinished" in info.stderr, info.stderr
    else:
        assert "is unchanged" in result.stderr and info.returncode == 0, result.stderr
    rerun = run_main(*_command("write", inputs, destination), "--overwrite")
    assert rerun.returncode == 0, rerun.stderr


def test_an_interrupted_replacement_says_whether_the_old_store_is_gone(tmp_path: Path) -> None:
    """'existed before and was left as it is' was printed also when the replacement had
    begun, and the user's store was gone: the guard now reads the root's marker."""
    from cytearc_vfs.cli.interrupts import DestinationGuard
    from cytearc_vfs.write.destinations import create_destination

    destination = tmp_path / "old.zarr"
    cv.write_counts(destination, realistic_counts(50, 20, seed=2))
    guard = DestinationGuard(destination)
    assert guard.existed
    said = guard.discard()
    assert said.endswith("existed before and is unchanged (it was not replaced yet)"), said
    assert cv.open_store(destination) is not None  # discard removed nothing
    # a replacement under way: the writer marks the root, then empties the rest
    group = create_destination(destination, overwrite=True, writer="write_counts")
    said = guard.discard()
    assert "was being replaced: what it held is gone and it is unfinished now" in said, said
    assert "--overwrite writes it again" in said and "left as it is" not in said
    assert destination.is_dir()  # a destination that existed is never removed
    del group


def test_an_interrupt_swallowed_by_a_callback_is_delivered_again(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A signal handled inside ``__del__`` (or a weakref callback) is printed as
    "Exception ignored" and lost; the command must still stop, quietly."""
    import os

    from cytearc_vfs.cli.interrupts import Interrupted, interruptible

    class SignalledWhileDeleted:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside __del__

    def swallow_then_work() -> None:
        SignalledWhileDeleted()  # deleted at once: Python swallows what its handler raised
        for _ in range(1000):  # the re-delivered signal lands between bytecodes
            time.sleep(0.001)

    with interruptible(), pytest.raises(Interrupted) as caught:
        swallow_then_work()
    assert caught.value.signum == signal.SIGTERM
    assert capfd.readouterr().err == ""  # no "Exception ignored ..." on the way


# A real SIGINT to the process itself the moment the command line starts
# loading its modules (the slow part of starting on a loaded machine).
_SIGINT_WHILE_LOADING = """
import importlib.abc, os, signal, sys

class SignalOnLoad(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "cytearc_vfs.cli.running":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, SignalOnLoad())
from cytearc_vfs.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_the_command_line_loads_is_one_line(
    inputs: dict[str, Path], tmp_path: Path, as_json: bool
) -> None:
    destination = tmp_path / "early.zarr"
    args = _command("write", inputs, destination) + (["--json"] if as_json else [])
    run = subprocess.run(
        [sys.executable, "-c", _SIGINT_WHILE_LOADING, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [
        "cytearc-vfs write: interrupted (SIGINT) while starting; nothing was written"
    ]
    assert not destination.exists()
    if as_json:
        assert json.loads(run.stdout)["category"] == "interrupted"


# A signal that comes between a coroutine's creation and its scheduling (inside
# zarr's sync(store.get(...)), as the random moments found under repack) leaves
# the coroutine unawaited; collected under the report, Python printed "coroutine
# ... was never awaited" and its origin below the one line.
_INTERRUPTED_WITH_A_COROUTINE_PENDING = """
import gc, sys
from cytearc_vfs.cli import main, running
from cytearc_vfs.cli.interrupts import Interrupted

def interrupted(arguments, state):
    async def get():
        return None
    pending = [get()]  # created, never scheduled
    pending.append(pending)  # in a cycle: freed by the collector, at a moment of its own
    raise Interrupted(2)

running._run = interrupted
gc.disable()  # the collector runs where the report runs, as it happened
code = main(sys.argv[1:])
gc.collect()
sys.exit(code)
"""


def test_a_coroutine_left_by_an_interrupt_prints_nothing(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_WITH_A_COROUTINE_PENDING, "repack", "a", "b"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 130, run.stderr
    assert run.stderr.splitlines() == [
        "cytearc-vfs repack: interrupted (SIGINT); nothing was written"
    ]


# An interrupted command's process, its cleanup reported, with a thread still
# busy in the background (as zarr's loop or a decoder pool can be) and an exit
# handler that must still run (a source cache's temporary folder).
_ENDING_WITH_A_THREAD_BUSY = """
import atexit, sys, threading, time
from pathlib import Path
from cytearc_vfs.cli.interrupts import end_interrupted_process

atexit.register(Path(sys.argv[1]).write_text, "ran")
threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon: joined at shutdown
print("reported", end="")  # buffered: a pipe
end_interrupted_process(130)
"""


def test_an_interrupted_process_ends_without_waiting_for_its_threads(tmp_path: Path) -> None:
    """After the report: exit handlers run, output flushed, status kept; no shutdown."""
    marker = tmp_path / "exit-handler"
    # a normal shutdown would join the thread for its 600 s: the timeout fails it
    run = subprocess.run(
        [sys.executable, "-c", _ENDING_WITH_A_THREAD_BUSY, str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 130, run.stderr
    assert run.stdout == "reported"
    assert marker.read_text() == "ran"


# A command run as the program (``main()`` with no arguments, as the console
# script calls it) that leaves a pool thread finishing queued work and an exit
# handler: both must be done before the process ends without teardown.
_A_COMMAND_ENDING = """
import atexit, sys, threading, time
from pathlib import Path

marker, finished = Path(sys.argv[1]), Path(sys.argv[2])
atexit.register(marker.write_text, "ran")

def work() -> None:
    time.sleep(0.5)
    finished.write_text("done")

threading.Thread(target=work).start()  # not a daemon: waited for, as shutdown does
sys.argv = ["cytearc-vfs", "--version"]
from cytearc_vfs.cli import main
main()
print("not reached: main() ends the process")
"""


def test_a_command_run_as_the_program_ends_without_teardown(tmp_path: Path) -> None:
    """Interpreter teardown cost 1-2 s of CPU after every command: it is skipped, after
    what shutdown must do (threads that are not daemons, exit handlers, output)."""
    marker, finished = tmp_path / "exit-handler", tmp_path / "thread"
    run = subprocess.run(
        [sys.executable, "-c", _A_COMMAND_ENDING, str(marker), str(finished)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("cytearc-vfs ") and "not reached" not in run.stdout
    assert finished.read_text() == "done" and marker.read_text() == "ran"


def test_an_interrupted_demo_names_what_its_folder_holds(tmp_path: Path) -> None:
    """Ctrl-C in `demo --directory DIR` said "nothing was written" while DIR held
    wu2020.zarr complete and celltypist.zarr unfinished (its writer interrupted)."""
    folder = tmp_path / "demo"
    process = subprocess.Popen(
        [cli_executable(), "demo", "--directory", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # the first store is written: the second is under way
        if "write_counts wu2020" in line:
            break
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    if process.returncode == 0:
        pytest.skip("the demo finished before the signal")
    assert process.returncode == 130, stderr
    assert "nothing was written" not in stderr, stderr
    said = stderr.strip().splitlines()[-1]
    assert f"{folder} holds the demo's stores as far as it got: wu2020.zarr (complete)" in said
    unfinished = []
    for name in ("celltypist.zarr", "composite.zarr", "mounted.zarr"):
        if (folder / name).exists():
            try:
                cv.open_store(folder / name).close()
                assert f"{name} (complete)" in said, said
            except Exception:
                unfinished.append(name)
                assert f"{name} (unfinished: it does not open)" in said, said
    assert said.endswith("the same command again replaces them"), said
    # which it does
    rerun = run_main("demo", "--directory", str(folder), "--json")
    assert rerun.returncode == 0, rerun.stderr
    for name in ("wu2020.zarr", "celltypist.zarr", "composite.zarr", "mounted.zarr"):
        cv.open_store(folder / name).close()


def test_an_interrupted_demo_in_a_temporary_folder_keeps_nothing() -> None:
    from cytearc_vfs.cli.commands import INTERRUPT_NOTES

    note = INTERRUPT_NOTES["demo"]
    assert callable(note)
    import argparse

    said = note(argparse.Namespace(directory=None))
    assert said == "nothing was kept: the demo's temporary folder is removed"
