"""Benchmark: resize and promote by renaming chunks, against rewriting with zarr-python.

One generated array of sparse-looking ``uint16`` counts (``--size`` MiB of
cells, about 6 % non-zero, geometric values; chunks of 512 x 1024 cells,
1 MiB each, ``bytes`` + ``zstd``), on a local directory and on a real S3 API
server on loopback (moto's server mode, through obstore):

* **prepend one chunk row**: ``cytearc_vfs.arrays.resize(a, low=[512, 0])``
  against zarr-python writing a new array one chunk row taller and copying
  the values in at row 512 (row bands of 16 chunk rows);
* **promote**: ``cytearc_vfs.arrays.promote(a, 0)`` against zarr-python
  writing a new ``(1, rows, cols)`` array and copying the values in.

**Consolidating again** (``anndata``): an AnnData store written by anndata
(consolidated, as anndata writes it by default; ~100 nodes), with
``obsm/X_pca`` grown by 14 columns by ``resize``: once on the store as
written (its root's consolidated metadata removed before the marker and
consolidated again at the end, which reads every node's document) and once
on a copy whose root holds no consolidated metadata (nothing to do), on
fresh copies, alternating, the median of each; the ratio is the cost of
keeping the store consolidated. Locally and on the S3 server.

Each operation runs on its own fresh copy of the array. **Bytes written**
are the bytes the client sent: locally what zarr's ``LocalStore`` wrote
(renames are ``os.replace`` calls: counted, no bytes); on S3 the bodies of
PUT requests (a rename is a server-side copy: counted, no body). Deletes
are counted too. The issue's target: at least 100 times fewer bytes
written than the rewrite.

    uv run python benchmarks/bench_arrays.py [--size 256] [--no-s3] [--consolidation-only]
        [--json -]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import zarr
from zarr.storage import LocalStore, _local

from cytearc_vfs.arrays import key_moves, promote, resize
from cytearc_vfs.remote.locations import open_location

CREDENTIALS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}
CHUNKS = (512, 1024)
COLUMNS = 4096
BAND_CHUNK_ROWS = 16


class Tally:
    """Client-side writes, counted by wrapping what zarr and the movers call."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls: Counter[str] = Counter()

    def reset(self) -> None:
        self.bytes = 0
        self.calls.clear()

    def install(self) -> None:
        tally = self
        put, delete, replace = _local._put, _local._delete, key_moves.replace_file

        def counted_put(path: Path, value: Any, exclusive: bool = False) -> int:
            tally.bytes += len(value)
            tally.calls["write"] += 1
            return put(path, value, exclusive)

        def counted_delete(path: Path) -> None:
            tally.calls["delete"] += 1
            delete(path)

        def counted_replace(source: Path, target: Path) -> None:
            tally.calls["rename"] += 1
            replace(source, target)

        put_async, copy_async, delete_async = (
            obstore.put_async,
            obstore.copy_async,
            obstore.delete_async,
        )

        async def counted_put_async(store: Any, path: str, file: Any, **kwargs: Any) -> Any:
            tally.bytes += len(memoryview(file))
            tally.calls["write"] += 1
            return await put_async(store, path, file, **kwargs)

        async def counted_copy_async(store: Any, source: str, target: str, **kwargs: Any) -> Any:
            tally.calls["server-side copy"] += 1
            return await copy_async(store, source, target, **kwargs)

        async def counted_delete_async(store: Any, paths: Any) -> Any:
            tally.calls["delete"] += 1
            return await delete_async(store, paths)

        _local._put = counted_put
        _local._delete = counted_delete
        key_moves.replace_file = counted_replace
        obstore.put_async = counted_put_async
        obstore.copy_async = counted_copy_async
        obstore.delete_async = counted_delete_async


TALLY = Tally()


def generate(rows: int, seed: int = 7) -> np.ndarray:
    """Sparse-looking counts: ~6 % of cells non-zero, mostly 1-3, a long tail."""
    rng = np.random.default_rng(seed)
    values = np.zeros((rows, COLUMNS), dtype=np.uint16)
    for start in range(0, rows, 4096):
        band = values[start : start + 4096]
        hit = rng.random(band.shape) < 0.06
        band[hit] = np.minimum(rng.geometric(0.45, int(hit.sum())), 65535)
    return values


