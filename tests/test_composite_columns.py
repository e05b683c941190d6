"""A composite's cell and feature columns: the sources' columns, merged by one rule.

On real data (Wu 2020 with cell columns ``patient``, ``source``, ``sample`` and
feature columns ``gene_ids``, ``feature_types``; the CellTypist sample with
none) the composite's tables equal ``anndata.concat(join="outer",
merge="first")`` except where the documented rule differs, and those
differences are asserted one by one. Small written sources cover the rest of
the rule: type promotion, missing values, feature conflicts, reserved names,
membership columns, and naming sources given as a list.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from conftest import realistic_counts
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs import realdata
from cytearc_vfs.composite.create import source_name_of, source_names_from_locations
from cytearc_vfs.format.tables import read_table

#: Columns a composite writes itself, and the source structure it carries under ``orig_``.
OWN_CELL_COLUMNS = {"ids", "names", "I", "source", "sourceId"}
OWN_FEATURE_COLUMNS = {"ids", "names", "I"}


def _tables(location: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The composite's cell and feature tables, read with plain zarr on its opened store."""
    group = zarr.open_group(cv.open_store(location), mode="r")
    cells = group["cellData"]
    features = group["RNA/featureData"]
    assert isinstance(cells, zarr.Group) and isinstance(features, zarr.Group)
    return read_table(cells), read_table(features)


# ------------------------------------------------------------------ real data


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("composite-columns")
    wu, ct = realdata.wu2020(), realdata.celltypist_sample()
    cv.write_counts(folder / "wu2020.zarr", wu)
    cv.write_counts(folder / "celltypist.zarr", ct)
    # a list: the sources are named "wu2020" and "celltypist"
    cv.create_composite(folder / "union.zarr", [folder / "wu2020.zarr", folder / "celltypist.zarr"])
    return {"folder": folder, "wu": wu, "ct": ct}


def _reference(real: dict[str, Any]) -> ad.AnnData:
    """The anndata reference, with the rule's one renaming applied to its input."""
    wu = real["wu"].copy()
    # the rule: a source column named like the composite's own ``source`` is ``orig_source``
    wu.obs = wu.obs.rename(columns={"source": "orig_source"})
    return ad.concat(
        {"wu2020": wu, "celltypist": real["ct"]}, join="outer", label="source", merge="first"
    )


def test_real_cell_columns_match_anndata_outer_concat(real: dict[str, Any]) -> None:
    cells, _ = _tables(real["folder"] / "union.zarr")
    reference = _reference(real)
    # documented differences: the composite also writes names, I and sourceId; the
    # sources' own names and I are the defaults write_counts made, not carried
    assert set(cells.columns) == (set(reference.obs.columns) | OWN_CELL_COLUMNS) - {"ids"}
    assert cells.index.tolist() == reference.obs_names.tolist()
    # and in anndata's order (its label column last), after the composite's own
    back = cv.to_anndata(real["folder"] / "union.zarr")
    concat_order = [name for name in reference.obs.columns if name != "source"]
    assert list(back.obs.columns) == ["source", "sourceId", *concat_order]
    assert cells["source"].tolist() == reference.obs["source"].astype(str).tolist()
    # categorical, the sources in composite order its categories, as concat's label
    assert back.obs["source"].dtype == reference.obs["source"].dtype
    assert cells["source"].dtype == reference.obs["source"].dtype
    assert cells["sourceId"].tolist() == reference.obs_names.tolist()
    for column in ("patient", "orig_source", "sample"):
        ours, theirs = cells[column], reference.obs[column]
        assert isinstance(ours.dtype, pd.CategoricalDtype)
        # documented difference: a missing text value is "" (a last category), not NaN
        assert ours.cat.categories.tolist() == [*theirs.cat.categories.tolist(), ""]
        assert ours.astype(str).tolist() == theirs.astype(object).fillna("").tolist()
    wu_rows = cells["source"] == "wu2020"
    assert (cells.loc[wu_rows, "orig_source"] != "").all()
    assert (cells.loc[~wu_rows, ["patient", "orig_source", "sample"]] == "").all().all()


