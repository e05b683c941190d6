"""Refusals of an AnnData's tables name them as anndata does: ``obs``, ``var``, ``raw/var``.

An AnnData's user typed ``obs`` and ``var`` (and sees ``adata.obs_names``),
never CyteArc's ``cellData`` and ``featureData``; a write of an AnnData (in
memory, an ``.h5ad``, an AnnData Zarr store) and a composite over an AnnData
source named its tables by where they would be stored
(``cellData column 'a' holds complex128 values ...``). They now name the
AnnData's table, its index and, where the layout explains the refusal, where
the column would be stored (``obs column 'I' (stored as cellData/I)``). A
table given as ``cells=`` / ``features=``, and a CyteArc store's own tables,
keep CyteArc's names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata_files import write_anndata_zarr
from cytearc_vfs_adapters.anndata_output import export_anndata

import cytearc_vfs as cv
from cytearc_vfs.cli import main

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"
)

KINDS = ["memory", "h5ad", "zarr"]


def _anndata(
    obs: dict[str, Any] | None = None,
    var: dict[str, Any] | None = None,
    *,
    obs_names: list[str] | None = None,
    var_names: list[str] | None = None,
) -> ad.AnnData:
    return ad.AnnData(
        X=sp.csr_matrix(np.arange(1, 7, dtype=np.float32).reshape(3, 2)),
        obs=pd.DataFrame(obs or {}, index=obs_names or ["c0", "c1", "c2"]),
        var=pd.DataFrame(var or {}, index=var_names or ["g0", "g1"]),
    )


def _given(data: ad.AnnData, kind: str, where: Path) -> Any:
    """``data`` as ``write_counts`` is given it: the object, an ``.h5ad``, a Zarr store."""
    if kind == "memory":
        return data
    if kind == "h5ad":
        data.write_h5ad(where / "a.h5ad")
        return where / "a.h5ad"
    return write_anndata_zarr(data, where / "a.zarr", 3)


# each: the AnnData, and how its refusal begins
REFUSED: dict[str, tuple[Callable[[], ad.AnnData], str]] = {
    "obs value": (
        lambda: _anndata({"a": [1 + 2j, 0, 0]}),
        "obs column 'a' holds complex128 values such as (1+2j)",
    ),
    "var value": (
        lambda: _anndata(var={"kind": pd.Categorical(["x", None])}),
        "var column 'kind' is categorical with missing values",
    ),
    "obs columns": (
        lambda: _anndata({"a": [1 + 2j, 0, 0], "b": pd.Categorical(["x", None, "x"])}),
        "obs column 'a' holds complex128",
    ),
    "obs selection": (
        lambda: _anndata({"I": [1, 2, 3]}),
        "obs column 'I' (stored as cellData/I) is the live selection",
    ),
    "var selection": (
        lambda: _anndata(var={"I": ["a", "b"]}),
        "var column 'I' (stored as featureData/I) is the live selection",
    ),
    "var names": (
        lambda: _anndata(var={"names": [0.5, 1.5]}),
        "var column 'names' (stored as featureData/names) holds 0.5 (float) at row 0",
    ),
    "obs index": (
        lambda: _anndata(obs_names=["c0", "", "c2"]),
        "obs index value at position 1 is the empty string",
    ),
    "var index": (
        lambda: _anndata(var_names=["g0", "g0"]),
        "var index values must be unique; ['g0'] repeat",
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_write_of_an_anndata_names_its_tables_as_anndata_does(
    tmp_path: Path, kind: str, case: str
) -> None:
    make, begins = REFUSED[case]
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "w.zarr", _given(make(), kind, tmp_path))
    said = str(raised.value)
    assert said.startswith(begins), said
    if "stored as" not in begins:
        assert "cellData" not in said and "featureData" not in said, said
    assert not (tmp_path / "w.zarr").exists()


def test_a_remedy_names_the_anndata_attribute(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. adata\.var\['names'\]\.astype\(str\)"):
        cv.write_counts(tmp_path / "w.zarr", REFUSED["var names"][0]())
    with pytest.raises(ValueError, match=r"Also refused: 'b' is categorical with missing"):
        cv.write_counts(tmp_path / "w.zarr", REFUSED["obs columns"][0]())


def _with_raw(var: dict[str, Any]) -> ad.AnnData:
    """An AnnData whose raw counts hold three features, described by ``var`` in raw/var."""
    data = _anndata()
    data.raw = ad.AnnData(
        X=sp.csr_matrix(np.ones((3, 3), dtype=np.float32)),
        obs=data.obs,
        var=pd.DataFrame(var, index=["g0", "g1", "g2"]),
    )
    return data


@pytest.mark.parametrize("kind", KINDS)
def test_the_raw_counts_features_are_named_raw_var(tmp_path: Path, kind: str) -> None:
    given = _given(_with_raw({"a": [1j, 0, 0]}), kind, tmp_path)
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "w.zarr", given, layer="raw/X")
    assert str(raised.value).startswith("raw/var column 'a' holds complex128"), raised.value
    # X's features are var, which holds no such column: written
    cv.write_counts(tmp_path / "w.zarr", given)


def test_repeated_raw_var_ids_are_given_a_remedy_that_runs(tmp_path: Path) -> None:
    """``AnnData.var_names_make_unique()`` was the remedy for repeated ``raw/var`` ids,
    which it leaves as they are (it renames ``var``'s)."""
    data = _with_raw({})
    data.raw.var.index = pd.Index(["g0", "g0", "g2"])
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "w.zarr", data, layer="raw/X")
    said = str(raised.value)
    assert said.startswith("raw/var index values must be unique; ['g0'] repeat"), said
    remedy = "adata.raw.var.index = anndata.utils.make_index_unique(adata.raw.var.index)"
    assert remedy in said, said
    data.raw.var.index = ad.utils.make_index_unique(data.raw.var.index)  # as given
    cv.write_counts(tmp_path / "w.zarr", data, layer="raw/X")


