"""Two writers of one empty destination: exactly one creates it.

The spec's "Writer destinations": a destination without keys is created with
mode "w-", which refuses keys that appear after the check. An audit ran two
``write_counts`` into one empty folder at once: both returned success, and
the store held one writer's counts while the other believed its own were
there. Both wrote the same root document (the marker names the writer, not
the write), and the backends answer ``set_if_not_exists`` of an existing key
silently, so reading the root back could not tell the two apart.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

import cytearc_vfs as cv
from cytearc_vfs.write.destination_checks import check_destination
from cytearc_vfs.write.destinations import create_destination


def test_a_root_created_after_the_check_is_refused(tmp_path: Path) -> None:
    location = tmp_path / "d.zarr"
    first = check_destination(location, overwrite=False)
    second = check_destination(location, overwrite=False)
    assert first == second == "w-"
    create_destination(location, overwrite=False, writer="write_counts", checked=first)
    with pytest.raises(FileExistsError, match="appeared there after it was checked"):
        create_destination(location, overwrite=False, writer="write_counts", checked=second)


def _write(args: tuple[Path, int]) -> str:
    location, value = args
    try:
        cv.write_counts(location, np.full((200, 40), value, dtype=np.uint8))
    except FileExistsError:
        return "refused"
    return "written"


def test_two_processes_writing_one_destination(tmp_path: Path) -> None:
    location = tmp_path / "d.zarr"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_write, [(location, 1), (location, 2)])
    assert sorted(outcomes) == ["refused", "written"]
    winner = 1 if outcomes[0] == "written" else 2
    values = cv.VirtualArrayReader(cv.open_store(location), assay="RNA").read()
    assert np.unique(values).tolist() == [winner]
