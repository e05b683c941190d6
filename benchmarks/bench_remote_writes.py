"""Benchmark: the writers to an S3 destination, in requests and sequential round trips.

Each writer writes to moto's S3 server on loopback behind the tests'
counting proxy (``tests/loopback_proxy.py``), each in a process of its own,
with ``--latency`` (default 20 ms) added to every request. For each writer
the proxy reports the requests by verb and the **rounds**: the longest chain
of requests each sent only after the one before it was answered
(``loopback_proxy.sequential_rounds``), which is what a real cloud's latency
multiplies. Writers measured (the sources are written straight to the
server, uncounted):

* ``write_counts`` of a small (``--small``, default 2,000 x 1,000) and a
  medium (``--medium``, default 20,000 x 2,000) matrix;
* ``write_counts(overwrite=True)`` over the small store;
* ``create_composite`` of two small S3 sources;
* ``mount_datastore`` of a small S3 source;
* ``repack`` of a small S3 source.

Each runs twice in the same process: with the write-behind destination
(the default: documents and chunks written concurrently under the pending
root, no parent checks, the root document last) and with
``destinations.WRITE_BEHIND = False``, which restores zarr's own node by
node writes (kept for this comparison only). Ratios are before / after.

    uv run python benchmarks/bench_remote_writes.py [--latency 0.02] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.write import destinations

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from bench_composite import realistic
from bench_remote import CREDENTIALS, _bucket, _start_server
from loopback_proxy import ProxyProcess, Seen, sequential_rounds


def tally(seen: list[Seen]) -> dict[str, Any]:
    """Requests by verb (a listing is LIST), and the sequential rounds."""
    verbs: Counter[str] = Counter()
    for request in seen:
        query = parse_qs(urlsplit(request.path).query)
        listing = request.method == "GET" and ("list-type" in query or "prefix" in query)
        verbs["LIST" if listing else request.method] += 1
    return {"requests": len(seen), **dict(sorted(verbs.items())), "rounds": sequential_rounds(seen)}


def measure(proxy: ProxyProcess, latency: float, write: Callable[[], Any]) -> dict[str, Any]:
    """Wall time, requests and rounds of ``write`` behind ``latency``."""
    proxy.delay = latency
    proxy.take()
    started = time.perf_counter()
    result = write()
    seconds = time.perf_counter() - started
    close = getattr(result, "close", None)
    if close is not None:
        close()
    figures = {"s": round(seconds, 3), **tally(proxy.take())}
    proxy.delay = 0.0
    return figures


def writers(
    args: argparse.Namespace, bucket: str, direct: dict[str, Any], proxied: dict[str, Any]
) -> dict[str, Callable[[str], Any]]:
    """Each writer, given the destination's name in the bucket."""
    rng = np.random.default_rng(7)
    small = realistic(*args.small, 0.05, rng)
    medium = realistic(*args.medium, 0.05, rng)
    sources = {}
    for name in ("a", "b"):
        sources[name] = f"s3://{bucket}/src_{name}.zarr"
        cv.write_counts(sources[name], realistic(*args.small, 0.05, rng), storage_options=direct)
    source_options = {name: proxied for name in sources}

    def url(name: str) -> str:
        return f"s3://{bucket}/{name}"

    def overwrite(name: str) -> Any:
        cv.write_counts(url(name), small, storage_options=direct)  # the store replaced, uncounted
        return lambda: cv.write_counts(url(name), small, storage_options=proxied, overwrite=True)

    return {
        "write_counts small": lambda name: (
            lambda: cv.write_counts(url(name), small, storage_options=proxied)
        ),
        "write_counts medium": lambda name: (
            lambda: cv.write_counts(url(name), medium, storage_options=proxied)
        ),
        "write_counts overwrite": overwrite,
        "create_composite (2 sources)": lambda name: (
            lambda: cv.create_composite(
                url(name), sources, source_storage_options=source_options, storage_options=proxied
            )
        ),
        "mount_datastore": lambda name: (
            lambda: cv.mount_datastore(
                sources["a"],
                url(name),
                source_storage_options=proxied,
                storage_options=proxied,
            )
        ),
        # repack opens a URL destination without options: give it the store
        "repack": lambda name: (
            lambda: cv.repack(
                sources["a"],
                open_location(url(name), read_only=False, storage_options=proxied),
                storage_options=proxied,
            )
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added per request")
    parser.add_argument("--small", default="2000,1000", help="cells,features of the small store")
    parser.add_argument("--medium", default="20000,2000", help="cells,features of the medium one")
    parser.add_argument("--only", default="", help="comma-separated writer names (default: all)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    args.small = tuple(int(n) for n in args.small.split(","))
    args.medium = tuple(int(n) for n in args.medium.split(","))
    os.environ.setdefault("CYTEARC_SOURCE_TIMEOUT", "120")
    server, endpoint = _start_server()
    proxy = ProxyProcess(endpoint)
    results: dict[str, Any] = {"latency_s": args.latency}
    try:
        direct = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
        proxied = {**direct, "endpoint": proxy.endpoint}
        bucket = _bucket(endpoint)
        with tempfile.TemporaryDirectory(prefix="cytearc-bench-writes-"):
            chosen = writers(args, bucket, direct, proxied)
            wanted = [n for n in args.only.split(",") if n] or list(chosen)
            for number, (label, make) in enumerate(chosen.items()):
                if not any(w in label for w in wanted):
                    continue
                row: dict[str, Any] = {}
                for mode, behind in (("before", False), ("after", True)):
                    destinations.WRITE_BEHIND = behind
                    write = make(f"{mode}{number}.zarr")
                    row[mode] = measure(proxy, args.latency, write)
                destinations.WRITE_BEHIND = True
                before, after = row["before"], row["after"]
                row["ratios"] = {
                    "time": round(before["s"] / max(after["s"], 1e-9), 2),
                    "requests": round(before["requests"] / max(after["requests"], 1), 2),
                    "rounds": round(before["rounds"] / max(after["rounds"], 1), 2),
                }
                results[label] = row
                print(label, json.dumps(row), file=sys.stderr, flush=True)
    finally:
        proxy.close()
        server.terminate()
        server.wait()
    text = json.dumps(results, indent=2)
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