def test_the_command_line_names_obs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _anndata({"I": [1, 2, 3]}).write_h5ad(tmp_path / "a.h5ad")
    assert main(["write", str(tmp_path / "a.h5ad"), str(tmp_path / "w.zarr")]) == 2
    err = capsys.readouterr().err
    assert "obs column 'I' (stored as cellData/I) is the live selection" in err, err
    assert not (tmp_path / "w.zarr").exists()


# ------------------------------------------------------------ composite sources


def test_a_composite_names_an_anndata_source_obs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = write_anndata_zarr(_anndata({"a": [1j, 0, 0], "b": [1, 2, 3]}), tmp_path / "s.zarr", 3)
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs"):
        cv.create_composite(tmp_path / "c.zarr", {"s": source}).close()
    warned = [r.getMessage() for r in caplog.records if "not carried" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "source 's': obs column 'a' holds complex128"
    ), warned


@pytest.mark.parametrize(
    ("obs_names", "var_names", "begins"),
    [
        (["c0", "", "c2"], None, "source 's': obs index value at position 1 is the empty string"),
        (
            None,
            ["g0", "g\x00h"],
            "source 's': var index value at position 1 ('g\\x00h') holds a NUL",
        ),
        # fixed-width text drops a trailing NUL: the composite held 'c1' for 'c1\x00'
        (["c0", "c1\x00", "c2"], None, "source 's': obs index value at position 1 ('c1\\x00')"),
    ],
    ids=["obs", "var", "trailing NUL"],
)
def test_a_composite_refuses_an_anndata_source_id_by_its_index(
    tmp_path: Path, obs_names: list[str] | None, var_names: list[str] | None, begins: str
) -> None:
    """An id no table stores was refused as the composite's own (``cellData id at
    position 4``, a position in the composite), naming neither the source nor its index;
    one ending in NUL was stored without it."""
    other = write_anndata_zarr(_anndata(obs_names=["x0", "x1", "x2"]), tmp_path / "o.zarr", 3)
    data = _anndata(obs_names=obs_names, var_names=var_names)
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    with pytest.raises(ValueError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"o": other, "s": source})
    assert str(raised.value).startswith(begins), raised.value
    assert not (tmp_path / "c.zarr").exists()