def test_real_feature_columns_match_anndata_outer_concat(real: dict[str, Any]) -> None:
    _, features = _tables(real["folder"] / "union.zarr")
    reference = _reference(real).var.reindex(features.index)
    assert reference.index.notna().all()
    assert set(features.columns) == set(reference.columns) | (OWN_FEATURE_COLUMNS - {"ids"})
    assert features["gene_ids"].tolist() == reference["gene_ids"].astype(object).fillna("").tolist()
    types = features["feature_types"]
    assert isinstance(types.dtype, pd.CategoricalDtype)
    assert types.cat.categories.tolist() == ["Gene Expression", ""]
    assert (
        types.astype(str).tolist() == reference["feature_types"].astype(object).fillna("").tolist()
    )
    only_ct = ~features.index.isin(real["wu"].var_names)
    assert only_ct.sum() == len(features) - real["wu"].n_vars
    assert (features.loc[only_ct, "gene_ids"] == "").all()


def test_real_selected_cells_carry_their_columns_in_output_order(
    real: dict[str, Any], tmp_path: Path
) -> None:
    folder = real["folder"]
    rows = np.array([17, 3, 150, 42])
    cv.create_composite(
        tmp_path / "some.zarr",
        {"ct": folder / "celltypist.zarr", "wu": folder / "wu2020.zarr"},
        features="intersection",
        cells={"wu": rows, "ct": np.zeros(real["ct"].n_obs, dtype=bool)},
    )
    cells, features = _tables(tmp_path / "some.zarr")
    obs = real["wu"].obs.iloc[rows]
    assert cells.index.tolist() == obs.index.tolist()
    assert cells["source"].tolist() == ["wu"] * len(rows)
    # no kept cell lacks a column, so nothing is missing and no "" category is added
    assert cells["patient"].tolist() == obs["patient"].tolist()
    assert cells["patient"].cat.categories.tolist() == obs["patient"].cat.categories.tolist()
    assert cells["orig_source"].tolist() == obs["source"].tolist()
    # the intersection's features all come from Wu (the second source), with its values
    var = real["wu"].var.reindex(features.index)
    assert features["gene_ids"].tolist() == var["gene_ids"].tolist()


def test_real_composite_reopens_and_deep_verifies(real: dict[str, Any]) -> None:
    from cytearc_vfs.inspection.deep_verify import deep_verify

    location = real["folder"] / "union.zarr"
    store = cv.open_store(location)
    phases: dict[str, int] = {}
    reports = deep_verify(
        store,
        where=str(location),
        progress=lambda phase, done, total: phases.update({phase: total}),
    )
    assert all(not report.problems for report in reports)
    # each source's bars name it: they were all "verify RNA counts", naming none
    sources = {source.name: source for source in store.sources}
    for name, source in sources.items():
        n_cells, n_features = source.info.shape
        assert phases[f"verify RNA counts (source {name})"] == n_cells, phases
        assert phases[f"verify RNA countsT (source {name})"] == n_features, phases
    assert phases["verify RNA"] == sum(source.info.shape[0] for source in sources.values())
    assert "verify RNA counts" not in phases, phases
    # a bare zarr open of the composite's own directory lists the columns too
    group = zarr.open_group(LocalStore(location, read_only=True), mode="r")
    names = {name for name, _ in group["cellData"].arrays()}  # type: ignore[union-attr]
    assert {"patient", "sample", "orig_source", "source"} <= names
    lengths = {array.shape for _, array in group["cellData"].arrays()}  # type: ignore[union-attr]
    assert lengths == {(200 + 559,)}


