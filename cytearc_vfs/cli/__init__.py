"""The ``cytearc-vfs`` command line.

Modules: :mod:`.parser` (arguments and help), :mod:`.usage_errors` (a command
line it refuses, in one line), :mod:`.commands` (what each
command does; :mod:`.info_command`, :mod:`.artifacts_command` and a few more hold
one command each), :mod:`.running` (running one and reporting it), :mod:`.failures`
(exit codes and one-line errors), :mod:`.interrupts` (SIGINT/SIGTERM and
unfinished destinations), :mod:`.progress` (bars), :mod:`.demo`.
The package imports nothing heavy until a command runs.
"""

from __future__ import annotations

import faulthandler
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .parser import build_parser

__all__ = ["build_parser", "main"]

# 128 + SIGINT, as ``failures.ExitCode.SIGINT`` (not imported: it is what is loading)
_INTERRUPTED_WHILE_LOADING = 130
# ``failures.ExitCode.SIGINT`` and ``.SIGTERM``: returned only after an interrupt
_INTERRUPTED = (130, 143)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cytearc-vfs``; returns the exit status.

    The modules of the command line load here, under a guard: Ctrl-C while
    they load (a second or more on a loaded machine without bytecode caches)
    ends with the one line and the status of any other interrupt, not a
    traceback; nothing has been started yet. (SIGTERM then ends the process
    by the default action, as before any handler exists.)

    Run as the program (``argv`` None), a crash in native code prints the
    Python stack of every thread (``faulthandler``), and the process ends as
    soon as the command has cleaned up and reported, without interpreter
    teardown (:mod:`~cytearc_vfs.cli.process_end`; an interrupted command
    without waiting for its threads either,
    :func:`~cytearc_vfs.cli.interrupts.end_interrupted_process`).
    """
    as_program = argv is None
    if as_program:
        faulthandler.enable()
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        from .running import main as run
    except KeyboardInterrupt:
        return _interrupted_while_loading(arguments)
    code = run(arguments)
    if as_program and code in _INTERRUPTED:
        from .interrupts import end_interrupted_process

        end_interrupted_process(code)
    if as_program:
        from .process_end import end_process

        end_process(code)
    return code


def _interrupted_while_loading(arguments: list[str]) -> int:
    command = next((word for word in arguments if not word.startswith("-")), "")
    message = "interrupted (SIGINT) while starting; nothing was written"
    if "--json" in arguments:
        payload = {
            "ok": False,
            "command": command,
            "error": "Interrupted",
            "category": "interrupted",
            "exitCode": _INTERRUPTED_WHILE_LOADING,
            "message": message,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        sys.stdout.flush()
    where = f"cytearc-vfs {command}" if command else "cytearc-vfs"
    print(f"{where}: {message}", file=sys.stderr)
    return _INTERRUPTED_WHILE_LOADING


def __getattr__(name: str) -> Any:
    if name == "build_parser":  # loaded on first use, like the rest of the command line
        from .parser import build_parser

        return build_parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
