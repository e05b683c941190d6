"""AnnData reaches write_counts through the input-adapter registry, never a core import.

The core reads scipy.sparse and numpy itself; an AnnData is recognised by the
``anndata`` entry of the ``cytearc_vfs.count_sources`` group, which lives in
``cytearc_vfs_adapters`` (docs/architecture.md).
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from cytearc_vfs_adapters.anndata_input import count_input

import cytearc_vfs as cv
from cytearc_vfs.write.count_source import COUNT_SOURCE_ENTRY_POINTS, CountInput


def _adata() -> ad.AnnData:
    counts = sp.random(30, 8, density=0.3, format="csr", random_state=3, dtype=np.float64)
    counts.data = np.ceil(counts.data * 9)
    adata = ad.AnnData(
        X=counts,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(30)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(8)]),
    )
    adata.layers["raw"] = (counts * 2).tocsr()
    return adata


def test_the_anndata_adapter_is_registered() -> None:
    (entry,) = [e for e in entry_points(group=COUNT_SOURCE_ENTRY_POINTS) if e.name == "anndata"]
    assert entry.load() is count_input


def test_the_adapter_answers_only_for_anndata() -> None:
    adata = _adata()
    found = count_input(adata, None)
    assert isinstance(found, CountInput)
    assert found.matrix is adata.X
    assert list(found.cells.index) == list(adata.obs_names)  # type: ignore[union-attr]
    assert count_input(adata, "raw").matrix is adata.layers["raw"]  # type: ignore[union-attr]
    assert count_input(adata.X, None) is None
    assert count_input(np.eye(2), None) is None
    # a string is a location: one that holds no AnnData is refused by name
    with pytest.raises(ValueError, match=r"not counts does not exist; check the path"):
        count_input("not counts", None)


def test_write_counts_takes_x_or_a_layer_with_obs_and_var(tmp_path: Path) -> None:
    adata = _adata()
    info = cv.write_counts(tmp_path / "x.zarr", adata)
    layered = cv.write_counts(tmp_path / "raw.zarr", adata, layer="raw")
    for location, expected in ((info.location, adata.X), (layered.location, adata.layers["raw"])):
        reader = cv.VirtualArrayReader(location)
        np.testing.assert_array_equal(reader.read(), expected.toarray())
        assert list(reader.cell_ids) == list(adata.obs_names)
        assert list(reader.feature_ids) == list(adata.var_names)


def test_an_unknown_layer_names_the_layers_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"no layer 'spliced'.*\['raw'\]"):
        cv.write_counts(tmp_path / "s.zarr", _adata(), layer="spliced")
    assert not (tmp_path / "s.zarr").exists()


def test_layer_needs_anndata_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layer= applies only to AnnData"):
        cv.write_counts(tmp_path / "s.zarr", sp.csr_array(np.eye(3)), layer="raw")
    assert not (tmp_path / "s.zarr").exists()


def test_scipy_input_never_imports_anndata(tmp_path: Path) -> None:
    code = (
        "import sys, numpy as np, scipy.sparse as sp, cytearc_vfs as cv\n"
        f"cv.write_counts({str(tmp_path / 's.zarr')!r}, sp.csr_array(np.eye(4, dtype=np.int32)))\n"
        "print('anndata' in sys.modules, 'h5py' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]
