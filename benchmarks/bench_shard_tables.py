"""What the shard tables cost: ``open_store`` with the shard check, and gather reads.

In one run:

* ``open_store`` of an ordinary store (its shards checked against their
  tables: a listing, each shard's size and last four bytes) against the
  metadata-only verification it did before (``verify_store``), on a local
  store and on the same store in a real S3 API server on loopback (moto's
  server mode; its listing carries the sizes, so the check adds one listing
  per count array and no request per shard);
* 1,000 random cells read by the gather reader from the store and from a
  copy without tables (the reader then skips the per-index comparison).

Prints medians, shard counts and ratios (check / metadata only; table /
none). Generated counts of realistic sparsity, not real data.

    uv run python benchmarks/bench_shard_tables.py [--cells 100000] [--genes 2000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import cytearc_vfs as cv
from cytearc_vfs.format.shard_tables import SHARD_TABLE_ATTR
from cytearc_vfs.format.source_store import verify_store
from cytearc_vfs.remote.locations import open_location

sys.path.insert(0, str(Path(__file__).parent))
from bench_cache import CREDENTIALS, _bucket, _start_server
from bench_checksums import generated_counts


def _median(function: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _open_pair(location: str, options: dict[str, Any] | None, repeat: int) -> tuple[float, float]:
    def metadata_only() -> None:
        verify_store(open_location(location, read_only=True, storage_options=options), where="x")

    def checked() -> None:
        cv.open_store(location, storage_options=options)

    checked()  # warm both once
    metadata_only()
    return _median(metadata_only, repeat), _median(checked, repeat)


def _shards(root: Path) -> int:
    return sum(1 for a in ("counts", "countsT") for _ in (root / "RNA" / a / "c").iterdir())


def _without_tables(root: Path, copy: Path) -> None:
    shutil.copytree(root, copy)
    for array in ("counts", "countsT"):
        document = copy / "RNA" / array / "zarr.json"
        content = json.loads(document.read_text())
        content["attributes"].pop(SHARD_TABLE_ATTR)
        document.write_text(json.dumps(content))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=2_000)
    parser.add_argument("--unit", default="256K", help="layout unitBytes (smaller: more shards)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reads", type=int, default=60)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-shard-tables-"))
    try:
        _compare(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _compare(args: argparse.Namespace, folder: Path) -> None:
    """Measure the store under ``folder`` locally and on loopback S3, and print."""
    counts = generated_counts(args.cells, args.genes)
    layout = cv.LayoutPolicy.parse((args.unit, "32K"))
    cv.write_counts(folder / "s.zarr", counts, layout=layout)
    shards = _shards(folder / "s.zarr")
    print(f"generated counts {args.cells} x {args.genes} (~5% non-zero), {shards} shards")

    base, checked = _open_pair(str(folder / "s.zarr"), None, args.repeat)
    print(
        f"open_store local     metadata only {base * 1e3:8.1f} ms   with shard check "
        f"{checked * 1e3:8.1f} ms   ratio {checked / base:.2f}   "
        f"(+{(checked - base) / shards * 1e6:.1f} us per shard)"
    )

    _without_tables(folder / "s.zarr", folder / "none.zarr")
    readers = {
        "table": cv.VirtualArrayReader(folder / "s.zarr"),
        "none": cv.VirtualArrayReader(folder / "none.zarr"),
    }
    rng = np.random.default_rng(0)
    reads: dict[str, list[float]] = {"table": [], "none": []}
    for repeat in range(args.reads):
        cells = np.sort(rng.choice(args.cells, 1_000, replace=False))
        for name in ("table", "none") if repeat % 2 else ("none", "table"):
            # a fresh reader reads its shard indexes again, as a new session does
            reader = cv.VirtualArrayReader(folder / f"{'s' if name == 'table' else 'none'}.zarr")
            started = time.perf_counter()
            reader.read(cells=cells)
            reads[name].append(time.perf_counter() - started)
    del readers
    r0, r1 = statistics.median(reads["none"]), statistics.median(reads["table"])
    print(
        f"1,000 random cells   no table {r0 * 1e3:8.2f} ms   table {r1 * 1e3:8.2f} ms   "
        f"ratio {r1 / r0:.3f}"
    )

    server, endpoint = _start_server()
    try:
        options = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
        bucket = _bucket(endpoint)
        cv.write_counts(f"s3://{bucket}/s.zarr", counts, layout=layout, storage_options=options)
        base, checked = _open_pair(f"s3://{bucket}/s.zarr", options, args.repeat)
        print(
            f"open_store S3 (loopback) metadata only {base * 1e3:8.1f} ms   with shard check "
            f"{checked * 1e3:8.1f} ms   ratio {checked / base:.2f}"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
