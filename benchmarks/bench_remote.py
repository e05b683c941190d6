"""Benchmark: round trips of remote composites (create, open, cold and warm reads).

Against a real S3 API server on loopback (moto's server mode) behind the
tests' loopback proxy (``tests/loopback_proxy.py``), each in a process of
its own so that their CPU is not the measured process's. The proxy delays
every request by ``--latency`` (default 25 ms, a cloud round trip; requests
in flight wait concurrently) and records each one, so every figure comes
with the requests that produced it, and the server's own CPU time is
reported beside it (moto spends ~2.5 ms of Python per GET and ~9 ms per
LIST of a small source, one request at a time: a floor a cloud server does
not have). For each ``--sources`` count (default 10 and
100 sources of ``--cells`` x ``--features``, default 2,000 x 1,000):

* ``create_composite`` of the remote sources (a local destination);
* ``open_store`` of that composite;
* 1,000 random cells, then 50 random genes, each read cold (a fresh open,
  nothing cached, no shard index known) and warm (the same read again
  through the same reader);
* the warm reads of an identical composite over local copies of the same
  sources, for the warm ratio (remote / local);
* with ``--remote-destination``, create and open once more with the
  composite's own store on S3 behind the same proxy.

Requests are counted at the proxy, split into GET and LIST, with the Zarr v2
probes (``.zgroup``, ``.zattrs``, ``.zmetadata``, ``.zarray``) and the
``.../zarr.json/zarr.json`` requests counted apart.

    uv run python benchmarks/bench_remote.py [--sources 10,100] [--latency 0.025] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

import cytearc_vfs as cv

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from bench_composite import realistic
from loopback_proxy import ProxyProcess, Seen

CREDENTIALS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}
V2_KEYS = (".zgroup", ".zattrs", ".zmetadata", ".zarray")


def _start_server() -> tuple[Any, str]:
    """moto's S3 server in its own process: its work (a listing's XML costs it
    ~40 ms of Python) must not take the measured process's CPU and GIL, as a
    real server's would not."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.1)
    return server, endpoint


