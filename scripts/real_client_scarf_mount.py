"""Real-client check: scarf's DataStore on a mount versus a plain copy of the source.

Not part of CI; the same throwaway environment as ``real_client_scarf.py``
(scarf's Zarr v3 line and this package)::

    /tmp/scvenv/bin/python scripts/real_client_scarf_mount.py [--workdir DIR] [--keep]

What it does:

1. writes ``realdata.wu2020`` as an ordinary source store, hashes every file
   of it, and copies it byte for byte to a plain store;
2. mounts the source into a target (``cv.mount_datastore``) and opens the
   ``MountStore`` with ``cv.open_store(target, mode="r+")``;
3. runs scarf's DataStore on the mount and on the plain copy:
   ``mark_hvgs`` -> ``run_normalization(feat_key="hvgs")`` -> ``run_pca``,
   and compares the results (the comparisons of ``real_client_scarf.py``);
4. checks that the source is byte for byte untouched, that no write was
   refused (``PermissionError``, with the key), and that every key scarf
   wrote through the mount is a file of the target;
5. opens the target again and runs scarf a second time: it must find its
   artifacts (the same normalized and PCA artifact ids, nothing recomputed).

scarf resolves a root ``matrixSource`` record itself and reads the counts
from the record's location, checking its own identity fields (``shape``,
``dtype``, ``datasetFingerprint`` or id fingerprints). This package's record
holds the spec's fields (``datasetFingerprint``, ``countsFingerprint``,
``requiresTranspose``; seeds/000), which scarf rejects ("no longer matches
the mounted count matrix identity"). The script first records that refusal,
then replaces scarf's ``resolve_matrix_source`` for this process by one that
opens the record's location read-only (the ``MountStore`` open has already
verified the source against the record) and runs the pipeline.

Exit status: 0 when everything matches, 1 on a mismatch, 2 when scarf could
not use the mount as it uses an ordinary store, 3 when the pipeline failed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import zarr
from real_client_scarf import Report, compare, finish_run, run_pipeline, summary_status
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs import realdata

CREATED = (
    "source.zarr",
    "plain.zarr",
    "target.zarr",
    "hvg-source.zarr",
    "hvg-plain.zarr",
    "hvg-target.zarr",
)


class MountWrites:
    """Every key scarf set or deleted through a MountStore, and every refusal."""

    def __init__(self) -> None:
        self.written: collections.Counter[str] = collections.Counter()
        self.deleted: list[str] = []
        self.refused: list[tuple[str, str, str]] = []  # (operation, key, message)

    def install(self) -> None:
        log = self
        mset, mdelete = cv.MountStore.set, cv.MountStore.delete

        async def set_(self: Any, key: str, value: Any) -> None:
            log.written[key] += 1
            try:
                await mset(self, key, value)
            except PermissionError as exc:
                log.refused.append(("set", key, str(exc)))
                raise

        async def delete(self: Any, key: str) -> None:
            log.deleted.append(key)
            try:
                await mdelete(self, key)
            except PermissionError as exc:
                log.refused.append(("delete", key, str(exc)))
                raise

        cv.MountStore.set = set_  # type: ignore[method-assign]
        cv.MountStore.delete = delete  # type: ignore[method-assign]


WRITES = MountWrites()


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root``, by relative path."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def adapt_scarf_matrix_source() -> None:
    """Let scarf open the spec's ``matrixSource`` record (see the module docstring)."""
    import scarf.datastore.base_datastore as base

    def resolve(root: zarr.Group, *, storage_options: Any = None) -> Any:
        record = root.attrs.get("matrixSource")
        if record is None:
            return None
        return zarr.open_group(Path(record["location"]), mode="r"), record["workspace"]

    base.resolve_matrix_source = resolve  # type: ignore[assignment]