@pytest.mark.filterwarnings(
    "ignore::FutureWarning",
    "ignore::UserWarning",
    # anndata's to_memory sets a pandas option that pandas 3 deprecates
    "ignore:The 'mode.chained_assignment' option is deprecated",
)
def test_real_anndata_sources_carry_the_same_columns(real: dict[str, Any]) -> None:
    """The same real data as AnnData stores (Wu in Zarr v3, CellTypist in v2): the
    composite's tables equal the ones over the converted CyteArc stores."""
    folder = real["folder"]
    sources = {
        "wu2020": write_anndata_zarr(real["wu"], folder / "wu2020.ad.zarr", 3),
        "celltypist": write_anndata_zarr(real["ct"], folder / "celltypist.ad.zarr", 2),
    }
    cv.create_composite(folder / "over_anndata.zarr", sources)
    cells, features = _tables(folder / "over_anndata.zarr")
    converted_cells, converted_features = _tables(folder / "union.zarr")
    pd.testing.assert_frame_equal(cells, converted_cells)
    pd.testing.assert_frame_equal(features, converted_features)
    # and so anndata's own outer concat, as the CyteArc composite's test shows; the
    # AnnData a user gets back holds them too, beside counts equal to the concat's
    assert {"patient", "sample", "orig_source"} <= set(cells.columns)
    back = cv.to_anndata(folder / "over_anndata.zarr", lazy=False)
    reference = _reference(real)
    assert back.obs_names.tolist() == reference.obs_names.tolist()
    for column in ("patient", "orig_source", "sample"):
        expected = reference.obs[column].astype(object).fillna("").tolist()
        assert back.obs[column].astype(str).tolist() == expected
    truth = reference[:, back.var_names].X
    np.testing.assert_array_equal(sp.csr_matrix(back.X).toarray(), sp.csr_matrix(truth).toarray())


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_anndata_column_kinds_and_missing_values(
    tmp_path: Path, zarr_format: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Every obs column kind anndata writes, with missing values, merged with a
    CyteArc source that lacks them; a declared membership column becomes RNA_I."""
    n = 6
    obs = pd.DataFrame(
        {
            "kind": pd.Categorical(["a", "b", None, "a", "b", None]),
            "stage": pd.Categorical([1, 2, 2, None, 1, 1]),
            "count": pd.array([1, None, 3, 4, 5, 6], dtype="Int64"),
            "flag": pd.array([True, False, None, True, True, False], dtype="boolean"),
            "whole": np.arange(n, dtype=np.int32),
            "score": np.linspace(0, 1, n),
            "label": pd.array(["x", None, "z", "x", "y", "z"], dtype="string"),
            "measured": np.array([True, True, False, True, False, True]),
        },
        index=[f"a{i}" for i in range(n)],
    )
    data = ad.AnnData(
        X=sp.csr_matrix(realistic_counts(n, 4, density=0.5, seed=1)).astype(np.float32),
        obs=obs,
        var=pd.DataFrame({"symbol": ["A", "B", "C", "D"]}, index=["g0", "g1", "g2", "g3"]),
    )
    data.uns["cytearc"] = {"assayMembership": {"RNA": "measured"}}
    annd = write_anndata_zarr(data, tmp_path / "a.zarr", zarr_format)
    other = _source(tmp_path / "b.zarr", 3, ["g1", "g9"], {"whole": [7, 8, 9]}, {}, seed=2)
    cv.create_composite(tmp_path / "comp.zarr", {"a": annd, "b": other})
    cells, features = _tables(tmp_path / "comp.zarr")
    a, b = cells["source"] == "a", cells["source"] == "b"
    assert cells.loc[a, "kind"].tolist() == ["a", "b", "", "a", "b", ""]
    assert cells["kind"].cat.categories.tolist() == ["a", "b", ""]
    assert (cells.loc[b, "kind"] == "").all()
    # numbers with missing values become float64 with NaN, in this source and the other
    np.testing.assert_array_equal(cells.loc[a, "stage"], [1, 2, 2, np.nan, 1, 1])
    np.testing.assert_array_equal(cells.loc[a, "count"], [1, np.nan, 3, 4, 5, 6])
    np.testing.assert_array_equal(cells.loc[a, "flag"], [1, 0, np.nan, 1, 1, 0])
    assert cells["count"].dtype == np.float64 and cells.loc[b, "count"].isna().all()
    assert cells["whole"].tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    np.testing.assert_allclose(cells.loc[a, "score"], obs["score"])
    assert cells.loc[a, "label"].tolist() == ["x", "", "z", "x", "y", "z"]
    # the declared membership column: the composite's RNA_I, True for the other source
    assert cells["RNA_I"].tolist() == [True, True, False, True, False, True, True, True, True]
    assert "measured" not in cells.columns
    group = zarr.open_group(cv.open_store(tmp_path / "comp.zarr"), mode="r")
    assert group["cellData/RNA_I"].attrs["role"] == "assay_membership"
    assert features.loc[["g0", "g1", "g9"], "symbol"].tolist() == ["A", "B", ""]


# ------------------------------------------------------------------ the rule on small sources


def _source(
    path: Path,
    n_cells: int,
    features: list[str],
    cells: dict[str, Any],
    feature_columns: dict[str, Any],
    seed: int,
) -> Path:
    counts = realistic_counts(n_cells, len(features), density=0.3, seed=seed, dtype="uint16")
    cv.write_counts(
        path,
        sp.csr_array(counts),
        cells=pd.DataFrame(cells, index=[f"{path.stem}-c{i}" for i in range(n_cells)]),
        features=pd.DataFrame(feature_columns, index=features),
    )
    return path


def test_disagreeing_columns_follow_the_rule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = _source(
        tmp_path / "a.zarr",
        3,
        ["f0", "f1", "f2", "f3"],
        {
            "score": np.array([1, 2, 3], dtype=np.int64),
            "flag": np.array([True, False, True]),
            "label": ["x", "y", "z"],
            "batch": pd.Categorical(["b1", "b2", "b1"], categories=["b2", "b1"]),
            "count": np.array([1, 2, 3], dtype=np.uint8),
            "when": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"]),
        },
        {"symbol": ["S0", "S1", "S2", "S3"], "length": np.array([10, 11, 12, 13], dtype=np.int32)},
        seed=1,
    )
    b = _source(
        tmp_path / "b.zarr",
        2,
        ["f3", "f4", "f2"],
        {
            "score": np.array([0.5, 1.5], dtype=np.float32),
            "label": np.array([7, 8], dtype=np.int64),
            "batch": pd.Categorical(["b3", "b1"], categories=["b1", "b3"]),
            "count": np.array([300, 4], dtype=np.int16),
            "extra": ["e0", "e1"],
        },
        {"symbol": ["S3-other", "S4", "S2"], "chrom": ["1", "2", "3"]},
        seed=2,
    )
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs.composite.columns"):
        cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    cells, features = _tables(tmp_path / "c.zarr")

    # numbers: numpy's common type (int64 with float32 -> float64), no missing rows
    assert cells["score"].dtype == np.float64
    assert cells["score"].tolist() == [1.0, 2.0, 3.0, 0.5, 1.5]
    assert cells["count"].dtype == np.int16  # uint8 with int16
    assert cells["count"].tolist() == [1, 2, 3, 300, 4]
    # a boolean that b lacks: float with NaN
    assert cells["flag"].dtype == np.float64
    np.testing.assert_array_equal(cells["flag"], [1.0, 0.0, 1.0, np.nan, np.nan])
    # text with numbers: text
    assert cells["label"].tolist() == ["x", "y", "z", "7", "8"]
    # categorical everywhere: the categories in order of first appearance
    assert cells["batch"].cat.categories.tolist() == ["b2", "b1", "b3"]
    assert cells["batch"].astype(str).tolist() == ["b1", "b2", "b1", "b3", "b1"]
    # text that a lacks: ""
    assert cells["extra"].tolist() == ["", "", "", "e0", "e1"]
    # a datetime that b lacks: NaT
    assert cells["when"].dtype.kind == "M"
    assert pd.isna(cells["when"].iloc[3:]).all()
    assert cells["when"].iloc[0] == pd.Timestamp("2020-01-01")

    # features: the union f0..f4; each value from the first source holding it
    assert features.index.tolist() == ["f0", "f1", "f2", "f3", "f4"]
    assert features["symbol"].tolist() == ["S0", "S1", "S2", "S3", "S4"]
    assert features["chrom"].tolist() == ["", "", "3", "1", "2"]
    np.testing.assert_array_equal(features["length"], [10, 11, 12, 13, np.nan])
    # f3 disagrees (S3 in a, S3-other in b); f2 agrees
    group = zarr.open_group(cv.open_store(tmp_path / "c.zarr"), mode="r")
    symbol = group["RNA/featureData/symbol"]
    assert symbol.attrs["cytearc:valueConflicts"] == {"features": 1, "example": "f3"}
    assert "cytearc:valueConflicts" not in group["RNA/featureData/chrom"].attrs
    assert any("'symbol'" in record.getMessage() for record in caplog.records)


def test_uint64_categories_beyond_int64_keep_their_values(tmp_path: Path) -> None:
    # numpy makes the JSON record [1, 2**64 - 1] float64: 2**64 - 1 rounded to 2**64,
    # which the cast back to uint64 made 0, a category no source has
    big = 2**64 - 1
    a = _source(
        tmp_path / "a.zarr",
        2,
        ["f0"],
        {"k": pd.Categorical(np.array([big, 1], dtype=np.uint64))},
        {},
        seed=1,
    )
    b = _source(
        tmp_path / "b.zarr",
        2,
        ["f0"],
        {"k": pd.Categorical(np.array([3, 1], dtype=np.uint64))},
        {},
        seed=2,
    )
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    cells, _ = _tables(tmp_path / "c.zarr")
    assert cells["k"].cat.categories.tolist() == [1, big, 3]
    assert cells["k"].tolist() == [big, 1, 3, 1]


def test_reserved_names_are_prefixed_orig(tmp_path: Path) -> None:
    a = _source(
        tmp_path / "a.zarr",
        2,
        ["f0", "f1"],
        {
            "source": ["lab1", "lab2"],
            "orig_source": ["old1", "old2"],
            "sourceId": ["s1", "s2"],
            "RNA_nCounts": np.array([5.0, 6.0]),
        },
        {},
        seed=3,
    )
    # no membership role: an ordinary column (write_counts skips the reserved name
    # with a warning, so it is added as an older writer or a hand edit would)
    _add_cell_column(a, "RNA_I", np.array([True, False]), {})
    b = _source(tmp_path / "b.zarr", 2, ["f0", "f1"], {"source": ["lab3", "lab4"]}, {}, seed=4)
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    cells, _ = _tables(tmp_path / "c.zarr")
    assert cells["source"].tolist() == ["a", "a", "b", "b"]  # the composite's own
    assert cells["sourceId"].tolist() == ["a-c0", "a-c1", "b-c0", "b-c1"]
    assert cells["orig_source"].tolist() == [
        "old1",
        "old2",
        "",
        "",
    ]  # a's own column keeps its name
    assert cells["orig_orig_source"].tolist() == ["lab1", "lab2", "lab3", "lab4"]
    assert cells["orig_sourceId"].tolist() == ["s1", "s2", "", ""]
    # preparation metrics describe a source's counts: not the composite's
    assert "RNA_nCounts" not in cells
    np.testing.assert_array_equal(cells["orig_RNA_nCounts"], [5.0, 6.0, np.nan, np.nan])
    assert "RNA_I" not in cells
    np.testing.assert_array_equal(cells["orig_RNA_I"], [1.0, 0.0, np.nan, np.nan])


def test_default_names_and_selection_are_not_carried(tmp_path: Path) -> None:
    """A source's ``names`` equal to its ids and ``I`` selecting every row are what
    write_counts wrote from the index: carried, they would be columns of ids and of
    True no one wrote (``orig_names``, ``orig_I``), which to_anndata of the source
    itself leaves out."""
    a = _source(tmp_path / "a.zarr", 2, ["f0", "f1"], {"x": [1, 2]}, {}, seed=3)
    b = _source(tmp_path / "b.zarr", 2, ["f0", "f1"], {"x": [3, 4]}, {}, seed=4)
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    cells, features = _tables(tmp_path / "c.zarr")
    assert set(cells.columns) == {"names", "I", "source", "sourceId", "x"}
    assert set(features.columns) == {"names", "I"}
    assert list(cv.to_anndata(tmp_path / "c.zarr").obs.columns) == ["source", "sourceId", "x"]


def test_a_source_selection_or_names_of_its_own_are_carried_for_every_source(
    tmp_path: Path,
) -> None:
    a = _source(tmp_path / "a.zarr", 2, ["f0", "f1"], {}, {}, seed=3)
    b = _source(
        tmp_path / "b.zarr",
        2,
        ["f0", "f1"],
        {"names": ["cell one", "cell two"], "I": np.array([True, False])},
        {"I": np.array([False, True])},
        seed=4,
    )
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    cells, features = _tables(tmp_path / "c.zarr")
    # a's defaults are kept beside b's own values: no row of the column is missing
    assert cells["orig_names"].tolist() == ["a-c0", "a-c1", "cell one", "cell two"]
    assert cells["orig_I"].tolist() == [True, True, True, False]
    assert features["orig_I"].tolist() == [True, True]  # a, the first source, holds both


def test_columns_keep_each_sources_order(tmp_path: Path) -> None:
    """Columns follow in order of first appearance, each source's as its table
    records it (its frame's order), as anndata.concat orders them: not by name."""
    a = _source(tmp_path / "a.zarr", 2, ["f0"], {"zeta": [1, 2], "alpha": ["p", "q"]}, {}, seed=3)
    b = _source(
        tmp_path / "b.zarr", 2, ["f0"], {"mid": [0.5, 1.5], "zeta": [3, 4]}, {"zz": [1]}, seed=4
    )
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    back = cv.to_anndata(tmp_path / "c.zarr")
    assert list(back.obs.columns) == ["source", "sourceId", "zeta", "alpha", "mid"]
    assert list(back.var.columns) == ["zz"]


def _add_cell_column(path: Path, name: str, values: np.ndarray, attrs: dict[str, Any]) -> None:
    group = zarr.open_group(LocalStore(path), mode="r+")
    group.create_array(f"cellData/{name}", data=values, attributes=attrs)


def test_membership_column_is_merged_as_membership(tmp_path: Path) -> None:
    a = _source(tmp_path / "a.zarr", 3, ["f0", "f1"], {}, {}, seed=5)
    b = _source(tmp_path / "b.zarr", 2, ["f0", "f1"], {}, {}, seed=6)
    role = {"role": "assay_membership"}
    _add_cell_column(a, "RNA_I", np.array([True, False, True]), {**role, "assay": "RNA"})
    _add_cell_column(a, "ADT_I", np.array([True, True, False]), {**role, "assay": "ADT"})
    cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    group = zarr.open_group(cv.open_store(tmp_path / "c.zarr"), mode="r")
    membership = group["cellData/RNA_I"]
    assert isinstance(membership, zarr.Array)
    # b has no membership column: it measured every one of its cells
    assert membership[:].tolist() == [True, False, True, True, True]
    assert membership.attrs["role"] == "assay_membership" and membership.attrs["assay"] == "RNA"
    names = {name for name, _ in group["cellData"].arrays()}  # type: ignore[union-attr]
    # another assay's membership is not carried, under any name
    assert not {"ADT_I", "orig_ADT_I", "orig_RNA_I"} & names


def test_broken_membership_column_is_refused_before_writing(tmp_path: Path) -> None:
    a = _source(tmp_path / "a.zarr", 3, ["f0", "f1"], {}, {}, seed=7)
    _add_cell_column(
        a, "RNA_I", np.array([1, 0, 1], dtype=np.int8), {"role": "assay_membership", "assay": "RNA"}
    )
    with pytest.raises(ValueError, match=r"source 'a': cell column RNA_I has role"):
        cv.create_composite(tmp_path / "c.zarr", {"a": a})
    assert not (tmp_path / "c.zarr").exists()


def test_column_of_another_shape_is_not_carried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = _source(tmp_path / "a.zarr", 3, ["f0", "f1"], {"kept": ["p", "q", "r"]}, {}, seed=8)
    _add_cell_column(a, "embedding", np.zeros((3, 2)), {})
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs.composite.columns"):
        cv.create_composite(tmp_path / "c.zarr", [a])
    cells, _ = _tables(tmp_path / "c.zarr")
    assert "embedding" not in cells and cells["kept"].tolist() == ["p", "q", "r"]
    assert any("'embedding'" in record.getMessage() for record in caplog.records)


# ------------------------------------------------------------------ sources as a list


def test_list_sources_are_named_like_the_command_line(tmp_path: Path) -> None:
    a = _source(tmp_path / "first.v1.zarr", 2, ["f0"], {}, {}, seed=9)
    b = _source(tmp_path / "second.zarr", 2, ["f0"], {}, {}, seed=10)
    store = cv.create_composite(tmp_path / "c.zarr", (str(a), b))
    assert [source.name for source in store.record.sources] == ["first", "second"]
    cells, _ = _tables(tmp_path / "c.zarr")
    assert cells["source"].tolist() == ["first", "first", "second", "second"]
    # one location: a composite of one source
    one = cv.create_composite(tmp_path / "one.zarr", b)
    assert [source.name for source in one.record.sources] == ["second"]


def test_store_objects_in_a_list_are_named_by_position(tmp_path: Path) -> None:
    a = _source(tmp_path / "a.zarr", 2, ["f0"], {}, {}, seed=11)
    b = _source(tmp_path / "b.zarr", 2, ["f0"], {}, {}, seed=12)
    store = cv.create_composite(tmp_path / "c.zarr", [LocalStore(a, read_only=True), b])
    assert [source.name for source in store.record.sources] == ["source0", "b"]


def test_duplicate_derived_names_suggest_a_mapping(tmp_path: Path) -> None:
    a = _source(tmp_path / "x" / "data.zarr", 2, ["f0"], {}, {}, seed=13)
    b = _source(tmp_path / "y" / "data.zarr", 2, ["f0"], {}, {}, seed=14)
    with pytest.raises(ValueError, match=r"both named 'data'.*pass a mapping \{name: location\}"):
        cv.create_composite(tmp_path / "c.zarr", [a, b])
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize(
    ("location", "name"),
    [
        ("wu2020.zarr", "wu2020"),
        ("data/pbmc.v2.zarr/", "pbmc"),
        ("s3://bucket/atlas/lung.zarr", "lung"),
        ("file:///tmp/x/blood.zarr", "blood"),
        (Path("a/b/c"), "c"),
        ("/", "source"),
    ],
)
def test_source_name_of(location: Any, name: str) -> None:
    assert source_name_of(location) == name


def test_source_names_from_locations_keeps_order() -> None:
    assert list(source_names_from_locations(["b.zarr", "a.zarr", "c"])) == ["b", "a", "c"]


def test_cells_by_id_keep_the_given_order(tmp_path: Path) -> None:
    """``cells=`` takes cell ids wherever it takes rows, in the order given."""
    from conftest import realistic_counts

    cv.write_counts(tmp_path / "a.zarr", realistic_counts(30, 8, seed=3))
    ids = cv.VirtualArrayReader(tmp_path / "a.zarr").cell_ids
    wanted = [ids[7], ids[2], ids[20]]
    by_id = cv.create_composite(
        tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"}, cells={"a": wanted}
    )
    by_row = cv.create_composite(
        tmp_path / "d.zarr", {"a": tmp_path / "a.zarr"}, cells={"a": [7, 2, 20]}
    )
    assert list(by_id.reader().cell_ids) == wanted
    np.testing.assert_array_equal(by_id.reader().read(), by_row.reader().read())
    with pytest.raises(ValueError, match="1 id\\(s\\) are not cells of that source"):
        cv.create_composite(tmp_path / "e.zarr", {"a": tmp_path / "a.zarr"}, cells={"a": ["nope"]})


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_more_anndata_sources_than_executor_threads_create(tmp_path: Path) -> None:
    """The element layer reads each source's tables through zarr's synchronous API on
    threads of its own: on the event loop's executor, as many sources as its threads
    held them all, waiting for decodes that needed one (creation hung)."""
    # more sources than asyncio's default executor has threads (zarr's loop uses it)
    count = min(32, (os.cpu_count() or 1) + 4) + 2
    sources = {}
    for index in range(count):
        data = ad.AnnData(
            X=sp.csr_matrix(realistic_counts(20, 5, density=0.5, seed=index)).astype(np.float32),
            obs=pd.DataFrame(
                {"depth": pd.array([index] * 20, dtype="Int64")},
                index=[f"s{index}c{i}" for i in range(20)],
            ),
            var=pd.DataFrame(index=[f"g{i}" for i in range(5)]),
        )
        sources[f"s{index}"] = write_anndata_zarr(data, tmp_path / f"s{index}.zarr", 3)
    cv.create_composite(tmp_path / "comp.zarr", sources).close()
    cells, _ = _tables(tmp_path / "comp.zarr")
    assert cells["depth"].tolist() == [index for index in range(count) for _ in range(20)]


def test_anndata_columns_named_as_reserved_ones_are_carried_prefixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An obs or var column called ``ids`` is kept as ``orig_ids``, as ``names``,
    ``source`` and ``sourceId`` are (it was dropped, the warning saying its name
    repeats); one called ``orig_ids`` beside it keeps its name."""
    obs = pd.DataFrame(
        {
            "ids": ["x1", "x2", "x3", "x4"],
            "orig_ids": ["o1", "o2", "o3", "o4"],
            "names": ["n1", "n2", "n3", "n4"],
            "source": ["s"] * 4,
            "sourceId": ["q"] * 4,
        },
        index=["c0", "c1", "c2", "c3"],
    )
    var = pd.DataFrame({"ids": ["E1", "E2", "E3"]}, index=["g0", "g1", "g2"])
    data = ad.AnnData(X=sp.csr_matrix(np.ones((4, 3), np.float32)), obs=obs, var=var)
    source = write_anndata_zarr(data, tmp_path / "a.zarr", 3)
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs"):
        store = cv.create_composite(tmp_path / "c.zarr", {"s": source})
    assert not [r for r in caplog.records if "not carried" in r.getMessage()]
    group = zarr.open_group(store, mode="r")
    cells, features = read_table(group["cellData"]), read_table(group["RNA/featureData"])
    assert list(cells.index) == cells["sourceId"].tolist() == list(obs.index)
    assert cells["orig_orig_ids"].tolist() == obs["ids"].tolist()
    assert cells["orig_ids"].tolist() == obs["orig_ids"].tolist()
    for name in ("names", "source", "sourceId"):
        assert cells[f"orig_{name}"].tolist() == obs[name].tolist()
    assert list(features.index) == list(var.index)
    assert features["orig_ids"].tolist() == var["ids"].tolist()
    store.close()