def test_a_cell_selection_names_where_an_anndata_source_keeps_its_ids(tmp_path: Path) -> None:
    """``cells=`` ids a source lacks: "give ids of its cellData/ids" told an AnnData
    source's user of an array their AnnData does not have."""
    source = write_anndata_zarr(_anndata(), tmp_path / "s.zarr", 3)
    with pytest.raises(ValueError, match=r"are not cells of that source .*of its obs index, a"):
        cv.create_composite(tmp_path / "c.zarr", {"s": source}, cells={"s": ["c0", "nope"]})
    cv.write_counts(tmp_path / "w.zarr", sp.csr_matrix(np.eye(2, dtype=np.uint8)))
    with pytest.raises(ValueError, match=r"are not cells of that source .*of its cellData/ids, a"):
        cv.create_composite(tmp_path / "c.zarr", {"w": tmp_path / "w.zarr"}, cells={"w": ["x"]})
    assert not (tmp_path / "c.zarr").exists()


def test_a_composite_over_raw_counts_names_raw_var(tmp_path: Path) -> None:
    """The source's raw counts' features were called ``var``, and the remedy
    ``adata.var = adata.var.rename(...)`` renamed the wrong table."""
    data = _with_raw({"I": [1, 2, 3]})
    source = write_anndata_zarr(data, tmp_path / "s.zarr", 3)
    with pytest.raises(cv.UnsupportedSourceError) as raised:
        cv.create_composite(tmp_path / "c.zarr", {"s": source}, source_layers={"s": "raw/X"})
    said = str(raised.value)
    assert said.startswith(
        "source 's': raw/var column 'I' (stored as featureData/I) is the live selection"
    ), said
    # a remedy that runs: adata.raw.var has no setter, so it renames in place
    assert "adata.raw.var.rename(columns={'I': 'NEW_NAME'}, inplace=True)" in said, said
    data.raw.var.rename(columns={"I": "NEW_NAME"}, inplace=True)  # the remedy, as given
    fixed = write_anndata_zarr(data, tmp_path / "fixed.zarr", 3)
    cv.create_composite(tmp_path / "c.zarr", {"s": fixed}, source_layers={"s": "raw/X"}).close()


# ------------------------------------------------------------ CyteArc's own tables


def test_a_table_given_or_stored_keeps_cytearc_names(tmp_path: Path) -> None:
    """``cells=`` is the caller's table, not the AnnData's obs; a store's own table is
    exported from cellData: both are named as they are stored."""
    counts = sp.csr_matrix(np.eye(3, dtype=np.uint8))
    cells = pd.DataFrame({"a": [1j, 0, 0]}, index=["c0", "c1", "c2"])
    with pytest.raises(ValueError, match=r"^cellData column 'a' holds complex128"):
        cv.write_counts(tmp_path / "w.zarr", counts, cells=cells)
    with pytest.raises(ValueError, match=r"^cellData column 'a' holds complex128"):
        cv.write_counts(tmp_path / "w.zarr", _anndata(obs_names=["c0", "c1", "c2"]), cells=cells)
    cells = pd.DataFrame({"note": ["a", "b\x00c", "d"]}, index=["c0", "c1", "c2"])
    cv.write_counts(tmp_path / "s.zarr", counts, cells=cells)
    with pytest.raises(ValueError, match=r"cellData column 'note' row 1"):
        export_anndata(tmp_path / "s.zarr", tmp_path / "out.h5ad")
