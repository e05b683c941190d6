"""Progress bars for long work: a terminal, a notebook, or nothing in a pipe.

Writers, composites, repack and verification report ``progress(phase, done,
total)``; this turns those calls into one bar per phase with a rate and an
ETA. Bars are drawn only where a person watches: stderr is a terminal, or
the code runs in a Jupyter kernel (widgets where ipywidgets is installed,
text otherwise). In a pipe or a log file nothing is drawn, so no carriage
returns end up in logs; the command's own summary line says what was done.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ProgressBars", "progress_bars", "watched"]


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    get_ipython = getattr(shell, "get_ipython", None)
    return get_ipython is not None and get_ipython() is not None


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def watched() -> bool:
    """Whether someone watches the output: stderr is a terminal or a notebook runs us."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) or _in_notebook()


#: phases that count something other than rows (repack copies keys, not rows)
_UNITS = {"copy keys": "key", "export": "step"}
#: phases that count a few steps, each possibly long (an export's: a band read, then
#: appended): every step is drawn, as a whole number. tqdm's default throttling drew
#: only some (a quick step reset its rate, and the next slow one was not drawn).
_STEPPED = frozenset({"export"})


class ProgressBars:
    """A ``progress(phase, done, total)`` callback that keeps one bar per phase.

    Parameters
    ----------
    enabled
        Draw bars; when false every call returns at once.
    """

    def __init__(self, *, enabled: bool) -> None:
        self._enabled = enabled
        self._bars: dict[str, Any] = {}

    @property
    def enabled(self) -> bool:
        """Whether bars are drawn."""
        return self._enabled

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        bar = self._bars.get(phase)
        if bar is None:
            # tqdm.auto picks notebook widgets in Jupyter and text bars
            # elsewhere; imported here so a run without bars never loads it.
            from tqdm.auto import tqdm

            stepped = phase in _STEPPED
            bar = tqdm(
                total=total,
                desc=phase,
                unit=_UNITS.get(phase, "row"),
                unit_scale=not stepped,
                mininterval=0 if stepped else 0.1,
                miniters=1 if stepped else None,
                leave=False,
                file=sys.stderr,
                # a terminal that reports no size (a fresh pty, some CI
                # consoles) would get zero-width bars: assume 80 columns
                ncols=None if _terminal_columns() else 80,
                dynamic_ncols=bool(_terminal_columns()),
            )
            self._bars[phase] = bar
        if bar.total != total:
            bar.total = total
        bar.update(max(0, done - bar.n))
        if done >= total:
            # a finished phase gives its line back, so the next bar does not
            # stack below it
            bar.close()
            del self._bars[phase]

    def write_line(self, line: str) -> None:
        """Print ``line`` on stderr, above the bars when some are drawn (they are redrawn below)."""
        if self._bars:
            from tqdm.auto import tqdm

            tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Close every bar (they leave no line behind)."""
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


@contextmanager
def progress_bars(*, enabled: bool | None = None) -> Iterator[ProgressBars]:
    """Bars on stderr; on by default where someone watches (see :func:`watched`)."""
    bars = ProgressBars(enabled=watched() if enabled is None else enabled)
    try:
        yield bars
    finally:
        bars.close()
