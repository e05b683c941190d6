"""Kill a writer right after its n-th store write, for every n: the crash sweeps' engine.

Used by the sweep children (``crash_child.py``, ``arrays_crash_child.py``),
which import everything they need once and then call :func:`sweep`. For
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

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["FINISHED", "RAISED", "count_writes", "install_kill_hook", "reports", "strided", "sweep"]

#: Exit status of a child whose operation returned before the kill point.
FINISHED = 0
#: Exit status of a child whose operation raised (a bug the sweep reports).
RAISED = 3


def install_kill_hook(point: int, *also: tuple[Any, str]) -> list[int]:
    """Count LocalStore's file writes and deletes, and calls of each ``(module, name)``
    of ``also``; SIGKILL right after the ``point``-th. Returns the live count."""
    from zarr.storage import _local

    lock = threading.Lock()
    count = [0]

    def counted(function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            with lock:
                count[0] += 1
                if count[0] == point:
                    os.kill(os.getpid(), signal.SIGKILL)
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


def reports(script: Path, config: dict[str, Any], config_path: Path) -> Iterator[dict[str, Any]]:
    """Run a sweep child ``script`` with ``config`` (written to ``config_path``); yields
    each point's JSON line as it is reported, so the caller checks the last
    destination while the next child runs (the two cores share the sweep).
    The script must end with status 0."""
    config_path.write_text(json.dumps(config))
    with subprocess.Popen(
        [sys.executable, str(script), str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        for line in child.stdout:
            if line.startswith("{"):
                yield json.loads(line)
        errors = child.stderr.read()
    assert child.returncode == 0, errors
