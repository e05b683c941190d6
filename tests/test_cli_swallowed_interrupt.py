"""Ctrl-C that lands inside an import done in C is still an interrupt.

A signal handler's exception raised while a C extension imports a module
(pandas' parser importing pandas) comes out as that extension's
``ImportError``, the interrupt dropped: CI saw ``cytearc-vfs mount`` report
"internal error ImportError: pd_parser.c could not import module pandas. This
is a bug" (exit 70) for a SIGINT. The command line now reports such an error
as the interrupt it stands for: exit 130, the destination cleaned up.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import commands, main


def _swallowed_interrupt(*_: Any) -> Any:
    try:
        os.kill(os.getpid(), signal.SIGINT)  # the command's handler raises at once
        time.sleep(5)
    except BaseException:
        # what a C extension's import does with it
        raise ImportError("pd_parser.c could not import module pandas") from None
    raise AssertionError("no signal arrived")


def test_an_interrupt_swallowed_by_an_import_is_reported_as_the_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(40, 10, seed=1))
    _run, destination = commands.COMMANDS["mount"]
    monkeypatch.setitem(commands.COMMANDS, "mount", (_swallowed_interrupt, destination))
    code = main(["mount", str(tmp_path / "a.zarr"), str(tmp_path / "m.zarr")])
    err = capsys.readouterr().err
    assert code == 130, err
    assert err.startswith("cytearc-vfs mount: interrupted (SIGINT); ")
    assert "internal error" not in err and "ImportError" not in err
    assert not (tmp_path / "m.zarr").exists()


def test_an_import_error_without_an_interrupt_is_still_reported_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def broken(*_: Any) -> Any:
        raise ImportError("no module named 'x'")

    _run, destination = commands.COMMANDS["info"]
    monkeypatch.setitem(commands.COMMANDS, "info", (broken, destination))
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(40, 10, seed=1))
    assert main(["info", str(tmp_path / "a.zarr")]) == 70
    assert "internal error ImportError" in capsys.readouterr().err