def write_source(store: Any, values: np.ndarray) -> zarr.Array[Any]:
    array = zarr.create_array(
        store, name="counts", shape=values.shape, chunks=CHUNKS, dtype="u2", fill_value=0
    )
    band = CHUNKS[0] * BAND_CHUNK_ROWS
    for start in range(0, values.shape[0], band):
        array[start : start + band] = values[start : start + band]
    return array


def rewrite(source: zarr.Array[Any], store: Any, shape: tuple[int, ...], at: Any) -> None:
    """zarr-python's way: a new array, the values copied in band by band."""
    chunks = CHUNKS if len(shape) == 2 else (1, *CHUNKS)
    target = zarr.create_array(
        store, name="rewritten", shape=shape, chunks=chunks, dtype="u2", fill_value=0
    )
    band = CHUNKS[0] * BAND_CHUNK_ROWS
    for start in range(0, source.shape[0], band):
        target[at(start, start + band)] = source[start : start + band]


def measure(label: str, run: Callable[[], Any]) -> dict[str, Any]:
    TALLY.reset()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    result = {
        "what": label,
        "seconds": round(seconds, 3),
        "bytesWritten": TALLY.bytes,
        "calls": dict(TALLY.calls),
    }
    print(f"  {label:<44} {seconds:8.2f} s {TALLY.bytes:>14,} bytes written  {dict(TALLY.calls)}")
    return result


def local_runs(values: np.ndarray, root: Path) -> list[dict[str, Any]]:
    source_dir = root / "source.zarr"
    write_source(LocalStore(source_dir), values)
    stored = sum(p.stat().st_size for p in source_dir.rglob("*") if p.is_file())
    print(f"local: {values.nbytes / 2**20:.0f} MiB of cells, {stored / 2**20:.1f} MiB stored")
    rows = values.shape[0]
    out: list[dict[str, Any]] = []

    def fresh(name: str) -> zarr.Array[Any]:
        shutil.copytree(source_dir, root / name)
        return zarr.open_array(LocalStore(root / name), path="counts", mode="r+")

    array = fresh("resized.zarr")
    out.append(
        measure("local prepend: resize(low=[512, 0])", lambda: resize(array, low=[CHUNKS[0], 0]))
    )
    assert np.array_equal(array[CHUNKS[0] : CHUNKS[0] + 1024], values[:1024])
    source = zarr.open_array(LocalStore(source_dir), path="counts", mode="r")
    out.append(
        measure(
            "local prepend: zarr-python rewrite",
            lambda: rewrite(
                source,
                LocalStore(root / "rw1.zarr"),
                (rows + CHUNKS[0], COLUMNS),
                lambda a, b: slice(a + CHUNKS[0], b + CHUNKS[0]),
            ),
        )
    )
    array = fresh("promoted.zarr")
    out.append(measure("local promote: promote(a, 0)", lambda: promote(array, 0)))
    assert np.array_equal(array[0, :1024], values[:1024])
    out.append(
        measure(
            "local promote: zarr-python rewrite",
            lambda: rewrite(
                source,
                LocalStore(root / "rw2.zarr"),
                (1, rows, COLUMNS),
                lambda a, b: (0, slice(a, b)),
            ),
        )
    )
    return out


def _server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def s3_runs(values: np.ndarray) -> list[dict[str, Any]]:
    server, endpoint = _server()
    try:
        options = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}

        def bucket() -> str:
            name = f"bench-{uuid.uuid4().hex[:10]}"
            request = urllib.request.Request(f"{endpoint}/{name}", method="PUT")
            with urllib.request.urlopen(request):
                pass
            return name

        def store(name: str) -> Any:
            return open_location(f"s3://{name}/a.zarr", read_only=False, storage_options=options)

        rows = values.shape[0]
        out: list[dict[str, Any]] = []
        started = time.perf_counter()
        resized_bucket, promoted_bucket = bucket(), bucket()
        resized = write_source(store(resized_bucket), values)
        promoted = write_source(store(promoted_bucket), values)
        print(f"s3: two copies written in {time.perf_counter() - started:.1f} s")
        out.append(
            measure("s3 prepend: resize(low=[512, 0])", lambda: resize(resized, low=[CHUNKS[0], 0]))
        )
        source = zarr.open_array(store(promoted_bucket), path="counts", mode="r")
        out.append(
            measure(
                "s3 prepend: zarr-python rewrite",
                lambda: rewrite(
                    source,
                    store(bucket()),
                    (rows + CHUNKS[0], COLUMNS),
                    lambda a, b: slice(a + CHUNKS[0], b + CHUNKS[0]),
                ),
            )
        )
        out.append(
            measure(
                "s3 promote: zarr-python rewrite",
                lambda: rewrite(
                    source, store(bucket()), (1, rows, COLUMNS), lambda a, b: (0, slice(a, b))
                ),
            )
        )
        out.append(measure("s3 promote: promote(a, 0)", lambda: promote(promoted, 0)))
        assert np.array_equal(resized[CHUNKS[0] : CHUNKS[0] + 512], values[:512])
        assert np.array_equal(promoted[0, :512], values[:512])
        return out
    finally:
        server.stop()


