"""Benchmark: the remote source cache against reading the sources directly.

In one run, against a real S3 API server on loopback (moto's server mode)
with a fixed delay added to every request (``--latency``, default 25 ms, a
cloud round trip; the delay is a wrapper around the real S3 store, so every
request pays it):

* a composite of ``--sources`` remote sources, read whole (every shard read
  densely) twice, each time through a fresh reader, with the cache
  (``CYTEARC_SOURCE_CACHE_BYTES`` unset: 2 GiB) and without it (``0``,
  measured first);
* ``--reads`` reads of 1,000 random cells, each through a fresh reader (so
  the shard indexes are fetched again: the cache keeps their suffixes),
  before the whole reads and after them (when the shards are cached whole),
  with and without the cache.

Prints the times, the cache's counters and the ratios (no cache / cache).

    uv run python benchmarks/bench_cache.py [--latency 0.025] [--json -]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location, register_backend

sys.path.insert(0, str(Path(__file__).parent))
from bench_composite import realistic

CREDENTIALS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}


class DelayedStore(WrapperStore[Store]):
    """A real store whose every request waits ``delay`` seconds first."""

    delay = 0.025

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        await asyncio.sleep(self.delay)
        return await self._store.get(key, prototype, byte_range)

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        # the default coalescer over our get: one delay per merged fetch
        async for batch in Store.get_ranges(self, key, byte_ranges, prototype=prototype):
            yield batch

    @property
    def _supports_sync_io(self) -> bool:
        return False


def _open_delayed(url: str, read_only: bool, options: Mapping[str, Any] | None) -> Store:
    # slows3://bucket/path -> the real S3 store, delayed
    real = open_location("s3" + url[len("slows3") :], read_only=read_only, storage_options=options)
    return DelayedStore(real)


def _start_server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def _bucket(endpoint: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT")):
        pass
    return name


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    server, endpoint = _start_server()
    try:
        options = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
        DelayedStore.delay = args.latency
        register_backend("slows3", _open_delayed)
        bucket = _bucket(endpoint)
        rng = np.random.default_rng(0)
        sources = {}
        for index in range(args.sources):
            matrix = realistic(args.cells, args.features, 0.05, rng)
            cv.write_counts(f"s3://{bucket}/s{index}.zarr", matrix, storage_options=options)
            sources[f"s{index}"] = f"slows3://{bucket}/s{index}.zarr"
        per_source = {name: options for name in sources}
        cv.create_composite(root / "c.zarr", sources, source_storage_options=per_source)
        n_cells = args.sources * args.cells
        selections = [
            np.sort(rng.choice(n_cells, size=1000, replace=False)) for _ in range(args.reads)
        ]
        results: dict[str, Any] = {"latency_s": args.latency, "shape": [n_cells, args.features]}
        for label, budget in (("no cache", "0"), ("cache", "")):
            os.environ["CYTEARC_SOURCE_CACHE_BYTES"] = budget
            store = cv.open_store(root / "c.zarr", source_storage_options=per_source)
            # sparse reads first: only the shard indexes are cacheable
            before = _random_reads(store, selections)
            passes = []
            for _ in range(2):
                started = time.perf_counter()
                block = store.reader().read()
                passes.append(time.perf_counter() - started)
            # then the same sparse reads, from shards now cached whole
            after = _random_reads(store, selections)
            info = store.cache_info()
            store.close()
            results[label] = {
                "1,000 random cells, before a whole read": round(before, 4),
                "whole read, first": round(passes[0], 3),
                "whole read, second": round(passes[1], 3),
                "1,000 random cells, after": round(after, 4),
                "cache_info": info._asdict(),
                "checksum": float(block.sum()),
            }
        os.environ.pop("CYTEARC_SOURCE_CACHE_BYTES", None)
        plain, cached = results["no cache"], results["cache"]
        results["ratios (no cache / cache)"] = {
            measure: round(plain[measure] / cached[measure], 2)
            for measure in (
                "1,000 random cells, before a whole read",
                "whole read, second",
                "1,000 random cells, after",
            )
        }
        results["values equal"] = plain["checksum"] == cached["checksum"]
        return results
    finally:
        server.stop()


def _random_reads(store: Any, selections: list[np.ndarray]) -> float:
    """Median time of reading each selection through a fresh reader (whose shard
    indexes are not yet known)."""
    times = []
    for cells in selections:
        started = time.perf_counter()
        store.reader().read(cells, None)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.025, help="seconds added per request")
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--cells", type=int, default=5000, help="cells per source")
    parser.add_argument("--features", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=9)
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-cache-") as scratch:
        results = run(args, Path(scratch))
    text = json.dumps(results, indent=2)
    if args.json and args.json != "-":
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
