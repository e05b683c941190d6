"""Peak memory against ``mem_budget``, and write time, of this checkout and of a baseline.

Each writer run (``write_counts`` of a tall, a wide and a dense-ish matrix,
``repack``; to a local directory and to a loopback S3 server in a process of
its own) is measured in a child process once with Python's allocations
traced (the peak, against the budget) and, without tracing, timed (best of
``--repeat``). The same runs are made with the baseline's code (by default
the ``main`` branch, its files extracted by ``git archive``), and the
ratios printed: peak / budget for each, and time after / before. At a small
budget each version writes in the layout its own refusal names (an import
uses a policy exactly); at the default budget, the default layout.

    uv run python benchmarks/bench_memory_budgets.py [--baseline-ref main] [--repeat 3]
        [--budgets 24M,2G] [--destinations local,s3]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout_runs import baseline_checkout, report_times, run_in_checkout, size_bytes

HERE = Path(__file__).resolve().parent.parent
MiB = 1 << 20
SHAPES = {"tall": (40_000, 500, 0.1), "wide": (1_000, 20_000, 0.1), "dense": (8_000, 2_000, 0.5)}


def cases(budgets: list[str], destinations: list[str]) -> list[tuple[str, str, str, str]]:
    """(writer, input, budget, destination) of every run."""
    return [
        (writer, shape, budget, destination)
        for writer, shape in [("write_counts", s) for s in SHAPES] + [("repack", "dense")]
        for budget in budgets
        for destination in destinations
    ]


CHILD = r"""
import json, re, sys, urllib.request, uuid, tempfile
from pathlib import Path
from checkout_runs import peak_and_seconds
import numpy as np, scipy.sparse as sp
import cytearc_vfs as cv
from cytearc_vfs.format.layout import LayoutPolicy

writer, shape, budget, destination, options, repeat = json.loads(sys.argv[1])
n, m, density = shape
x = sp.random_array((n, m), density=density, format="csr", dtype=np.float64,
                    rng=np.random.default_rng(0))
x.data = np.ceil(x.data * 300)
tmp = Path(tempfile.mkdtemp())

def location():
    if destination == "local":
        return tmp / uuid.uuid4().hex, None
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{options['endpoint']}/{bucket}", method="PUT")).close()
    return f"s3://{bucket}/store", options

def named_layout(write):
    try:
        write(tmp / uuid.uuid4().hex)
    except ValueError as exc:
        found = re.search(r"layout=LayoutPolicy\(unit_bytes=(\d+), chunk_bytes=(\d+)\)", str(exc))
        if found:
            return LayoutPolicy(int(found[1]), int(found[2]))
        raise
    return None

if writer == "write_counts":
    policy = named_layout(lambda where: cv.write_counts(where, x, mem_budget=budget))
    def run():
        where, storage = location()
        cv.write_counts(where, x, mem_budget=budget, layout=policy, storage_options=storage)
else:
    source = tmp / "source.zarr"
    cv.write_counts(source, x, layout=("4M", "256K"))
    def run():
        where, storage = location()
        cv.repack(source, where, mem_budget=budget, destination_storage_options=storage)

run()  # imports and first-use caches
print(json.dumps(peak_and_seconds(run, repeat)))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_s3() -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                server.terminate()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(endpoint, timeout=10).close()
    return server, {
        "endpoint": endpoint,
        "access_key_id": "bench-key",
        "secret_access_key": "bench-secret",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
    }


def _measure(
    code: Path, case: tuple[str, str, str, str], options: dict[str, Any], repeat: int
) -> dict[str, Any]:
    writer, shape, budget, destination = case
    argument = json.dumps([writer, SHAPES[shape], budget, destination, options, repeat])
    return run_in_checkout(code, CHILD, argument) or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main", help="git ref of the code before")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best kept)")
    parser.add_argument("--budgets", default="24M,2G", help="budgets, comma-separated (M or G)")
    parser.add_argument("--destinations", default="local,s3", help="local and/or s3")
    args = parser.parse_args()
    with baseline_checkout(HERE, args.baseline_ref) as baseline:
        _compare(args, baseline)


def _compare(args: argparse.Namespace, baseline: Path) -> None:
    """Measure every case before (``baseline``) and after (this checkout), and print."""
    server, options = _start_s3()
    try:
        print(
            f"{'writer':12} {'input':6} {'budget':>6} {'dest':5} | "
            f"{'peak before':>11} {'/budget':>7} | {'peak after':>10} {'/budget':>7} | "
            f"{'s before':>8} {'s after':>7} {'after/before':>12}"
        )
        for case in cases(args.budgets.split(","), args.destinations.split(",")):
            before = _measure(baseline, case, options, args.repeat)
            after = _measure(HERE, case, options, args.repeat)
            writer, shape, budget, destination = case
            limit = size_bytes(budget)

            def peak(m: dict[str, Any], limit: int = limit) -> str:
                if "error" in m:
                    return f"{'refused':>11} {'':>7}"
                return f"{m['peak'] / MiB:8.1f} MiB {m['peak'] / limit:7.2f}"

            label = f"{writer:12} {shape:6} {budget:>6} {destination:5}"
            report_times(label, f"{peak(before)} | {peak(after)}", before, after)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
