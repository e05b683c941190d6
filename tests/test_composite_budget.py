"""create_composite holds its memory budget: peak traced bytes <= mem_budget + BUDGET_ALLOWANCE.

The sources (CyteArc stores, AnnData Zarr stores in CSR and CSC) are written
once per module; each composite is created with Python's allocations traced,
at the smallest budget its refusal names and at a larger one, whole and in
part (an intersection of features, a selection of cells). A budget too small
is refused before the destination exists, through the API and the command
line, and a composite created at a small budget equals one at the default.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from test_memory_budgets import s3_process, smallest_budget, traced_peak  # noqa: F401 (fixture)

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.format.sizes import format_size
from cytearc_vfs.write.budget import BUDGET_ALLOWANCE

MiB = 1 << 20
N_CELLS, N_FEATURES = 8_000, 300


def _counts(seed: int, n_cells: int = N_CELLS, n_features: int = N_FEATURES) -> sp.csr_array:
    matrix = sp.random_array(
        (n_cells, n_features),
        density=0.1,
        format="csr",
        dtype=np.float64,
        rng=np.random.default_rng(seed),
    )
    matrix.data = np.ceil(matrix.data * 300)
    return matrix


def _tables(name: str, n_cells: int, n_features: int, offset: int) -> tuple[Any, Any]:
    cells = pd.DataFrame(
        {
            "depth": np.arange(n_cells, dtype=np.float64),
            "kind": pd.Categorical(np.array(["a", "b"])[np.arange(n_cells) % 2]),
        },
        index=[f"{name}-cell{i}" for i in range(n_cells)],
    )
    features = pd.DataFrame(index=[f"gene{i + offset}" for i in range(n_features)])
    return cells, features


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two CyteArc stores sharing 200 of their 300 features, and AnnData stores in CSR and CSC."""
    root = tmp_path_factory.mktemp("sources")
    paths: dict[str, Path] = {}
    for index, (name, offset) in enumerate([("a", 0), ("b", 100)]):
        cells, features = _tables(name, N_CELLS, N_FEATURES, offset)
        paths[name] = root / f"{name}.zarr"
        cv.write_counts(paths[name], _counts(index), cells=cells, features=features)
    for index, encoding in enumerate(["csr", "csc"]):
        cells, features = _tables(encoding, N_CELLS // 2, N_FEATURES, 0)
        x = _counts(10 + index, N_CELLS // 2)
        matrix = sp.csr_matrix(x) if encoding == "csr" else sp.csc_matrix(x)
        paths[encoding] = root / f"{encoding}.zarr"
        ad.AnnData(X=matrix, obs=cells[["depth"]], var=features).write_zarr(paths[encoding])
    return paths


CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "whole": (["a", "b"], {}),
    "intersection": (["a", "b"], {"features": "intersection"}),
    "cells": (["a", "b"], {"cells": {"a": np.arange(0, N_CELLS, 3)}}),
    "anndata-csr": (["csr", "a"], {}),
    "anndata-csc": (["csc", "csr"], {"features": "intersection"}),
}


def _least(tmp_path: Path, locations: list[Path], **options: Any) -> int:
    """The smallest budget a refusal at 1 MiB names; nothing is written by it."""
    destination = tmp_path / f"{uuid.uuid4().hex}.zarr"
    with pytest.raises(ValueError, match=r"raise mem_budget to at least") as refused:
        cv.create_composite(destination, locations, mem_budget=MiB, **options)
    assert not destination.exists()
    return smallest_budget(refused.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_create_composite_holds_its_budget(
    tmp_path: Path, sources: dict[str, Path], case: str
) -> None:
    names, options = CASES[case]
    locations = [sources[name] for name in names]
    least = _least(tmp_path, locations, **options)
    for budget in (least, least + 8 * MiB):
        destination = tmp_path / f"{uuid.uuid4().hex}.zarr"
        peak = traced_peak(
            lambda d=destination, b=budget: cv.create_composite(
                d, locations, mem_budget=b, **options
            )
        )
        assert peak <= budget + BUDGET_ALLOWANCE, (
            f"{case}: peak {peak / MiB:.1f} MiB over budget {budget / MiB:.1f} MiB "
            f"+ allowance {BUDGET_ALLOWANCE / MiB:.0f} MiB"
        )
        assert cv.open_store(destination).reader().shape[0] > 0


def test_a_composite_on_s3_holds_its_budget(
    tmp_path: Path, sources: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    # the destination's write-behind holds what S3 has not yet stored: its share is counted
    import urllib.request

    s3 = request.getfixturevalue("s3_process")  # moto in a process of its own

    bucket = f"bkt-{uuid.uuid4().hex[:12]}"
    put = urllib.request.Request(f"{s3['endpoint']}/{bucket}", method="PUT")
    urllib.request.urlopen(put, timeout=10).close()
    names, options = CASES["intersection"]
    locations = [sources[name] for name in names]
    least = _least(tmp_path, locations, **options)
    destination = f"s3://{bucket}/composite"
    peak = traced_peak(
        lambda: cv.create_composite(
            destination, locations, mem_budget=least, storage_options=s3, **options
        )
    )
    assert peak <= least + BUDGET_ALLOWANCE, f"peak {peak / MiB:.1f} MiB at {least / MiB:.1f} MiB"
    opened = cv.open_store(destination, storage_options=s3)
    assert cv.VirtualArrayReader(opened).shape == (2 * N_CELLS, 200)


def test_a_budget_below_the_smallest_is_refused_before_writing(
    tmp_path: Path, sources: dict[str, Path]
) -> None:
    locations = [sources["a"], sources["b"]]
    least = _least(tmp_path, locations)
    destination = tmp_path / "c.zarr"
    with pytest.raises(
        ValueError, match=rf"at least .* \({least} bytes\).*Nothing was written"
    ) as refused:
        cv.create_composite(destination, locations, mem_budget=least * 9 // 10)
    assert not destination.exists()
    # one figure for the need and the remedy: the write-behind share is in both (the
    # need once left it out, and read below the budget it was refused at)
    message = str(refused.value)
    found = re.search(
        r"needs about ([\d.]+) MiB: ([\d.]+) MiB for its tables.*, and ([\d.]+) MiB for the "
        r"destination's buffered writes \(a share of the budget\), over mem_budget ([\d.]+) MiB",
        message,
    )
    assert found is not None, message
    need, held, share, budget = (float(figure) for figure in found.groups())
    assert f"raise mem_budget to at least {format_size(least)} ({least} bytes)" in message
    assert format_size(least) == f"{need:.1f} MiB" and need > budget
    assert abs(held + share - need) <= 0.11  # each rounded to 0.1 MiB
    assert "shorten" not in message  # no text column makes this cost
    cv.create_composite(destination, locations, mem_budget=least)
    assert destination.exists()


def test_a_refusal_names_the_wide_text_column_that_makes_its_cost(tmp_path: Path) -> None:
    """Text is held as wide as its longest value: one long note in one cell made the
    refusal ask for a budget hundreds of times the counts, without saying why."""
    n_cells = 2_000
    cells = pd.DataFrame(index=[f"cell{i}" for i in range(n_cells)])
    cells["note"] = [f"n{i}" for i in range(n_cells)]
    cells.loc["cell7", "note"] = "x" * 5_000
    source = tmp_path / "noted.zarr"
    x = sp.csr_matrix(_counts(3, n_cells, 10).astype(np.float32))
    ad.AnnData(X=x, obs=cells, var=pd.DataFrame(index=[f"g{i}" for i in range(10)])).write_zarr(
        source
    )
    destination = tmp_path / "c.zarr"
    with pytest.raises(
        ValueError,
        match=r"or shorten the longest value of the cell column 'note' of source 'noted' "
        r"\(5000 characters\).*Nothing was written",
    ):
        cv.create_composite(destination, [source], mem_budget=16 * MiB)
    assert not destination.exists()


def test_the_command_line_refuses_a_budget_too_small_in_one_line(
    tmp_path: Path, sources: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    destination = tmp_path / "c.zarr"
    code = main(
        ["composite", str(destination), str(sources["a"]), str(sources["b"]), "--mem-budget", "1M"]
    )
    assert code == 2
    message = capsys.readouterr().err.strip()
    assert "--mem-budget" in message and "raise --mem-budget to at least" in message
    assert len(message.splitlines()) == 1, message
    assert not destination.exists()
    least = smallest_budget(ValueError(message))
    assert (
        main(
            [
                "composite",
                str(destination),
                str(sources["a"]),
                str(sources["b"]),
                "--mem-budget",
                str(least),
            ]
        )
        == 0
    )


@pytest.mark.parametrize("case", ["intersection", "anndata-csc"])
def test_a_composite_at_a_small_budget_equals_one_at_the_default(
    tmp_path: Path, sources: dict[str, Path], case: str
) -> None:
    names, options = CASES[case]
    locations = [sources[name] for name in names]
    small = cv.create_composite(
        tmp_path / "small.zarr",
        locations,
        mem_budget=_least(tmp_path, locations, **options),
        **options,
    )
    default = cv.create_composite(tmp_path / "default.zarr", locations, **options)
    np.testing.assert_array_equal(small.reader().read(), default.reader().read())
    for name in ("rowSums", "rowPositive", "columnPositive"):
        path = f"RNA/countSummaries/{name}"
        np.testing.assert_array_equal(_array(small, path), _array(default, path))


def _array(store: Any, path: str) -> Any:
    import zarr

    return zarr.open_array(store, path=path, mode="r")[...]
