"""``cytearc-vfs``: parse, run one command, report once, exit with a documented code.

Errors never end in a traceback unless ``--debug`` asks for it: each is
translated once (:func:`cytearc_vfs.cli.failures.classify_failure`) into one
line on stderr and, with ``--json``, one JSON object on stdout. Commands that
create a destination run under :func:`~cytearc_vfs.cli.interrupts.interruptible`:
SIGINT or SIGTERM stops background I/O, removes a destination this command
created, and exits 130 or 143.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import DestinationBusyError
from ..remote.failures import first_line
from .failures import ExitCode, classify_failure
from .interrupts import (
    Interrupted,
    begin_cleanup,
    interrupt_behind,
    interruptible,
    stop_background_io,
)
from .parser import build_parser
from .usage_errors import _Parser

__all__ = ["main"]


def _emit(payload: dict[str, Any], *, as_json: bool, text: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    elif text:
        print(text)
    sys.stdout.flush()


def _report_failure(
    command: str,
    exc: BaseException,
    *,
    as_json: bool,
    debug: bool,
    cleanup: str = "",
    locations: Mapping[str, str] | None = None,
) -> ExitCode:
    failure = classify_failure(exc, locations)
    if cleanup:
        # what became of the destination this command created, after the message
        # that described it unfinished
        failure = replace(failure, message=f"{failure.message}; {cleanup}")
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    _emit(
        {
            "ok": False,
            "command": command,
            "error": type(exc).__name__,
            "category": failure.category,
            "exitCode": int(failure.code),
            "message": failure.message,
        },
        as_json=as_json,
        text="",
    )
    print(f"cytearc-vfs {command}: {failure.message}", file=sys.stderr)
    return failure.code


def _report_interrupt(command: str, signum: int, done: str, *, as_json: bool) -> ExitCode:
    import signal

    name = signal.Signals(signum).name
    code = ExitCode.SIGINT if signum == signal.SIGINT else ExitCode.SIGTERM
    message = f"interrupted ({name}); {done}"
    _emit(
        {
            "ok": False,
            "command": command,
            "error": "Interrupted",
            "category": "interrupted",
            "exitCode": int(code),
            "message": message,
        },
        as_json=as_json,
        text="",
    )
    print(f"cytearc-vfs {command}: {message}", file=sys.stderr)
    return code


@dataclass(slots=True)
class _RunState:
    """What the interrupt handler needs to know about the command that was running."""

    command: str
    as_json: bool
    guard: Any = None
    cleanup: str = ""
    """What a failed command did with the destination it created, for its error line."""
    args: argparse.Namespace | None = None
    """The parsed command line, once parsed (an interrupt's note may name its operands)."""


def _run(arguments: list[str], state: _RunState) -> int:
    _Parser.json_errors = state.as_json
    try:
        args = build_parser().parse_args(arguments)
    except SystemExit as exited:
        # usage errors, --help and --version: their status is returned as every
        # command's is, so main([...]) called in a process returns it too
        return exited.code if isinstance(exited.code, int) else int(exited.code is not None)
    state.command = args.command
    state.args = args
    # "false", "no" and "off" turned the tracebacks on: only "" and "0" were off
    debug = bool(args.debug) or os.environ.get("CYTEARC_VFS_DEBUG", "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )
    from ..format.option_names import command_line_names

    # the library's remedies name --flags, not Python keywords, on the command line
    with command_line_names():
        return _run_command(args, state, debug)


def _run_command(args: Any, state: _RunState, debug: bool) -> int:
    from .commands import COMMANDS, DESTINATION_OPTIONS
    from .inputs import json_option
    from .interrupts import DestinationGuard
    from .library_warnings import command_warnings
    from .location_flags import location_flags
    from .progress import progress_bars

    run, destination_argument = COMMANDS[args.command]
    args.destination_guard = None
    try:
        with (
            progress_bars(enabled=None if not state.as_json else False) as bars,
            command_warnings(args.command, bars.write_line, debug=debug) as library_warnings,
        ):
            try:
                if destination_argument is not None:
                    flag = DESTINATION_OPTIONS.get(args.command)
                    options = (
                        None
                        if flag is None
                        else json_option(getattr(args, flag[2:].replace("-", "_")), flag)
                    )
                    state.guard = DestinationGuard(
                        getattr(args, destination_argument), storage_options=options
                    )
                    args.destination_guard = state.guard
                outcome = run(args, bars)
                library_warnings.succeeded()
            except Exception as exc:
                bars.close()
                interrupt = interrupt_behind(exc)
                if interrupt is not None:
                    # swallowed on its way (an import in C): cleaned up and reported
                    # as the interrupt it was
                    raise interrupt from exc
                # another writer's destination (one writer per destination) is not this
                # command's to remove, even when it was empty when the command began
                if (
                    state.guard is not None
                    and not state.guard.existed
                    and not isinstance(exc, DestinationBusyError)
                ):
                    state.cleanup = _discarded(state.guard)
                raise
    except Exception as exc:
        return _report_failure(
            args.command,
            exc,
            as_json=state.as_json,
            debug=debug,
            cleanup=state.cleanup,
            locations=location_flags(args),
        )
    try:
        _emit(outcome.payload, as_json=state.as_json, text=outcome.text)
    except BrokenPipeError:
        # the reader left early (`anndata ls X | head`): the work is done, so no
        # traceback; stdout goes to devnull so the flush at exit does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return int(outcome.code)


def _discarded(guard: Any) -> str:
    """Remove the destination a failed command created; what was done, in words."""
    try:
        done: str = guard.discard()
    except Exception as exc:  # the command's own error stays the one reported
        # its first line: obstore's errors go on with a debug dump of many lines
        return (
            f"removing it failed ({type(exc).__name__}: {first_line(exc)}); "
            f"delete {guard.where} yourself"
        )
    if done.startswith("removed"):
        # the library's message, written for a caller left with the destination,
        # says to write it again with --overwrite: not needed once it is gone
        return f"{done}, so running the command again needs no --overwrite"
    return "" if done == "nothing was written" else done


def _untouched(state: _RunState) -> str:
    from .commands import INTERRUPT_NOTES

    note = INTERRUPT_NOTES.get(state.command, "nothing was written")
    if callable(note):
        return note(state.args) if state.args is not None else "nothing was written"
    return note


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cytearc-vfs``; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    first_word = next((word for word in arguments if not word.startswith("-")), "")
    state = _RunState(command=first_word, as_json="--json" in arguments)
    # Signals raise Interrupted from the first moment: before the imports a
    # command needs, during its work, and (ignored by then) during cleanup.
    with interruptible():
        try:
            try:
                return _run(arguments, state)
            except Exception as exc:
                # an interrupt swallowed by an import in C while the command loaded
                interrupt = interrupt_behind(exc)
                if interrupt is None:
                    raise
                raise interrupt from exc
        except Interrupted as interrupt:
            # A signal between a coroutine's creation and its scheduling (zarr's
            # sync(store.get(...))) leaves it unawaited; collected under the report
            # or at exit, Python would print "coroutine ... was never awaited" below
            # the one line. The process is ending: nothing there to act on.
            warnings.filterwarnings(
                "ignore", message="coroutine .* was never awaited", category=RuntimeWarning
            )
            begin_cleanup()
            try:
                stop_background_io()
                done = state.guard.discard() if state.guard is not None else _untouched(state)
            except Exception as exc:  # the report must come out whatever cleanup met
                where = state.guard.where if state.guard is not None else "the destination"
                done = (
                    f"cleaning up failed ({type(exc).__name__}: {first_line(exc)}); "
                    f"delete {where} yourself"
                )
            return _report_interrupt(state.command, interrupt.signum, done, as_json=state.as_json)
