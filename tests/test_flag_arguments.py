"""Yes/no arguments of the public functions take True or False, not anything truthy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    location = tmp_path_factory.mktemp("flags") / "s.zarr"
    cv.write_counts(location, realistic_counts(30, 12, seed=5))
    return location


CALLS: dict[str, Callable[[Path, Path, Any], Any]] = {
    "to_anndata lazy": lambda store, out, flag: cv.to_anndata(store, lazy=flag),
    "write_counts overwrite": lambda store, out, flag: cv.write_counts(
        out, realistic_counts(5, 4, seed=1), overwrite=flag
    ),
    "create_composite overwrite": lambda store, out, flag: cv.create_composite(
        out, {"a": store}, overwrite=flag
    ),
    "mount_datastore overwrite": lambda store, out, flag: cv.mount_datastore(
        store, out, overwrite=flag
    ),
    "repack data_only": lambda store, out, flag: cv.repack(store, out, data_only=flag),
    "repack overwrite": lambda store, out, flag: cv.repack(store, out, overwrite=flag),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("flag", ["yes", "false", 1, None])
def test_a_flag_that_is_not_a_bool_is_refused(
    call: str, flag: object, store: Path, tmp_path: Path
) -> None:
    argument = call.split()[1]
    out = tmp_path / "out.zarr"
    with pytest.raises(TypeError, match=rf"^{argument} must be True or False, not {flag!r}"):
        CALLS[call](store, out, flag)
    assert not out.exists()  # refused before anything was written


def test_numpy_bools_are_bools(store: Path, tmp_path: Path) -> None:
    adata = cv.to_anndata(store, lazy=np.bool_(False))
    assert adata.X.shape == (30, 12) and not hasattr(adata.X, "compute")
    cv.repack(store, tmp_path / "copy.zarr", overwrite=np.False_)
