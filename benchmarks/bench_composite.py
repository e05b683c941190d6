"""Benchmark: reading a composite against a materialized store and the anndata route.

One run builds ``--sources`` generated sources (realistic counts, each holding
a random 80-95 % of a shared gene pool), then compares, on the same cells and
features:

* ``composite``      ``create_composite`` (union of genes), read with the
                     gather reader (``VirtualArrayReader``) and through plain
                     ``zarr.open_array`` on the ``CompositeStore``.
* ``materialized``   the same matrix written by ``write_counts`` as one
                     ordinary store, read with the same reader and plain zarr.
* ``anndata``        each source also written by ``AnnData.write_zarr``; a
                     selection reads each source's CSR lazily
                     (``anndata.io.sparse_dataset``) and joins them with
                     ``anndata.concat(join="outer")``, the route anndata offers
                     for on-disk sources with different genes.

Selections: 1,000 random cells x all features; 50 random features x all
cells; a 10,000-row band through plain zarr. The readers are compared on
``--reads`` fresh random selections, each read by both in alternating order
(medians reported); the anndata route (seconds per selection) and the band
are the median of ``--repeat`` runs. ``--scale`` adds the 50-source test: one generated
source copied to 50 stores (so >= 1,000,000 cells; the output says so),
timing create, open and a 1,000-cell read, with peak RSS.

    uv run python benchmarks/bench_composite.py
    uv run python benchmarks/bench_composite.py --scale --json -
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr
from timing import median_time

import cytearc_vfs as cv


def realistic(
    n_cells: int, n_features: int, density: float, rng: np.random.Generator
) -> sp.csr_array:
    """Counts mostly 1-3 with a long tail, ``density`` non-zero, built band by band."""
    bands = []
    for start in range(0, n_cells, 5000):
        rows = min(5000, n_cells - start)
        nnz = int(rows * n_features * density)
        r = rng.integers(0, rows, nnz)
        c = rng.integers(0, n_features, nnz)
        v = rng.geometric(0.45, nnz).astype(np.float32)
        band = sp.coo_array((v, (r, c)), shape=(rows, n_features)).tocsr()
        band.sum_duplicates()
        bands.append(band)
    return sp.csr_array(sp.vstack(bands, format="csr"))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compare(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    pool = [f"gene{i:05d}" for i in range(args.features)]
    per_source = args.cells // args.sources
    sources: dict[str, Path] = {}
    matrices, gene_sets = [], []
    started = time.perf_counter()
    for index in range(args.sources):
        keep = np.sort(
            rng.choice(
                args.features, size=int(args.features * rng.uniform(0.8, 0.95)), replace=False
            )
        )
        genes = [pool[i] for i in keep]
        matrix = realistic(per_source, len(genes), args.density, rng)
        cells = [f"s{index}_c{j}" for j in range(per_source)]
        path = root / f"source{index}.zarr"
        cv.write_counts(path, matrix, cells=cells, features=genes)
        _write_anndata(root / f"source{index}.ad.zarr", matrix, cells, genes)
        sources[f"s{index}"] = path
        matrices.append(matrix)
        gene_sets.append(genes)
    build_seconds = time.perf_counter() - started

    create_seconds, comp = median_time(lambda: _fresh_composite(root, sources), 1)
    union = list(comp.reader().feature_ids)
    lookup = {g: i for i, g in enumerate(union)}
    pieces = []
    for matrix, genes in zip(matrices, gene_sets, strict=True):
        columns = np.array([lookup[g] for g in genes])
        coo = matrix.tocoo()
        pieces.append(
            sp.csr_array(
                (coo.data, (coo.row, columns[coo.col])), shape=(matrix.shape[0], len(union))
            )
        )
    full = sp.csr_array(sp.vstack(pieces, format="csr"))
    materialize_seconds, _ = median_time(
        lambda: cv.write_counts(root / "materialized.zarr", full, features=union, overwrite=True), 1
    )

    composite_reader = cv.VirtualArrayReader(cv.open_store(root / "composite.zarr"))
    materialized_reader = cv.VirtualArrayReader(root / "materialized.zarr")
    n_cells, n_features = composite_reader.shape
    band = slice(n_cells // 3, min(n_cells, n_cells // 3 + 10_000))

    results: dict[str, Any] = {
        "shape": [n_cells, n_features],
        "sources": args.sources,
        "build_seconds": round(build_seconds, 2),
        "create_composite_seconds": round(create_seconds, 3),
        "materialize_seconds": round(materialize_seconds, 2),
    }
    checks = {}
    draws: dict[str, Callable[[], tuple[Any, Any]]] = {
        "1000 cells x all features": lambda: (
            np.sort(rng.choice(n_cells, size=min(1000, n_cells), replace=False)),
            None,
        ),
        "50 features x all cells": lambda: (
            None,
            np.sort(rng.choice(n_features, size=min(50, n_features), replace=False)),
        ),
    }
    for label, draw in draws.items():
        # A fresh random selection per round, both readers on the same one, in
        # alternating order: the median compares like with like.
        selections = [draw() for _ in range(args.reads)]
        for selection in selections[:2]:  # warm both (shard indexes, page cache)
            composite_reader.read(*selection)
            materialized_reader.read(*selection)
        t_comp, t_mat = [], []
        equal = True
        for round_, selection in enumerate(selections):
            pair = [(composite_reader, t_comp), (materialized_reader, t_mat)]
            outputs = []
            for reader, times in pair if round_ % 2 == 0 else pair[::-1]:
                started = time.perf_counter()
                outputs.append(reader.read(*selection))
                times.append(time.perf_counter() - started)
            equal &= bool(np.array_equal(outputs[0], outputs[1]))
        composite_reader.reset_stats()
        a = composite_reader.read(*selections[0])
        stats = composite_reader.stats
        t_ad, c = median_time(
            lambda s=selections[0]: _anndata_route(root, args.sources, union, *s, per_source),
            args.repeat,
        )
        checks[label] = equal and bool(np.array_equal(a, c))
        median_comp, median_mat = statistics.median(t_comp), statistics.median(t_mat)
        results[label] = {
            "rounds": len(selections),
            "composite_reader_s": round(median_comp, 4),
            "materialized_reader_s": round(median_mat, 4),
            "anndata_route_s": round(t_ad, 4),
            "composite_over_materialized": round(median_comp / median_mat, 3),
            "anndata_over_composite": round(t_ad / median_comp, 2),
            "composite_chunks_decoded": stats.chunks_decoded,
            "composite_bytes_read": stats.bytes_read,
        }
    plain_comp = zarr.open_array(
        cv.open_store(root / "composite.zarr"), path="RNA/counts", mode="r"
    )
    plain_mat = zarr.open_array(
        cv.open_store(root / "materialized.zarr"), path="RNA/counts", mode="r"
    )
    t_pc, a = median_time(lambda: plain_comp[band], args.repeat)
    t_pm, b = median_time(lambda: plain_mat[band], args.repeat)
    checks["plain zarr band"] = bool(np.array_equal(a, b))
    results["10000-row band, plain zarr"] = {
        "composite_s": round(t_pc, 4),
        "materialized_s": round(t_pm, 4),
        "composite_over_materialized": round(t_pc / t_pm, 3),
    }
    results["values_equal"] = checks
    return results


def _write_anndata(path: Path, matrix: sp.csr_array, cells: list[str], genes: list[str]) -> None:
    import anndata
    import pandas as pd

    obs = pd.DataFrame(index=pd.Index(cells, name="cell"))
    var = pd.DataFrame(index=pd.Index(genes, name="gene"))
    anndata.AnnData(sp.csr_matrix(matrix), obs=obs, var=var).write_zarr(path)


def _fresh_composite(root: Path, sources: dict[str, Path]) -> Any:
    shutil.rmtree(root / "composite.zarr", ignore_errors=True)
    return cv.create_composite(root / "composite.zarr", sources)


def _anndata_route(
    root: Path, n_sources: int, union: list[str], cells: Any, features: Any, per_source: int
) -> np.ndarray:
    """The selection through anndata: lazy CSR per source, outer concat, then columns."""
    import anndata
    import pandas as pd

    parts = []
    for index in range(n_sources):
        group = zarr.open_group(root / f"source{index}.ad.zarr", mode="r")
        matrix = anndata.io.sparse_dataset(group["X"])
        genes = np.asarray(anndata.io.read_elem(group["var"]).index).astype(str)
        rows = (
            np.arange(per_source)
            if cells is None
            else cells[(cells >= index * per_source) & (cells < (index + 1) * per_source)]
            - index * per_source
        )
        block = matrix[rows] if len(rows) else sp.csr_matrix((0, len(genes)), dtype=np.float32)
        parts.append(anndata.AnnData(block, var=pd.DataFrame(index=pd.Index(genes))))
    joined = anndata.concat(parts, join="outer")
    order = joined.var_names.get_indexer(union)
    x = sp.csr_array(joined.X)[:, order]
    if features is not None:
        x = x[:, features]
    return x.toarray()


def scale(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    per_source = args.scale_cells // 50
    template = root / "template.zarr"
    genes = [f"gene{i:05d}" for i in range(args.scale_features)]
    matrix = realistic(per_source, len(genes), args.density, rng)
    cv.write_counts(template, matrix, features=genes)
    sources = {}
    for index in range(50):
        path = root / f"tile{index}.zarr"
        shutil.copytree(template, path)
        sources[f"t{index}"] = path
    rss_before = peak_rss_mib()
    create_seconds, _ = median_time(lambda: cv.create_composite(root / "scale.zarr", sources), 1)
    open_seconds, store = median_time(lambda: cv.open_store(root / "scale.zarr"), 3)
    reader = cv.VirtualArrayReader(store)
    cells = np.sort(rng.choice(reader.shape[0], size=1000, replace=False))
    read_seconds, block = median_time(lambda: reader.read(cells, None), 3)
    return {
        "note": f"50 stores are copies of one generated source (tiled), {50 * per_source:,} cells",
        "shape": list(reader.shape),
        "create_seconds": round(create_seconds, 3),
        "open_seconds": round(open_seconds, 3),
        "read_1000_cells_seconds": round(read_seconds, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_rss_before_composite_mib": round(rss_before, 1),
        "block_shape": list(block.shape),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--cells", type=int, default=80_000, help="total cells over the sources")
    parser.add_argument("--features", type=int, default=20_000, help="size of the shared gene pool")
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timed step")
    parser.add_argument(
        "--reads", type=int, default=31, help="random selections per reader comparison"
    )
    parser.add_argument("--scale", action="store_true", help="also run the 50-source scale test")
    parser.add_argument("--scale-cells", type=int, default=1_000_000)
    parser.add_argument("--scale-features", type=int, default=2_000)
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-") as scratch:
        root = Path(scratch)
        if not args.skip_compare:
            results["compare"] = compare(args, root)
        if args.scale:
            results["scale"] = scale(args, root)
    if args.json:
        text = json.dumps(results, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    else:
        _report(results)
    return 0


def _report(results: dict[str, Any]) -> None:
    compare_results = results.get("compare")
    if compare_results:
        print(
            f"composite of {compare_results['sources']} sources, {compare_results['shape'][0]} x {compare_results['shape'][1]} (union)"
        )
        print(
            f"  create_composite {compare_results['create_composite_seconds']} s; materializing with write_counts {compare_results['materialize_seconds']} s"
        )
        for label in ("1000 cells x all features", "50 features x all cells"):
            r = compare_results[label]
            print(
                f"  {label:28s} composite {r['composite_reader_s']:.4f} s  materialized {r['materialized_reader_s']:.4f} s  "
                f"anndata {r['anndata_route_s']:.4f} s  | composite/materialized {r['composite_over_materialized']:.2f}x  "
                f"anndata/composite {r['anndata_over_composite']:.1f}x  ({r['composite_chunks_decoded']} chunks decoded)"
            )
        r = compare_results["10000-row band, plain zarr"]
        print(
            f"  10,000-row band, plain zarr  composite {r['composite_s']:.4f} s  materialized {r['materialized_s']:.4f} s  | {r['composite_over_materialized']:.2f}x"
        )
        print(f"  values equal: {compare_results['values_equal']}")
    scale_results = results.get("scale")
    if scale_results:
        print(f"scale: {scale_results['note']}")
        print(
            f"  {scale_results['shape'][0]} x {scale_results['shape'][1]}: create {scale_results['create_seconds']} s, "
            f"open {scale_results['open_seconds']} s, 1,000-cell read {scale_results['read_1000_cells_seconds']} s, "
            f"peak RSS {scale_results['peak_rss_mib']} MiB"
        )


if __name__ == "__main__":
    sys.exit(main())
