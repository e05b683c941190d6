"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_time(function: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls of ``function``, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result
