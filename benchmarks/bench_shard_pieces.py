"""Benchmark: a shard's job cut in pieces for the decoding threads, against one job.

The gather reader hands each touched shard of a store to the decoding
threads; a read within one shard (a band of a few thousand cells) was one
job on one thread. ``job_pieces`` cuts it in one piece per thread: a local
store's pieces each read their own chunks from the shard file, a remote
store's shard is fetched as before (one request per shard or coalesced run)
and only its decoding is cut. This runs the same reads both ways in one
process, alternating, each way first every other time (``whole``:
``PIECE_BYTES`` set past any job, as before), on generated ``uint16``
stores written by ``write_counts``:

* ``narrow``: ``--cells`` x 8,000 genes at 5 % (bench_portable's default);
* ``wide``: 31,000 x 75,000 genes at 1.2 % (the shape of issue 14's real
  data: 150 KB rows, 13 rows a chunk).

Each store is read where ``--where`` says (any of, comma-separated):

* ``local``: a plain local store (its shard files read directly);
* ``wrapped``: the same files through a ``WrapperStore``, as a latency or
  fault injector would wrap them: the remote path (fetch, then decode), the
  fetches read by zarr's ``LocalStore``, no network;
* ``s3``: the store written to moto's S3 server on loopback (in a process of
  its own, as in bench_remote.py) and read through obstore, no cache.

Reads: a band of ``--band`` rows (``read`` and ``read_sparse``), a band of
one shard's rows, 1,000 random cells; plus plain ``zarr`` on the same band
(through the same store) for the ratio issue 14 sets (plain zarr within 2x
of the gather reader). Medians of ``--repeat``; every result is checked
against the other way's.

    uv run python benchmarks/bench_shard_pieces.py [--repeat 7] [--band 10000] [--where local,s3]
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
from zarr.abc.store import Store
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.read import shard_reader
from cytearc_vfs.remote.locations import open_location

sys.path.insert(0, str(Path(__file__).parent))
from bench_remote import CREDENTIALS, _bucket, _start_server

WHOLE = 1 << 62


def _counts(cells: int, genes: int, density: float) -> sp.csr_array:
    rng = np.random.default_rng(1)
    counts = sp.random(cells, genes, density=density, format="csr", random_state=rng)
    counts.data = np.ceil(counts.data * 40).astype(np.float32)
    return counts.astype(np.float32)


class S3:
    """moto's S3 server in a process of its own, and one bucket on it."""

    def __init__(self) -> None:
        self._server, endpoint = _start_server()
        self.root = f"s3://{_bucket(endpoint)}"
        self.options = {
            **CREDENTIALS,
            "endpoint": endpoint,
            "client_options": {"allow_http": True},
        }

    def close(self) -> None:
        self._server.kill()
        self._server.wait()


def _stores(
    root: Path, name: str, counts: sp.csr_array, where: list[str], s3: S3 | None
) -> dict[str, Store]:
    """The store ``counts`` written as ``name``, opened for each of ``where``."""
    stores: dict[str, Store] = {}
    if {"local", "wrapped"} & set(where):
        path = root / f"{name}.zarr"
        cv.write_counts(path, counts)
        for way in {"local", "wrapped"} & set(where):
            local = LocalStore(path, read_only=True)
            stores[way] = local if way == "local" else WrapperStore(local)
    if s3 is not None:
        url = f"{s3.root}/{name}.zarr"
        cv.write_counts(url, counts, storage_options=s3.options)
        stores["s3"] = open_location(url, read_only=True, storage_options=s3.options)
    return {way: stores[way] for way in where}


def _same(a: Any, b: Any) -> bool:
    if sp.issparse(a):
        return bool((a != b).nnz == 0)
    return bool(np.array_equal(a, b))


def _compare(name: str, store: Store, band: int, repeat: int) -> None:
    reader = cv.VirtualArrayReader(store)
    array = zarr.open_array(store, path="RNA/counts", mode="r")
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
    print(f"{name}: {array.shape[0]:,} x {array.shape[1]:,}, shards of {shard_rows:,} rows")
    gather_band: dict[str, float] = {}
    for name, read in reads.items():
        times: dict[str, list[float]] = {"pieces": [], "whole": []}
        results: dict[str, Any] = {}
        ways = [("pieces", shard_reader.PIECE_BYTES), ("whole", WHOLE)]
        for turn in range(repeat):
            # each way goes first every other turn: on a busy machine the
            # same code (1,000 random cells: one piece a shard either way)
            # ran up to 1.3x slower as the first of the two
            for way, piece_bytes in ways if turn % 2 == 0 else ways[::-1]:
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
    parser.add_argument("--where", default="local", help="local, wrapped, s3 (comma-separated)")
    args = parser.parse_args()
    where = args.where.split(",")
    if unknown := set(where) - {"local", "wrapped", "s3"}:
        parser.error(f"--where {args.where!r}: unknown {sorted(unknown)}; use local, wrapped, s3")
    s3 = S3() if "s3" in where else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            shapes = {"narrow": (args.cells, 8_000, 0.05), "wide": (31_000, 75_000, 0.012)}
            for name, (cells, genes, density) in shapes.items():
                if args.only not in (None, name):
                    continue
                counts = _counts(cells, genes, density)
                for way, store in _stores(Path(tmp), name, counts, where, s3).items():
                    _compare(f"{name} ({way})", store, args.band, args.repeat)
                    sys.stdout.flush()
    finally:
        if s3 is not None:
            s3.close()


if __name__ == "__main__":
    main()
