"""Real-client check: scarf's DataStore on a composite versus the materialized copy.

Not part of CI. It needs an environment holding both scarf (the Zarr v3 line,
NygenAnalytics/scarf master) and this package, for example a throwaway venv::

    uv pip install --python /tmp/scvenv/bin/python -e /work/main
    /tmp/scvenv/bin/python scripts/real_client_scarf.py [--workdir DIR] [--keep]

What it does:

1. loads two real data sets (``realdata.wu2020`` and
   ``realdata.celltypist_sample``) and writes each as a source store;
2. creates a composite of both (``features="union"``);
3. writes the materialized equivalent: an ordinary store holding the
   composite's counts (read with its ``VirtualArrayReader``) with the same
   cells, feature ids and feature names, in the same order;
4. opens both with ``scarf.DataStore``, passing store objects (the
   ``CompositeStore`` from ``cv.open_store(..., mode="r+")`` and a
   ``zarr.storage.LocalStore``), and runs the same pipeline on each:
   ``mark_hvgs`` -> ``run_normalization(feat_key="hvgs")`` -> ``run_pca``;
5. compares the results (cell and feature statistics, HVG set, normalized
   data, PCA up to the sign of each component), checks that scarf accepted
   and read ``RNA/countsT`` on the composite, that it never tried to write a
   protected key, and that ``DataStore.load_artifact`` works.

Exit status: 0 when everything matches, 1 on a result mismatch, 2 when scarf
or zarr could not use the composite the way it uses an ordinary store (the
results may still match), 3 when the pipeline itself failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs import realdata

ASSAY = "RNA"
COUNTS = f"{ASSAY}/counts"
COUNTS_T = f"{ASSAY}/countsT"
CREATED = ("wu.zarr", "ct.zarr", "composite.zarr", "materialized.zarr", "warmup.zarr")


# --------------------------------------------------------------------------- read accounting


class ReadLog:
    """Counts chunk reads per (phase, store label, array path), across threads.

    Installed by patching the read methods of ``LocalStore`` (sources,
    materialized store, the composite's own backing store) and of
    ``CompositeStore`` (computed chunks) for this process only.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phase = "setup"
        self.labels: dict[str, str] = {}  # LocalStore root -> label
        self.reads: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.composite_writes: collections.Counter[str] = collections.Counter()
        self.refused_writes: list[tuple[str, str]] = []

    def label_local(self, store: LocalStore) -> str:
        return self.labels.get(str(Path(store.root).resolve()), f"other:{store.root}")

    def record(self, label: str, key: str) -> None:
        if "/c/" in key:
            array = key.split("/c/", 1)[0]
        elif key.endswith("zarr.json"):
            array = "<metadata>"
        else:
            array = key
        with self.lock:
            self.reads[(self.phase, label, array)] += 1

    def chunk_reads(self, phase: str | None, label: str, array: str) -> int:
        return sum(
            n
            for (p, lab, arr), n in self.reads.items()
            if (phase is None or p == phase) and lab == label and arr == array
        )

    def install(self) -> None:
        log = self
        local_get = LocalStore.get
        local_get_sync = LocalStore.get_sync
        local_partial = LocalStore.get_partial_values
        comp_get = cv.CompositeStore.get
        comp_set = cv.CompositeStore.set

        async def get(
            self: LocalStore, key: str, prototype: Any = None, byte_range: Any = None
        ) -> Any:
            log.record(log.label_local(self), key)
            return await local_get(self, key, prototype, byte_range)

        def get_sync(
            self: LocalStore, key: str, *, prototype: Any = None, byte_range: Any = None
        ) -> Any:
            log.record(log.label_local(self), key)
            return local_get_sync(self, key, prototype=prototype, byte_range=byte_range)

        async def get_partial_values(self: LocalStore, prototype: Any, key_ranges: Any) -> Any:
            key_ranges = list(key_ranges)
            for key, _ in key_ranges:
                log.record(log.label_local(self), key)
            return await local_partial(self, prototype, key_ranges)

        async def cget(self: Any, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if self._virtual_array(key) is not None:
                log.record("composite(virtual)", key)
            return await comp_get(self, key, prototype, byte_range)

        async def cset(self: Any, key: str, value: Any) -> None:
            with log.lock:
                log.composite_writes[key] += 1
            try:
                await comp_set(self, key, value)
            except PermissionError as exc:
                with log.lock:
                    log.refused_writes.append((key, str(exc)))
                raise

        LocalStore.get = get  # type: ignore[method-assign]
        LocalStore.get_sync = get_sync  # type: ignore[method-assign]
        LocalStore.get_partial_values = get_partial_values  # type: ignore[method-assign]
        cv.CompositeStore.get = cget  # type: ignore[method-assign]
        cv.CompositeStore.set = cset  # type: ignore[method-assign]


READS = ReadLog()


class ScarfLogCapture:
    """Keeps scarf's loguru messages (all levels) for inspection."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []
        from loguru import logger

        self._id = logger.add(self._sink, level="DEBUG", format="{message}")

    def _sink(self, message: Any) -> None:
        record = message.record
        self.messages.append((record["level"].name, record["message"]))

    def matching(self, needle: str) -> list[str]:
        return [m for _, m in self.messages if needle in m]


# --------------------------------------------------------------------------- report


@dataclass
class Report:
    checks: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, detail)
    failures: int = 0
    issues: int = 0

    def check(self, ok: bool, name: str, detail: str = "") -> bool:
        self.checks.append(("PASS" if ok else "FAIL", name, detail))
        self.failures += 0 if ok else 1
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}{': ' + detail if detail else ''}", flush=True)
        return ok

    def issue(self, ok: bool, name: str, detail: str = "") -> bool:
        """A compatibility check: the client could not use the store as it uses others."""
        self.checks.append(("OK" if ok else "ISSUE", name, detail))
        self.issues += 0 if ok else 1
        print(f"  [{'OK' if ok else 'ISSUE'}] {name}{': ' + detail if detail else ''}", flush=True)
        return ok

    def info(self, name: str, detail: str) -> None:
        self.checks.append(("INFO", name, detail))
        print(f"  [INFO] {name}: {detail}", flush=True)


# --------------------------------------------------------------------------- pipeline


@dataclass
class RunResult:
    label: str
    seconds: dict[str, float]
    cells: pd.DataFrame
    feats: pd.DataFrame
    hvg_key: str
    normalized: np.ndarray
    pca: np.ndarray
    loadings: np.ndarray
    artifact_ids: dict[str, str]
    counts_t_accepted: bool
    feature_stream_axis: int
    load_artifact_error: str | None


def _artifact_group(ds: Any, ref: Any) -> tuple[zarr.Group, str | None]:
    """The artifact's group through scarf's public ``load_artifact``, else directly.

    Returns the group and the error ``load_artifact`` raised (if any), so a
    failure of the public path is reported without hiding the results.
    """
    try:
        return ds.load_artifact(ref), None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        status = ds.inspect_artifact(ref)
        group = ds.zw[status.path]
        assert isinstance(group, zarr.Group)
        return group, error


def run_pipeline(label: str, store: Any, args: argparse.Namespace) -> RunResult:
    import scarf

    seconds: dict[str, float] = {}

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        READS.phase = f"{label}:{name}"
        started = time.perf_counter()
        try:
            return fn()
        finally:
            seconds[name] = time.perf_counter() - started
            READS.phase = "idle"

    ds = phase(
        "open",
        lambda: scarf.DataStore(
            store,
            nthreads=args.nthreads,
            min_features_per_cell=args.min_features_per_cell,
            min_cells_per_feature=args.min_cells_per_feature,
            zarr_mode="r+",
        ),
    )
    assay = ds.get_assay(ASSAY)
    counts_t_accepted = assay.rawDataT is not None
    _, feature_axis, _ = assay._raw_feature_stream_source()
    phase(
        "hvg",
        lambda: ds.mark_hvgs(
            min_cells=args.min_cells,
            top_n=args.top_n,
            show_plot=False,
            hvg_key_name="hvgs",
        ),
    )
    norm_ref = phase("normalize", lambda: ds.run_normalization(feat_key="hvgs"))
    pca_ref = phase("pca", lambda: ds.run_pca(normalized=norm_ref, dims=args.dims))

    READS.phase = f"{label}:collect"
    norm_group, error_n = _artifact_group(ds, norm_ref)
    pca_group, error_p = _artifact_group(ds, pca_ref)
    cell_cols = [f"{ASSAY}_{c}" for c in ("nCounts", "nFeatures", "percentMito", "percentRibo")]
    cells = pd.DataFrame({c: ds.cells.fetch_all(c) for c in ["ids", "I", *cell_cols]})
    feat_cols = [c for c in assay.feats.columns if c not in ("names",)]
    feats = pd.DataFrame({c: assay.feats.fetch_all(c) for c in ["names", *feat_cols]})
    state = ds.get_assay_state(ASSAY)
    ids = {
        "normalized": norm_ref.artifact_id,
        "reduction": pca_ref.artifact_id,
        "feature_scaling": state.feature_scaling.artifact_id if state.feature_scaling else "",
    }
    READS.phase = "idle"
    return RunResult(
        label=label,
        seconds=seconds,
        cells=cells,
        feats=feats,
        hvg_key="I__hvgs",
        normalized=np.asarray(norm_group["data"][:]),
        pca=np.asarray(pca_group["data"][:]),
        loadings=np.asarray(pca_group["loadings"][:]),
        artifact_ids=ids,
        counts_t_accepted=counts_t_accepted,
        feature_stream_axis=int(feature_axis),
        load_artifact_error=error_n or error_p,
    )


# --------------------------------------------------------------------------- comparisons


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


def _align_signs(ref: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``other`` with each column's sign flipped to agree with ``ref``; the signs."""
    dots = np.sum(ref.astype(np.float64) * other.astype(np.float64), axis=0)
    signs = np.where(dots < 0, -1.0, 1.0)
    return other * signs, signs


def compare(
    comp: RunResult,
    mat: RunResult,
    report: Report,
    args: argparse.Namespace,
    title: str = "composite vs materialized",
) -> None:
    print(f"\nComparisons ({title}):")
    same_ids = np.array_equal(comp.cells["ids"].to_numpy(), mat.cells["ids"].to_numpy())
    report.check(same_ids, "cell ids and order identical", f"{len(comp.cells)} cells")
    active = int(np.sum(comp.cells["I"]))
    report.check(
        np.array_equal(comp.cells["I"].to_numpy(), mat.cells["I"].to_numpy()),
        "active cells (I) identical",
        f"{active} active",
    )
    for col in comp.cells.columns:
        if col in ("ids", "I"):
            continue
        a, b = comp.cells[col].to_numpy(), mat.cells[col].to_numpy()
        report.check(
            a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-9),
            f"cell statistic {col}",
            f"max |diff| {_max_abs(a, b):.3g}",
        )
    same_feats = np.array_equal(comp.feats["ids"].to_numpy(), mat.feats["ids"].to_numpy())
    report.check(same_feats, "feature ids and order identical", f"{len(comp.feats)} features")
    report.check(
        np.array_equal(comp.feats["names"].to_numpy(), mat.feats["names"].to_numpy()),
        "feature names identical (the HVG blacklist matches names)",
    )
    for col in ("I", "nCells", "dropOuts"):
        report.check(
            np.array_equal(comp.feats[col].to_numpy(), mat.feats[col].to_numpy()),
            f"feature column {col} identical",
            f"{int(comp.feats['I'].sum())} active features" if col == "I" else "",
        )
    stat_cols = sorted(
        c for c in set(comp.feats.columns) & set(mat.feats.columns) if c.startswith("stats_")
    )
    for col in stat_cols:
        a = comp.feats[col].to_numpy(dtype=np.float64)
        b = mat.feats[col].to_numpy(dtype=np.float64)
        report.check(
            np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True),
            f"HVG statistic {col}",
            f"max |diff| {float(np.nanmax(np.abs(a - b))) if a.size else 0.0:.3g}",
        )
    hvg_c = set(comp.feats["ids"][comp.feats[comp.hvg_key].to_numpy(dtype=bool)])
    hvg_m = set(mat.feats["ids"][mat.feats[mat.hvg_key].to_numpy(dtype=bool)])
    both = len(hvg_c & hvg_m)
    report.check(
        hvg_c == hvg_m and len(hvg_c) > 0,
        "HVG set identical",
        f"composite {len(hvg_c)}, materialized {len(hvg_m)}, overlap {both} "
        f"({both / max(1, len(hvg_c | hvg_m)):.1%} of union)",
    )
    a, b = comp.normalized, mat.normalized
    ok = a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)
    report.check(
        ok,
        "normalized data equal (allclose rtol=1e-5 atol=1e-6)",
        f"shape {a.shape} {a.dtype}, max |diff| {_max_abs(a, b) if a.shape == b.shape else float('nan'):.3g}, "
        f"exactly equal: {a.shape == b.shape and bool(np.array_equal(a, b))}",
    )
    a, b = comp.pca, mat.pca
    if a.shape != b.shape:
        report.check(False, "PCA embedding shapes", f"{a.shape} vs {b.shape}")
        return
    aligned, signs = _align_signs(a, b)
    scale = float(np.max(np.abs(a))) or 1.0
    diff = _max_abs(a, aligned)
    report.check(
        diff <= args.pca_tol * scale,
        f"PCA embedding equal up to sign per component (tol {args.pca_tol:g} x max|PC| = "
        f"{args.pca_tol * scale:.3g})",
        f"shape {a.shape}, max |diff| {diff:.3g} (max |PC| {scale:.3g}), "
        f"sign flips {int(np.sum(signs < 0))}/{len(signs)}",
    )
    la, lb = comp.loadings, mat.loadings * signs
    report.check(
        np.allclose(la, lb, atol=args.pca_tol * (float(np.max(np.abs(la))) or 1.0)),
        "PCA loadings equal up to the same signs",
        f"max |diff| {_max_abs(la, lb):.3g}",
    )
    same_art = comp.artifact_ids == mat.artifact_ids
    report.info(
        "scarf artifact ids",
        "identical in both stores"
        if same_art
        else f"differ: {comp.artifact_ids} vs {mat.artifact_ids}",
    )


