"""Benchmark: a composite read through its FUSE mount against reading it in process.

Builds ``--sources`` generated sources (``--cells`` each, realistic counts,
each holding a random 80-95 % of a ``--features`` gene pool), composes them
(union of genes), mounts the composite with ``cytearc-vfs mount-fs`` in a
child process, and reads the virtual ``RNA/counts`` with:

* ``zarr in process``   ``zarr.open_array(CompositeStore, path="RNA/counts")``:
                        the baseline; chunks are computed by the store.
* ``reader in process`` the gather reader (``VirtualArrayReader``), for scale.
* ``tensorstore/fuse``  tensorstore, ``zarr3`` driver on the ``file`` kvstore
                        at the mounted path (no tensorstore cache).
* ``zarr/fuse``         zarr-python on the mounted path.
* ``zarrs/fuse``        zarr-python with the zarrs codec pipeline on the path.

Selections: a ``--band``-row band at a random start, and ``--rows`` random
rows (every column), a fresh selection per repeat, the same for every
contender. Every result is checked against the baseline once. Prints the
median of ``--repeat`` runs per contender and selection and the ratio to the
baseline, and how many chunks the mount computed.

    uv run python benchmarks/bench_mount_fs.py
    uv run python benchmarks/bench_mount_fs.py --sources 2 --cells 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.fuse.mounting import check_fuse, is_mounted
from timing import median_time

import cytearc_vfs as cv


def realistic(n_cells: int, n_features: int, density: float, rng: np.random.Generator) -> Any:
    nnz = int(n_cells * n_features * density)
    rows = rng.integers(0, n_cells, nnz)
    cols = rng.integers(0, n_features, nnz)
    values = rng.geometric(0.45, nnz).astype(np.float32)
    matrix = sp.coo_array((values, (rows, cols)), shape=(n_cells, n_features)).tocsr()
    matrix.sum_duplicates()
    return matrix


def build(args: argparse.Namespace, root: Path) -> Path:
    rng = np.random.default_rng(0)
    pool = [f"gene{i:05d}" for i in range(args.features)]
    sources = {}
    for index in range(args.sources):
        keep = np.sort(
            rng.choice(args.features, int(args.features * rng.uniform(0.8, 0.95)), False)
        )
        path = root / f"s{index}.zarr"
        cv.write_counts(
            path,
            realistic(args.cells, len(keep), args.density, rng),
            cells=[f"s{index}_c{i}" for i in range(args.cells)],
            features=[pool[i] for i in keep],
        )
        sources[f"s{index}"] = str(path)
    cv.create_composite(root / "composite.zarr", sources)
    return root / "composite.zarr"


@contextmanager
def mounted(location: Path, mountpoint: Path) -> Iterator[dict[str, Any]]:
    """``cytearc-vfs mount-fs --json`` in a child; yields a dict filled with its report."""
    mountpoint.mkdir()
    with tempfile.TemporaryFile(mode="w+") as errors:
        yield from _serve(location, mountpoint, errors)


def _serve(location: Path, mountpoint: Path, errors: Any) -> Iterator[dict[str, Any]]:
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cytearc_vfs.cli",
            "mount-fs",
            "--json",
            str(location),
            str(mountpoint),
        ],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    report: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 120
        while not is_mounted(mountpoint):
            if child.poll() is not None or time.monotonic() > deadline:
                errors.seek(0)
                raise SystemExit(f"mount-fs did not mount: {errors.read().strip()}")
            time.sleep(0.05)
        yield report
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        assert child.stdout is not None
        if select.select([child.stdout], [], [], 60)[0]:
            out = child.stdout.read()
            if out.strip():
                report.update(json.loads(out))
        child.wait(timeout=60)
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--cells", type=int, default=5000, help="cells per source")
    parser.add_argument("--features", type=int, default=2000, help="gene pool")
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--band", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    try:
        check_fuse()
    except (ImportError, OSError) as exc:
        raise SystemExit(f"cannot mount here: {exc}") from exc
    import tensorstore as ts

    root = Path(tempfile.mkdtemp(prefix="bench_mount_fs_"))
    try:
        started = time.perf_counter()
        location = build(args, root)
        print(
            f"built {args.sources} sources x {args.cells} cells in {time.perf_counter() - started:.1f} s"
        )
        composite = cv.open_store(location)
        baseline = zarr.open_array(composite, path="RNA/counts", mode="r")
        shape = baseline.shape
        chunk_rows = baseline.chunks[0]
        print(
            f"composite {shape[0]} x {shape[1]} {baseline.dtype}, virtual chunks of "
            f"{chunk_rows} rows ({chunk_rows * shape[1] * baseline.dtype.itemsize / 2**20:.1f} MiB)"
        )
        rng = np.random.default_rng(1)
        bands = [int(rng.integers(0, shape[0] - args.band)) for _ in range(args.repeat)]
        scattered = [
            np.sort(rng.choice(shape[0], args.rows, replace=False)) for _ in range(args.repeat)
        ]
        reader = composite.reader()

        with mounted(location, root / "mp") as report:
            path = root / "mp" / "RNA" / "counts"
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{path}/"}}
            tensor = ts.open(spec, read=True).result()
            on_path = zarr.open_array(path, mode="r")
            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                with_zarrs = zarr.open_array(path, mode="r")

            def zarrs_read(selection: Any) -> Any:
                with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                    return with_zarrs.oindex[selection]

            contenders: dict[str, Callable[[Any], Any]] = {
                "zarr in process": lambda s: baseline.oindex[s],
                "reader in process": lambda s: reader.read(cells=s),
                "tensorstore/fuse": lambda s: tensor[s].read().result(),
                "zarr/fuse": lambda s: on_path.oindex[s],
                "zarrs/fuse": zarrs_read,
            }
            selections = {
                f"{args.band}-row band": [slice(b, b + args.band) for b in bands],
                f"{args.rows} random rows": [np.asarray(r) for r in scattered],
            }
            results: dict[str, dict[str, float]] = {}
            for label, chosen in selections.items():
                expected = baseline.oindex[chosen[0]]
                for name, read in contenders.items():
                    got = np.asarray(read(chosen[0]))
                    assert np.array_equal(got, expected.astype(got.dtype)), (name, label)
                    iterator = iter(chosen)
                    seconds, _ = median_time(
                        lambda read=read, iterator=iterator: read(next(iterator)), args.repeat
                    )
                    results.setdefault(label, {})[name] = seconds
        base = "zarr in process"
        print(f"\nmedian of {args.repeat} (a fresh selection each), ratio to {base}:")
        for label, timings in results.items():
            print(f"  {label}")
            for name, seconds in timings.items():
                print(f"    {name:<18} {seconds * 1000:9.1f} ms   x{seconds / timings[base]:.2f}")
        print(f"\nthe mount computed {report.get('computedChunks', '?')} chunks")
        if args.json:
            Path(args.json).write_text(
                json.dumps({"args": vars(args), "seconds": results, "mount": report}, indent=2)
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
