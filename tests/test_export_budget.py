"""``export_anndata`` holds its memory budget: peak traced bytes <= mem_budget + BUDGET_ALLOWANCE.

Exports of ordinary stores, composites and composites over AnnData stores
(CSR and dense ``X``), unsigned counts (bands sized by each cell's entries)
and float counts (sized as if every value were non-zero), to ``.zarr`` v3
and v2 and ``.h5ad``, are traced. A budget too small is refused before
anything is written, naming the smallest that works, and that budget holds.
The bands never change the output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.anndata_output.export import export_anndata
from cytearc_vfs_adapters.anndata_output.export_budget import MIN_BAND_BYTES
from test_memory_budgets import MiB, smallest_budget, traced_peak

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.write.budget import BUDGET_ALLOWANCE

BUDGET = 32 * MiB


def _counts(n: int, m: int, density: float, dtype: Any, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    x = sp.random_array((n, m), density=density, format="csr", dtype=np.float64, rng=rng)
    x.data = np.ceil(x.data * 200) if np.dtype(dtype).kind != "f" else x.data * 3.7
    return sp.csr_matrix(x.astype(dtype))


def _adata(x: Any, prefix: str) -> ad.AnnData:
    n, m = x.shape
    rng = np.random.default_rng(1)
    obs = pd.DataFrame(
        {
            "depth": rng.random(n),
            "kind": pd.Categorical(rng.choice(["a", "b", "c"], n)),
            "note": [f"text {i}" for i in range(n)],
        },
        index=[f"{prefix}{i}" for i in range(n)],
    )
    return ad.AnnData(X=x, obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(m)]))


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export-budget")
    built = {
        # half the values non-zero, uint8: the sparse form is several times the dense one
        "dense-ish": _counts(2_000, 1_500, 0.5, np.uint8, 0),
        # float counts: no entry counts, bands sized for every value non-zero
        "wide float": _counts(150, 10_000, 0.1, np.float32, 1),
        "part a": _counts(1_500, 800, 0.2, np.uint16, 2),
        "part b": _counts(1_500, 800, 0.2, np.uint16, 3),
    }
    paths = {}
    for name, x in built.items():
        paths[name] = root / f"{name.replace(' ', '-')}.zarr"
        cv.write_counts(paths[name], _adata(x, name[:4]))
    paths["composite"] = root / "composite.zarr"
    cv.create_composite(paths["composite"], {"a": paths["part a"], "b": paths["part b"]})
    for kind, x in (("csr", _counts(2_000, 1_000, 0.3, np.uint8, 4)), ("dense", None)):
        source = root / f"anndata-{kind}.zarr"
        matrix = _counts(2_000, 1_000, 0.3, np.uint8, 5).toarray() if x is None else x
        _adata(matrix, kind).write_zarr(source)
        paths[f"anndata {kind}"] = root / f"over-anndata-{kind}.zarr"
        cv.create_composite(paths[f"anndata {kind}"], {"a": source})
    # the first export of a process imports anndata's and zarr's writers and makes
    # the decoding threads' buffers: once a process, not the export's data
    for suffix in ("h5ad", "zarr"):
        export_anndata(paths["part a"], root / f"warm.{suffix}")
    return paths


def _export(store: Path, out: Path, **options: Any) -> Any:
    zarr_format = options.pop("zarr_format", 3)
    return export_anndata(store, out, zarr_format=zarr_format, **options)


def _traced_export(store: Path, out: Path, budget: int) -> tuple[Any, int]:
    """The export's info and its traced peak."""
    infos: list[Any] = []
    peak = traced_peak(lambda: infos.append(_export(store, out, mem_budget=budget)))
    return infos[0], peak


@pytest.mark.parametrize(
    ("store", "output"),
    [
        ("dense-ish", "v3"),
        ("dense-ish", "h5ad"),
        ("wide float", "v2"),
        ("composite", "v3"),
        ("anndata csr", "h5ad"),
        ("anndata dense", "v2"),
    ],
)
def test_export_holds_its_budget(
    stores: dict[str, Path], tmp_path: Path, store: str, output: str
) -> None:
    out = tmp_path / ("out.h5ad" if output == "h5ad" else "out.zarr")
    zarr_format = 2 if output == "v2" else 3
    infos: list[Any] = []
    peak = traced_peak(
        lambda: infos.append(
            _export(stores[store], out, mem_budget=BUDGET, zarr_format=zarr_format)
        )
    )
    assert peak <= BUDGET + BUDGET_ALLOWANCE, f"peak {peak / MiB:.1f} MiB"
    assert ad.read_h5ad(out).shape if output == "h5ad" else ad.read_zarr(out).shape


def _arrays(out: Path) -> dict[str, Any]:
    group = zarr.open_group(out, mode="r")
    x = group["X"]
    return {
        "attrs": dict(x.attrs),
        **{name: (x[name][:], x[name].chunks, x[name].dtype) for name in x.array_keys()},
    }


