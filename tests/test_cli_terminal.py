"""Every long command run in a real pseudo-terminal: progress bars drawn, no traceback.

The README's first command once crashed in any terminal (the progress bars)
while CI, which has none, stayed green. These tests run the installed entry
point on a pty with a window size, as a person's terminal does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_harness import run_in_terminal, write_h5ad
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def _clean(run_output: str) -> None:
    assert "Traceback" not in run_output, run_output
    assert "Task was destroyed" not in run_output, run_output


@pytest.fixture
def store(tmp_path: Path) -> Path:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(2000, 300, seed=3))
    return tmp_path / "a.zarr"


def test_write_draws_bars_in_a_terminal(tmp_path: Path) -> None:
    write_h5ad(tmp_path / "in.h5ad", realistic_counts(3000, 200, seed=1))
    run = run_in_terminal(["write", str(tmp_path / "in.h5ad"), str(tmp_path / "out.zarr")])
    assert run.returncode == 0, run.output
    _clean(run.output)
    assert "%|" in run.output  # a bar with its percentage
    assert "row/s" in run.output or "?row/s" in run.output  # its rate (the ETA's basis)
    assert "wrote 3,000 cells x 200 features" in run.output
    assert cv.open_store(tmp_path / "out.zarr")


def test_verify_composite_and_repack_draw_bars(tmp_path: Path, store: Path) -> None:
    verify = run_in_terminal(["verify", str(store)])
    assert verify.returncode == 0, verify.output
    _clean(verify.output)
    assert "verify RNA counts" in verify.output and "%|" in verify.output

    cv.write_counts(tmp_path / "b.zarr", realistic_counts(500, 300, seed=4))
    composite = run_in_terminal(
        [
            "composite",
            str(tmp_path / "c.zarr"),
            str(store),
            str(tmp_path / "b.zarr"),
            "--features",
            "intersection",
        ]
    )
    assert composite.returncode == 0, composite.output
    _clean(composite.output)
    assert "composite of 2 sources" in composite.output

    repack = run_in_terminal(["repack", str(store), str(tmp_path / "r.zarr")])
    assert repack.returncode == 0, repack.output
    _clean(repack.output)
    assert "copy keys" in repack.output and "%|" in repack.output
    # what it counts: keys, not rows (it said "0.00/6.00 [00:00<?, ?row/s]")
    copying = [line for line in repack.output.split("\r") if "copy keys" in line]
    assert copying and all("key/s" in line for line in copying), copying


def test_a_terminal_without_a_size_still_gets_bars(tmp_path: Path, store: Path) -> None:
    # A fresh pty (script(1), some CI consoles) reports 0 columns; bars must not vanish.
    run = run_in_terminal(["verify", str(store)], columns=0)
    assert run.returncode == 0, run.output
    assert "%|" in run.output


def test_errors_in_a_terminal_are_one_line(tmp_path: Path) -> None:
    run = run_in_terminal(["info", str(tmp_path / "missing.zarr")])
    assert run.returncode == 2
    lines = [line for line in run.output.splitlines() if line.strip()]
    assert len(lines) == 1, run.output
    assert "does not exist" in lines[0]


@pytest.mark.slow
def test_readme_demo_in_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command, as a person runs it, then again as a script does."""
    run = run_in_terminal(["demo", "--directory", str(tmp_path / "demo")])
    assert run.returncode == 0, run.output
    _clean(run.output)
    assert "done: 11 steps" in run.output
    # every count grouped, as the other commands' lines group theirs
    assert re.search(r"values=\d{1,3}(,\d{3})+\)", run.output), run.output
    assert "%|" in run.output
    # a second run into the same directory replaces the demo's own stores; run in
    # this process with --json (the terminal's part was just checked), it stands for
    # the piped and scripted runs too, which report every step
    assert main(["demo", "--directory", str(tmp_path / "demo"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["kept"] is True
    steps = payload["steps"]
    assert any(step["step"].startswith("write_counts wu2020") for step in steps)
    assert all(step.get("equal", True) for step in steps)
    assert cv.open_store(tmp_path / "demo" / "wu2020.zarr")
    # API.md: the demo builds a mount too, which reads the source's artifact through
    mounted = next(step for step in steps if step["step"].startswith("mount wu2020"))
    assert mounted["read_through"] == 1 and mounted["listed"] == 2
    assert isinstance(cv.open_store(tmp_path / "demo" / "mounted.zarr"), cv.MountStore)


def test_pipe_gets_no_bars(tmp_path: Path, store: Path) -> None:
    import subprocess

    from cli_harness import cli_executable

    result = subprocess.run(
        [cli_executable(), "verify", str(store)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "\r" not in result.stderr and "%|" not in result.stderr
    assert "OK" in result.stdout


def test_help_and_version_are_plain_text() -> None:
    run = run_in_terminal(["--help"])
    assert run.returncode == 0
    assert "``" not in run.output  # no reStructuredText markup
    for command in ("demo", "info", "verify", "write", "composite", "mount", "repack", "artifacts"):
        assert command in run.output
    version = run_in_terminal(["--version"])
    assert version.output.strip() == f"cytearc-vfs {cv.__version__}"


def test_every_argument_has_help() -> None:
    from cytearc_vfs.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert subparsers.choices is not None
    for name, command in subparsers.choices.items():
        for action in command._actions:
            assert action.help, f"{name}: argument {action.dest} has no help"


def test_bars_are_drawn_inside_a_jupyter_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a notebook stderr is no terminal, yet a person watches: bars go on."""
    import sys
    import types

    from cytearc_vfs.cli.progress import progress_bars, watched

    monkeypatch.setattr(sys, "stderr", __import__("io").StringIO())
    assert not watched()
    shell = types.ModuleType("IPython")
    shell.get_ipython = lambda: object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", shell)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert watched()
    with progress_bars() as bars:
        assert bars.enabled


def test_a_closed_terminal_stops_a_write_and_removes_its_destination(tmp_path: Path) -> None:
    """SIGHUP (the terminal closed, an SSH session dropped) ended ``write`` at once by
    Python's default action: the destination stayed behind unfinished (info exits 3, a
    rerun needs --overwrite). It now stops the command as SIGTERM does."""
    import signal

    from cli_harness import TerminalSession

    write_h5ad(tmp_path / "in.h5ad", realistic_counts(80_000, 2_000, seed=2))
    destination = tmp_path / "out.zarr"
    session = TerminalSession(["write", str(tmp_path / "in.h5ad"), str(destination)])
    try:
        seen = session.read_until("counts")
        assert "counts" in seen and session.process.poll() is None, seen
        session.process.send_signal(signal.SIGHUP)
        run = session.finish()
    finally:
        if session.process.poll() is None:
            session.process.kill()
    assert run.returncode == 143, run.output
    _clean(run.output)
    assert "interrupted (SIGHUP); removed the unfinished destination" in run.output
    assert not destination.exists()


def test_serve_under_nohup_outlives_its_terminal(store: Path) -> None:
    """``nohup cytearc-vfs serve ...``: SIGHUP is ignored from the start, so closing the
    terminal must not stop the server; serve set its own SIGHUP handler over the ignore."""
    import signal
    import subprocess
    import time
    import urllib.request

    from cli_harness import cli_executable, readable, stop_process

    def as_nohup_does() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    process = subprocess.Popen(
        [cli_executable(), "serve", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_nohup_does,
    )
    try:
        assert process.stdout is not None and readable(process.stdout, 120)
        url = process.stdout.readline().removeprefix("serving ").strip()
        assert url.startswith("http://127.0.0.1:"), url
        process.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert process.poll() is None, "serve stopped on SIGHUP under nohup"
        with urllib.request.urlopen(url + "zarr.json") as answer:
            assert answer.status == 200
    finally:
        stop_process(process)  # SIGTERM
        process.communicate()  # and its pipes closed
    assert process.returncode == 143


def test_a_background_job_keeps_the_sigint_its_shell_ignored(tmp_path: Path) -> None:
    """A shell starts ``cytearc-vfs write ... &`` of a script with SIGINT ignored, so that
    Ctrl-C stops the script and not the job; Python leaves such a signal ignored, but the
    command set its own handler over it, and the Ctrl-C meant for the script stopped the
    write (exit 130, its destination removed)."""
    import signal
    import subprocess
    import time

    from cli_harness import cli_executable

    write_h5ad(tmp_path / "in.h5ad", realistic_counts(80_000, 2_000, seed=2))
    destination = tmp_path / "out.zarr"

    def as_a_shell_starts_a_background_job() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    process = subprocess.Popen(
        [cli_executable(), "write", str(tmp_path / "in.h5ad"), str(destination)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_a_shell_starts_a_background_job,
    )
    try:
        # as soon as the writer has begun (the destination exists), Ctrl-C at the script
        deadline = time.monotonic() + 120
        while not destination.exists() and process.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "wrote 80,000 cells" in out
    assert cv.open_store(destination)


def test_ctrl_backslash_stops_serve_as_it_stops_mount_fs(store: Path) -> None:
    """Ctrl-\\ (SIGQUIT) in serve's terminal ended it by the default action ("Quit (core
    dumped)", exit -3, no line, a remote composite's cache directory left behind), where
    mount-fs takes it as the end; serve now stops on it as on SIGTERM."""
    from cli_harness import TerminalSession

    session = TerminalSession(["serve", str(store)])
    try:
        seen = session.read_until("serving http://")
        assert "serving http://" in seen, seen
        session.read_until("\n")
        session.type(b"\x1c")  # Ctrl-\
        run = session.finish()
    finally:
        if session.process.poll() is None:
            session.process.kill()
    assert run.returncode == 143, run.output
    _clean(run.output)
    assert "cytearc-vfs serve: interrupted (SIGQUIT)" in run.output