# --------------------------------------------------------------------------- main


def prepare_workdir(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.workdir is None:
        return Path(tempfile.mkdtemp(prefix="real_client_scarf-")), True
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    present = [name for name in CREATED if (workdir / name).exists()]
    if present and not args.overwrite:
        raise SystemExit(
            f"{workdir} already holds {present}; pass --overwrite to replace them (only these)"
        )
    for name in present:
        shutil.rmtree(workdir / name)
    return workdir, False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="directory for the stores (default: a temporary one)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace this script's stores in --workdir"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary workdir")
    parser.add_argument("--nthreads", type=int, default=2)
    parser.add_argument("--min-features-per-cell", type=int, default=10)
    parser.add_argument("--min-cells-per-feature", type=int, default=5)
    parser.add_argument("--min-cells", type=int, default=5, help="mark_hvgs min_cells")
    parser.add_argument("--top-n", type=int, default=500, help="mark_hvgs top_n")
    parser.add_argument("--dims", type=int, default=20, help="run_pca dims")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the warm-up run (scarf's first pipeline in a process pays numba compilation)",
    )
    parser.add_argument(
        "--pca-tol", type=float, default=1e-4, help="PCA tolerance, relative to max |PC|"
    )
    args = parser.parse_args(argv)

    import importlib.metadata as md

    import scarf

    scarf.configure_output(level="WARNING", progress=False)
    warnings.simplefilter("default")
    started = time.perf_counter()
    versions = {
        name: md.version(name)
        for name in ("scarf", "cytearc-vfs", "zarr", "numpy", "scipy", "anndata")
    }
    print(f"python {sys.version.split()[0]}; " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    workdir, temporary = prepare_workdir(args)
    print(f"workdir: {workdir}")
    report = Report()
    READS.install()
    scarf_log = ScarfLogCapture()
    timings: dict[str, float] = {}

    try:
        # 1. sources ---------------------------------------------------------------
        t = time.perf_counter()
        wu = realdata.wu2020()
        ct = realdata.celltypist_sample()
        timings["load data"] = time.perf_counter() - t
        t = time.perf_counter()
        cv.write_counts(workdir / "wu.zarr", wu)
        cv.write_counts(workdir / "ct.zarr", ct)
        timings["write sources"] = time.perf_counter() - t
        print(f"sources: wu2020 {wu.shape}, celltypist_sample {ct.shape}")

        # 2. composite -------------------------------------------------------------
        t = time.perf_counter()
        comp = cv.create_composite(
            workdir / "composite.zarr",
            {"wu": workdir / "wu.zarr", "ct": workdir / "ct.zarr"},
            features="union",
        )
        timings["create composite"] = time.perf_counter() - t

        # 3. materialized equivalent -----------------------------------------------
        t = time.perf_counter()
        reader = comp.reader()
        dense = reader.read()
        root = zarr.open_group(comp.backing, mode="r")
        names = np.asarray(root[f"{ASSAY}/featureData/names"][:])
        cell_table = pd.DataFrame(
            {
                "source": np.asarray(root["cellData/source"][:]),
                "sourceId": np.asarray(root["cellData/sourceId"][:]),
            },
            index=pd.Index(list(reader.cell_ids), dtype=object),
        )
        feature_table = pd.DataFrame(
            {"names": names}, index=pd.Index(list(reader.feature_ids), dtype=object)
        )
        cv.write_counts(
            workdir / "materialized.zarr",
            sp.csr_array(dense),
            cells=cell_table,
            features=feature_table,
        )
        timings["materialize"] = time.perf_counter() - t
        print(
            f"composite: {reader.shape} {reader.dtype} (nnz {int(np.count_nonzero(dense))}); "
            f"materialized copy written"
        )
        del comp, reader

        # Sanity of the inputs themselves, through plain zarr.
        print("\nInputs:")
        comp_store = cv.open_store(workdir / "composite.zarr", mode="r+")
        mat_store = LocalStore(workdir / "materialized.zarr")
        READS.labels[str(Path(comp_store.backing.root).resolve())] = "composite(backing)"
        READS.labels[str((workdir / "materialized.zarr").resolve())] = "materialized"
        READS.labels[str((workdir / "wu.zarr").resolve())] = "source:wu"
        READS.labels[str((workdir / "ct.zarr").resolve())] = "source:ct"
        READS.phase = "inputs"
        probe = cv.open_store(workdir / "composite.zarr", mode="r")
        c_counts = zarr.open_array(probe, path=COUNTS, mode="r")[:]
        c_counts_t = zarr.open_array(probe, path=COUNTS_T, mode="r")[:]
        m_counts = zarr.open_array(mat_store, path=COUNTS, mode="r")[:]
        report.check(
            np.array_equal(c_counts, dense) and np.array_equal(m_counts, dense),
            "composite counts (plain zarr) == reader.read() == materialized counts",
            f"{dense.shape} {dense.dtype}",
        )
        report.check(
            np.array_equal(c_counts_t, dense.T), "composite countsT (plain zarr) == counts.T"
        )
        del c_counts, c_counts_t, m_counts
        try:
            zarr.open_array(comp_store, path=COUNTS, mode="r")
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        report.issue(
            error is None,
            'zarr.open_array(<CompositeStore opened mode="r+">, path="RNA/counts", mode="r")',
            error or "",
        )
        READS.phase = "idle"

        # 4. scarf on both -----------------------------------------------------------
        if not args.no_warmup:
            # The first DataStore pipeline in a process compiles scarf's numba
            # kernels (seconds); run it once on a small throwaway store so the
            # timings below compare the stores, not the compilation.
            t = time.perf_counter()
            cv.write_counts(
                workdir / "warmup.zarr",
                sp.csr_array(dense[: min(200, dense.shape[0])]),
                cells=cell_table.iloc[: min(200, dense.shape[0])],
                features=feature_table,
            )
            run_pipeline("warmup", LocalStore(workdir / "warmup.zarr"), args)
            timings["warm-up"] = time.perf_counter() - t
        print("\nscarf pipeline (DataStore -> mark_hvgs -> run_normalization -> run_pca):")
        results: dict[str, RunResult] = {}
        for label, store in (("composite", comp_store), ("materialized", mat_store)):
            try:
                results[label] = run_pipeline(label, store, args)
            except Exception:
                print(f"\nscarf failed on the {label} store (phase {READS.phase}):")
                traceback.print_exc()
                refused = READS.refused_writes
                if refused:
                    print(f"writes refused by the CompositeStore: {refused}")
                return 3
            r = results[label]
            print(
                f"  {label}: "
                + ", ".join(f"{k} {v:.2f}s" for k, v in r.seconds.items())
                + f"; countsT accepted: {r.counts_t_accepted}"
            )

        # 5. compare -------------------------------------------------------------------
        comp_r, mat_r = results["composite"], results["materialized"]
        compare(comp_r, mat_r, report, args)

        print("\ncountsT use:")
        report.check(
            comp_r.counts_t_accepted, "scarf accepted the composite's countsT (assay.rawDataT set)"
        )
        report.check(
            comp_r.feature_stream_axis == 0,
            "scarf's feature-wise stream source on the composite is countsT",
            f"feature axis {comp_r.feature_stream_axis}",
        )
        ignored = scarf_log.matching("Ignoring countsT")
        report.check(not ignored, "no scarf 'Ignoring countsT' message", "; ".join(ignored))
        hvg_t = READS.chunk_reads("composite:hvg", "composite(virtual)", COUNTS_T)
        report.check(
            hvg_t > 0,
            "mark_hvgs read computed RNA/countsT chunks on the composite",
            f"{hvg_t} chunk gets",
        )
        mat_t = READS.chunk_reads("materialized:hvg", "materialized", COUNTS_T)
        report.info("mark_hvgs RNA/countsT chunk/shard gets on the materialized store", str(mat_t))
        report.info(
            "composite chunk_stats (source reads for computed chunks)", str(comp_store.chunk_stats)
        )

        print("\nWrites into the composite:")
        report.issue(
            not READS.refused_writes,
            "no write refused (PermissionError) by the CompositeStore",
            "; ".join(k for k, _ in READS.refused_writes),
        )
        prefixes = collections.Counter()
        for key, n in READS.composite_writes.items():
            parts = key.split("/")
            prefixes[
                "/".join(parts[:3]) if parts[0] == ASSAY and len(parts) > 2 else "/".join(parts[:2])
            ] += n
        report.info("keys scarf wrote (by prefix)", json.dumps(dict(sorted(prefixes.items()))))
        report.issue(
            comp_r.load_artifact_error is None,
            "DataStore.load_artifact on the composite",
            comp_r.load_artifact_error or "",
        )
        report.check(
            mat_r.load_artifact_error is None,
            "DataStore.load_artifact on the materialized store",
            mat_r.load_artifact_error or "",
        )

        print("\nRead accounting (chunk/shard gets per phase, store, array; metadata excluded):")
        rows = sorted(
            (p, lab, arr, n)
            for (p, lab, arr), n in READS.reads.items()
            if arr in (COUNTS, COUNTS_T)
            and not p.startswith(("setup", "warmup"))
            and not lab.startswith("other:")
        )
        for p, lab, arr, n in rows:
            print(f"  {p:24s} {lab:20s} {arr:12s} {n}")
    finally:
        finish_run(timings, started, workdir, temporary=temporary, keep=args.keep)
    return summary_status(report)


def finish_run(
    timings: dict[str, float], started: float, workdir: Path, *, temporary: bool, keep: bool
) -> None:
    """Print the timings and remove (or keep) a temporary working directory."""
    timings["total"] = time.perf_counter() - started
    print("\nTimings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    if temporary and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    elif temporary:
        print(f"kept {workdir}")


def summary_status(report: Report) -> int:
    """Print the summary line; the exit status: 1 on a mismatch, 2 on a store issue, else 0."""
    passed = sum(1 for k, *_ in report.checks if k == "PASS")
    print(f"\nSummary: {passed} passed, {report.failures} failed, {report.issues} store issue(s)")
    return 1 if report.failures else 2 if report.issues else 0


if __name__ == "__main__":
    sys.exit(main())
