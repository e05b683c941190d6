"""Benchmark: mounts against reading one store directly.

In one run, on real files:

* artifact read: a 200,000 x 50 float32 artifact array read through the mount
  (the source holds it) vs read directly from the source store;
* listing: an artifact kind holding ``--artifacts`` artifacts (default
  10,000), split evenly between source and target, listed through the mount
  (``list_dir`` of the kind, and ``cv.list_artifacts``) vs the same number in
  one store;
* repack: ``cv.repack`` of the mount (source: a generated 50,000 x 5,000
  store) vs a plain key-by-key copy of the same keys with zarr's store API.

    uv run python benchmarks/bench_mount.py [--artifacts 10000] [--json -]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from timing import median_time
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import cytearc_vfs as cv

sys.path.insert(0, str(Path(__file__).parent))
from bench_composite import realistic

PCA = {"operation": "bench.pca", "parameters": {}, "inputs": {}}


def fake_artifacts(root: Path, group: str, count: int) -> None:
    """``count`` complete artifact groups (attribute records only), written as files."""
    base = root / group
    base.mkdir(parents=True, exist_ok=True)
    for path in (root / group.split("/")[0], root / "/".join(group.split("/")[:2]), base):
        if not (path / "zarr.json").exists():
            (path / "zarr.json").write_text(
                json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
            )
    for _ in range(count):
        artifact_id = secrets.token_hex(32)
        attributes = {
            "artifact_id": artifact_id,
            "kind": group.rsplit("/", 1)[-1],
            "provenance": {
                "operation": "bench.noop",
                "parameters": {"n": artifact_id[:6]},
                "inputs": {},
            },
            "execution_options": {},
            "created_at_ns": time.time_ns(),
            "cytearc_version": "0.1.0",
            "complete": True,
        }
        (base / artifact_id).mkdir()
        (base / artifact_id / "zarr.json").write_text(
            json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes})
        )


def list_kind(store: Any, directory: str) -> int:
    async def collect() -> int:
        return len([name async for name in store.list_dir(directory)])

    return sync(collect())


def plain_copy(mount: Any, destination: Path) -> int:
    """The obvious alternative: every key of the mount's namespace plus the source's
    count arrays, copied one after another through the store API."""
    target = LocalStore(destination)

    async def copy() -> int:
        count = 0
        for store, wanted in ((mount, lambda key: True), (mount.source, _is_count_key)):
            async for key in store.list():
                if not wanted(key):
                    continue
                value = await store.get(key, prototype=default_buffer_prototype())
                if value is not None:
                    await target.set(key, value)
                    count += 1
        return count

    return sync(copy())


def _is_count_key(key: str) -> bool:
    return any(key.startswith(f"RNA/{name}/") for name in ("counts", "countsT", "countSummaries"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifacts", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cytearc-bench-mount-") as scratch:
        root = Path(scratch)
        rng = np.random.default_rng(0)
        matrix = realistic(50_000, 5_000, 0.05, rng)
        cv.write_counts(root / "src.zarr", matrix)
        source = cv.open_store(root / "src.zarr", mode="r+")
        values = rng.random((200_000, 50), dtype=np.float32)
        with cv.publish_artifact(source, "RNA/artifacts", "embedding", provenance=PCA) as art:
            art.write_array("data", values)
        mount = cv.mount_datastore(root / "src.zarr", root / "tgt.zarr")
        path = f"RNA/artifacts/embedding/{art.artifact_id}/data"
        direct = zarr.open_array(cv.open_store(root / "src.zarr"), path=path, mode="r")
        through = zarr.open_array(mount, path=path, mode="r")
        direct[:]  # warm the page cache for both
        t_direct, a = median_time(lambda: direct[:], args.repeat)
        t_mount, b = median_time(lambda: through[:], args.repeat)
        assert np.array_equal(a, b)
        results["artifact read 200,000 x 50 float32"] = {
            "direct_s": round(t_direct, 4),
            "mount_s": round(t_mount, 4),
            "mount_over_direct": round(t_mount / t_direct, 3),
        }

        half = args.artifacts // 2
        fake_artifacts(root / "src.zarr", "RNA/artifacts/hvg", half)
        fake_artifacts(root / "tgt.zarr", "RNA/artifacts/hvg", args.artifacts - half)
        fake_artifacts(root / "one.zarr", "RNA/artifacts/hvg", args.artifacts)
        (root / "one.zarr" / "zarr.json").write_text(
            json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
        )
        single = LocalStore(root / "one.zarr", read_only=True)
        t_one, n_one = median_time(lambda: list_kind(single, "RNA/artifacts/hvg"), args.repeat)
        t_union, n_union = median_time(lambda: list_kind(mount, "RNA/artifacts/hvg"), args.repeat)
        assert n_one == n_union == args.artifacts + 1, (n_one, n_union)  # + the kind document
        t_one_records, r1 = median_time(
            lambda: cv.list_artifacts(single, "RNA/artifacts", "hvg"), 1
        )
        t_union_records, r2 = median_time(
            lambda: cv.list_artifacts(mount, "RNA/artifacts", "hvg"), 1
        )
        assert len(r1) == len(r2) == args.artifacts
        results[f"listing a kind of {args.artifacts} artifacts"] = {
            "one_store_list_dir_s": round(t_one, 4),
            "mount_list_dir_s": round(t_union, 4),
            "list_dir_mount_over_one": round(t_union / t_one, 3),
            "one_store_list_artifacts_s": round(t_one_records, 3),
            "mount_list_artifacts_s": round(t_union_records, 3),
            "list_artifacts_mount_over_one": round(t_union_records / t_one_records, 3),
        }

        t_repack, _ = median_time(
            lambda: cv.repack(root / "tgt.zarr", root / f"repacked-{time.perf_counter_ns()}.zarr"),
            1,
        )
        t_copy, n_keys = median_time(
            lambda: plain_copy(mount, root / f"copied-{time.perf_counter_ns()}"), 1
        )
        size = sum(p.stat().st_size for p in (root / "src.zarr").rglob("*") if p.is_file())
        results["repack of the mount"] = {
            "repack_s": round(t_repack, 3),
            "plain_key_copy_s": round(t_copy, 3),
            "keys_copied_plain": n_keys,
            "source_bytes": size,
            "repack_mb_per_s": round(size / t_repack / 1e6, 1),
            "repack_over_plain_copy": round(t_repack / t_copy, 3),
            "note": "both copy the same keys (the mount's namespace and the source's counts); repack also verifies the output's identity",
        }
    text = json.dumps(results, indent=2)
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).write_text(text)
    else:
        for name, figures in results.items():
            print(name)
            for key, value in figures.items():
                print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
