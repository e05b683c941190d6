"""Benchmark: a composite opened by anndata through ``--as-anndata``, against exporting it first.

Another AnnData reader (anndata in another process, R, JavaScript) gets a
composite as an AnnData store either by exporting it (``cytearc-vfs export
c.zarr out.zarr``: every value written once, then read like any AnnData
store) or, with nothing copied, through ``cytearc-vfs mount-fs
--as-anndata`` (a directory) or ``cytearc-vfs serve --as-anndata`` (HTTP).
Builds ``--sources`` generated sources as ``bench_mount_fs.py`` does and
composes them, then for each route times:

* ``ready``: from nothing to an AnnData open with ``anndata.experimental.read_lazy``
  (for the export: the export itself, then the open);
* ``cells``: ``--cells`` random cells x every gene, ``.X`` computed;
* ``band``: a ``--band``-cell band x every gene.

``in process``, ``cv.to_anndata(lazy=True)`` in this process, is shown for
scale. Every route's values are checked against the composite once. Medians
of ``--repeat`` runs, a fresh selection per run, the same for every route;
ratios are to the exported store.

    uv run python benchmarks/bench_anndata_served.py
    uv run python benchmarks/bench_anndata_served.py --sources 2 --cells-per-source 2000 --repeat 1
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scipy.sparse as sp
from bench_mount_fs import build
from cytearc_vfs_adapters.fuse.mounting import check_fuse, is_mounted
from timing import median_time
from zarr.storage import FsspecStore

import cytearc_vfs as cv


@contextmanager
def child(args: list[str], first: str) -> Iterator[str]:
    """``cytearc-vfs *args`` until the block ends; yields its first line (``first ...``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cytearc_vfs.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith(first):
            raise RuntimeError(f"cytearc-vfs {' '.join(args)} said {line!r}")
        yield line
    finally:
        process.terminate()
        process.wait(timeout=60)


def dense(matrix: Any) -> np.ndarray:
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--cells-per-source", dest="cells", type=int, default=25_000)
    parser.add_argument("--features", type=int, default=3_000, help="gene pool")
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--selected", type=int, default=1_000, help="random cells per read")
    parser.add_argument("--band", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    fuse = True
    try:
        check_fuse()
    except (ImportError, OSError) as exc:
        print(f"mount-fs skipped: FUSE does not work here ({exc})")
        fuse = False
    root = Path(tempfile.mkdtemp(prefix="bench_anndata_served_"))
    try:
        composite = build(args, root)
        reference = cv.to_anndata(composite, lazy=True)
        n_cells = reference.n_obs
        rng = np.random.default_rng(1)
        picks = [np.sort(rng.choice(n_cells, args.selected, False)) for _ in range(args.repeat)]
        starts = [int(rng.integers(0, max(1, n_cells - args.band))) for _ in range(args.repeat)]
        expected_cells = dense(reference[picks[0]].X.compute())
        print(f"composite: {n_cells:,} cells x {reference.n_vars:,} genes, {args.sources} sources")

        results: dict[str, dict[str, float]] = {}

        def measure(name: str, ready: Callable[[], ad.AnnData]) -> None:
            started = time.perf_counter()
            lazy = ready()
            opened = time.perf_counter() - started
            assert np.array_equal(dense(lazy[picks[0]].X.compute()), expected_cells), name
            turn = iter(range(args.repeat))
            cells, _ = median_time(lambda: lazy[picks[next(turn)]].X.compute(), args.repeat)
            turn = iter(range(args.repeat))
            band, _ = median_time(
                lambda: lazy[(s := starts[next(turn)]) : s + args.band].X.compute(), args.repeat
            )
            results[name] = {"ready": opened, "cells": cells, "band": band}

        def exported() -> ad.AnnData:
            out = root / "exported.zarr"
            shutil.rmtree(out, ignore_errors=True)
            run = subprocess.run(
                [sys.executable, "-m", "cytearc_vfs.cli", "export", str(composite), str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            if run.returncode != 0:
                raise RuntimeError(f"export failed (exit {run.returncode}): {run.stderr.strip()}")
            return ad.experimental.read_lazy(out)

        measure("exported .zarr", exported)
        with child(["serve", str(composite), "--port", "0", "--as-anndata"], "serving ") as line:
            url = line.removeprefix("serving ")
            measure(
                "serve --as-anndata",
                lambda: ad.experimental.read_lazy(FsspecStore.from_url(url, read_only=True)),
            )
        if fuse:
            mountpoint = root / "mnt"
            mountpoint.mkdir()
            started = time.perf_counter()
            with child(["mount-fs", str(composite), str(mountpoint), "--as-anndata"], "mounted "):
                mount_time = time.perf_counter() - started
                measure("mount-fs --as-anndata", lambda: ad.experimental.read_lazy(mountpoint))
                results["mount-fs --as-anndata"]["ready"] += mount_time
            assert not is_mounted(mountpoint)
        measure("in process (to_anndata)", lambda: cv.to_anndata(composite, lazy=True))

        base = results["exported .zarr"]
        print(f"\n{'route':26} {'ready':>9} {'cells':>9} {'band':>9}   (ratio to exported)")
        for name, figures in results.items():
            row = " ".join(f"{figures[k]:8.3f}s" for k in ("ready", "cells", "band"))
            ratios = " ".join(f"x{figures[k] / base[k]:.2f}" for k in ("ready", "cells", "band"))
            print(f"{name:26} {row}   {ratios}")
        print(
            f"\ncells: {args.selected:,} random cells x every gene; band: {args.band:,} cells; "
            f"medians of {args.repeat}; ready includes the export (exported) or the mount "
            "(mount-fs)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
