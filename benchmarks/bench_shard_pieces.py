"""Benchmark: a local shard's job cut in pieces for the decoding threads, against one job.

The gather reader hands each touched shard of a local store to the
decoding threads; a read within one shard (a band of a few thousand cells)
was one job on one thread. ``job_pieces`` cuts it in one piece per thread.
This runs the same reads both ways in one process, alternating (``whole``:
``PIECE_BYTES`` set past any job, as before), on generated ``uint16``
stores written by ``write_counts``:

* ``narrow``: ``--cells`` x 8,000 genes at 5 % (bench_portable's default);
* ``wide``: 31,000 x 75,000 genes at 1.2 % (the shape of issue 14's real
  data: 150 KB rows, 13 rows a chunk).

Reads: a band of ``--band`` rows (``read`` and ``read_sparse``), a band of
one shard's rows, 1,000 random cells; plus plain ``zarr`` on the same band
for the ratio issue 14 sets (plain zarr within 2x of the gather reader).
Medians of ``--repeat``; every result is checked against the other way's.

    uv run python benchmarks/bench_shard_pieces.py [--repeat 7] [--band 10000]
"""

from __future__ import annotations

import argparse
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

import cytearc_vfs as cv
from cytearc_vfs.read import shard_reader

WHOLE = 1 << 62


def _store(root: Path, name: str, cells: int, genes: int, density: float) -> Path:
    rng = np.random.default_rng(1)
    counts = sp.random(cells, genes, density=density, format="csr", random_state=rng)
    counts.data = np.ceil(counts.data * 40).astype(np.float32)
    path = root / f"{name}.zarr"
    cv.write_counts(path, counts.astype(np.float32))
    return path


def _same(a: Any, b: Any) -> bool:
    if sp.issparse(a):
        return bool((a != b).nnz == 0)
    return bool(np.array_equal(a, b))


def _compare(path: Path, band: int, repeat: int) -> None:
    reader = cv.VirtualArrayReader(path)
    array = zarr.open_array(path, path="RNA/counts", mode="r")
    assert array.shards is not None  # write_counts shards its counts
    shard_rows = int(array.shards[0])
    rng = np.random.default_rng(2)
    cells = np.sort(rng.choice(array.shape[0], 1_000, replace=False))
    rows = slice(0, min(band, array.shape[0]))
    one_shard = slice(0, min(shard_rows, array.shape[0]))
    band_read = f"band of {rows.stop:,} rows, read"
    reads: dict[str, Callable[[], Any]] = {
        band_read: lambda: reader.read(rows, None),
        f"band of {rows.stop:,} rows, read_sparse": lambda: reader.read_sparse(rows, None),
        f"one shard ({one_shard.stop:,} rows), read": lambda: reader.read(one_shard, None),
        "1,000 random cells, read": lambda: reader.read(cells, None),
    }
    print(f"{path.stem}: {array.shape[0]:,} x {array.shape[1]:,}, shards of {shard_rows:,} rows")
    gather_band: dict[str, float] = {}
    for name, read in reads.items():
        times: dict[str, list[float]] = {"pieces": [], "whole": []}
        results: dict[str, Any] = {}
        for _ in range(repeat):
            for way, piece_bytes in (("pieces", shard_reader.PIECE_BYTES), ("whole", WHOLE)):
                saved = shard_reader.PIECE_BYTES
                shard_reader.PIECE_BYTES = piece_bytes
                try:
                    start = time.perf_counter()
                    results[way] = read()
                    times[way].append(time.perf_counter() - start)
                finally:
                    shard_reader.PIECE_BYTES = saved
        assert _same(results["pieces"], results["whole"]), name
        pieces, whole = (statistics.median(times[way]) for way in ("pieces", "whole"))
        if name == band_read:
            gather_band = {"pieces": pieces, "whole": whole}
        print(
            f"  {name:40s} pieces {pieces * 1e3:8.1f} ms  whole {whole * 1e3:8.1f} ms  ({pieces / whole:.2f}x)"
        )
    plain = []
    for _ in range(repeat):
        start = time.perf_counter()
        array[rows]
        plain.append(time.perf_counter() - start)
    zarr_band = statistics.median(plain)
    print(
        f"  plain zarr, the same band {zarr_band * 1e3:8.1f} ms: "
        f"{zarr_band / gather_band['pieces']:.2f}x the gather reader with pieces, "
        f"{zarr_band / gather_band['whole']:.2f}x with whole jobs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=60_000)
    parser.add_argument("--band", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", choices=["narrow", "wide"], default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shapes = {"narrow": (args.cells, 8_000, 0.05), "wide": (31_000, 75_000, 0.012)}
        for name, (cells, genes, density) in shapes.items():
            if args.only not in (None, name):
                continue
            _compare(_store(root, name, cells, genes, density), args.band, args.repeat)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
