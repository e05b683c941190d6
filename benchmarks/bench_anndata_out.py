"""Benchmark: CyteArc stores as AnnData (to_anndata, anndata_view, export) against anndata's own paths.

Real data (``docs/data.md``, cached by ``cytearc_vfs.realdata``):

* ``ordinary``: the 10x mouse subset, 10,000 cells x 1,000 genes, written
  with ``write_counts``;
* ``composite``: the Wu 2020 T cells and the CelltypIst immune sample, a
  union composite of 759 cells x 43,135 genes (no counts copied).

For each store, on the same selections (a new draw per repeat, same draw
for every contender): ``cells`` (``--cells`` random cells x all genes),
``genes`` (50 random genes x all cells) and ``band`` (a band of ``--band``
consecutive cells x all genes):

* ``to_anndata``        ``cv.to_anndata(store)`` (lazy), subset, ``X.compute()``;
* ``view+read_lazy``    ``anndata.experimental.read_lazy(cv.anndata_view(store))``,
                        subset, ``X.compute()``;
* ``export+read_zarr``  the obvious alternative: a store exported once to an
                        AnnData ``.zarr`` (not timed), then ``anndata.read_zarr``
                        of it and the subset (what a user without this layer
                        does: convert, then load);
* ``export+read_lazy``  the same exported store through ``read_lazy``.

Every open is part of the time (a user opens, then subsets). Values are
checked equal to ``to_anndata``'s once per selection. Then the writes:
``cytearc-vfs export`` (streamed, ``.zarr`` and ``.h5ad``) against anndata's
``write_zarr`` / ``write_h5ad`` of the same AnnData loaded in memory (the
load not timed). Medians of ``--repeat`` runs and ratios are printed.

    uv run python benchmarks/bench_anndata_out.py
    uv run python benchmarks/bench_anndata_out.py --repeat 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scipy.sparse as sp
from cytearc_vfs_adapters.anndata_output import export_anndata

import cytearc_vfs as cv
from cytearc_vfs.realdata import loaders

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_time


def dense(matrix: Any) -> np.ndarray:
    if hasattr(matrix, "compute"):
        matrix = matrix.compute()
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def build(root: Path) -> dict[str, Path]:
    mouse = loaders.mouse_10k_subset()
    cv.write_counts(root / "mouse.zarr", mouse)
    wu = loaders.wu2020()
    celltypist = loaders.celltypist_sample()
    cv.write_counts(root / "wu.zarr", wu)
    cv.write_counts(root / "celltypist.zarr", celltypist)
    cv.create_composite(
        root / "immune.zarr", {"wu": root / "wu.zarr", "celltypist": root / "celltypist.zarr"}
    ).close()
    return {"ordinary": root / "mouse.zarr", "composite": root / "immune.zarr"}


Select = tuple[Any, Any]


def selections(
    shape: tuple[int, int], names: Any, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, Select]:
    n_cells, _ = shape
    cells = np.sort(rng.choice(n_cells, min(args.cells, n_cells), replace=False))
    genes = list(rng.choice(np.asarray(names), 50, replace=False))
    band = min(args.band, n_cells)
    start = int(rng.integers(0, n_cells - band + 1))
    return {
        "cells": (cells, slice(None)),
        "genes": (slice(None), genes),
        "band": (slice(start, start + band), slice(None)),
    }


def compare_reads(
    store: Path, exported: Path, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, dict[str, float]]:
    reference = cv.to_anndata(store)
    contenders: dict[str, Callable[[Select], Any]] = {
        "to_anndata": lambda s: dense(cv.to_anndata(store)[s].X),
        "view+read_lazy": lambda s: dense(ad.experimental.read_lazy(cv.anndata_view(store))[s].X),
        "export+read_zarr": lambda s: dense(ad.read_zarr(exported)[s].X),
        "export+read_lazy": lambda s: dense(ad.experimental.read_lazy(exported)[s].X),
    }
    warm = selections(reference.shape, reference.var_names, args, rng)["band"]
    for read in contenders.values():
        read(warm)  # first-use imports and thread pools (dask, xarray) are not timed
    results: dict[str, dict[str, float]] = {}
    for name in ("cells", "genes", "band"):
        times: dict[str, list[float]] = {contender: [] for contender in contenders}
        for repeat in range(args.repeat):
            select = selections(reference.shape, reference.var_names, args, rng)[name]
            expected = dense(reference[select].X) if repeat == 0 else None
            for contender, read in contenders.items():
                seconds, values = median_time(lambda read=read, select=select: read(select), 1)
                times[contender].append(seconds)
                if expected is not None:
                    assert np.array_equal(values, expected), (contender, name)
        results[name] = {contender: float(np.median(t)) for contender, t in times.items()}
    return results


def compare_writes(store: Path, root: Path, args: argparse.Namespace) -> dict[str, float]:
    loaded = cv.to_anndata(store, lazy=False)
    out: dict[str, float] = {}
    for suffix, write in ((".zarr", loaded.write_zarr), (".h5ad", loaded.write_h5ad)):
        target = root / f"bench{suffix}"

        def ours(target: Path = target) -> None:
            export_anndata(store, target, overwrite=True)

        def theirs(target: Path = target, write: Any = write) -> None:
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            write(target)

        out[f"export{suffix}"], _ = median_time(ours, args.repeat)
        out[f"anndata write{suffix}"], _ = median_time(theirs, args.repeat)
    return out


def report(kind: str, reads: dict[str, dict[str, float]], writes: dict[str, float]) -> list[str]:
    lines = [f"\n{kind}: reads (median seconds; ratio = contender / to_anndata)"]
    for selection, times in reads.items():
        base = times["to_anndata"]
        cells = ", ".join(
            f"{name} {seconds:.3f} s ({seconds / base:.2f}x)" for name, seconds in times.items()
        )
        lines.append(f"  {selection:6s} {cells}")
    view = np.median([t["view+read_lazy"] / t["to_anndata"] for t in reads.values()])
    lines.append(f"  view+read_lazy / to_anndata, median over selections: {view:.2f}x")
    lines.append(f"{kind}: writes (median seconds)")
    for suffix in (".zarr", ".h5ad"):
        ours, theirs = writes[f"export{suffix}"], writes[f"anndata write{suffix}"]
        lines.append(
            f"  {suffix:6s} export {ours:.3f} s, anndata write of the loaded AnnData "
            f"{theirs:.3f} s: export / anndata = {ours / theirs:.2f}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cells", type=int, default=1_000, help="random cells per selection")
    parser.add_argument("--band", type=int, default=2_000, help="cells of the band selection")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # anndata's and pandas' deprecations, not ours
    rng = np.random.default_rng(0)
    root = Path(tempfile.mkdtemp(prefix="bench_anndata_out_"))
    figures: dict[str, Any] = {}
    try:
        stores = build(root)
        lines = []
        for kind, store in stores.items():
            exported = root / f"{kind}_exported.zarr"
            export_anndata(store, exported)
            reads = compare_reads(store, exported, args, rng)
            writes = compare_writes(store, root, args)
            figures[kind] = {"reads": reads, "writes": writes}
            lines.extend(report(kind, reads, writes))
            print("\n".join(report(kind, reads, writes)), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
