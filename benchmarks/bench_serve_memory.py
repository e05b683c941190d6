"""Benchmark: the memory of ``cytearc-vfs serve`` with many clients of a large shard.

One run writes a zarr sharded array whose one shard is ``--shard-mib`` MiB
(uncompressed random bytes, so its size is exact) and a small array, then
serves it twice, each time from a fresh server process (127.0.0.1, a free
port; so each process's peak RSS is its own):

* ``streamed``  the server as shipped: values larger than a piece (1 MiB)
                are read and sent piece by piece under the answer budget
                (256 MiB);
* ``whole``     the behaviour before: pieces and budget larger than the
                shard, so every answer reads the whole value into memory
                and holds it until its client has taken the last byte.

Against each server, in this order:

1. ``download``: ``--clients`` threads each GET the whole shard at once
   (bodies read in 1 MiB reads and dropped; one is checked byte for byte):
   wall time, throughput, and the server's peak RSS above its RSS at start;
2. ``stalled``: as many clients ask for the shard and read nothing (4 KiB
   receive buffers); once the server holds still, its RSS above start and
   the answer bytes its counters say it holds;
3. ``small``: ``--small`` GETs of a 4 KB chunk one after the other on one
   connection: requests per second (what a read costs when nothing is
   streamed).

Ratios are to ``before`` (``--before PATH``: the serve code of a checkout from
before streaming, run as one more contender) when given, else to ``whole``.

    uv run python benchmarks/bench_serve_memory.py
    uv run python benchmarks/bench_serve_memory.py --shard-mib 128 --clients 16 --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

MiB = 1 << 20
SHARD_KEY = "big/c/0"
SMALL_KEY = "small/c/0"

# The server, in its own process: prints its URL, then its stats (JSON) for
# every line read on stdin; exits at end of input.
RUNNER = r"""
import json, sys
from zarr.storage import LocalStore
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer

root, piece, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    options = ServeOptions(piece_bytes=piece, max_answer_bytes=budget, write_timeout=600)
except TypeError:  # a server from before streaming (--before): no such options
    options = ServeOptions(write_timeout=600)
server = StoreServer.start(LocalStore(root, read_only=True), options=options)
print(server.url, flush=True)
for _ in sys.stdin:
    print(json.dumps(server.stats()._asdict()), flush=True)
server.close()
"""


def build(root: Path, shard_mib: int) -> None:
    store = LocalStore(root)
    big = zarr.create_array(
        store,
        name="big",
        shape=(shard_mib * MiB,),
        dtype="uint8",
        chunks=(MiB,),
        shards=(shard_mib * MiB,),
        compressors=None,
    )
    big[:] = np.frombuffer(np.random.default_rng(0).bytes(shard_mib * MiB), dtype=np.uint8)
    small = zarr.create_array(store, name="small", shape=(1000,), dtype="int32", chunks=(1000,))
    small[:] = np.arange(1000, dtype=np.int32)


class Server:
    """A serving process, its URL, its counters and its memory."""

    def __init__(self, root: Path, piece: int, budget: int, adapters: Path | None) -> None:
        environment = dict(os.environ)
        if adapters is not None:
            environment["PYTHONPATH"] = str(adapters)
        self.process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(root), str(piece), str(budget)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), self.url
        host_port = self.url.removeprefix("http://").rstrip("/")
        host, port = host_port.rsplit(":", 1)
        self.address = (host, int(port))
        self.rss_at_start = self.memory()["VmRSS"]

    def stats(self) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        stats: dict[str, Any] = json.loads(self.process.stdout.readline())
        return stats

    def memory(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak RSS) of the process, in bytes."""
        fields = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
        return fields

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def download(server: Server, key: str, digest: bool) -> tuple[int, str]:
    connection = http.client.HTTPConnection(*server.address, timeout=600)
    try:
        connection.request("GET", "/" + key)
        response = connection.getresponse()
        assert response.status == 200, response.status
        total, hasher = 0, hashlib.blake2b()
        while data := response.read(MiB):
            total += len(data)
            if digest:
                hasher.update(data)
        return total, hasher.hexdigest() if digest else ""
    finally:
        connection.close()


