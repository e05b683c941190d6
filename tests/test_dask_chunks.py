"""``to_dask(chunks=...)``: a pair of whole numbers of cells and features (-1 or
None: the whole axis, as in dask); anything else is refused naming the value,
never an array of another shape (``(-1, 5)`` gave a 0-row array)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("dask")
    root = tmp_path_factory.mktemp("chunks")
    cv.write_counts(root / "a.zarr", realistic_counts(50, 10, density=0.3, seed=1))
    return cv.VirtualArrayReader(root / "a.zarr")


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ((-1, 5), ((50,), (5, 5))),
        ((None, 4), ((50,), (4, 4, 2))),
        ((np.int64(20), -1), ((20, 20, 10), (10,))),
        ((80, 20), ((50,), (10,))),
    ],
)
def test_whole_axes_and_numpy_integers(reader: Any, chunks: Any, expected: Any) -> None:
    lazy = reader.to_dask(chunks=chunks)
    assert lazy.chunks == expected
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), reader.read())


@pytest.mark.parametrize(
    "chunks", [100, (0, 5), (-2, 5), ("auto", 5), (5,), (5, 5, 5), (2.5, 5), (True, 5)]
)
def test_other_chunks_are_refused_naming_them(reader: Any, chunks: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=r"chunks must be.*\(cells, features\)"):
        reader.to_dask(chunks=chunks)
