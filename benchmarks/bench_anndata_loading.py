"""Benchmark: ``to_anndata(lazy=False)``, X filled in place, against the obvious alternatives.

A generated store (``--cells`` x ``--genes`` at ``--density``, ``uint16``
counts) is loaded whole three ways, each in a fresh process so its peak
memory is its own:

* ``filled``      ``cv.to_anndata(store, lazy=False)``: X's arrays made once
                  at their size from ``rowPositive`` and filled band by band;
* ``stacked``     ``cv.to_anndata(store, lazy=False)`` with X's bands
                  (``read_sparse``) kept and joined with ``scipy.sparse.vstack``,
                  as ``lazy=False`` did before;
* ``lazy``        ``cv.to_anndata(store).X.compute()``: the lazy ``X``'s
                  sparse blocks computed by dask and joined;
* ``read_zarr``   ``anndata.read_zarr`` of the store exported once to an
                  AnnData ``.zarr`` (the export not timed): what a user
                  without this layer does.

Reported: the load's time (median of ``--repeat``) and its peak memory
traced by ``tracemalloc`` (numpy's arrays included; a separate run, as
tracing slows the load), and their ratios to ``filled``. Every result is
checked equal to ``filled``'s.

    uv run python benchmarks/bench_anndata_loading.py
    uv run python benchmarks/bench_anndata_loading.py --cells 200000 --genes 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

CONTENDERS = ("filled", "stacked", "lazy", "read_zarr")


def _child(name: str, root: Path, traced: bool) -> None:
    """Load the store one way and print its time or traced peak, and a digest."""
    import anndata as ad
    from cytearc_vfs_adapters.anndata_output import conversion

    import cytearc_vfs as cv

    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    if name == "stacked":

        def stacked(opened: Any, bands: Any) -> sp.csr_matrix:
            return sp.csr_matrix(sp.vstack([block for _, block in bands], format="csr"))

        conversion.loaded_counts = stacked  # type: ignore[assignment]
    if name in ("filled", "stacked"):
        matrix = cv.to_anndata(root / "store.zarr", lazy=False).X
    elif name == "lazy":
        matrix = cv.to_anndata(root / "store.zarr").X.compute()
    else:
        matrix = ad.read_zarr(root / "export.zarr").X
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] if traced else 0
    tracemalloc.stop()
    matrix = sp.csr_matrix(matrix)
    digest = [
        int(matrix.nnz),
        float(matrix.data.astype(np.float64).sum()),
        int(matrix.indices.sum()),
    ]
    print(json.dumps({"seconds": seconds, "peak": peak, "digest": digest}))


def _prepare(root: Path, cells: int, genes: int, density: float) -> None:
    from cytearc_vfs_adapters.anndata_output import export_anndata

    import cytearc_vfs as cv

    rng = np.random.default_rng(0)
    counts = sp.random(
        cells, genes, density=density, format="csr", random_state=rng, dtype=np.float32
    )
    counts.data = np.ceil(counts.data * 30)
    cv.write_counts(root / "store.zarr", counts)
    export_anndata(root / "store.zarr", root / "export.zarr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), args.child[2] == "traced")
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _prepare(root, args.cells, args.genes, args.density)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
        peaks: dict[str, int] = {}
        for repeat in range(args.repeat + 1):
            for name in CONTENDERS:
                mode = "traced" if repeat == args.repeat else "timed"
                out = subprocess.run(
                    [sys.executable, __file__, "--child", name, str(root), mode],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                result = json.loads(out.strip().splitlines()[-1])
                if mode == "traced":
                    peaks[name] = result["peak"]
                runs[name].append(result)
    digest = runs["filled"][0]["digest"]
    print(f"{args.cells:,} x {args.genes:,} at {args.density}: {digest[0]:,} stored values")
    filled_time = statistics.median(run["seconds"] for run in runs["filled"][:-1])
    filled_peak = peaks["filled"]
    for name, results in runs.items():
        assert all(run["digest"] == digest for run in results), f"{name} read other values"
        seconds = statistics.median(run["seconds"] for run in results[:-1])
        peak = peaks[name]
        print(
            f"{name:10s} {seconds:7.3f} s ({seconds / filled_time:4.2f}x)  "
            f"peak {peak / 2**20:8.1f} MiB ({peak / filled_peak:4.2f}x)"
        )


if __name__ == "__main__":
    main()