#: The array the consolidation figure resizes, and how (14 more columns).
ANNDATA_ARRAY, ANNDATA_HIGH = "obsm/X_pca", [0, 14]
#: Runs of each kind per place (S3: fewer, each copy is ~100 uploads).
CONSOLIDATION_REPEATS = {"local": 5, "s3": 3}


def write_anndata(where: Path) -> int:
    """An AnnData store as anndata writes it (consolidated); returns its node count."""
    import warnings

    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    n_obs, n_vars = 2000, 500
    obs = pd.DataFrame(
        {
            **{f"score_{i}": rng.random(n_obs) for i in range(12)},
            **{f"count_{i}": rng.integers(0, 1000, n_obs) for i in range(8)},
            **{
                f"label_{i}": pd.Categorical(rng.choice(["a", "b", "c", "d"], n_obs))
                for i in range(8)
            },
        },
        index=[f"cell{i}" for i in range(n_obs)],
    )
    var = pd.DataFrame(
        {"mean": rng.random(n_vars), "kind": pd.Categorical(rng.choice(["x", "y"], n_vars))},
        index=[f"gene{i}" for i in range(n_vars)],
    )
    x = sp.random(n_obs, n_vars, density=0.03, format="csr", dtype=np.float32, random_state=4)
    data = ad.AnnData(
        X=x,
        obs=obs,
        var=var,
        obsm={"X_pca": rng.random((n_obs, 50)), "X_umap": rng.random((n_obs, 2))},
        layers={"counts": x.copy()},
        uns={"params": {"n_pcs": 50, "method": "pca"}, "colors": np.array(["red", "blue"])},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata 0.13 deprecates the format setting
        ad.settings.zarr_write_format = 3
        data.write_zarr(where)
    return sum(1 for _ in where.rglob("zarr.json"))


def unconsolidated_copy(source: Path, target: Path) -> None:
    """``source`` copied, its root's consolidated metadata removed."""
    shutil.copytree(source, target)
    document = json.loads((target / "zarr.json").read_text())
    document.pop("consolidated_metadata", None)
    (target / "zarr.json").write_text(json.dumps(document))


def _upload(template: Path, store: Any) -> None:
    """Every file of ``template`` put into ``store``, concurrently."""
    import asyncio

    from zarr.core.buffer.cpu import Buffer
    from zarr.core.sync import sync

    files = [f for f in template.rglob("*") if f.is_file()]

    async def put_all() -> None:
        await asyncio.gather(
            *(
                store.set(f.relative_to(template).as_posix(), Buffer.from_bytes(f.read_bytes()))
                for f in files
            )
        )

    sync(put_all())


class _Copies:
    """Fresh copies of a local store template, locally or in new buckets of an S3 server."""

    def __init__(self, place: str, root: Path) -> None:
        self.place, self.root = place, root
        self.server: Any = None
        if place == "s3":
            self.server, self.endpoint = _server()
            self.options = {**CREDENTIALS, "endpoint": self.endpoint}
            self.options["client_options"] = {"allow_http": True}

    def fresh(self, template: Path, name: str) -> Any:
        if self.place == "local":
            shutil.copytree(template, self.root / name)
            return LocalStore(self.root / name)
        bucket = f"bench-{uuid.uuid4().hex[:10]}"
        with urllib.request.urlopen(
            urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        ):
            pass
        store = open_location(
            f"s3://{bucket}/a.zarr", read_only=False, storage_options=self.options
        )
        _upload(template, store)
        return store

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def consolidation_runs(root: Path, places: tuple[str, ...]) -> list[dict[str, Any]]:
    """Resize on a consolidated AnnData store against the same store unconsolidated."""
    import statistics

    from cytearc_vfs.arrays.resizing import resize_array

    started = time.perf_counter()
    source, plain = root / "anndata.zarr", root / "anndata-plain.zarr"
    nodes = write_anndata(source)
    unconsolidated_copy(source, plain)
    print(f"  an AnnData store of {nodes} nodes written in {time.perf_counter() - started:.1f} s")
    out: list[dict[str, Any]] = []
    for place in places:
        copies = _Copies(place, root)
        timings: dict[bool, list[float]] = {True: [], False: []}
        writes: dict[bool, int] = {}
        try:
            for repeat in range(CONSOLIDATION_REPEATS[place]):
                # alternating which goes first, so neither always runs on a warmer machine
                for consolidated in (True, False) if repeat % 2 == 0 else (False, True):
                    store = copies.fresh(
                        source if consolidated else plain, f"{place}-{repeat}-{consolidated}"
                    )
                    array = zarr.open_array(store, path=ANNDATA_ARRAY, mode="r+")
                    TALLY.reset()
                    started = time.perf_counter()
                    change = resize_array(array, high=ANNDATA_HIGH)
                    timings[consolidated].append(time.perf_counter() - started)
                    writes[consolidated] = TALLY.calls["write"]
                    assert change.reconsolidated == (("/",) if consolidated else ())
        finally:
            copies.close()
        with_it, without = (statistics.median(timings[c]) for c in (True, False))
        entry = {
            "what": f"{place} anndata: resize {ANNDATA_ARRAY} high={ANNDATA_HIGH}",
            "nodes": nodes,
            "runs": CONSOLIDATION_REPEATS[place],
            "secondsConsolidatedAgain": round(with_it, 4),
            "secondsUnconsolidated": round(without, 4),
            "timeRatio": round(with_it / max(1e-9, without), 2),
            "writesConsolidatedAgain": writes[True],
            "writesUnconsolidated": writes[False],
        }
        print(
            f"  {place} resize {ANNDATA_ARRAY} high={ANNDATA_HIGH}, median of "
            f"{CONSOLIDATION_REPEATS[place]}: {with_it:.3f} s consolidated again, {without:.3f} s "
            f"without: {entry['timeRatio']}x; {writes[True]} writes against {writes[False]}"
        )
        out.append(entry)
    return out


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {r["what"]: r for r in results}
    out = []
    for place in ("local", "s3"):
        for operation, ours in (("prepend", "resize(low=[512, 0])"), ("promote", "promote(a, 0)")):
            mine = by_name.get(f"{place} {operation}: {ours}")
            theirs = by_name.get(f"{place} {operation}: zarr-python rewrite")
            if mine is None or theirs is None:
                continue
            entry = {
                "what": f"{place} {operation}",
                "bytesRatio": round(theirs["bytesWritten"] / max(1, mine["bytesWritten"]), 1),
                "timeRatio": round(theirs["seconds"] / max(1e-9, mine["seconds"]), 1),
            }
            print(
                f"  {entry['what']:<16} rewrite / rename: {entry['bytesRatio']:>10,}x bytes written, "
                f"{entry['timeRatio']:>8,}x time"
            )
            out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=256, help="MiB of cells (default 256)")
    parser.add_argument("--no-s3", action="store_true", help="local runs only")
    parser.add_argument("--json", metavar="FILE", help="also write the results ('-': stdout)")
    parser.add_argument(
        "--consolidation-only",
        action="store_true",
        help="only the cost of consolidating an AnnData store again",
    )
    args = parser.parse_args(argv)
    places = ("local",) if args.no_s3 else ("local", "s3")
    TALLY.install()
    if args.consolidation_only:
        print("consolidating again:")
        with tempfile.TemporaryDirectory(prefix="cytearc-bench-arrays-") as scratch:
            results = consolidation_runs(Path(scratch), places)
        if args.json:
            _write_json({"results": results}, args.json)
        return 0
    rows = max(CHUNKS[0], (args.size << 20) // (2 * COLUMNS) // CHUNKS[0] * CHUNKS[0])
    values = generate(rows)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-arrays-") as scratch:
        results += local_runs(values, Path(scratch))
    if not args.no_s3:
        results += s3_runs(values)
    print("consolidating again:")
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-arrays-") as scratch:
        results += consolidation_runs(Path(scratch), places)
    print("ratios (target: >= 100x fewer bytes written than the rewrite):")
    summary = {
        "cells": list(values.shape),
        "chunks": list(CHUNKS),
        "results": results,
        "ratios": ratios(results),
    }
    if args.json:
        _write_json(summary, args.json)
    return 0


def _write_json(summary: dict[str, Any], where: str) -> None:
    text = json.dumps(summary, indent=2)
    if where == "-":
        print(text)
    else:
        Path(where).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
