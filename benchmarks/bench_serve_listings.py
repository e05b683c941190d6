"""Benchmark: listing a composite's directories through ``serve``, each client's way.

One run writes ``--sources`` small sources, creates their composite with
small computed chunks (so ``RNA/counts/c/`` holds many chunk rows), serves
it in process (``StoreServer`` on 127.0.0.1) and lists it, on the same
directories, as:

* ``json``                the JSON listing (``GET /RNA/counts/c/`` without
                          ``Accept``): the listing serve offered before, the baseline;
* ``html (fsspec)``       fsspec's ``HTTPFileSystem.ls`` of the directory's URL
                          ending in ``/``: one ``GET`` of the HTML index (zarr's
                          ``FsspecStore.list_dir`` asks without the final ``/``,
                          which serve answers ``404``: a directory's name is no key);
* ``propfind (obstore)``  zarr's ``ObjectStore(HTTPStore).list_dir``: one
                          ``PROPFIND`` with ``Depth: 1``;
* ``in process``          ``CompositeStore.list_dir``, for scale.

and the whole hierarchy (``zarr.open_group(...).members(max_depth=None)``)
through obstore against in process (through ``FsspecStore`` it stops at the
root's names, for the reason above). Medians of ``--repeat`` runs, the
requests the server answered per listing, ratios to the baseline, and the
composite's chunk counter (a listing must compute no chunk) are printed.

    uv run python benchmarks/bench_serve_listings.py
    uv run python benchmarks/bench_serve_listings.py --repeat 9 --rows 20000
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import fsspec
import numpy as np
import obstore.store
import scipy.sparse as sp
import zarr
from cytearc_vfs_adapters.serve import StoreServer
from zarr.abc.store import Store
from zarr.core.sync import sync

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create


def build(root: Path, sources: int, rows: int, genes: int) -> Path:
    rng = np.random.default_rng(0)
    locations = {}
    for index in range(sources):
        counts = sp.random_array(
            (rows, genes), density=0.05, format="csr", rng=rng, dtype=np.float32
        )
        counts.data = np.ceil(counts.data * 5)
        location = root / f"s{index}.zarr"
        cv.write_counts(
            location,
            counts,
            cells=[f"s{index}c{i}" for i in range(rows)],
            features=[f"g{i}" for i in range(genes)],
        )
        locations[f"s{index}"] = location
    # small computed chunks: a chunk directory of many rows, as a large atlas has
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 16_000):
        cv.create_composite(root / "comp.zarr", locations).close()
    return root / "comp.zarr"


def json_listing(url: str, prefix: str) -> None:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request("GET", f"/{prefix}/" if prefix else "/")
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
    finally:
        connection.close()


def names_of(store: Store, prefix: str) -> list[str]:
    async def collect() -> list[str]:
        return sorted({name async for name in store.list_dir(prefix)})

    return sync(collect())


def fsspec_names(fs: Any, url: str, prefix: str) -> list[str]:
    """The names fsspec scrapes from the HTML index at the directory's URL (ending in ``/``)."""
    base = f"{url}{prefix}/"
    links = fs.ls(base, detail=False)
    return sorted({link.removeprefix(base).strip("/") for link in links})


def timed(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=3)
    parser.add_argument("--rows", type=int, default=6000, help="cells per source")
    parser.add_argument("--genes", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        location = build(Path(directory), args.sources, args.rows, args.genes)
        store = cv.open_store(location)
        assert isinstance(store, cv.CompositeStore)
        with StoreServer.start(store) as server:
            url = server.url
            fsspec_fs = fsspec.filesystem("http")
            obstore_store = zarr.storage.ObjectStore(
                obstore.store.HTTPStore.from_url(url, client_options={"allow_http": True}),
                read_only=True,
            )
            before = store.chunk_stats
            for prefix in ("RNA/counts/c", "RNA"):
                expected = names_of(store, prefix)
                assert fsspec_names(fsspec_fs, url, prefix) == expected
                assert names_of(obstore_store, prefix) == expected
                contenders: dict[str, Callable[[], object]] = {
                    "json": lambda prefix=prefix: json_listing(url, prefix),
                    "html (fsspec)": lambda prefix=prefix: fsspec_names(fsspec_fs, url, prefix),
                    "propfind (obstore)": lambda prefix=prefix: names_of(obstore_store, prefix),
                    "in process": lambda prefix=prefix: names_of(store, prefix),
                }
                print(f"\nlisting {prefix}/ ({len(expected)} names), median of {args.repeat}")
                print(f"{'contender':<20} {'seconds':>10} {'requests':>9} {'ratio':>7}")
                baseline = None
                for name, action in contenders.items():
                    first = server.stats().requests
                    action()
                    requests = server.stats().requests - first
                    seconds = timed(action, args.repeat)
                    baseline = baseline or seconds
                    print(f"{name:<20} {seconds:>10.4f} {requests:>9} {seconds / baseline:>6.2f}x")
            print(f"\nthe whole hierarchy, members(max_depth=None), median of {args.repeat}")
            local_members = sorted(p for p, _ in zarr.open_group(store, mode="r").members(None))
            hierarchy: dict[str, Store] = {
                "in process": store,
                "propfind (obstore)": obstore_store,
            }
            baseline = None
            for name, target in hierarchy.items():
                group = zarr.open_group(target, mode="r")
                found = sorted(p for p, _ in group.members(max_depth=None))
                assert found == local_members, name
                first = server.stats().requests
                seconds = timed(
                    lambda group=group: list(group.members(max_depth=None)), args.repeat
                )
                requests = (server.stats().requests - first) // args.repeat
                baseline = baseline or seconds
                print(f"{name:<20} {seconds:>10.4f} {requests:>9} {seconds / baseline:>6.2f}x")
            assert store.chunk_stats == before, "a listing computed a chunk"
            print(f"\nchunks computed by all listings: 0 ({store.chunk_stats})")
        store.close()


if __name__ == "__main__":
    main()
