"""Files named on the command line: ``--storage-options @FILE``, ``--features-file``,
``--features @FILE``, ``--cells NAME=FILE``.

A shell hands a command its data as a pipe as often as a file:
``--storage-options @<(pass show s3)`` keeps a credential out of every file
and ``--features-file <(grep ...)`` out of a temporary one, and both name
``/dev/fd/N``, which is no regular file. These were refused as "does not
exist"; so were a directory and a bare ``@``, which do exist. Each is now
read, or refused naming what it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import zarr
from cli_harness import cli_executable, run_main
from conftest import realistic_counts

import cytearc_vfs as cv


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("option-files") / "store.zarr"
    cv.write_counts(path, realistic_counts(60, 20, seed=3))
    return path


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe's read and write ends, as a shell's ``<(...)`` gives one."""
    read, write = os.pipe()
    yield read, write
    for end in (read, write):
        with contextlib.suppress(OSError):  # already closed by the test
            os.close(end)


def _fill(pipe: tuple[int, int], text: str) -> str:
    """Write ``text`` into the pipe, close its write end; its ``/dev/fd`` path."""
    read, write = pipe
    os.write(write, text.encode())
    os.close(write)
    return f"/dev/fd/{read}"


def _ids(store: Path, path: str) -> list[str]:
    """The stored ids at ``path`` (``cellData/ids``, ``RNA/featureData/ids``)."""
    return [str(i) for i in zarr.open_array(store / path, mode="r")[:]]


def test_storage_options_from_a_pipe(store: Path, pipe: tuple[int, int]) -> None:
    ran = run_main("info", str(store), "--storage-options", "@" + _fill(pipe, "{}"), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["kind"] == "ordinary"


def test_storage_options_from_process_substitution_in_the_program(
    store: Path, pipe: tuple[int, int]
) -> None:
    # what `cytearc-vfs info STORE --storage-options @<(echo '{}')` runs
    path = _fill(pipe, "{}")
    ran = subprocess.run(
        [cli_executable(), "info", str(store), "--storage-options", "@" + path],
        capture_output=True,
        text=True,
        pass_fds=(pipe[0],),
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "ordinary CyteArc store" in ran.stdout


@pytest.mark.parametrize("flag", ["--features-file", "--features", "--cells"])
def test_ids_from_a_pipe(store: Path, tmp_path: Path, pipe: tuple[int, int], flag: str) -> None:
    if flag == "--cells":
        ids = _ids(store, "cellData/ids")[:4]
        argument = "a=" + _fill(pipe, "\n".join(ids) + "\n")
    else:
        ids = _ids(store, "RNA/featureData/ids")[:3]
        path = _fill(pipe, "\n".join(ids) + "\n")
        argument = "@" + path if flag == "--features" else path
    destination = tmp_path / "both.zarr"
    ran = run_main("composite", str(destination), f"a={store}", flag, argument)
    assert ran.returncode == 0, ran.stderr
    kept = _ids(destination, "cellData/ids" if flag == "--cells" else "RNA/featureData/ids")
    assert kept == ids


@pytest.mark.parametrize(
    ("argument", "words"),
    [
        ("@DIR", "is a directory, not a file"),
        ("@", "names no file"),
        ("@BINARY", "is not UTF-8 text"),
        ("@MISSING", "does not exist"),
    ],
)
@pytest.mark.parametrize("option", ["--storage-options", "--source-storage-options"])
def test_an_options_file_that_cannot_be_read_is_named_for_what_it_is(
    store: Path, tmp_path: Path, argument: str, words: str, option: str
) -> None:
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{\x00")
    given = (
        argument.replace("DIR", str(tmp_path))
        .replace("BINARY", str(tmp_path / "binary.json"))
        .replace("MISSING", str(tmp_path / "absent.json"))
    )
    for json_output in (False, True):
        ran = run_main("info", str(store), option, given, *(["--json"] if json_output else []))
        assert ran.returncode == 2, ran
        lines = ran.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
        assert f"{option} " in lines[0] and words in lines[0], lines[0]
        if json_output:
            payload = json.loads(ran.stdout)
            assert payload["exitCode"] == 2 and words in payload["message"]


@pytest.mark.parametrize(
    ("flag", "argument", "words"),
    [
        ("--features-file", "DIR", "is a directory, not a file"),
        # --features-file "$IDS" with IDS unset made a composite of every feature
        ("--features-file", "", "names no file"),
        ("--features", "@DIR", "is a directory, not a file"),
        ("--features", "@", "names no file"),
        ("--cells", "a=DIR", "is a directory, not a file"),
        ("--cells", "a=", "names no file"),
        ("--features-file", "BINARY", "is not UTF-8 text"),
    ],
)
def test_an_id_file_that_cannot_be_read_is_named_for_what_it_is(
    store: Path, tmp_path: Path, flag: str, argument: str, words: str
) -> None:
    folder = tmp_path / "ids"
    folder.mkdir()
    (tmp_path / "ids.bin").write_bytes(b"\xff\xfegene\n")
    given = argument.replace("DIR", str(folder)).replace("BINARY", str(tmp_path / "ids.bin"))
    destination = tmp_path / "new.zarr"
    ran = run_main("composite", str(destination), f"a={store}", flag, given)
    assert ran.returncode == 2, ran
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], ran.stderr
    assert not destination.exists()
