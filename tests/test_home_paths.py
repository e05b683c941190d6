"""Paths that start with ``~`` name the home directory, wherever they are given.

The shell expands ``~`` only at the start of a word: ``--directory=~/x``,
``@~/options.json``, a quoted path and every path given in Python reached
the package as typed, and were taken as a directory named ``~`` in the
working directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import run_main, write_h5ad
from conftest import realistic_counts

import cytearc_vfs as cv


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory of its own, and a working directory beside it."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return home


def test_python_paths_with_a_tilde_are_in_the_home_directory(home: Path) -> None:
    counts = realistic_counts(60, 20, seed=3)
    info = cv.write_counts("~/a.zarr", counts)
    assert (home / "a.zarr" / "zarr.json").is_file()
    assert Path(str(info.location).removeprefix("file://")) == home / "a.zarr"
    assert cv.open_store("~/a.zarr") is not None
    composite = cv.create_composite("~/c.zarr", {"a": "~/a.zarr"})
    # the record keeps the absolute path: it opens from any working directory
    assert composite.record.sources[0].location == str(home / "a.zarr")
    cv.open_store(Path("~/c.zarr"))
    assert not (Path.cwd() / "~").exists()


def test_command_line_paths_the_shell_leaves_alone(home: Path) -> None:
    counts = realistic_counts(60, 20, seed=4)
    write_h5ad(home / "data.h5ad", counts)
    (home / "options.json").write_text("{}")
    (home / "features.txt").write_text("gene0\ngene3\n")
    # quoted, after '=' or after '@': the program receives the '~'
    done = run_main("write", "~/data.h5ad", "~/a.zarr", "--source-storage-options=@~/options.json")
    assert done.returncode == 0, done.stderr
    done = run_main("composite", "~/c.zarr", "a=~/a.zarr", "--features-file=~/features.txt")
    assert done.returncode == 0, done.stderr
    assert cv.VirtualArrayReader(cv.open_store(home / "c.zarr")).shape == (60, 2)
    assert run_main("info", "~/c.zarr").returncode == 0
    assert not (Path.cwd() / "~").exists()


def test_a_directory_named_tilde_is_reached_as_dot_slash_tilde(home: Path) -> None:
    counts = realistic_counts(30, 10, seed=5)
    cv.write_counts("./~/a.zarr", counts)
    assert (Path.cwd() / "~" / "a.zarr" / "zarr.json").is_file()
    assert not (home / "a.zarr").exists()
