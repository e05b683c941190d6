"""Measurements run in a child process against a given checkout, shared by the
memory-budget benchmarks (``bench_memory_budgets.py``, ``bench_export_budget.py``,
``bench_composite_budget.py``), which compare the code before and after."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def baseline_checkout(here: Path, ref: str) -> Iterator[Path]:
    """The files of ``ref`` (``git archive``, so no worktree is registered in the
    repository) in a temporary folder, removed at the end.

    This checkout's compiled kernels are copied where their C source is the
    same: the archive has none, and numpy's fallback would slow the baseline.
    """
    folder = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(here), "archive", ref], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        for built in here.glob("cytearc_vfs/**/*.so"):
            source = built.parent / (built.name.split(".")[0] + ".c")
            twin = folder / built.relative_to(here)
            twin_source = twin.parent / source.name
            same = source.is_file() and twin_source.is_file()
            if same and source.read_bytes() == twin_source.read_bytes():
                shutil.copy2(built, twin)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_in_checkout(code: Path, script: str, *arguments: str) -> dict[str, Any] | None:
    """Run ``script`` (Python source) with ``code``'s package first on the path
    (and this folder after it: the script may import :func:`peak_and_seconds`).

    The child's temporary files (its ``tempfile`` folders: the stores and
    exports it measures) go to a folder of its own, removed when it ends.

    Returns the JSON of the child's last line of output (``None``: no output),
    or ``{"error": ...}`` with the last line of its errors when it failed.
    """
    env = dict(os.environ)
    # the checkout measured comes first on the path (its core and its adapters)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(code), str(code / "adapters"), str(Path(__file__).resolve().parent)]
    )
    # the children write their stores under tempfile.mkdtemp() and leave them
    # (hundreds of MB a run): give them a TMPDIR that is removed afterwards
    scratch = Path(tempfile.mkdtemp(prefix="bench-child-"))
    env["TMPDIR"] = str(scratch)
    try:
        result = subprocess.run(
            [sys.executable, "-c", script, *arguments],
            env=env,
            capture_output=True,
            text=True,
            cwd=scratch,
            check=False,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.returncode:
        return {"error": result.stderr.strip().splitlines()[-1][:160]}
    lines = result.stdout.strip().splitlines()
    found: dict[str, Any] | None = json.loads(lines[-1]) if lines else None
    return found


def size_bytes(text: str) -> int:
    """Bytes of a size such as ``64M`` or ``2G`` (binary units).

    >>> size_bytes("64M")
    67108864
    """
    number, unit = re.fullmatch(r"(\d+)([MG])", text).groups()  # type: ignore[union-attr]
    return int(number) << (20 if unit == "M" else 30)


def peak_and_seconds(run: Callable[[], Any], repeat: int) -> dict[str, float]:
    """``run``'s best time of ``repeat`` and its traced peak (``tracemalloc``), in
    a child: call ``run`` once before, for the imports and first-use caches."""
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"peak": peak - before, "seconds": min(seconds)}


def report_times(label: str, peaks: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Print one row: ``label``, ``peaks``, the seconds before and after and their
    ratio; then the error of either run, if one failed."""
    timed = "seconds" in before and "seconds" in after
    ratio = f"{after['seconds'] / before['seconds']:12.2f}" if timed else f"{'-':>12}"
    seconds = [f"{m['seconds']:8.2f}" if "seconds" in m else f"{'-':>8}" for m in (before, after)]
    print(f"{label} | {peaks} | {seconds[0]} {seconds[1]:>7} {ratio}", flush=True)
    for measured in (before, after):
        if "error" in measured:
            print(f"    {measured['error']}")
