"""Kill a writer right after its n-th store write, for every n: the crash sweeps' engine.

Used by the sweep children (``crash_child.py``, ``arrays_crash_child.py``,
``export_crash_child.py``), which import everything they need once and then
serve sweeps (:func:`serve_sweeps`, :func:`reports`), each by :func:`sweep`. For
each kill point it forks a child (before any zarr call, so no event-loop
thread is forked) that counts every file write and delete zarr's
``LocalStore`` makes (and any other functions named) and sends itself
SIGKILL right after the n-th. Writes still in flight on other threads stay
half-done, as they would in a real crash.

Each point prints one JSON line: ``{"point": n, "outcome": "killed"}``, or
``"finished"`` with the ``writes`` count once a point lies past the
operation's last write (later points would finish too: the sweep stops), or
``{"point": n, "error": ...}`` when the operation raised.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FINISHED",
    "RAISED",
    "count_writes",
    "install_kill_hook",
    "reports",
    "serve_sweeps",
    "strided",
    "sweep",
]

#: Exit status of a child whose operation returned before the kill point.
FINISHED = 0
#: Exit status of a child whose operation raised (a bug the sweep reports).
RAISED = 3


def kill_counter(point: int) -> tuple[Callable[[], None], list[int]]:
    """``(tick, count)``: each ``tick()`` counts one write, and SIGKILLs the process
    right after the ``point``-th (0: count only); ``count[0]`` is the live count."""
    lock = threading.Lock()
    count = [0]

    def tick() -> None:
        with lock:
            count[0] += 1
            if count[0] == point:
                os.kill(os.getpid(), signal.SIGKILL)

    return tick, count


def install_kill_hook(point: int, *also: tuple[Any, str]) -> list[int]:
    """Count LocalStore's file writes and deletes, and calls of each ``(module, name)``
    of ``also``; SIGKILL right after the ``point``-th. Returns the live count."""
    from zarr.storage import _local

    tick, count = kill_counter(point)

    def counted(function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            tick()
            return result

        return wrapper

    # LocalStore's async methods look these helpers up at call time
    for module, name in ((_local, "_put"), (_local, "_delete"), (_local, "_delete_dir"), *also):
        setattr(module, name, counted(getattr(module, name)))
    return count


def strided(writes: int, edge: int, stride: int) -> list[int]:
    """Every point of the first and last ``edge`` writes, every ``stride``-th between."""
    return sorted(
        set(range(1, min(edge, writes) + 1))
        | set(range(1, writes + 1, stride))
        | set(range(max(1, writes - edge + 1), writes + 1))
    )


def count_writes(
    prepare: Callable[[int], Any], operate: Callable[[Any], None], *also: tuple[Any, str]
) -> int | None:
    """The writes of a whole run of ``operate`` (on ``prepare(0)``), in a forked child
    never killed; None if it raised (reported as point 0's error)."""
    destination = prepare(0)
    sys.stdout.flush()
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(readable)
        count = install_kill_hook(0, *also)  # point 0: counts, never kills
        try:
            operate(destination)
        except BaseException as exc:
            print(json.dumps({"point": 0, "error": repr(exc)}), flush=True)
            os._exit(RAISED)
        os.write(writable, str(count[0]).encode())
        os._exit(FINISHED)
    os.close(writable)
    with os.fdopen(readable, "rb") as answer:
        reported = answer.read()
    _, status = os.waitpid(pid, 0)
    finished = os.WIFEXITED(status) and os.WEXITSTATUS(status) == FINISHED
    return int(reported) if finished else None


def sweep(
    points: list[int] | dict[str, int],
    prepare: Callable[[int], Any],
    operate: Callable[[Any], None],
    *also: tuple[Any, str],
) -> int:
    """For each of ``points``: ``prepare(point)`` (in this process) makes the
    destination, and a forked child runs ``operate(destination)`` until the
    kill point. Returns the script's exit status (1 if a child failed otherwise).

    ``points`` may instead be ``{"edge": E, "stride": S}``: a first run counts the
    writes (reported as ``{"point": 0, "outcome": "counted", "writes": n}``, its
    destination that of ``prepare(0)``), then the points are :func:`strided`
    (a stride of 1: every point, and one past the last)."""
    if isinstance(points, dict):
        writes = count_writes(prepare, operate, *also)
        if writes is None:
            return 1
        print(json.dumps({"point": 0, "outcome": "counted", "writes": writes}), flush=True)
        edge, stride = points["edge"], points["stride"]
        points = list(range(1, writes + 2)) if stride == 1 else strided(writes, edge, stride)
    for point in points:
        destination = prepare(point)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: operate, die at the point
            count = install_kill_hook(point, *also)
            try:
                operate(destination)
            except BaseException as exc:
                print(json.dumps({"point": point, "error": repr(exc)}), flush=True)
                os._exit(RAISED)
            print(json.dumps({"point": point, "outcome": "finished", "writes": count[0]}))
            sys.stdout.flush()
            os._exit(FINISHED)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            print(json.dumps({"point": point, "outcome": "killed"}), flush=True)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == FINISHED:
            break  # past the last write: later points would finish too
        else:
            print(json.dumps({"point": point, "outcome": "failed", "status": status}), flush=True)
            return 1
    return 0


def serve_sweeps(run: Callable[[dict[str, Any]], int]) -> int:
    """A sweep child's main loop: each line of stdin is one sweep's JSON config, run by
    ``run`` (which calls :func:`sweep`), its points' lines followed by ``{"done": status}``.

    One child serves every sweep of a test process (:func:`reports`): it imports
    the package once, where a child per sweep cost a new interpreter (2-4 s of
    imports on a loaded machine) each time. It makes no zarr call itself, so
    nothing it holds is unsafe to fork.
    """
    for line in sys.stdin:
        if line.strip():
            status = run(json.loads(line))
            print(json.dumps({"done": status}), flush=True)
    return 0


@dataclass(frozen=True, slots=True)
class _SweepChild:
    process: subprocess.Popen[str]
    errors: Path
    """Where the child's stderr goes (a pipe nobody reads could fill and block it)."""


#: The sweep child serving each script, in this test process.
_CHILDREN: dict[Path, _SweepChild] = {}


def _child(script: Path) -> _SweepChild:
    running = _CHILDREN.get(script)
    if running is not None and running.process.poll() is None:
        return running
    handle, name = tempfile.mkstemp(prefix=f"{script.stem}-", suffix=".stderr")
    with os.fdopen(handle, "w") as errors:
        process = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    if not _CHILDREN:
        atexit.register(_stop_all)
    _CHILDREN[script] = running = _SweepChild(process, Path(name))
    return running


def _stop(script: Path) -> None:
    running = _CHILDREN.pop(script, None)
    if running is None:
        return
    running.process.kill()
    running.process.wait()
    for stream in (running.process.stdin, running.process.stdout):
        if stream is not None:
            stream.close()
    running.errors.unlink(missing_ok=True)


def _stop_all() -> None:
    for script in list(_CHILDREN):
        _stop(script)


def reports(script: Path, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Run one sweep of ``config`` in the sweep child of ``script`` (started on first
    use, see :func:`serve_sweeps`); yields each point's JSON line as it is
    reported, so the caller checks the last destination while the next point
    runs (the two cores share the sweep). The sweep must end with status 0.

    A caller that stops reading early (a failed check) stops the child too: the
    next sweep gets a fresh one rather than this sweep's remaining lines."""
    running = _child(script)
    assert running.process.stdin is not None and running.process.stdout is not None
    running.process.stdin.write(json.dumps(config) + "\n")
    running.process.stdin.flush()
    done = False
    try:
        for line in running.process.stdout:
            if not line.startswith("{"):
                continue
            report = json.loads(line)
            if "done" in report:
                done = True
                assert report["done"] == 0, running.errors.read_text()[-4000:]
                return
            yield report
        done = True
        _stop(script)
        raise AssertionError(f"the sweep child {script.name} ended: {running.errors.read_text()}")
    finally:
        if not done:
            _stop(script)