def _bucket(endpoint: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT")):
        pass
    return name


def tally(seen: list[Seen], n_sources: int) -> dict[str, Any]:
    """Requests by kind, and per source (the most any one source cost)."""
    kinds: Counter[str] = Counter()
    per_source: Counter[str] = Counter()
    for request in seen:
        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        listing = request.method == "GET" and ("list-type" in query or "prefix" in query)
        key = (query.get("prefix", [""])[0] if listing else parts.path.split("/", 2)[-1]) or ""
        kinds["LIST" if listing else request.method] += 1
        if key.rsplit("/", 1)[-1] in V2_KEYS:
            kinds["v2 probes"] += 1
        if key.endswith("zarr.json/zarr.json"):
            kinds["zarr.json/zarr.json"] += 1
        top = key.split("/", 1)[0]
        if top.startswith("s") and top.endswith(".zarr"):
            per_source[top] += 1
    return {
        "requests": len(seen),
        **dict(sorted(kinds.items())),
        "max per source": max(per_source.values(), default=0),
        "per source (mean)": round(sum(per_source.values()) / max(1, n_sources), 2),
    }


SERVER_PID = 0


def _server_cpu() -> float:
    """CPU seconds the server process has used (user + system)."""
    with open(f"/proc/{SERVER_PID}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(function: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def _measured(function: Any) -> tuple[dict[str, float], Any]:
    """Wall time, this process's CPU time and the server's CPU time of ``function``."""
    server, cpu = _server_cpu(), time.process_time()
    seconds, result = _timed(function)
    return {
        "s": round(seconds, 3),
        "client cpu s": round(time.process_time() - cpu, 3),
        "server cpu s": round(_server_cpu() - server, 3),
    }, result


def run_size(
    args: argparse.Namespace,
    n_sources: int,
    endpoint: str,
    proxy: ProxyProcess,
    scratch: Path,
) -> dict[str, Any]:
    direct = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
    proxied = {**direct, "endpoint": proxy.endpoint}
    bucket = _bucket(endpoint)
    rng = np.random.default_rng(n_sources)
    remote: dict[str, str] = {}
    local: dict[str, Path] = {}
    proxy.delay = 0.0
    for index in range(n_sources):
        matrix = realistic(args.cells, args.features, 0.05, rng)
        # written straight to the server (not timed, not counted)
        cv.write_counts(f"s3://{bucket}/s{index}.zarr", matrix, storage_options=direct)
        local[f"s{index}"] = scratch / f"s{index}.zarr"
        cv.write_counts(local[f"s{index}"], matrix)
        remote[f"s{index}"] = f"s3://{bucket}/s{index}.zarr"
    options = {name: proxied for name in remote}
    n_cells = n_sources * args.cells
    cells = np.sort(rng.choice(n_cells, size=1000, replace=False))
    genes = np.sort(rng.choice(args.features, size=50, replace=False))
    results: dict[str, Any] = {"sources": n_sources, "shape": [n_cells, args.features]}

    proxy.delay = args.latency
    proxy.take()
    times, store = _measured(
        lambda: cv.create_composite(
            scratch / f"c{n_sources}.zarr", remote, source_storage_options=options
        )
    )
    store.close()
    results["create_composite"] = {**times, **tally(proxy.take(), n_sources)}
    times, store = _measured(
        lambda: cv.open_store(scratch / f"c{n_sources}.zarr", source_storage_options=options)
    )
    results["open_store"] = {**times, **tally(proxy.take(), n_sources)}
    store.close()

    proxy.delay = 0.0
    local_store = cv.create_composite(scratch / f"l{n_sources}.zarr", local)
    for label, selection in (("1,000 cells", (cells, None)), ("50 genes", (None, genes))):
        proxy.delay = args.latency
        store = cv.open_store(scratch / f"c{n_sources}.zarr", source_storage_options=options)
        reader = store.reader()
        proxy.take()
        cold_times, block = _measured(lambda reader=reader, s=selection: reader.read(*s))
        cold_requests = tally(proxy.take(), n_sources)
        warm_times = []
        for _ in range(args.repeat):
            seconds, again = _timed(lambda reader=reader, s=selection: reader.read(*s))
            warm_times.append(seconds)
        warm_requests = tally(proxy.take(), n_sources)
        store.close()
        local_reader = local_store.reader()
        local_reader.read(*selection)  # warm, as the remote reader is
        local_times = []
        for _ in range(args.repeat):
            seconds, expected = _timed(lambda r=local_reader, s=selection: r.read(*s))
            local_times.append(seconds)
        warm, local_warm = float(np.median(warm_times)), float(np.median(local_times))
        results[label] = {
            "cold s": cold_times["s"],
            "cold server cpu s": cold_times["server cpu s"],
            "cold": cold_requests,
            "warm s": round(warm, 4),
            "warm requests": warm_requests["requests"],
            "local warm s": round(local_warm, 4),
            "warm / local": round(warm / local_warm, 2),
            "values equal": bool(np.array_equal(block, expected) and np.array_equal(again, block)),
        }
    local_store.close()

    if args.remote_destination:
        proxy.delay = args.latency
        url = f"s3://{bucket}/composite{n_sources}.zarr"
        proxy.take()
        times, store = _measured(
            lambda: cv.create_composite(
                url, remote, source_storage_options=options, storage_options=proxied
            )
        )
        store.close()
        results["create_composite, S3 destination"] = {**times, **tally(proxy.take(), n_sources)}
        times, store = _measured(
            lambda: cv.open_store(url, storage_options=proxied, source_storage_options=options)
        )
        store.close()
        results["open_store, S3 destination"] = {**times, **tally(proxy.take(), n_sources)}
    proxy.delay = 0.0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.025, help="seconds added per request")
    parser.add_argument("--sources", default="10,100", help="comma-separated source counts")
    parser.add_argument("--cells", type=int, default=2000, help="cells per source")
    parser.add_argument("--features", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="warm reads timed (median)")
    parser.add_argument("--remote-destination", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    os.environ.setdefault("CYTEARC_SOURCE_TIMEOUT", "120")
    global SERVER_PID
    server, endpoint = _start_server()
    SERVER_PID = server.pid
    proxy = ProxyProcess(endpoint)
    runs = []
    try:
        for n_sources in (int(n) for n in args.sources.split(",")):
            with tempfile.TemporaryDirectory(prefix="cytearc-bench-remote-") as scratch:
                runs.append(run_size(args, n_sources, endpoint, proxy, Path(scratch)))
                print(json.dumps(runs[-1], indent=2), file=sys.stderr, flush=True)
    finally:
        proxy.close()
        server.terminate()
        server.wait()
    results = {"latency_s": args.latency, "runs": runs}
    text = json.dumps(results, indent=2)
    if args.json and args.json != "-":
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
