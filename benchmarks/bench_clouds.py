"""Benchmark: the same composite operations on every loopback cloud, and the atomic-claim race.

Servers (as the tests start them, ``tests/cloud_servers.py``): moto (S3,
obstore), fake-gcs-server (GCS, gcsfs), Azurite (Azure Blob, obstore) and
WsgiDAV (plain HTTP, read-only, obstore); and SeaweedFS's S3 gateway when
``uv sync --group bench`` installed it (an S3 server whose own cost per
request is far below moto's). Each sits behind the tests'
counting proxy in a process of its own (``--latency`` added to every
request, 25 ms by default), so every time comes with the requests that
produced it. For each backend, ``--sources`` sources of ``--cells`` x
``--features``:

* ``create_composite`` (local destination) and ``open_store``;
* 1,000 random cells cold (fresh open) and warm (again, same reader);

with ratios against S3 (time and requests). Then the race: ``--claimers``
threads claim each of ``--keys`` keys at once, through
``create_if_absent`` (one conditional request) and through the obvious
alternative, check-then-put (``exists``, then ``set``): claims per second,
and how many keys ended with more than one winner (check-then-put loses the
race: two writers both see "absent").

    uv run python benchmarks/bench_clouds.py [--sources 10] [--latency 0.025] [--json FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from cytearc_vfs_adapters import create_if_absent
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import cloud_servers as servers  # sets gcsfs's emulator switch before gcsfs is imported
from bench_composite import realistic
from bench_remote import _bucket, _start_server
from loopback_proxy import ProxyProcess

LAYOUT = cv.LayoutPolicy(256 * 1024, 16384)


class Backend:
    """One server behind its own counting, delaying proxy."""

    def __init__(self, name: str, endpoint: str, options: dict[str, Any], key: str) -> None:
        self.name = name
        server = "{0.scheme}://{0.netloc}".format(urlsplit(endpoint))
        self.proxy = ProxyProcess(server)
        self.direct_options = options
        self.options = dict(options)
        if key:
            self.options[key] = self.options[key].replace(server, self.proxy.endpoint)
        self.endpoint = endpoint.replace(server, self.proxy.endpoint)

    def requests(self) -> int:
        """Requests seen since the last call."""
        return len(self.proxy.take())


def _seaweedfs(work: Path, stop: list[Any]) -> str | None:
    """SeaweedFS's S3 gateway (``uv sync --group bench``) when its binary is here."""
    from contextlib import ExitStack

    try:
        from bench_remote_caches import seaweedfs
    except ImportError:
        return None
    stack = ExitStack()
    try:
        endpoint = stack.enter_context(seaweedfs(work))
    except (SystemExit, RuntimeError) as exc:
        print(f"SeaweedFS skipped: {exc}")
        return None
    stop.append(stack)
    return endpoint


def _servers(work: Path) -> tuple[list[Backend], dict[str, Callable[[], str]], list[Any]]:
    """Start every server; returns the backends, a new-root maker per backend
    (URL of a fresh bucket or container, or a served directory's URL), and what to stop."""
    stop: list[Any] = []
    s3, s3_endpoint = _start_server()
    stop.append(s3)
    s3_options = {
        "endpoint": s3_endpoint,
        "access_key_id": "bench",
        "secret_access_key": "bench",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
    }
    gcs, gcs_endpoint = servers.start_gcs()
    stop.append(gcs)
    azure_key = base64.b64encode(secrets.token_bytes(32)).decode()
    azure, azure_endpoint = servers.start_azurite(azure_key)
    stop.append(azure)
    served = work / "served"
    served.mkdir()
    http, http_endpoint = servers.start_http(served)
    stop.append(http)
    backends = [
        Backend("s3", s3_endpoint, s3_options, "endpoint"),
        Backend(
            "gs", gcs_endpoint, servers.gcs_options(gcs_endpoint, "bench-token"), "endpoint_url"
        ),
        Backend("az", azure_endpoint, servers.azure_options(azure_endpoint, azure_key), "endpoint"),
        Backend("http", http_endpoint, {"client_options": {"allow_http": True}}, ""),
    ]
    weed = _seaweedfs(work, stop)
    if weed is not None:
        from bench_remote_caches import _bucket as weed_bucket

        backends.insert(
            1, Backend("s3-seaweedfs", weed, {**s3_options, "endpoint": weed}, "endpoint")
        )
    roots = {
        "s3-seaweedfs": lambda: f"s3://{weed_bucket(str(weed))}",
        "s3": lambda: f"s3://{_bucket(s3_endpoint)}",
        "gs": lambda: f"gs://{servers.gcs_bucket(gcs_endpoint)}",
        "az": lambda: f"az://{servers.azure_container(azure_endpoint, azure_key)}",
        "http": lambda: "http",
    }
    return backends, roots, stop


