"""A table refused for its columns names every refused column at once.

Wu 2020's ``obs`` (scirpy's test file) has two categorical columns with
missing values; ``cytearc-vfs write`` named only the first, so a user who
filled it ran the import again only to be refused for the second.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.cli.failures import ExitCode, classify_failure
from cytearc_vfs.errors import IncompleteStoreError, NonFiniteArtifactError, RecordShapeError
from cytearc_vfs.format.column_refusals import column_refusal, combined_class, refuse_columns
from cytearc_vfs.format.table_names import CELL_DATA


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
    # the AnnData's table, named as anndata names it
    assert said.startswith("obs column 'd_call' is categorical with missing values"), said
    assert "'extra'" in said and "'count'" in said and "'fine'" not in said, said
    assert not (tmp_path / "s.zarr").exists()
    cv.write_counts(tmp_path / "s.zarr", _adata(), fill_missing=True)  # the remedy works


def test_the_command_line_names_them_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _adata().write_h5ad(tmp_path / "a.h5ad")
    assert main(["write", str(tmp_path / "a.h5ad"), str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err
    assert "obs column 'd_call'" in err and "'extra'" in err and "'count'" in err, err
    assert "--fill-missing" in err, err


def test_refusals_of_the_package_own_class_keep_it_and_its_exit_code() -> None:
    """The combined refusal was a plain ValueError whatever its parts: damaged columns
    (RecordShapeError, exit 3 alone) exited 2 together, and ``except RecordShapeError``
    missed them."""
    parts = [
        (name, column_refusal(CELL_DATA, name, "is damaged", "restore it", kind=RecordShapeError))
        for name in ("a", "b")
    ]
    with pytest.raises(RecordShapeError) as raised:
        refuse_columns(parts, table=CELL_DATA)
    said = str(raised.value)
    assert said == (
        "cellData column 'a' is damaged; restore it. Also refused: 'b' is damaged. "
        "Nothing was written"
    )
    assert raised.value.__cause__ is parts[0][1]
    assert classify_failure(raised.value).code == ExitCode.DAMAGED
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is RecordShapeError and str(again) == said


def test_refusals_of_different_classes_are_their_common_class() -> None:
    """A caller catching RecordShapeError expects every column it names to be damaged:
    beside a missing value (a ValueError), the combined refusal is a ValueError, exit 2."""
    parts: list[tuple[str, ValueError]] = [
        ("a", column_refusal(CELL_DATA, "a", "is damaged", "restore it", kind=RecordShapeError)),
        ("b", column_refusal(CELL_DATA, "b", "is categorical with missing values", "fill them")),
    ]
    with pytest.raises(ValueError) as raised:
        refuse_columns(parts, table=CELL_DATA)
    assert type(raised.value) is ValueError
    assert "Also refused: 'b' is categorical with missing values." in str(raised.value)
    assert classify_failure(raised.value).code == ExitCode.REFUSED
    assert combined_class([parts[0][1], IncompleteStoreError("x")]) is ValueError


def test_a_class_whose_constructor_takes_more_keeps_the_first_column_attributes() -> None:
    parts = [
        (name, NonFiniteArtifactError(f"column {name!r}: NaN", operation="o", array=name, row=n))
        for n, name in enumerate("ab")
    ]
    with pytest.raises(NonFiniteArtifactError) as raised:
        refuse_columns(parts, table=CELL_DATA)
    assert (raised.value.array, raised.value.row) == ("a", 0)
    assert "Also refused: 'b' column 'b': NaN" in str(raised.value)


def test_another_library_subclass_is_restated_as_a_value_error() -> None:
    parts = [(name, pd.errors.OutOfBoundsDatetime(f"{name} out of bounds")) for name in "ab"]
    with pytest.raises(ValueError) as raised:
        refuse_columns(parts, table=CELL_DATA)
    assert type(raised.value) is ValueError


def test_plain_refusals_stay_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "s.zarr", _adata())
    assert type(raised.value) is ValueError and "Also refused" in str(raised.value)


def test_datetimes_past_what_a_column_holds_are_refused_by_name(tmp_path: Path) -> None:
    """An OverflowError with numpy's words alone ("Overflow when converting between
    datetime64 units"), naming no column and stopping the check of the others."""
    cells = pd.DataFrame(
        {
            "when": np.array(["3000-01-01", "2000-01-01"], dtype="M8[s]"),
            "kind": pd.Categorical(["a", None]),
        },
        index=["x", "y"],
    )
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 3), np.uint8), cells=cells)
    said = str(raised.value)
    assert said.startswith(
        "cellData column 'when' (datetime64[s]) holds datetimes outside 1677..2262, which a "
        "column stores as datetime64[ns] cannot hold; convert it, e.g. with .astype(str). "
        "Also refused: 'kind' is categorical with missing values"
    ), said
    assert not (tmp_path / "s.zarr").exists()
    cells["when"] = cells["when"].astype(str)
    cv.write_counts(tmp_path / "s.zarr", np.ones((2, 3), np.uint8), cells=cells, fill_missing=True)


def test_a_reason_quoting_a_semicolon_is_named_whole(tmp_path: Path) -> None:
    """ "Also refused" cut each column's message at its first ';' to drop the remedy, so
    a value quoted in the reason that held one was cut off mid-quote: each refusal
    carries its reason from where it is raised."""
    cells = pd.DataFrame(
        {"kind": pd.Categorical(["a", None]), "note": ["x;y\0", "z"]}, index=["c0", "c1"]
    )
    with pytest.raises(ValueError) as raised:
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 3), np.uint8), cells=cells)
    said = str(raised.value)
    assert said.endswith(
        "Also refused: 'note' holds text ending in a NUL character at row 0 ('x;y\\x00'), "
        "which fixed-width text cannot keep (it drops trailing NULs, so the value would "
        "change). Nothing was written"
    ), said
    assert not (tmp_path / "s.zarr").exists()


def test_a_refusal_raised_elsewhere_is_named_by_its_whole_message() -> None:
    """A column refused by an error that carries no reason (not raised by
    column_refusal) is named by all it says, never by a guess at its form."""
    parts: list[tuple[str, ValueError]] = [
        ("a", column_refusal(CELL_DATA, "a", "is damaged", "restore it")),
        ("b", ValueError("cellData column 'b' overflowed; cast it")),
    ]
    with pytest.raises(ValueError) as raised:
        refuse_columns(parts, table=CELL_DATA)
    assert str(raised.value).endswith(
        "Also refused: 'b' cellData column 'b' overflowed; cast it. Nothing was written"
    )
    assert not hasattr(raised.value, "column_reason")
