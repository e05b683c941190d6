"""Benchmark: a composite of many small sources against opening them one by one.

An atlas of donor stores is many small sources: ``--sources`` stores of
``--cells`` cells, each holding ``--kept`` of a shared pool of ``--pool``
genes (a random subset per source), written by ``write_counts``. Timed,
each the median of ``--repeat`` runs:

* ``create``  ``create_composite`` of all sources (union of genes).
* ``open``    ``cv.open_store`` of the composite (every source verified),
              against opening the sources one by one with ``cv.open_store``
              (what reading them without a composite starts with).
* ``cells``   1,000 random cells x all genes through the composite's gather
              reader, against the same cells read from the separately opened
              sources (one ``VirtualArrayReader`` each, rows placed into the
              union's columns); a fresh random draw per run.
* ``genes``   50 random genes x all cells, the same two ways.

Both routes of a read must return equal values (checked). The sources are
written once into ``--root`` (default: a scratch directory, removed) and
reused when it already holds them.

    uv run python benchmarks/bench_composite_sources.py                 # 50 sources, seconds
    uv run python benchmarks/bench_composite_sources.py --sources 800 --root /tmp/atlas800
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from timing import median_time, write_json

import cytearc_vfs as cv


def build(root: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The sources (written unless ``root`` holds them from an earlier run)."""
    root.mkdir(parents=True, exist_ok=True)
    sources = {f"d{i}": root / f"d{i}.zarr" for i in range(args.sources)}
    marker = root / f"built-{args.sources}-{args.cells}-{args.kept}-{args.pool}"
    if marker.exists():
        return sources
    rng = np.random.default_rng(0)
    pool = [f"gene{i:05d}" for i in range(args.pool)]
    for index, path in enumerate(sources.values()):
        keep = np.sort(rng.choice(args.pool, args.kept, replace=False))
        counts = sp.random(
            args.cells, args.kept, density=0.1, format="csr", random_state=index, dtype=np.float32
        )
        counts.data = np.ceil(counts.data * 5)
        cv.write_counts(
            path,
            counts,
            cells=[f"d{index}c{j}" for j in range(args.cells)],
            features=[pool[k] for k in keep],
            overwrite=True,
        )
    marker.write_text("written")
    return sources


def one_by_one(
    readers: list[cv.VirtualArrayReader],
    union: dict[str, int],
    cells: np.ndarray | None,
    genes: np.ndarray | None,
) -> np.ndarray:
    """The selection read from each source's own reader, placed into the union's columns."""
    n_features = len(union)
    wanted = np.arange(n_features) if genes is None else genes
    parts, start = [], 0
    for reader in readers:
        n = reader.shape[0]
        rows = (
            np.arange(n) if cells is None else cells[(cells >= start) & (cells < start + n)] - start
        )
        start += n
        columns = np.array([union[g] for g in reader.feature_ids])
        block = np.zeros((len(rows), n_features), dtype=reader.dtype)
        held = np.isin(columns, wanted)
        if len(rows) and held.any():
            block[:, columns[held]] = reader.read(rows, np.flatnonzero(held))
        parts.append(block[:, wanted])
    return np.concatenate(parts)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    sources = build(root, args)
    destination = root / "atlas.zarr"

    def create() -> None:
        shutil.rmtree(destination, ignore_errors=True)
        cv.create_composite(destination, sources).close()

    create_s, _ = median_time(create, args.repeat)
    open_s, store = median_time(lambda: cv.open_store(destination), args.repeat)
    separately_s, stores = median_time(
        lambda: [cv.open_store(path) for path in sources.values()], args.repeat
    )
    reader = cv.VirtualArrayReader(store)
    union = {gene: i for i, gene in enumerate(reader.feature_ids)}
    readers = [cv.VirtualArrayReader(s) for s in stores]
    rng = np.random.default_rng(1)
    n_cells, n_features = reader.shape
    results: dict[str, Any] = {
        "sources": args.sources,
        "shape": [n_cells, n_features],
        "create_s": round(create_s, 3),
        "open_s": round(open_s, 3),
        "open_one_by_one_s": round(separately_s, 3),
        "one_by_one_over_composite_open": round(separately_s / open_s, 2),
    }
    draws = {
        "cells": lambda: (np.sort(rng.choice(n_cells, min(1000, n_cells), replace=False)), None),
        "genes": lambda: (
            None,
            np.sort(rng.choice(n_features, min(50, n_features), replace=False)),
        ),
    }
    for label, draw in draws.items():
        composite_times, separate_times, equal = [], [], True
        for _ in range(args.repeat):
            cells, genes = draw()
            started = time.perf_counter()
            a = reader.read(cells, genes)
            composite_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            b = one_by_one(readers, union, cells, genes)
            separate_times.append(time.perf_counter() - started)
            equal &= bool(np.array_equal(a, b))
        composite, separate = statistics.median(composite_times), statistics.median(separate_times)
        results[label] = {
            "composite_s": round(composite, 4),
            "one_by_one_s": round(separate, 4),
            "one_by_one_over_composite": round(separate / composite, 2),
            "values_equal": equal,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=50)
    parser.add_argument("--cells", type=int, default=100, help="cells per source")
    parser.add_argument("--kept", type=int, default=500, help="genes per source")
    parser.add_argument("--pool", type=int, default=600, help="genes over all sources")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--root", type=Path, help="where the sources are (kept); default scratch")
    parser.add_argument("--json", help="write the results as JSON here ('-': stdout)")
    args = parser.parse_args(argv)
    if args.kept > args.pool:
        parser.error("--kept cannot exceed --pool")
    scratch = None if args.root else tempfile.mkdtemp(prefix="bench-sources-")
    try:
        results = run(args, args.root or Path(scratch or ""))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    for key, value in results.items():
        print(f"{key}: {value}")
    write_json(results, args.json)
    return 0 if all(results[k]["values_equal"] for k in ("cells", "genes")) else 1


if __name__ == "__main__":
    sys.exit(main())
