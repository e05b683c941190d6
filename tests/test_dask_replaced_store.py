"""A lazy array read from a store that was replaced after the array was made refuses
(``IdentityMismatchError``), in the process that made it and in a fresh one: its
blocks never mix the old store's values with the new one's."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.errors import IdentityMismatchError

FEATURES = [f"g{i}" for i in range(12)]


def _replace(path: Path, counts: object) -> None:
    shutil.rmtree(path)
    cv.write_counts(path, counts, features=FEATURES)


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No reader kept by this process, as in a worker that has run no block yet."""
    from cytearc_vfs_adapters.anndata_output import conversion

    from cytearc_vfs.read import blockwise

    monkeypatch.setattr(blockwise, "_PROCESS_READERS", {})
    monkeypatch.setattr(conversion, "_PROCESS_READERS", {})


def test_to_dask_refuses_a_store_replaced_after_some_blocks_were_read(
    tmp_path: Path, fresh_process: None
) -> None:
    pytest.importorskip("dask")
    a = realistic_counts(60, 12, density=0.3, seed=1)
    b = realistic_counts(60, 12, density=0.3, seed=2)
    cv.write_counts(tmp_path / "a.zarr", a, features=FEATURES)
    lazy = cv.VirtualArrayReader(tmp_path / "a.zarr").to_dask(chunks=(30, 12))
    np.testing.assert_array_equal(lazy[:30].compute(scheduler="sync"), a.toarray()[:30])
    _replace(tmp_path / "a.zarr", b)  # same ids and shape, other values
    with pytest.raises(IdentityMismatchError, match=r"a\.zarr.*to_dask") as caught:
        lazy[30:].compute(scheduler="sync")
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == str(caught.value)


def test_to_dask_blocks_unpickled_after_the_store_was_replaced_refuse(
    tmp_path: Path, fresh_process: None
) -> None:
    pytest.importorskip("dask")
    a = realistic_counts(60, 12, density=0.3, seed=3)
    cv.write_counts(tmp_path / "a.zarr", a, features=FEATURES)
    lazy = cv.VirtualArrayReader(tmp_path / "a.zarr").to_dask(chunks=(30, 12))
    _replace(tmp_path / "a.zarr", realistic_counts(60, 12, density=0.3, seed=4))
    with pytest.raises(IdentityMismatchError, match="to_dask"):
        lazy.compute(scheduler="sync")


def test_lazy_anndata_blocks_unpickled_after_the_store_was_replaced_refuse(
    tmp_path: Path, fresh_process: None
) -> None:
    pytest.importorskip("anndata")
    a = realistic_counts(60, 12, density=0.3, seed=7)
    cv.write_counts(tmp_path / "a.zarr", a, features=FEATURES)
    x = cv.to_anndata(tmp_path / "a.zarr").X
    travelled = pickle.loads(pickle.dumps(x))  # as a worker gets it: no reader kept
    _replace(tmp_path / "a.zarr", realistic_counts(60, 12, density=0.3, seed=8))
    with pytest.raises(IdentityMismatchError, match="to_anndata"):
        travelled.compute(scheduler="sync")
