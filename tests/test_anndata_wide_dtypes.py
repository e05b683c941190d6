"""Count dtypes outside the spec's storage dtypes, from an AnnData: kept exactly or refused.

The spec ("Count dtype") stores whole non-negative counts unsigned and other
float counts as float32 or float64; float16 is no storage dtype. A
``numpy.longdouble`` X (``float128``: h5py writes it to an ``.h5ad``) is stored
as float64 only where float64 holds every value, whole counts as unsigned
integers exactly; any other is refused before the destination exists (it was
refused midway, leaving a pending store, by a cast "that cannot happen for
dtypes the rule chose"). Complex X is refused; float16 widens exactly to float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cli_harness import run_main

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

WIDE = np.dtype(np.longdouble)
needs_wide = pytest.mark.skipif(
    WIDE.itemsize <= 8, reason="numpy.longdouble is float64 on this platform"
)
ENCODINGS = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "dense": np.asarray}


def h5ad(path: Path, values: np.ndarray, encoding: str) -> Path:
    data = ad.AnnData(X=ENCODINGS[encoding](values))
    data.obs_names = [f"c{i}" for i in range(values.shape[0])]
    data.var_names = [f"g{j}" for j in range(values.shape[1])]
    data.write_h5ad(path)
    with h5py.File(path, "r") as stored:  # the file keeps the dtype given
        member = stored["X"] if encoding == "dense" else stored["X/data"]
        assert member.dtype == values.dtype
    return path


def stored(path: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(path, mode="r")["RNA/counts"][:])


def wide(rows: list[list[Any]]) -> np.ndarray:
    return np.array([[np.longdouble(v) for v in row] for row in rows], dtype=WIDE)


@needs_wide
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_longdouble_counts_that_float64_would_round_are_refused_before_writing(
    tmp_path: Path, encoding: str
) -> None:
    values = wide([[1, 0, 2], [0, 3, 0]]) / 3  # a third: float64 rounds it
    source = h5ad(tmp_path / "a.h5ad", values, encoding)
    for given in (str(source), ad.read_h5ad(source)):
        with pytest.raises(
            ValueError,
            match=r"counts of dtype float128 \(numpy\.longdouble\) hold a value that float64.*"
            r"cannot hold exactly \(np\.longdouble\('0\.333.*'\) in rows 0:2\).*"
            r"X\.astype\(numpy\.float64\).*Nothing was written",
        ):
            cv.write_counts(tmp_path / "out.zarr", given)
        assert not (tmp_path / "out.zarr").exists()  # refused before, not midway
    done = run_main("write", str(source), str(tmp_path / "out.zarr"))
    assert done.returncode == 2 and "numpy.longdouble" in done.stderr, done.stderr
    assert not (tmp_path / "out.zarr").exists()


@needs_wide
def test_a_whole_count_float64_cannot_hold_makes_a_float_matrix_refused(tmp_path: Path) -> None:
    """Whole counts alone are stored unsigned; beside one fraction they would be float64."""
    values = wide([[2**60 + 1, 0], [0, 0.5]])
    source = h5ad(tmp_path / "a.h5ad", values, "csr")
    with pytest.raises(ValueError, match=r"np\.longdouble\('1\.152921504606846977e\+18'\)"):
        cv.write_counts(tmp_path / "out.zarr", str(source))
    assert not (tmp_path / "out.zarr").exists()


@needs_wide
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_longdouble_counts_are_kept_exactly_where_they_can_be(
    tmp_path: Path, encoding: str
) -> None:
    whole = wide([[2**60 + 1, 0, 7], [0, 3, 0]])  # uint64 holds it; float64 would not
    source = h5ad(tmp_path / "whole.h5ad", whole, encoding)
    cv.write_counts(tmp_path / "whole.zarr", str(source))
    counts = stored(tmp_path / "whole.zarr")
    assert counts.dtype == np.uint64
    assert counts[0, 0] == 2**60 + 1 and np.array_equal(counts.astype(WIDE), whole)
    # the largest uint64: float() of the scan's maximum rounded it to 2**64, past
    # uint64, and the counts were refused as floats float64 cannot hold
    largest = wide([[2**64 - 1, 0, 0], [0, 3, 1]])
    source = h5ad(tmp_path / "largest.h5ad", largest, encoding)
    cv.write_counts(tmp_path / "largest.zarr", str(source))
    counts = stored(tmp_path / "largest.zarr")
    assert counts.dtype == np.uint64 and counts[0, 0] == 2**64 - 1
    halves = wide([[0.5, 0, 2.25], [0, 3, 0]])  # float64 holds every one
    source = h5ad(tmp_path / "halves.h5ad", halves, encoding)
    cv.write_counts(tmp_path / "halves.zarr", str(source))
    counts = stored(tmp_path / "halves.zarr")
    assert counts.dtype == np.float64 and np.array_equal(counts.astype(WIDE), halves)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_counts_are_refused_by_both_paths(tmp_path: Path, dtype: str) -> None:
    values = np.array([[1, 0, 2], [0, 3, 0]], dtype=dtype)
    data = ad.AnnData(X=values)
    data.obs_names, data.var_names = ["c0", "c1"], ["g0", "g1", "g2"]
    data.write_zarr(tmp_path / "a.zarr")
    data.write_h5ad(tmp_path / "a.h5ad")
    for source in ("a.zarr", "a.h5ad"):
        with pytest.raises(TypeError, match=rf"counts must be numeric, found dtype {dtype}"):
            cv.write_counts(tmp_path / "out.zarr", str(tmp_path / source))
        assert not (tmp_path / "out.zarr").exists()
    with pytest.raises(cv.UnsupportedSourceError, match=rf"X holds {dtype} values, not counts"):
        cv.create_composite(tmp_path / "c.zarr", {"s": str(tmp_path / "a.zarr")})
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("encoding", ["csr", "csc"])
def test_float16_counts_widen_exactly_to_float32(tmp_path: Path, encoding: str) -> None:
    """scipy has no float16 sparse matrix, but a file can hold one (written here by hand)."""
    values = np.array([[1, 0, 2], [0, 3, 0]], dtype=np.float32) / 4
    source = h5ad(tmp_path / "a.h5ad", values, encoding)
    with h5py.File(source, "r+") as file:
        data = file["X/data"][:].astype(np.float16)
        del file["X/data"]
        file["X/data"] = data
    cv.write_counts(tmp_path / "out.zarr", str(source))
    counts = stored(tmp_path / "out.zarr")
    assert counts.dtype == np.float32 and np.array_equal(counts, values)