def hvg_source_case(workdir: Path, args: argparse.Namespace, report: Report) -> None:
    """A source where scarf already selected HVGs: the mount must reuse, not rewrite, them.

    (A source scarf has normalized holds ``RNA/state``, which the spec retires:
    ``mount_datastore`` refuses it, so the source stops after ``mark_hvgs``.)
    """
    import scarf

    source, plain, target = (workdir / n for n in CREATED[3:])
    print("\nA source holding scarf's HVG selection (mark_hvgs run on it first):")
    cv.write_counts(source, realdata.wu2020())
    published = scarf.DataStore(
        str(source),
        nthreads=args.nthreads,
        min_features_per_cell=args.min_features_per_cell,
        min_cells_per_feature=args.min_cells_per_feature,
        zarr_mode="r+",
    )
    published.mark_hvgs(
        min_cells=args.min_cells, top_n=args.top_n, show_plot=False, hvg_key_name="hvgs"
    )
    del published
    shutil.copytree(source, plain)
    before = tree_digest(source)
    cv.mount_datastore(source, target)
    WRITES.written.clear()
    WRITES.refused.clear()
    mount_r = run_pipeline("hvg-mount", cv.open_store(target, mode="r+"), args)
    plain_r = run_pipeline("hvg-plain", LocalStore(plain), args)
    for r in (mount_r, plain_r):
        print(f"  {r.label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in r.seconds.items()))
    compare(mount_r, plain_r, report, args, "mount vs plain copy")
    report.check(tree_digest(source) == before, "source byte for byte untouched")
    report.issue(
        not WRITES.refused,
        "no write or delete refused (PermissionError) by the MountStore",
        "; ".join(f"{op} {key}: {msg}" for op, key, msg in WRITES.refused),
    )
    rewritten = [k for k in WRITES.written if k.startswith("RNA/artifacts/feature_selection/")]
    report.check(
        not rewritten,
        "no feature_selection artifact written through the mount (the source's shows through it)",
        f"wrote {rewritten[:3]}" if rewritten else "",
    )
    prefixes = collections.Counter("/".join(k.split("/")[:3]) for k in WRITES.written)
    report.info("keys scarf wrote (by prefix)", json.dumps(dict(sorted(prefixes.items()))))
    missing = [k for k in WRITES.written if not (target / k).is_file()]
    report.check(
        not missing,
        "every key scarf wrote through the mount is a file of the target",
        f"{len(WRITES.written)} keys" + (f"; missing {missing[:5]}" if missing else ""),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="directory for the stores (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workdir")
    parser.add_argument("--nthreads", type=int, default=2)
    parser.add_argument("--min-features-per-cell", type=int, default=10)
    parser.add_argument("--min-cells-per-feature", type=int, default=5)
    parser.add_argument("--min-cells", type=int, default=5)
    parser.add_argument("--top-n", type=int, default=500)
    parser.add_argument("--dims", type=int, default=20)
    parser.add_argument("--pca-tol", type=float, default=1e-4)
    args = parser.parse_args(argv)

    import importlib.metadata as md

    import scarf

    scarf.configure_output(level="WARNING", progress=False)
    warnings.simplefilter("default")
    started = time.perf_counter()
    names = ("scarf", "cytearc-vfs", "zarr", "numpy")
    print(f"python {sys.version.split()[0]}; " + ", ".join(f"{n} {md.version(n)}" for n in names))
    temporary = args.workdir is None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="real_client_scarf_mount-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    present = [n for n in CREATED if (workdir / n).exists()]
    if present:
        raise SystemExit(f"{workdir} already holds {present}; remove them first")
    source, plain, target = (workdir / n for n in CREATED[:3])
    report = Report()
    WRITES.install()
    timings: dict[str, float] = {}
    try:
        t = time.perf_counter()
        cv.write_counts(source, realdata.wu2020())
        shutil.copytree(source, plain)
        before = tree_digest(source)
        cv.mount_datastore(source, target)
        timings["setup"] = time.perf_counter() - t
        print(f"workdir: {workdir}; source {len(before)} files")

        print("\nscarf on the mount as it stands:")
        try:
            scarf.DataStore(cv.open_store(target, mode="r+"), zarr_mode="r+", nthreads=1)
            report.issue(True, "scarf.DataStore opens the mount's matrixSource record")
        except Exception as exc:
            report.issue(
                False,
                "scarf.DataStore opens the mount's matrixSource record",
                f"{type(exc).__name__}: {exc}",
            )
        adapt_scarf_matrix_source()

        print("\nscarf pipeline (mount, then the plain copy):")
        try:
            mount_r = run_pipeline("mount", cv.open_store(target, mode="r+"), args)
            plain_r = run_pipeline("plain", LocalStore(plain), args)
        except Exception:
            traceback.print_exc()
            print(f"\nPipeline failed; refused writes: {WRITES.refused}")
            return 3
        for r in (mount_r, plain_r):
            print(f"  {r.label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in r.seconds.items()))
        compare(mount_r, plain_r, report, args, "mount vs plain copy")
        report.check(
            mount_r.load_artifact_error is None,
            "DataStore.load_artifact on the mount",
            mount_r.load_artifact_error or "",
        )

        print("\nSource and target:")
        report.check(tree_digest(source) == before, "source byte for byte untouched")
        report.issue(
            not WRITES.refused,
            "no write or delete refused (PermissionError) by the MountStore",
            "; ".join(f"{op} {key}: {msg}" for op, key, msg in WRITES.refused),
        )
        missing = [k for k in WRITES.written if not (target / k).is_file()]
        report.check(
            not missing,
            "every key scarf wrote through the mount is a file of the target",
            f"{len(WRITES.written)} keys" + (f"; missing {missing[:5]}" if missing else ""),
        )
        prefixes = collections.Counter("/".join(k.split("/")[:3]) for k in WRITES.written)
        report.info("keys scarf wrote (by prefix)", json.dumps(dict(sorted(prefixes.items()))))

        print("\nSecond run after reopening the mount:")
        rerun = run_pipeline("mount-again", cv.open_store(target, mode="r+"), args)
        print("  mount-again: " + ", ".join(f"{k} {v:.2f}s" for k, v in rerun.seconds.items()))
        report.check(
            rerun.artifact_ids == mount_r.artifact_ids,
            "scarf found its artifacts again (same normalized, reduction, scaling ids)",
            json.dumps(rerun.artifact_ids) if rerun.artifact_ids != mount_r.artifact_ids else "",
        )
        report.check(
            bool((rerun.pca == mount_r.pca).all()),
            "PCA after reopening identical to the first run",
        )
        report.check(tree_digest(source) == before, "source still untouched after the second run")
        listed = cv.list_artifacts(cv.open_store(target), "RNA/artifacts")
        on_disk = [p for p in (target / "RNA" / "artifacts").glob("*/*") if p.is_dir()]
        report.info(
            "cv.list_artifacts on the mount (scarf's records lack the spec's cytearc_version)",
            f"{len(listed)} listed of {len(on_disk)} scarf artifact groups in the target",
        )
        hvg_source_case(workdir, args, report)
    finally:
        finish_run(timings, started, workdir, temporary=temporary, keep=args.keep)
    return summary_status(report)


if __name__ == "__main__":
    sys.exit(main())
