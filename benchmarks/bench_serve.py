"""Benchmark: reading a composite through ``cytearc-vfs serve`` against reading it in process.

One run builds ``--sources`` generated sources (realistic counts; each holds
``--genes`` of a shared pool of ``--genes * 1.1``, so the composite is a
feature union), creates their composite, and starts ``cytearc-vfs serve`` on
it as a separate process (as a user runs it; 127.0.0.1, a free port). Then,
on the same selections:

* ``zarr in process``  ``zarr.open_array(cv.open_store(comp), path="RNA/counts")``:
                       the baseline, plain zarr on the CompositeStore;
* ``tensorstore/http`` tensorstore's ``zarr3`` driver on its ``http`` kvstore
                       (no cache pool: every read fetches);
* ``zarr/http obstore`` zarr-python on ``ObjectStore(HTTPStore)``;
* ``zarr/http fsspec``  zarr-python on ``FsspecStore`` (aiohttp);
* ``reader in process`` the gather reader (``VirtualArrayReader``), for scale.

Selections: a 2,000-row band (all features) and 1,000 random rows (all
features; ``oindex``). Each repeat draws a new band start and new rows, read
by every contender in a rotating order; values are checked equal to the
baseline once per selection. Medians of ``--repeat`` reads and ratios to the
baseline are printed. Every HTTP read computes its chunks on the server
(nothing is cached between requests), as the in-process read does.

    uv run python benchmarks/bench_serve.py
    uv run python benchmarks/bench_serve.py --repeat 9 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv


def generated_counts(
    n_cells: int, n_features: int, density: float, rng: np.random.Generator
) -> sp.csr_array:
    """Counts mostly 1-3 with a long tail (geometric), ``density`` of them non-zero."""
    nnz = int(n_cells * n_features * density)
    rows = rng.integers(0, n_cells, nnz)
    cols = rng.integers(0, n_features, nnz)
    values = rng.geometric(0.45, nnz).astype(np.float32)
    matrix = sp.coo_array((values, (rows, cols)), shape=(n_cells, n_features)).tocsr()
    matrix.sum_duplicates()
    return sp.csr_array(matrix)


def build(root: Path, args: argparse.Namespace) -> Path:
    rng = np.random.default_rng(0)
    pool = [f"gene{i:05d}" for i in range(int(args.genes * 1.1))]
    sources: dict[str, Path] = {}
    for index in range(args.sources):
        genes = sorted(rng.choice(pool, args.genes, replace=False).tolist())
        path = root / f"s{index}.zarr"
        cv.write_counts(
            path,
            generated_counts(args.cells, args.genes, args.density, rng),
            cells=[f"s{index}_{i}" for i in range(args.cells)],
            features=genes,
        )
        sources[f"s{index}"] = path
    composite = root / "comp.zarr"
    cv.create_composite(composite, sources).close()
    return composite


def start_server(composite: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``cytearc-vfs serve`` in its own process; returns it and its URL (its first line)."""
    executable = Path(sys.executable).parent / "cytearc-vfs"
    process = subprocess.Popen(
        [str(executable), "serve", str(composite)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + 120
    while not line.endswith(b"\n"):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"cytearc-vfs serve did not start: {line!r}")
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            line += os.read(process.stdout.fileno(), 1)
    text = line.decode().strip()
    assert text.startswith("serving http://"), text
    return process, text.split()[1]


def contenders(composite: Path, url: str) -> dict[str, Any]:
    import obstore.store
    import tensorstore as ts

    local = cv.open_store(composite)
    arrays: dict[str, Any] = {
        "zarr in process": zarr.open_array(local, path="RNA/counts", mode="r"),
        "tensorstore/http": ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "http", "base_url": url, "path": "RNA/counts/"},
            },
            read=True,
        ).result(),
        "zarr/http obstore": zarr.open_array(
            zarr.storage.ObjectStore(
                obstore.store.HTTPStore.from_url(url, client_options={"allow_http": True}),
                read_only=True,
            ),
            path="RNA/counts",
            mode="r",
        ),
        "zarr/http fsspec": zarr.open_array(
            zarr.storage.FsspecStore.from_url(url, read_only=True), path="RNA/counts", mode="r"
        ),
        "reader in process": cv.VirtualArrayReader(local),
    }
    return arrays


def read_band(name: str, array: Any, start: int, stop: int) -> np.ndarray:
    if name.startswith("tensorstore"):
        return np.asarray(array[start:stop, :].read().result())
    if name.startswith("reader"):
        return np.asarray(array.read(cells=slice(start, stop)))
    return np.asarray(array[start:stop, :])


def read_rows(name: str, array: Any, rows: np.ndarray) -> np.ndarray:
    if name.startswith("tensorstore"):
        return np.asarray(array[rows, :].read().result())
    if name.startswith("reader"):
        return np.asarray(array.read(cells=rows))
    return np.asarray(array.oindex[rows, :])


def measure(
    arrays: dict[str, Any], shape: tuple[int, int], args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(1)
    names = list(arrays)
    times: dict[str, dict[str, list[float]]] = {
        selection: {name: [] for name in names} for selection in ("band", "rows")
    }
    for repeat in range(args.repeat):
        start = int(rng.integers(0, shape[0] - args.band))
        rows = np.sort(rng.choice(shape[0], args.rows, replace=False))
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for selection in ("band", "rows"):
            results: dict[str, np.ndarray] = {}
            for name in order:
                started = time.perf_counter()
                if selection == "band":
                    results[name] = read_band(name, arrays[name], start, start + args.band)
                else:
                    results[name] = read_rows(name, arrays[name], rows)
                times[selection][name].append(time.perf_counter() - started)
            reference = results["zarr in process"]
            for name, values in results.items():
                if not np.array_equal(values, reference):
                    raise AssertionError(f"{name} read other values than zarr in process")
    return {
        selection: {name: statistics.median(values) for name, values in per_name.items()}
        for selection, per_name in times.items()
    }


def report(medians: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    labels = {
        "band": f"{args.band:,}-row band x all features",
        "rows": f"{args.rows:,} random rows x all features",
    }
    for selection, per_name in medians.items():
        base = per_name["zarr in process"]
        print(f"\n{labels[selection]} (median of {args.repeat})")
        print(f"  {'contender':<20} {'seconds':>9} {'/ zarr in process':>18}")
        for name, seconds in per_name.items():
            print(f"  {name:<20} {seconds:>9.3f} {seconds / base:>17.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--cells", type=int, default=5000, help="cells per source")
    parser.add_argument("--genes", type=int, default=2000, help="genes per source")
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--band", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", metavar="FILE", help="also write the medians as JSON")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    process = None
    try:
        started = time.perf_counter()
        composite = build(root, args)
        print(
            f"built {args.sources} sources and their composite in {time.perf_counter() - started:.1f} s"
        )
        process, url = start_server(composite)
        arrays = contenders(composite, url)
        shape = tuple(arrays["zarr in process"].shape)
        chunks = arrays["zarr in process"].chunks
        print(
            f"composite {shape[0]:,} x {shape[1]:,} {arrays['zarr in process'].dtype}, "
            f"computed chunks {chunks[0]:,} x {chunks[1]:,}; served at {url}"
        )
        medians = measure(arrays, (int(shape[0]), int(shape[1])), args)
        report(medians, args)
        if args.json:
            Path(args.json).write_text(
                json.dumps({"args": vars(args), "medians": medians}, indent=2)
            )
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
