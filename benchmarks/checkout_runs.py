"""Measurements run in a child process against a given checkout, shared by the
memory-budget benchmarks (``bench_memory_budgets.py``, ``bench_export_budget.py``,
``bench_composite_budget.py``), which compare the code before and after."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def run_in_checkout(code: Path, script: str, *arguments: str) -> dict[str, Any] | None:
    """Run ``script`` (Python source) with ``code``'s package first on the path.

    Returns the JSON of the child's last line of output (``None``: no output),
    or ``{"error": ...}`` with the last line of its errors when it failed.
    """
    env = dict(os.environ)
    # the checkout measured comes first on the path (its core and its adapters)
    env["PYTHONPATH"] = os.pathsep.join([str(code), str(code / "adapters")])
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        check=False,
    )
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
