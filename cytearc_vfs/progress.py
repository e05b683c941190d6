"""Progress bars for long work, shown on stderr only when a person is watching."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm

__all__ = ["ProgressBars", "progress_bars"]


class ProgressBars:
    """A ``progress(phase, done, total)`` callback that keeps one bar per phase."""

    def __init__(self, *, enabled: bool) -> None:
        self._enabled = enabled
        self._bars: dict[str, tqdm[Any]] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        bar = self._bars.get(phase)
        if bar is None:
            bar = tqdm[Any](
                total=total, desc=phase, unit="row", unit_scale=True, leave=False, file=sys.stderr
            )
            self._bars[phase] = bar
        bar.update(done - bar.n)

    def close(self) -> None:
        """Close every bar."""
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


@contextmanager
def progress_bars(*, enabled: bool | None = None) -> Iterator[ProgressBars]:
    """Bars on stderr; on by default when stderr is a terminal."""
    bars = ProgressBars(enabled=sys.stderr.isatty() if enabled is None else enabled)
    try:
        yield bars
    finally:
        bars.close()
