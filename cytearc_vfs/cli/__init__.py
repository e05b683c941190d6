"""The ``cytearc-vfs`` command line.

Modules: :mod:`.parser` (arguments and help), :mod:`.commands` (what each
command does), :mod:`.main` (running one and reporting it), :mod:`.failures`
(exit codes and one-line errors), :mod:`.interrupts` (SIGINT/SIGTERM and
unfinished destinations), :mod:`.progress` (bars), :mod:`.demo`.
The package imports nothing heavy until a command runs.
"""

from __future__ import annotations

from .main import main
from .parser import build_parser

__all__ = ["build_parser", "main"]
