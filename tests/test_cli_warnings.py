"""The package's warnings reach the command line's user: one line each on stderr, as
``cytearc-vfs COMMAND: warning: ...``; other libraries' warnings stay hidden, ``--json``
stays one JSON object on stdout, and a warning about a failure the error line reports
is not printed beside it."""

from __future__ import annotations

import argparse
import json
import logging
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from cli_harness import run_in_terminal, write_h5ad
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import commands, main
from cytearc_vfs.cli.outcome import Outcome
from cytearc_vfs.cli.progress import ProgressBars

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_package_warning_is_one_line_and_json_stays_parseable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h5ad = tmp_path / "in.h5ad"
    write_h5ad(h5ad, realistic_counts(40, 12, seed=2))
    argv = ["write", str(h5ad), str(tmp_path / "out.zarr"), "--assay", "Spatial", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)  # nothing but the JSON object on stdout
    assert payload["assay"] == "Spatial"
    lines = _stderr_lines(captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("cytearc-vfs write: warning: assay 'Spatial' has no assay_type")
    assert "Give --assay-type to choose" in lines[0]
    # Python callers get the same warning as a UserWarning naming the keyword
    with pytest.warns(UserWarning, match="Give assay_type to choose"):
        cv.write_counts(tmp_path / "py.zarr", realistic_counts(5, 4, seed=1), assay="Spatial")


def _info_that_warns(monkeypatch: pytest.MonkeyPatch, extra: object) -> None:
    """``info`` as it is, after ``extra`` (warnings and log records) ran."""
    real, destination = commands.COMMANDS["info"]
    real = getattr(real, "real", real)  # patched twice in one test: wrap the command itself

    def info(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
        extra()  # type: ignore[operator]
        return real(args, bars)

    info.real = real  # type: ignore[attr-defined]
    monkeypatch.setitem(commands.COMMANDS, "info", (info, destination))


def test_other_libraries_warnings_stay_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.zarr"
    cv.write_counts(store, realistic_counts(20, 6, seed=3))

    def noise() -> None:
        warnings.warn("anndata will change this", FutureWarning, stacklevel=1)
        warnings.warn("zarr: not part of the spec", UserWarning, stacklevel=1)
        logging.getLogger("zarr.core").warning("a third-party record")
        logging.getLogger("cytearc_vfs.composite.columns").warning("column 'x'\nis not carried")
        logging.getLogger("cytearc_vfs.composite.columns").info("not for users")

    _info_that_warns(monkeypatch, noise)
    assert main(["info", str(store)]) == 0
    captured = capsys.readouterr()
    assert "ordinary CyteArc store" in captured.out
    assert _stderr_lines(captured.err) == ["cytearc-vfs info: warning: column 'x'; is not carried"]
    # --debug shows everything, third-party warnings included (as Python shows them by
    # default: pytest's own filter would turn them into errors)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["info", str(store), "--debug"]) == 0
    err = capsys.readouterr().err
    assert "FutureWarning: anndata will change this" in err
    assert "cytearc-vfs info: warning: column 'x'; is not carried" in err


def test_a_warning_about_the_failure_is_not_printed_beside_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.zarr"
    cv.write_counts(store, realistic_counts(20, 6, seed=3))
    log = logging.getLogger("cytearc_vfs.write.writer")

    def fails() -> None:
        try:
            raise OSError("disk full")
        except OSError:
            log.warning("write to X failed; the assay stays pending and will not open")
            raise

    _info_that_warns(monkeypatch, fails)
    assert main(["info", str(store)]) == 4
    lines = _stderr_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "disk full" in lines[0] and "warning" not in lines[0]

    def recovers() -> None:
        try:
            raise OSError("one artifact unreadable")
        except OSError:
            log.warning("skipping unreadable artifact a")

    _info_that_warns(monkeypatch, recovers)
    assert main(["info", str(store)]) == 0
    # handled, so the command went on: shown once it succeeded
    assert _stderr_lines(capsys.readouterr().err) == [
        "cytearc-vfs info: warning: skipping unreadable artifact a"
    ]


def test_a_logged_warning_in_a_terminal(tmp_path: Path) -> None:
    counts = realistic_counts(60, 10, seed=4)
    h5ad = tmp_path / "reserved.h5ad"
    adata = write_h5ad(h5ad, counts)
    adata.obs["RNA_I"] = pd.Series([True] * counts.shape[0], index=adata.obs.index)
    adata.write_h5ad(h5ad)
    run = run_in_terminal(["write", str(h5ad), str(tmp_path / "out.zarr")])
    assert run.returncode == 0, run.output
    lines = [line.strip() for line in _ANSI.sub("\n", run.output).splitlines() if line.strip()]
    warned = [line for line in lines if "warning:" in line.lower()]
    assert warned == [
        "cytearc-vfs write: warning: cell column 'RNA_I' is reserved for the membership of "
        "assay 'RNA' and is not declared in uns['cytearc']['assayMembership']; it is not "
        "imported"
    ], run.output
    assert any(line.startswith("wrote 60 cells x 10 features") for line in lines)
