"""An ``obs`` (or ``var``) column named ``I``: the same rule from ``write_counts`` and
from a composite over the AnnData.

``cellData/I`` (``featureData/I``) is reserved: the live selection, boolean without
missing values (docs/layout.md). An import stores a table's boolean ``I`` as the
selection (an export of a narrowed selection writes one) and refuses any other; a
composite carries a source's selection as ``orig_I``. Before, a composite over an
AnnData carried an ``I`` of numbers or text as ``orig_I`` where ``write_counts``
refused it, and an AnnData without ``I`` beside one whose ``I`` selects fewer
cells read as missing (NaN) where the same AnnData imported reads as selected: a
composite over the AnnData held other tables than one over its import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import cytearc_vfs as cv
from cytearc_vfs.format.tables import read_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def anndata_with(prefix: str, selection: Any | None, *, axis: str = "obs") -> ad.AnnData:
    data = ad.AnnData(X=sp.csr_matrix(np.arange(12, dtype=np.float32).reshape(3, 4)))
    data.obs_names = [f"{prefix}{i}" for i in range(3)]
    data.var_names = ["g0", "g1", "g2", "g3"]
    data.obs["other"] = [1, 2, 3]
    if selection is not None:
        frame = data.obs if axis == "obs" else data.var
        frame["I"] = selection if axis == "obs" else [*selection, True][: len(frame)]
    return data


def tables(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    import zarr

    group = zarr.open_group(path, mode="r")
    return read_table(group["cellData"]), read_table(group["RNA/featureData"])


REFUSED = {
    "integers": [1, 2, 3],
    "text": ["a", "b", "c"],
    "booleans with a missing value": pd.array([True, None, False], dtype="boolean"),
    "floats": [1.0, 0.0, 1.0],
}


@pytest.mark.parametrize("axis", ["obs", "var"])
@pytest.mark.parametrize("kind", list(REFUSED))
def test_an_I_column_that_is_no_selection_is_refused_by_both_paths(
    tmp_path: Path, kind: str, axis: str
) -> None:
    source = tmp_path / "a.zarr"
    anndata_with("a", REFUSED[kind], axis=axis).write_zarr(source)
    # both name the column as anndata does, and where it would be stored
    table = "cellData" if axis == "obs" else "featureData"
    column = rf"{axis} column 'I' \(stored as {table}/I\)"
    with pytest.raises(ValueError, match=rf"^{column} is the live selection, which must"):
        cv.write_counts(tmp_path / "imported.zarr", str(source))
    assert not (tmp_path / "imported.zarr").exists()
    with pytest.raises(
        cv.UnsupportedSourceError,
        match=rf"source 'a': {column} is the live selection, which must be boolean "
        rf"without missing values \(it is .*\); the name is reserved.*rename\(columns=",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"a": source})
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("selection", [[True, False, True], [True, True, True]])
def test_a_composite_over_the_anndata_holds_what_one_over_its_import_holds(
    tmp_path: Path, selection: list[bool]
) -> None:
    anndata_with("a", selection).write_zarr(tmp_path / "a.zarr")
    anndata_with("b", None).write_zarr(tmp_path / "b.zarr")  # no I: every cell selected
    for name in ("a", "b"):
        cv.write_counts(tmp_path / f"{name}-imported.zarr", str(tmp_path / f"{name}.zarr"))
    imported = tables(tmp_path / "a-imported.zarr")[0]
    assert imported["I"].tolist() == selection  # the import's live selection
    cv.create_composite(
        tmp_path / "over-anndata.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}
    )
    cv.create_composite(
        tmp_path / "over-imports.zarr",
        {"a": tmp_path / "a-imported.zarr", "b": tmp_path / "b-imported.zarr"},
    )
    over_anndata = tables(tmp_path / "over-anndata.zarr")
    over_imports = tables(tmp_path / "over-imports.zarr")
    for mine, theirs in zip(over_anndata, over_imports, strict=True):
        pd.testing.assert_frame_equal(
            mine.sort_index(axis=1), theirs.sort_index(axis=1), check_index_type=False
        )
    cells = over_anndata[0]
    assert cells["I"].tolist() == [True] * 6  # the composite's own selection
    if all(selection):
        assert "orig_I" not in cells  # nobody's selection narrowed: nothing to carry
    else:
        # a's own selection, and b's every cell (it was NaN: b has no I column)
        assert cells["orig_I"].tolist() == [*selection, True, True, True]
        assert cells["orig_I"].dtype == bool
