"""What a reader's dask blocks carry to reopen its store: a worker process may run
in another working directory than the process that made the reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv


def test_blocks_of_a_store_given_by_a_relative_path_read_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dask")
    from cytearc_vfs.read import blockwise

    counts = realistic_counts(120, 30, density=0.1, seed=3)
    cv.write_counts(tmp_path / "a.zarr", counts)
    monkeypatch.chdir(tmp_path)
    lazy = cv.VirtualArrayReader("a.zarr").to_dask(chunks=(50, 30))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # as a worker started in another folder
    # a new process has no reader kept (and this test leaves none to the others)
    monkeypatch.setattr(blockwise, "_PROCESS_READERS", {})
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), counts.toarray())
