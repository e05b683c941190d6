"""``write_counts`` from an ``.h5ad`` whose matrix has no cells or no features.

anndata writes such files (a filter that kept nothing); a dense ``X`` of
shape ``(n, 0)`` is stored unchunked, and its row bands were cut with a
step of zero columns (``range() arg 3 must not be zero``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

KINDS: dict[str, Callable[[np.ndarray], Any]] = {
    "csr": sp.csr_matrix,
    "csc": sp.csc_matrix,
    "dense": np.asarray,
}


@pytest.mark.parametrize("shape", [(0, 4), (5, 0), (0, 0)])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_write_counts_from_an_h5ad_with_an_empty_axis(
    tmp_path: Path, kind: str, shape: tuple[int, int]
) -> None:
    data = ad.AnnData(X=KINDS[kind](np.zeros(shape, dtype=np.float32)))
    data.obs_names = [f"c{i}" for i in range(shape[0])]
    data.var_names = [f"g{i}" for i in range(shape[1])]
    path = tmp_path / "empty.h5ad"
    data.write_h5ad(path)
    info = cv.write_counts(str(tmp_path / "out.zarr"), str(path))
    assert info.shape == shape
    reader = cv.VirtualArrayReader(cv.open_store(str(tmp_path / "out.zarr")), assay="RNA")
    assert reader.read().shape == shape
    assert list(reader.cell_ids) == list(data.obs_names)
    assert list(reader.feature_ids) == list(data.var_names)