@pytest.mark.parametrize("store", ["dense-ish", "composite"])
def test_the_bands_do_not_change_the_output(
    stores: dict[str, Path], tmp_path: Path, store: str
) -> None:
    # dense-ish: 1.5 million entries, so bands end inside, across and on chunks of 2^20
    store_path = stores[store]
    few = _export(store_path, tmp_path / "few.zarr", mem_budget="2G")
    many = _export(store_path, tmp_path / "many.zarr", mem_budget=BUDGET, band_bytes=170_000)
    assert few.bands == 1 and many.bands > 10
    left, right = _arrays(tmp_path / "few.zarr"), _arrays(tmp_path / "many.zarr")
    assert left.keys() == right.keys()
    for name, value in left.items():
        if name == "attrs":
            assert value == right[name]
        else:
            np.testing.assert_array_equal(value[0], right[name][0])
            assert value[1:] == right[name][1:]
    exported = ad.read_zarr(tmp_path / "many.zarr")
    loaded = cv.to_anndata(store_path, lazy=False)
    assert (exported.X != loaded.X).nnz == 0
    pd.testing.assert_frame_equal(exported.obs, loaded.obs, check_dtype=False)
    pd.testing.assert_frame_equal(exported.var, loaded.var, check_dtype=False)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_column_writes_whole_chunks_and_equals_its_appends(
    tmp_path: Path, zarr_format: int
) -> None:
    from cytearc_vfs_adapters.anndata_output.export import _Column

    group = zarr.open_group(tmp_path / "c.zarr", mode="w", zarr_format=zarr_format)
    array = group.create_array("v", shape=(0,), dtype="int32", chunks=(7,))
    column = _Column(array, 7, resizable=True, whole_chunks=True)
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 100, size, dtype=np.int32) for size in (3, 0, 4, 7, 15, 1, 2, 6, 20)]
    lengths = []
    for part in parts:
        column.append(part)
        lengths.append(array.shape[0])
        assert array.shape[0] % 7 == 0  # whole chunks only, until the end
    column.finish()
    np.testing.assert_array_equal(array[:], np.concatenate(parts))
    assert lengths == [0, 0, 7, 14, 28, 28, 28, 35, 56]


@pytest.mark.parametrize("output", ["out.zarr", "out.h5ad"])
def test_a_budget_too_small_is_refused_before_anything_is_written(
    stores: dict[str, Path], tmp_path: Path, output: str
) -> None:
    out = tmp_path / output
    with pytest.raises(
        ValueError, match=r"raise mem_budget to at least .*Nothing was written"
    ) as refused:
        _export(stores["dense-ish"], out, mem_budget=MiB)
    assert list(tmp_path.iterdir()) == []  # no destination, no temporary
    least = smallest_budget(refused.value)
    with pytest.raises(ValueError, match="raise mem_budget"):
        _export(stores["dense-ish"], out, mem_budget=least - 1)
    assert list(tmp_path.iterdir()) == []
    # the smallest budget holds, in bands of at least MIN_BAND_BYTES (of one cell
    # each, a budget named so took minutes here)
    info, peak = _traced_export(stores["dense-ish"], out, least)
    assert peak <= least + BUDGET_ALLOWANCE, f"peak {peak / MiB:.1f} MiB at {least} bytes"
    n_cells, n_features = info.shape
    fewest = min(n_cells, -(-MIN_BAND_BYTES // n_features))  # uint8 counts: a byte a value
    assert info.bands <= -(-n_cells // fewest)


def test_the_command_line_refuses_with_one_line_and_exit_2(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.zarr"
    assert main(["export", str(stores["composite"]), str(out), "--mem-budget", "1M"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "raise --mem-budget to at least" in error and "bytes)" in error
    assert not out.exists()
    assert main(["export", str(stores["composite"]), str(out), "--mem-budget", "32M"]) == 0
    assert ad.read_zarr(out).shape == (3_000, 800)


def test_band_bytes_bounds_a_band_within_the_budget(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    info = _export(stores["dense-ish"], tmp_path / "o.h5ad", mem_budget="1G", band_bytes=300_000)
    assert info.band_cells == 300_000 // 1_500
    with pytest.raises(ValueError, match="band_bytes must be a positive"):
        _export(stores["dense-ish"], tmp_path / "p.h5ad", band_bytes=0)


def test_the_default_budget_exports_an_ordinary_100000_cell_store(tmp_path: Path) -> None:
    """The default was 64 MiB, which the obs and var tables alone (read, made plain and
    encoded: five copies) outgrow near 60,000 cells with two text columns: an export
    of such a store with no --mem-budget was refused. It is every writer's default."""
    from cytearc_vfs_adapters.anndata_output.export_budget import EXPORT_BUDGET

    from cytearc_vfs.format.layout import DEFAULT_MEM_BUDGET

    assert EXPORT_BUDGET == DEFAULT_MEM_BUDGET
    n = 100_000
    counts = sp.random(n, 4, density=0.3, format="csr", random_state=0, dtype=np.float32)
    counts.data[:] = 1
    ids = [f"sample-{i % 7}-cell-barcode-{i:08d}" for i in range(n)]
    cells = pd.DataFrame(
        {"sample": [f"sample-{i % 7}" for i in range(n)], "barcode": ids}, index=ids
    )
    cv.write_counts(tmp_path / "s.zarr", counts, cells=cells)
    assert main(["export", str(tmp_path / "s.zarr"), str(tmp_path / "out.zarr")]) == 0
    exported = ad.read_zarr(tmp_path / "out.zarr")
    assert exported.shape == (n, 4) and exported.obs["barcode"].iloc[-1] == ids[-1]


@pytest.mark.parametrize("budget", [2**63, 10**30, "99999999999999999999999T"])
def test_a_budget_beyond_64_bits_exports_in_one_band(
    stores: dict[str, Path], tmp_path: Path, budget: int | str
) -> None:
    # a budget larger than any machine's memory (a typo, or "no limit") sized the
    # bands with a search in int64 that overflowed: exit 70 as "a bug in cytearc-vfs"
    out = tmp_path / "out.zarr"
    info = _export(stores["composite"], out, mem_budget=budget)
    assert info.bands == 1
    assert ad.read_zarr(out).shape == (3_000, 800)


def test_the_command_line_takes_a_budget_beyond_64_bits(
    stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.h5ad"
    budget = "99999999999999999999999T"
    assert main(["export", str(stores["composite"]), str(out), "--mem-budget", budget]) == 0
    assert capsys.readouterr().err == ""
    assert ad.read_h5ad(out).shape == (3_000, 800)
