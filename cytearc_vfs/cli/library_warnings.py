"""The package's own warnings on the command line: one line each on stderr.

The library warns on purpose (a reserved column not imported, a column not
carried, an assay written as the generic type) through :mod:`logging` and
:func:`warnings.warn` with :class:`~cytearc_vfs.errors.VfsWarning`. While a
command runs, :func:`command_warnings` shows both as ``cytearc-vfs COMMAND:
warning: ...`` on stderr (above any progress bars), never on stdout, so
``--json`` output stays one JSON object. Other libraries' warnings (anndata's
FutureWarnings, zarr's notes on its own spec) are not the user's to act on
and stay hidden, unless ``--debug`` asks for everything.

A record logged while an exception is being handled is an account of a
failure (``write to ... failed; the assay stays pending``): it is held, and
shown only if the command then succeeds. When the command fails, its one
error line is the account, and the command has cleaned up what the record
describes (an unfinished destination is removed), so the record would
contradict it.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from ..errors import VfsWarning
from .failures import one_line

__all__ = ["HeldWarnings", "command_warnings"]

#: The loggers whose warnings are the package's own
PACKAGE_LOGGER = "cytearc_vfs"


class HeldWarnings:
    """The warnings of one command: shown at once, or held until it succeeds."""

    def __init__(self, command: str, write: Callable[[str], None]) -> None:
        self._prefix = f"cytearc-vfs {command}: warning: "
        self._write = write
        self._held: list[str] = []

    def show(self, message: str, *, during_failure: bool) -> None:
        """Print ``message`` as one line, or hold it when it reports a failure under way."""
        line = self._prefix + one_line(message)
        if during_failure:
            self._held.append(line)
        else:
            self._write(line)

    def succeeded(self) -> None:
        """The command succeeded: what was held did not end it, so it is shown."""
        for line in self._held:
            self._write(line)
        self._held.clear()


class _ToHeld(logging.Handler):
    """A logging handler that passes WARNING and above to :class:`HeldWarnings`."""

    def __init__(self, held: HeldWarnings) -> None:
        super().__init__(logging.WARNING)
        self._held = held

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must not end the command
            self.handleError(record)
            return
        # sys.exc_info() sees an exception handled anywhere up this thread's stack
        self._held.show(message, during_failure=sys.exc_info()[0] is not None)


@contextmanager
def command_warnings(
    command: str, write: Callable[[str], None], *, debug: bool
) -> Iterator[HeldWarnings]:
    """Show the package's warnings as one line each through ``write`` while the block runs.

    Restores the logger and the warning filters afterwards: ``main`` also
    runs inside other programs (and tests).
    """
    held = HeldWarnings(command, write)
    handler = _ToHeld(held)
    logger = logging.getLogger(PACKAGE_LOGGER)
    level = logger.level
    if not debug:
        # debug and info records stay out of a user's terminal
        logger.setLevel(logging.WARNING)
    logger.addHandler(handler)

    def show_warning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, VfsWarning):
            held.show(str(message), during_failure=sys.exc_info()[0] is not None)
        else:  # shown only under --debug: the usual form, with its origin
            write(warnings.formatwarning(message, category, filename, lineno, line).rstrip())

    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.simplefilter("ignore")
            warnings.simplefilter("default", VfsWarning)
            warnings.showwarning = show_warning
            yield held
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
