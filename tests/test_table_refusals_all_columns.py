"""A table refused for its columns names every refused column at once.

Wu 2020's ``obs`` (scirpy's test file) has two categorical columns with
missing values; ``cytearc-vfs write`` named only the first, so a user who
filled it ran the import again only to be refused for the second.
"""

from __future__ import annotations

from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def _adata() -> anndata.AnnData:
    obs = pd.DataFrame(
        {
            "d_call": pd.Categorical(["a", None, "b", "a"]),
            "fine": ["x", "y", "z", "w"],
            "extra": pd.Categorical([None, None, None, None], categories=["k"]),
            "count": pd.array([1, None, 3, 4], dtype="Int64"),
        },
        index=[f"c{i}" for i in range(4)],
    )
    return anndata.AnnData(np.ones((4, 3), np.float32), obs=obs)


def test_every_column_with_missing_values_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "s.zarr", _adata())
    said = str(raised.value)
    assert "'d_call' is categorical with missing values" in said, said
    assert "'extra'" in said and "'count'" in said and "'fine'" not in said, said
    assert not (tmp_path / "s.zarr").exists()
    cv.write_counts(tmp_path / "s.zarr", _adata(), fill_missing=True)  # the remedy works


def test_the_command_line_names_them_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _adata().write_h5ad(tmp_path / "a.h5ad")
    assert main(["write", str(tmp_path / "a.h5ad"), str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err
    assert "'d_call'" in err and "'extra'" in err and "'count'" in err, err
    assert "--fill-missing" in err, err
