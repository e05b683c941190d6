"""Benchmark: ``write_counts`` from an AnnData Zarr store, streamed, against loading it first.

Contenders, each in a fresh subprocess so its peak RSS is its own:

* ``streamed``  ``write_counts(dest, "in.zarr")``: the element layer hands the
                writer ``X`` as a band-readable matrix; CSR rows are read band by
                band straight from ``data``/``indices``/``indptr``.
* ``loaded``    ``write_counts(dest, anndata.read_zarr("in.zarr"))``: the obvious
                alternative, the whole AnnData in memory first (read time counted).
* ``streamed-csc`` (opt-in) the same store's CSC layer, streamed through the
                out-of-core transpose.

The input is an AnnData Zarr v3 store written once by anndata (CSR ``X``;
with ``--csc`` also a CSC layer). ``--dataset generated`` (default) builds a
realistic matrix (about 5 % non-zero, counts mostly 1-3 with a long tail);
``--dataset wu2020`` tiles the real Wu 2020 T-cell counts (200 x 30,727,
scirpy's h5ad, fetched by ``cytearc_vfs.realdata``) ``--tile`` times along
the cells. Each child records its RSS after imports (baseline), resets the
kernel's peak mark, writes, and reports wall time, peak RSS and working
memory (peak - baseline). Both writes must give the same dataset fingerprint.

    uv run python benchmarks/bench_anndata_input.py                       # 100,000 x 5,000
    uv run python benchmarks/bench_anndata_input.py --dataset wu2020 --tile 100
    uv run python benchmarks/bench_anndata_input.py --cells 20000 --csc --json -
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_write import PeakRss, current_rss
from timing import write_json

MiB = 1024**2


def generated(cells: int, features: int, density: float, seed: int = 0) -> sp.csr_matrix:
    """Realistic counts built band by band (geometric values, mostly 1-3)."""
    rng = np.random.default_rng(seed)
    bands = []
    for start in range(0, cells, 10_000):
        rows = min(10_000, cells - start)
        nnz = int(rows * features * density)
        coo = sp.coo_matrix(
            (
                rng.geometric(0.45, nnz).astype(np.float32),
                (rng.integers(0, rows, nnz), rng.integers(0, features, nnz)),
            ),
            shape=(rows, features),
        )
        band = coo.tocsr()
        band.sum_duplicates()
        bands.append(band)
    return sp.csr_matrix(sp.vstack(bands, format="csr"))


def wu2020_tiled(tile: int) -> sp.csr_matrix:
    """The real Wu 2020 counts repeated ``tile`` times along the cells."""
    from cytearc_vfs import realdata

    x = sp.csr_matrix(realdata.wu2020().X)
    return sp.csr_matrix(sp.vstack([x] * tile, format="csr"))


def build_input(args: argparse.Namespace, directory: Path) -> tuple[Path, tuple[int, int], int]:
    import anndata as ad

    x = (
        wu2020_tiled(args.tile)
        if args.dataset == "wu2020"
        else generated(args.cells, args.features, args.density)
    )
    adata = ad.AnnData(X=x)
    adata.obs_names = [f"cell{i}" for i in range(x.shape[0])]
    adata.var_names = [f"gene{i}" for i in range(x.shape[1])]
    if args.csc:
        adata.layers["csc"] = sp.csc_matrix(x)
    path = directory / "in.zarr"
    adata.write_zarr(path)
    return path, (int(x.shape[0]), int(x.shape[1])), int(x.nnz)


def child(contender: str, source: str, destination: str, mem_budget: str) -> dict[str, Any]:
    """Run one contender in this process and report its time and memory."""
    import anndata as ad

    import cytearc_vfs as cv

    baseline = current_rss()
    peak = PeakRss()
    started = time.perf_counter()
    if contender == "loaded":
        counts: Any = ad.read_zarr(source)
        layer = None
    else:
        counts = source
        layer = "csc" if contender == "streamed-csc" else None
    info = cv.write_counts(destination, counts, layer=layer, mem_budget=mem_budget)
    seconds = time.perf_counter() - started
    high = peak.stop()
    return {
        "contender": contender,
        "seconds": seconds,
        "peakBytes": high,
        "workingBytes": max(0, high - baseline),
        "peakMethod": peak.method,
        "datasetFingerprint": info.dataset_fingerprint,
    }


def run_child(contender: str, source: Path, directory: Path, mem_budget: str) -> dict[str, Any]:
    destination = directory / f"{contender}.zarr"
    shutil.rmtree(destination, ignore_errors=True)
    output = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            contender,
            str(source),
            str(destination),
            mem_budget,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(output.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:6])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=["generated", "wu2020"], default="generated")
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=5_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--tile", type=int, default=100, help="wu2020 copies along the cells")
    parser.add_argument("--csc", action="store_true", help="also stream a CSC layer")
    parser.add_argument("--mem-budget", default="512M")
    parser.add_argument("--json", metavar="FILE", help="write the results (- for stdout only)")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="bench-anndata-input-"))
    try:
        source, shape, nnz = build_input(args, directory)
        what = (
            f"Wu 2020 real counts tiled {args.tile}x"
            if args.dataset == "wu2020"
            else f"generated, {args.density:.0%} non-zero"
        )
        contenders = ["streamed", "loaded"] + (["streamed-csc"] if args.csc else [])
        results = [run_child(c, source, directory, args.mem_budget) for c in contenders]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    fingerprints = {r["datasetFingerprint"] for r in results}
    assert len(fingerprints) == 1, "the contenders wrote different stores"
    report = {
        "dataset": what,
        "shape": list(shape),
        "nnz": nnz,
        "memBudget": args.mem_budget,
        "results": results,
    }
    if args.json != "-":
        print(
            f"write_counts from an AnnData Zarr store: {shape[0]:,} x {shape[1]:,}, {nnz:,} "
            f"non-zeros ({what}), mem_budget {args.mem_budget}"
        )
        print(f"{'contender':<14}{'seconds':>9}{'peak MiB':>10}{'working MiB':>13}")
        for r in results:
            print(
                f"{r['contender']:<14}{r['seconds']:>9.2f}{r['peakBytes'] / MiB:>10.0f}"
                f"{r['workingBytes'] / MiB:>13.0f}"
            )
        by = {r["contender"]: r for r in results}
        streamed, loaded = by["streamed"], by["loaded"]
        print(
            f"streamed / loaded: time {streamed['seconds'] / loaded['seconds']:.2f}x, "
            f"peak {streamed['peakBytes'] / loaded['peakBytes']:.2f}x, working memory "
            f"{streamed['workingBytes'] / max(1, loaded['workingBytes']):.2f}x"
        )
        if "streamed-csc" in by:
            csc = by["streamed-csc"]
            print(
                f"streamed CSC / streamed CSR: time {csc['seconds'] / streamed['seconds']:.2f}x, "
                f"working memory {csc['workingBytes'] / max(1, streamed['workingBytes']):.2f}x"
            )
    write_json(report, args.json)


if __name__ == "__main__":
    main()
