"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def median_time(function: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls of ``function``, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def write_json(report: Any, destination: str | None) -> None:
    """Write ``report`` as indented JSON to ``destination`` (``-``: stdout; ``None``: nowhere)."""
    if not destination:
        return
    text = json.dumps(report, indent=2)
    if destination == "-":
        print(text)
    else:
        Path(destination).write_text(text)