def run_downloads(
    server: Server, clients: int, expected: tuple[int, str], repeat: int
) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        results: list[tuple[int, str]] = []
        threads = [
            threading.Thread(
                target=lambda i=i, results=results: results.append(
                    download(server, SHARD_KEY, i == 0)
                )
            )
            for i in range(clients)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        times.append(time.perf_counter() - started)
        assert len(results) == clients and all(size == expected[0] for size, _ in results)
        assert [d for _, d in results if d] == [expected[1]], "a download differs from the shard"
    seconds = statistics.median(times)
    memory = server.memory()
    stats = server.stats()
    return {
        "seconds": seconds,
        "mb_per_s": clients * expected[0] / seconds / 1e6,
        "peak_rss_above_start_mib": (memory["VmHWM"] - server.rss_at_start) / MiB,
        "peak_held_mib": stats.get("peak_held_bytes", float("nan")) / MiB,
    }


def run_stalled(server: Server, clients: int) -> dict[str, float]:
    sockets = []
    for _ in range(clients):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(server.address)
        client.sendall(f"GET /{SHARD_KEY} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        sockets.append(client)
    try:
        # the server holds still once every answer waits on its client
        last, steady = -1, 0
        while steady < 10:
            held = server.stats().get("held_bytes", None)
            if held is None:  # a server from before streaming: it holds what it read
                held = server.memory()["VmRSS"] - server.rss_at_start
            steady = steady + 1 if held == last and held > 0 else 0
            last = held
            time.sleep(0.1)
        memory = server.memory()
        return {
            "rss_above_start_mib": (memory["VmRSS"] - server.rss_at_start) / MiB,
            "held_mib": server.stats().get("held_bytes", float("nan")) / MiB,
        }
    finally:
        for client in sockets:
            client.close()


def run_small(server: Server, count: int, repeat: int) -> dict[str, float]:
    connection = http.client.HTTPConnection(*server.address, timeout=60)
    times = []
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            for _ in range(count):
                connection.request("GET", "/" + SMALL_KEY)
                response = connection.getresponse()
                assert response.status == 200 and len(response.read()) > 0
            times.append(time.perf_counter() - started)
    finally:
        connection.close()
    return {"requests_per_s": count / statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard-mib", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="downloads and small runs (median)")
    parser.add_argument(
        "--pieces-kib",
        default="1024",
        help="piece sizes of the streamed servers, KiB, comma-separated (1024 is the default's)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a checkout from before streaming: its serve code is run as one more contender",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_serve_memory_") as tmp:
        root = Path(tmp) / "store.zarr"
        build(root, args.shard_mib)
        shard = (root / "big" / "c" / "0").read_bytes()
        expected = (len(shard), hashlib.blake2b(shard).hexdigest())
        del shard
        whole_piece = expected[0] + MiB
        modes: dict[str, tuple[int, int, Path | None]] = {
            f"streamed {kib}K": (int(kib) * 1024, 256 * MiB, None)
            for kib in args.pieces_kib.split(",")
        }
        if args.before is not None:
            modes["before"] = (0, 0, args.before / "adapters")
        modes["whole"] = (whole_piece, (args.clients + 2) * whole_piece, None)
        results: dict[str, dict[str, dict[str, float]]] = {}
        for mode, (piece, budget, adapters) in modes.items():
            server = Server(root, piece, budget, adapters)
            try:
                results[mode] = {
                    "download": run_downloads(server, args.clients, expected, args.repeat),
                    "stalled": run_stalled(server, args.clients),
                    "small": run_small(server, args.small, args.repeat),
                }
            finally:
                server.close()
    baseline = "before" if "before" in results else "whole"
    print(
        f"{args.clients} clients, one {args.shard_mib} MiB shard ({expected[0]:,} bytes); "
        f"streamed: 256 MiB budget; medians of {args.repeat}; ratio: each to {baseline!r}"
    )
    names = list(results)
    print(f"{'measure':<36}" + "".join(f"{name:>15}" for name in names))
    for scenario, measures in results["whole"].items():
        for measure in measures:
            values = [results[name][scenario][measure] for name in names]
            base = results[baseline][scenario][measure]
            ratios = [value / base if base == base and base else float("nan") for value in values]
            print(
                f"{scenario + ' ' + measure:<36}"
                + "".join(f"{value:>15.1f}" for value in values)
                + "   ratio "
                + " ".join(f"{ratio:.3f}" for ratio in ratios)
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