def _timed(function: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def run_backend(
    backend: Backend,
    root: str,
    work: Path,
    matrices: list[Any],
    latency: float,
) -> dict[str, Any]:
    """Write the sources (directly), then create, open and read through the proxy."""
    sources: dict[str, str] = {}
    for index, matrix in enumerate(matrices):
        name = f"s{index}.zarr"
        if backend.name == "http":
            directory = work / "served" / f"http-{uuid.uuid4().hex[:8]}"
            directory.mkdir(parents=True, exist_ok=True)
            cv.write_counts(directory / name, matrix, layout=LAYOUT)
            sources[f"s{index}"] = f"{backend.endpoint}/{directory.name}/{name}"
        else:
            cv.write_counts(
                f"{root}/{name}", matrix, layout=LAYOUT, storage_options=backend.direct_options
            )
            sources[f"s{index}"] = f"{root}/{name}"
    options = {name: backend.options for name in sources}
    backend.proxy.delay = latency
    backend.requests()
    row: dict[str, Any] = {"backend": backend.name}
    destination = work / f"{backend.name}-{uuid.uuid4().hex[:6]}.zarr"
    seconds, _ = _timed(
        lambda: cv.create_composite(destination, sources, source_storage_options=options)
    )
    row["create s"], row["create req"] = round(seconds, 3), backend.requests()
    seconds, store = _timed(lambda: cv.open_store(destination, source_storage_options=options))
    row["open s"], row["open req"] = round(seconds, 3), backend.requests()
    n_cells = sum(matrix.shape[0] for matrix in matrices)
    cells = np.sort(np.random.default_rng(7).choice(n_cells, min(1000, n_cells), replace=False))
    reader = store.reader()
    seconds, cold = _timed(lambda: reader.read(cells=cells))
    row["1k cells cold s"], row["1k cells cold req"] = round(seconds, 3), backend.requests()
    seconds, warm = _timed(lambda: reader.read(cells=cells))
    row["1k cells warm s"], row["1k cells warm req"] = round(seconds, 4), backend.requests()
    assert np.array_equal(cold, warm)
    store.close()
    backend.proxy.delay = 0.0
    return row


def _check_then_put(store: Any, key: str, value: bytes) -> bool:
    """The obvious alternative: look, then write. Two writers can both see "absent"."""

    async def attempt() -> bool:
        if await store.exists(key):
            return False
        await store.set(key, default_buffer_prototype().buffer.from_bytes(value))
        return True

    return sync(attempt())


def race(
    store: Any, claim: Callable[[Any, str, bytes], bool], keys: int, claimers: int
) -> dict[str, Any]:
    """``claimers`` threads claim each of ``keys`` keys at once; claims per second and
    how many keys had more than one winner."""
    doubled, seconds = 0, 0.0
    for round_ in range(keys):
        key = f"labels/{uuid.uuid4().hex[:8]}-{round_}"
        results = [False] * claimers
        barrier = threading.Barrier(claimers)

        def claimer(
            index: int,
            key: str = key,
            results: list[bool] = results,
            barrier: threading.Barrier = barrier,
        ) -> None:
            barrier.wait()
            results[index] = claim(store, key, f"c{index}".encode())

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds += time.perf_counter() - started
        doubled += sum(results) > 1
    return {
        "claims/s": round(keys * claimers / seconds, 1),
        "keys with >1 winner": doubled,
        "keys": keys,
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--features", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.025)
    parser.add_argument("--claimers", type=int, default=16)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    matrices = [realistic(args.cells, args.features, 0.05, rng) for _ in range(args.sources)]
    report: dict[str, Any] = {"sources": args.sources, "latency": args.latency}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        backends, roots, stop = _servers(work)
        try:
            rows = [run_backend(b, roots[b.name](), work, matrices, args.latency) for b in backends]
            report["operations"] = rows
            base = rows[0]
            print(
                f"\n{args.sources} sources of {args.cells} x {args.features}, +{args.latency * 1000:.0f} ms per request"
            )
            columns = ["create", "open", "1k cells cold"]
            print(
                "backend | " + " | ".join(f"{c} s (vs S3) | req" for c in columns) + " | warm req"
            )
            for row in rows:
                cells = [
                    f"{row[f'{c} s']} ({_ratio(row[f'{c} s'], base[f'{c} s'])}) | {row[f'{c} req']}"
                    f" ({_ratio(row[f'{c} req'], base[f'{c} req'])})"
                    for c in columns
                ]
                print(f"{row['backend']} | " + " | ".join(cells) + f" | {row['1k cells warm req']}")
            races = []
            for backend in backends:
                if backend.name == "http":
                    continue  # read-only: create_if_absent refuses it
                backend.proxy.delay = args.latency
                location = f"{roots[backend.name]()}/claims"
                store = open_location(location, read_only=False, storage_options=backend.options)
                for how, claim in (
                    ("create_if_absent", create_if_absent),
                    ("check-then-put", _check_then_put),
                ):
                    races.append(
                        {
                            "backend": backend.name,
                            "how": how,
                            **race(store, claim, args.keys, args.claimers),
                        }
                    )
                backend.proxy.delay = 0.0
            local = open_location(work / "claims", read_only=False)
            for how, claim in (
                ("create_if_absent", create_if_absent),
                ("check-then-put", _check_then_put),
            ):
                races.append(
                    {"backend": "local", "how": how, **race(local, claim, args.keys, args.claimers)}
                )
            report["race"] = races
            print(f"\nrace: {args.claimers} threads per key, {args.keys} keys")
            print("backend | how | claims/s | keys with >1 winner")
            for entry in races:
                print(
                    f"{entry['backend']} | {entry['how']} | {entry['claims/s']} | {entry['keys with >1 winner']}/{entry['keys']}"
                )
        finally:
            for backend in backends:
                backend.proxy.close()
            for server in stop:
                if hasattr(server, "close"):  # an ExitStack
                    server.close()
                elif hasattr(server, "stop"):
                    server.stop()
                else:
                    server.terminate()
                    server.wait()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
