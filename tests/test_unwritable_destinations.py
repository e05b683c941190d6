"""Local destinations that cannot be written are refused before any work, by every writer.

``/proc/x.zarr`` raised a bare ``FileNotFoundError`` once the writer made its
first directory, after it had read its input. Each writer (``write_counts``,
``create_composite``, ``mount_datastore``, ``repack``, ``export_anndata`` and
their commands) now asks the file system first (``write/writable.py``) and
refuses with :class:`UnwritableDestinationError`, naming the destination, the
folder, the reason and the remedy; its input is not read (a counting wrapper
sees no call) and nothing is left behind, not even the probe.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata_output.export import export_anndata
from test_refusals import CountingRows, CountingStore
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.write.writable import UnwritableDestinationError, require_writable

LINUX_PSEUDO = Path("/proc/self/mountinfo").exists()
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sources") / "a.zarr"
    cv.write_counts(path, realistic_counts(60, 20, seed=3))
    return path


@pytest.fixture(scope="module")
def h5ad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "in.h5ad"
    ad.AnnData(X=sp.csr_matrix(realistic_counts(30, 10, seed=4))).write_h5ad(path)
    return path


def _below_a_file(tmp_path: Path, name: str) -> tuple[Path, Path]:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder")
    return blocker / "deeper" / name, blocker


def _destinations(tmp_path: Path, name: str) -> dict[str, tuple[Path, Path, str]]:
    """Kind -> (destination, the folder the refusal names, the reason it gives)."""
    below, blocker = _below_a_file(tmp_path, name)
    found = {"below a file": (below, blocker, "is a file, not a directory")}
    if LINUX_PSEUDO:
        found["proc"] = (Path("/proc") / name, Path("/proc"), "proc file system")
        found["sys"] = (Path("/sys/kernel") / name, Path("/sys/kernel"), "sysfs file system")
    return found


KINDS = ["below a file", "proc", "sys"]


def _destination(tmp_path: Path, kind: str, name: str) -> tuple[Path, Path, str]:
    found = _destinations(tmp_path, name)
    if kind not in found:
        pytest.skip(f"no {kind} file system here")
    return found[kind]


def _assert_refusal(error: BaseException, destination: Path, folder: Path, reason: str) -> None:
    message = str(error)
    assert isinstance(error, UnwritableDestinationError)
    assert isinstance(error, PermissionError) and isinstance(error, cv.VfsError)
    assert str(destination) in message, message
    assert f"its folder {str(folder)!r}" in message and reason in message, message
    assert "Choose a destination" in message and message.endswith("Nothing was written")


@pytest.mark.parametrize("kind", KINDS)
def test_write_counts_refuses_before_it_reads_the_input(tmp_path: Path, kind: str) -> None:
    destination, folder, reason = _destination(tmp_path, kind, "x.zarr")
    rows = CountingRows(sp.csr_array(realistic_counts(40, 10, seed=1)))
    before = _tree(tmp_path)
    with pytest.raises(UnwritableDestinationError) as refused:
        cv.write_counts(destination, rows)
    _assert_refusal(refused.value, destination, folder, reason)
    assert rows.reads == 0
    assert _tree(tmp_path) == before and not destination.exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", ["composite", "mount", "repack"])
def test_store_writers_refuse_before_they_read_their_source(
    tmp_path: Path, source: Path, kind: str, writer: str
) -> None:
    destination, folder, reason = _destination(tmp_path, kind, f"{writer}.zarr")
    counted = CountingStore(LocalStore(source, read_only=True))
    run: dict[str, Callable[[], Any]] = {
        "composite": lambda: cv.create_composite(destination, {"a": counted}),
        "mount": lambda: cv.mount_datastore(counted, destination),
        "repack": lambda: cv.repack(counted, destination),
    }
    before = _tree(tmp_path)
    with pytest.raises(UnwritableDestinationError) as refused:
        run[writer]()
    _assert_refusal(refused.value, destination, folder, reason)
    assert counted.calls == 0
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_export_refuses_before_it_opens_the_store(
    tmp_path: Path, source: Path, kind: str, suffix: str
) -> None:
    destination, folder, reason = _destination(tmp_path, kind, f"x{suffix}")
    counted = CountingStore(LocalStore(source, read_only=True))
    with pytest.raises(UnwritableDestinationError) as refused:
        export_anndata(counted, destination)
    message = str(refused.value)
    assert f"export destination {str(destination)!r}" in message, message
    assert f"its folder {str(folder)!r}" in message and reason in message
    assert counted.calls == 0


@pytest.mark.parametrize("kind", KINDS)
def test_the_commands_refuse_with_one_line_and_exit_2(
    tmp_path: Path, source: Path, h5ad: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    destination, folder, _ = _destination(tmp_path, kind, "x.zarr")
    export_to = destination.with_suffix(".h5ad")
    for command in (
        ["write", str(h5ad), str(destination)],
        ["composite", str(destination), str(source)],
        ["mount", str(source), str(destination)],
        ["repack", str(source), str(destination)],
        ["export", str(source), str(export_to)],
    ):
        assert main(command) == 2, command
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"cytearc-vfs {command[0]}: ") and "\n" not in line
        assert "cannot be written" in line and "Choose a destination" in line, line
        assert repr(str(folder)) in line


@pytest.mark.skipif(ROOT, reason="the root user writes into a folder without write permission")
def test_a_folder_without_write_permission_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(UnwritableDestinationError, match="permission denied") as refused:
            cv.write_counts(folder / "x.zarr", np.eye(3, dtype=np.uint8))
        _assert_refusal(refused.value, folder / "x.zarr", folder, "permission denied")
    finally:
        folder.chmod(0o755)


def test_a_writable_destination_leaves_no_probe(tmp_path: Path) -> None:
    # missing folders are made by the writer; the probe sits in the nearest that exists
    destination = tmp_path / "new" / "deeper" / "x.zarr"
    cv.write_counts(destination, np.eye(3, dtype=np.uint8))
    existing = tmp_path / "existing"
    existing.mkdir()
    require_writable(existing, where="destination")
    cv.write_counts(existing, np.eye(2, dtype=np.uint8))
    assert not [p for p in tmp_path.rglob("*") if "probe" in p.name]
    assert cv.VirtualArrayReader(cv.open_store(destination)).shape == (3, 3)


def test_the_refusal_pickles_with_its_message() -> None:
    error = UnwritableDestinationError("destination /proc/x.zarr cannot be written")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is UnwritableDestinationError and str(again) == str(error)
