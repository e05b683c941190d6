"""Benchmark: ``write_counts`` from an AnnData Zarr store on S3, each chunk fetched once.

``write_counts`` reads an AnnData matrix several times (the partial-copy
check, the value scan before the destination exists, the write pass, each
further ``countsT`` feature group), and bands sharing a chunk each read it.
Since this benchmark's commit the first read of a chunk object fetches it
whole and keeps it in a temporary directory for the rest of the write
(``adapters/.../anndata/fetched_once.py``). Contenders, on moto's S3 server
on loopback behind the tests' counting proxy with ``--latency`` (default
20 ms) added to every request:

* ``fetched-once``  ``write_counts(local, "s3://.../x.zarr")``: the code now;
* ``refetched``     the same with the keeping switched off
                    (``MatrixElement.fetch_once`` answering ``None``): the code before;
* ``download``      the obvious alternative: copy every object of the store to
                    a local directory first (one listing, then 32 GETs at once),
                    then ``write_counts`` from the copy.

All three must give the same dataset fingerprint. Printed per contender: wall
time, requests, GETs of ``X``'s chunk objects (and how many were fetched more
than once), and the ratios against ``fetched-once``.

    uv run --group bench python benchmarks/bench_anndata_remote_input.py [--cells 20000]
        [--genes 2000] [--latency 0.02] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import cytearc_vfs as cv

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from bench_composite import realistic
from bench_remote import CREDENTIALS, _bucket, _start_server
from loopback_proxy import ProxyProcess, Seen

_DOCUMENTS = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def anndata_store(path: Path, cells: int, genes: int) -> Path:
    """A Zarr v3 AnnData store of realistic CSR counts, ``X`` in chunks of 200,000
    entries (several chunks, several bands of the write)."""
    import anndata as ad
    import scipy.sparse as sp
    import zarr

    counts = sp.csr_matrix(realistic(cells, genes, 0.05, np.random.default_rng(3)))
    counts.data = counts.data.astype(np.float32)
    data = ad.AnnData(X=counts)
    data.obs_names = [f"c{i}" for i in range(cells)]
    data.var_names = [f"g{i}" for i in range(genes)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.settings.zarr_write_format = 3
        data.write_zarr(path)
        root = zarr.open_group(path, mode="a", use_consolidated=False)
        del root["X"]
        ad.io.write_elem(root, "X", counts, dataset_kwargs={"chunks": (200_000,)})
        zarr.consolidate_metadata(path)
    return path


def upload(bucket: str, options: dict[str, Any], local: Path) -> str:
    """Every file of ``local`` put under its name in ``bucket``; the store's URL."""
    import obstore
    from obstore.store import from_url

    client = from_url(f"s3://{bucket}", **options)
    for file in local.rglob("*"):
        if file.is_file():
            obstore.put(
                client, f"{local.name}/{file.relative_to(local).as_posix()}", file.read_bytes()
            )
    return f"s3://{bucket}/{local.name}"


def download(url: str, options: dict[str, Any], into: Path) -> Path:
    """Every object of the store at ``url`` copied into ``into`` (one listing, then 32
    GETs at once): the user's obvious route to a local copy."""
    import obstore
    from obstore.store import from_url

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client = from_url(f"s3://{bucket}", **options)
    keys = [meta["path"] for batch in obstore.list(client, prefix=prefix + "/") for meta in batch]
    gate = asyncio.Semaphore(32)

    async def one(key: str) -> None:
        async with gate:
            data = await (await obstore.get_async(client, key)).bytes_async()
        target = into / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes(data))

    async def every() -> None:
        await asyncio.gather(*(one(key) for key in keys))

    asyncio.run(every())
    return into / prefix


def chunk_gets(seen: list[Seen], name: str) -> Counter[str]:
    """GETs of each chunk object of ``X`` (documents and listings left out)."""
    marker = f"/{name}/X/"
    return Counter(
        s.path.split(marker, 1)[1]
        for s in seen
        if s.method == "GET"
        and marker in s.path
        and "?" not in s.path
        and not s.path.endswith(_DOCUMENTS)
    )


def measure(
    proxy: ProxyProcess, latency: float, run: Callable[[], str], name: str, repeat: int
) -> dict[str, Any]:
    """Median wall time of ``run`` (it returns a fingerprint), its requests and X's GETs."""
    times, fingerprints = [], set()
    for _ in range(repeat):
        proxy.delay = latency
        proxy.take()
        started = time.perf_counter()
        fingerprints.add(run())
        times.append(time.perf_counter() - started)
        seen = proxy.take()
        proxy.delay = 0.0
    gets = chunk_gets(seen, name)
    return {
        "s": round(statistics.median(times), 3),
        "requests": len(seen),
        "x_chunk_gets": sum(gets.values()),
        "x_chunks_fetched_twice_or_more": sum(1 for n in gets.values() if n > 1),
        "fingerprints": sorted(fingerprints),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--genes", type=int, default=2_000)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added per request")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="write results as JSON ('-' for stdout)")
    args = parser.parse_args(argv)
    os.environ.setdefault("CYTEARC_SOURCE_TIMEOUT", "120")
    from cytearc_vfs_adapters.anndata.matrices import MatrixElement

    keep = MatrixElement.fetch_once
    server, endpoint = _start_server()
    proxy = ProxyProcess(endpoint)
    results: dict[str, Any] = {
        "shape": [args.cells, args.genes],
        "latency_s": args.latency,
        "repeat": args.repeat,
    }
    try:
        direct = {**CREDENTIALS, "endpoint": endpoint, "client_options": {"allow_http": True}}
        proxied = {**direct, "endpoint": proxy.endpoint}
        with tempfile.TemporaryDirectory(prefix="cytearc-bench-remote-input-") as scratch:
            root = Path(scratch)
            local = anndata_store(root / "x.zarr", args.cells, args.genes)
            url = upload(_bucket(endpoint), direct, local)
            runs = iter(range(10**6))

            def written(source: Any, **options: Any) -> str:
                out = root / f"out{next(runs)}.zarr"
                info = cv.write_counts(out, source, **options)
                return str(info.dataset_fingerprint)

            def refetched() -> str:
                MatrixElement.fetch_once = lambda self: None  # type: ignore[method-assign,assignment,return-value]
                try:
                    return written(url, source_storage_options=proxied)
                finally:
                    MatrixElement.fetch_once = keep  # type: ignore[method-assign]

            def downloaded() -> str:
                copy = download(url, proxied, root / f"copy{next(runs)}")
                return written(copy)

            contenders: dict[str, Callable[[], str]] = {
                "fetched-once": lambda: written(url, source_storage_options=proxied),
                "refetched": refetched,
                "download": downloaded,
            }
            for label, run in contenders.items():
                results[label] = measure(proxy, args.latency, run, local.name, args.repeat)
                print(label, json.dumps(results[label]), file=sys.stderr, flush=True)
    finally:
        proxy.close()
        server.terminate()
        server.wait()
    prints = {
        tuple(results[label]["fingerprints"]) for label in ("fetched-once", "refetched", "download")
    }
    assert len(prints) == 1, f"the contenders wrote different stores: {prints}"
    now = results["fetched-once"]
    results["ratios"] = {
        label: {
            "time": round(results[label]["s"] / max(now["s"], 1e-9), 2),
            "requests": round(results[label]["requests"] / max(now["requests"], 1), 2),
            "x_chunk_gets": round(results[label]["x_chunk_gets"] / max(now["x_chunk_gets"], 1), 2),
        }
        for label in ("refetched", "download")
    }
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
