"""Benchmark: ``cytearc_vfs.write_counts`` against ``anndata.AnnData.write_zarr``.

One run generates a realistic sparse count matrix (CSR, float32 values as most
h5ad files hold them), saves it once to an uncompressed ``.npz`` and then runs
every contender in a fresh subprocess, so each one's peak RSS is its own:

* ``cytearc``        ``write_counts(dir / "cv.zarr", X, mem_budget=...)``: dense
                     sharded ``counts`` and ``countsT`` (zstd 1), fingerprint,
                     summaries and tables.
* ``anndata``        ``AnnData(X).write_zarr(dir / "ad.zarr")``: CSR, anndata's
                     defaults (zarr v3; anndata switches zarr to its fused codec
                     pipeline itself while it writes).
* ``cytearc-fused``  (opt-in) ``write_counts`` with zarr's ``FusedCodecPipeline``
                     configured, the pipeline anndata picks for itself.

Each child loads the matrix (not timed), records its RSS (the baseline), resets
the kernel's peak-RSS mark (``/proc/self/clear_refs``), writes, and reports the
wall time, the peak RSS of the write (``VmHWM``) and the working memory
(peak - baseline). The cytearc child also records when each phase ends through
the ``progress`` callback and thin timing wrappers around writer helpers (no
behaviour change), giving the scan / counts / countsT split.

    uv run python benchmarks/bench_write.py                      # 200,000 x 20,000, 5 %
    uv run python benchmarks/bench_write.py --cells 20000 --json -
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

CONTENDERS = ("cytearc", "anndata", "cytearc-fused")
DEFAULT_CONTENDERS = ("cytearc", "anndata")
STORE_NAMES = {"cytearc": "cv.zarr", "anndata": "ad.zarr", "cytearc-fused": "cv-fused.zarr"}
GiB = 1024**3
MiB = 1024**2


# ---------------------------------------------------------------------------
# Matrix generation
# ---------------------------------------------------------------------------


def gene_detection_rates(
    n_features: int, density: float, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Per-feature probability that a cell has a non-zero: lognormal, mean ``density``.

    A few features are detected in most cells, most in very few, as in real
    single-cell data; rates are capped at 0.95 and rescaled to keep the mean.
    """
    raw = rng.lognormal(0.0, 1.5, n_features)
    target = min(max(density, 0.0), 0.95)
    low, high = 0.0, target / max(raw.mean(), 1e-300) * 64
    for _ in range(60):  # bisection on the scale: mean(min(0.95, scale * raw)) == target
        mid = (low + high) / 2
        if np.minimum(0.95, mid * raw).mean() < target:
            low = mid
        else:
            high = mid
    return np.minimum(0.95, high * raw)


def _geometric(
    scale: npt.NDArray[np.float32], repeats: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """``repeats[j]`` Geometric draws (support 1, 2, ...) per entry, ``scale = -1 / log(1 - p)``.

    ``1 + floor(Exp(1) * scale)`` is Geometric(p); the float32 exponential is
    several times faster than ``Generator.geometric`` with an array of ``p``.
    """
    draws = rng.standard_exponential(int(repeats.sum()), dtype=np.float32)
    draws *= np.repeat(scale, repeats)
    out = draws.astype(np.int64)
    out += 1
    return out


def _bernoulli_rows(
    n_rows: int, rates: npt.NDArray[np.float64], rng: np.random.Generator, sigmas: float = 4.0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """For each feature j, the sorted rows < n_rows that are non-zero with probability rates[j].

    Geometric skip sampling, O(non-zeros) and never a dense band: each
    feature gets enough gaps to pass ``n_rows`` with overwhelming probability;
    the rare feature whose gaps fall short continues from its last success
    (gaps are memoryless, so the result stays exact). Returns the per-feature
    counts and the row positions, feature-major.
    """
    n = len(rates)
    counts = np.zeros(n, dtype=np.int64)
    parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32]]] = []
    todo = np.flatnonzero(rates > 0)
    offset = np.zeros(len(todo), dtype=np.int64)  # first row each feature still has to cover
    while len(todo):
        p = rates[todo]
        mean = (n_rows - offset) * p
        draws = np.ceil(mean + sigmas * np.sqrt(mean * (1 - p)) + 4).astype(np.int64)
        gaps = _geometric((-1.0 / np.log1p(-p)).astype(np.float32), draws, rng)
        starts = np.zeros(len(todo), dtype=np.int64)
        np.cumsum(draws[:-1], out=starts[1:])
        totals = np.add.reduceat(gaps, starts)
        gaps[starts] += offset
        gaps[starts[1:]] -= (offset + totals)[:-1]  # so one cumsum restarts at every feature
        np.cumsum(gaps, out=gaps)
        gaps -= 1  # 0-based row of each success
        reached = offset + totals  # one past each feature's last success
        inside = gaps < n_rows
        kept = np.add.reduceat(inside.view(np.int8), starts, dtype=np.int64)
        parts.append((todo, kept, gaps[inside].astype(np.int32)))
        del gaps, inside
        counts[todo] += kept
        short = reached <= n_rows  # every draw landed inside: rows past the last one are unknown
        todo, offset = todo[short], reached[short]
        sigmas = max(4.0, 2 * sigmas)
    if not parts:
        return counts, np.zeros(0, dtype=np.int32)
    if len(parts) == 1:
        return counts, parts[0][2]
    owners = np.concatenate([np.repeat(features, k) for features, k, _ in parts])
    merged = np.concatenate([r for _, _, r in parts])
    # Stable: a feature's rows from later rounds follow its earlier (smaller) ones.
    return counts, merged[np.argsort(owners, kind="stable")]


def realistic_band(
    n_rows: int,
    rates: npt.NDArray[np.float64],
    value_scale: npt.NDArray[np.float32],
    rng: np.random.Generator,
) -> sp.csr_array:
    """One canonical CSR row band: Bernoulli(rate_j) pattern, geometric float32 values."""
    n_features = len(rates)
    counts, rows = _bernoulli_rows(n_rows, rates, rng)
    values = _geometric(value_scale, counts, rng).astype(np.float32)
    indptr = np.zeros(n_features + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    # Feature-major (CSC) to CSR is one counting-sort pass and leaves indices sorted.
    band = sp.csc_array((values, rows, indptr), shape=(n_rows, n_features))
    return sp.csr_array(band.tocsr())


def realistic_counts(
    n_cells: int, n_features: int, density: float, *, seed: int = 0, band_rows: int = 20_000
) -> sp.csr_array:
    """Cells x features float32 CSR counts, built row band by row band.

    Values are mostly 1-3 with a long tail: geometric per feature, with a mean
    of 1.5 for rarely detected features rising to ~10 for ubiquitous ones.
    """
    rng = np.random.default_rng(seed)
    rates = gene_detection_rates(n_features, density, rng)
    poisson_mean = -np.log1p(-rates)  # a Poisson feature detected at `rate` has this mean
    value_p = 1.0 / (1.5 + 3.0 * poisson_mean)
    value_scale = (-1.0 / np.log1p(-value_p)).astype(np.float32)
    data: list[npt.NDArray[np.float32]] = []
    indices: list[npt.NDArray[np.int32]] = []
    row_nnz: list[npt.NDArray[np.int64]] = []
    for start in range(0, n_cells, band_rows):
        band = realistic_band(min(band_rows, n_cells - start), rates, value_scale, rng)
        data.append(band.data)
        indices.append(band.indices.astype(np.int32, copy=False))
        row_nnz.append(np.diff(band.indptr).astype(np.int64))
        del band
    nnz = sum(len(d) for d in data)
    index_dtype = np.int32 if nnz < 2**31 else np.int64
    indptr = np.zeros(n_cells + 1, dtype=index_dtype)
    np.cumsum(np.concatenate(row_nnz) if row_nnz else np.zeros(0, np.int64), out=indptr[1:])
    all_data = _concat_release(data, np.float32)
    all_indices = _concat_release(indices, np.int32)
    matrix = sp.csr_array((all_data, all_indices, indptr), shape=(n_cells, n_features))
    matrix.has_canonical_format = True
    return matrix


def _concat_release(parts: list[Any], dtype: type[np.generic]) -> npt.NDArray[Any]:
    """Concatenate and drop the pieces as they are copied (peak = total + one piece)."""
    out = np.empty(sum(len(p) for p in parts), dtype=dtype)
    offset = 0
    parts.reverse()
    while parts:
        piece = parts.pop()
        out[offset : offset + len(piece)] = piece
        offset += len(piece)
        del piece
    return out


# ---------------------------------------------------------------------------
# Measurements shared by the children
# ---------------------------------------------------------------------------


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def current_rss() -> int:
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


class PeakRss:
    """Peak RSS from now on: the kernel's VmHWM after a reset, else a sampling thread."""

    def __init__(self, interval: float = 0.02) -> None:
        self.method = "VmHWM"
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")  # reset the peak resident set size mark
        except OSError:
            self.method = "sampled"
        if self.method == "VmHWM" and _status_kib("VmHWM") is None:
            self.method = "sampled"
        self._sampled = current_rss()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.method == "sampled":
            self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
            self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._sampled = max(self._sampled, current_rss())

    def stop(self) -> int:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            return max(self._sampled, current_rss())
        return int(_status_kib("VmHWM") or 0) * 1024


def disk_usage(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes as ``du`` counts them) of every file under ``path``."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            apparent += stat.st_size
            allocated += stat.st_blocks * 512
    return apparent, allocated


def system_busy_seconds() -> float | None:
    """CPU seconds all processes have been busy since boot (``/proc/stat``), if readable."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    ticks = [int(x) for x in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


@dataclass
class Timeline:
    """Phase end times of a cytearc write, from ``progress`` and timing wrappers."""

    start: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    counts_t_groups: int = 0

    def progress(self, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        self.marks.setdefault(f"{phase}:first", now)
        self.marks[f"{phase}:last"] = now

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append((name, begin, time.perf_counter()))

    def wrap(self, module: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(label):
                return original(*args, **kwargs)

        setattr(module, name, timed)

    def split(self, end: float) -> dict[str, float]:
        """Seconds per phase, in write order; ``countsT:`` entries break the countsT phase down.

        ``prepare`` is everything before the value scan (canonical CSR check,
        cell/feature tables), ``counts`` runs from the destination's creation
        to the first countsT group (tables written, every counts band cast,
        hashed, summarised, densified and written), ``countsT`` to the end of
        the last group, ``finish`` the summaries and attributes.
        """
        spans = {
            label: [(b, e) for n, b, e in self.spans if n == label]
            for label in ("scan", "dest", "group")
        }
        scan = spans["scan"][0] if spans["scan"] else (self.start, self.start)
        dest_end = spans["dest"][0][1] if spans["dest"] else scan[1]
        groups = spans["group"]
        counts_end = groups[0][0] if groups else self.marks.get("counts:last", end)
        out = {
            "prepare": scan[0] - self.start,
            "scan values": scan[1] - scan[0],
            "layout + destination": dest_end - scan[1],
            "counts": counts_end - dest_end,
            "countsT": (groups[-1][1] - groups[0][0]) if groups else 0.0,
        }
        if groups:
            # Before each group after the first the writer re-reads and column-slices the source.
            out["countsT: re-read source"] = sum(
                groups[i][0] - groups[i - 1][1] for i in range(1, len(groups))
            )
            out["countsT: transpose + write"] = sum(e - b for b, e in groups)
        out["finish"] = end - (groups[-1][1] if groups else counts_end)
        return out


# ---------------------------------------------------------------------------
# Children: one contender each
# ---------------------------------------------------------------------------


def run_child(contender: str, npz: Path, out: Path, mem_budget: str) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    import anndata
    import zarr

    import cytearc_vfs
    from cytearc_vfs.write import writer as cv_writer

    load_started = time.perf_counter()
    matrix = sp.load_npz(npz)
    counts = matrix if isinstance(matrix, sp.csr_array) else sp.csr_array(matrix)
    del matrix
    load_seconds = time.perf_counter() - load_started
    baseline = current_rss()
    result: dict[str, Any] = {
        "contender": contender,
        "load_seconds": load_seconds,
        "baseline_rss": baseline,
    }
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    peak = PeakRss()
    timeline = Timeline()
    if contender.startswith("cytearc"):
        config = (
            {
                "codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline",
                "codec_pipeline.max_workers": None,
            }
            if contender == "cytearc-fused"
            else {}
        )
        timeline.wrap(cv_writer, "scan_source", "scan")
        timeline.wrap(cv_writer, "create_destination", "dest")
        timeline.wrap(cv_writer, "_write_transposed_group", "group")
        with zarr.config.set(config):
            timeline.start = started = time.perf_counter()
            info = cytearc_vfs.write_counts(
                out, counts, mem_budget=mem_budget, progress=timeline.progress
            )
            ended = time.perf_counter()
            result["codec_pipeline"] = zarr.config.get("codec_pipeline.path")
        result["split"] = timeline.split(ended)
        result["counts_t_groups"] = sum(1 for n, _, _ in timeline.spans if n == "group")
        result["dtype"] = str(info.dtype)
        result["layout"] = {
            "counts_shards": list(info.layout.counts.shards),
            "counts_chunks": list(info.layout.counts.chunks),
            "counts_t_shards": list(info.layout.counts_t.shards) if info.layout.counts_t else None,
            "counts_t_chunks": list(info.layout.counts_t.chunks) if info.layout.counts_t else None,
        }
    elif contender == "anndata":
        started = time.perf_counter()
        anndata.AnnData(counts).write_zarr(out)
        ended = time.perf_counter()
    else:
        raise SystemExit(f"unknown contender {contender!r}")
    result["seconds"] = ended - started
    result["peak_rss"] = peak.stop()
    result["peak_method"] = peak.method
    result["working_memory"] = result["peak_rss"] - baseline
    # ru_maxrss is not used: after fork+exec it starts from the parent's peak.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["minor_faults"] = usage.ru_minflt - usage_before.ru_minflt
    result["cpu_user"] = usage.ru_utime - usage_before.ru_utime
    result["cpu_system"] = usage.ru_stime - usage_before.ru_stime
    return result


# ---------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / MiB:.0f} MiB"


def spawn(
    contender: str, npz: Path, out: Path, mem_budget: str, env: dict[str, str]
) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        contender,
        "--npz",
        str(npz),
        "--out",
        str(out),
        "--mem-budget",
        mem_budget,
    ]
    busy_before = system_busy_seconds()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, **env}
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{contender} child failed with exit code {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = elapsed = time.perf_counter() - started
    busy_after = system_busy_seconds()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if busy_before is not None and busy_after is not None:
        own = (children.ru_utime - children_before.ru_utime) + (
            children.ru_stime - children_before.ru_stime
        )
        # Cores other processes kept busy while the child ran: a noisy machine shows here.
        result["others_cpu_cores"] = max(0.0, (busy_after - busy_before - own) / elapsed)
    result["disk_apparent"], result["disk_allocated"] = disk_usage(out)
    result["files"] = count_files(out)
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time over repeats, the largest peak, the first run's other fields."""
    summary = dict(runs[0])
    summary["seconds"] = statistics.median(r["seconds"] for r in runs)
    summary["seconds_all"] = [r["seconds"] for r in runs]
    for key in ("peak_rss", "working_memory"):
        summary[key] = max(r[key] for r in runs)
    return summary


def print_report(report: dict[str, Any]) -> None:
    matrix = report["matrix"]
    budget = report["mem_budget_bytes"]
    print(
        f"\nmatrix: {matrix['cells']:,} x {matrix['features']:,} float32 CSR, "
        f"nnz {matrix['nnz']:,} "
        f"(density {matrix['density']:.4f}), {fmt_bytes(matrix['bytes'])} in memory; "
        f"built in {matrix['build_seconds']:.1f} s, saved in {matrix['save_seconds']:.1f} s; "
        f"max value {matrix['max_value']:g}"
    )
    print(f"mem_budget {report['mem_budget']} ({fmt_bytes(budget)}), repeat {report['repeat']}\n")
    header = (
        f"{'contender':<14} {'wall s':>7} {'CPU s':>6} {'baseline':>10} {'peak RSS':>10} "
        f"{'working':>10} {'<budget':>7} {'disk du':>10} {'files':>6} {'others':>6}"
    )
    print(header)
    print("-" * len(header))
    results = report["results"]
    for name, r in results.items():
        under = "yes" if r["working_memory"] <= budget else "NO"
        others = r.get("others_cpu_cores")
        print(
            f"{name:<14} {r['seconds']:>7.1f} {r['cpu_user'] + r['cpu_system']:>6.1f} "
            f"{fmt_bytes(r['baseline_rss']):>10} {fmt_bytes(r['peak_rss']):>10} "
            f"{fmt_bytes(r['working_memory']):>10} {under:>7} "
            f"{fmt_bytes(r['disk_allocated']):>10} {r['files']:>6} "
            f"{'?' if others is None else f'{others:.2f}':>6}"
        )
    print(
        "(CPU s: user+system seconds of the write; working = peak RSS - baseline; others: "
        "cores other processes kept busy meanwhile, >0.2 means a noisy run)"
    )
    for name, ratio in report["ratios"].items():
        print(
            f"\n{name}: time x{ratio['time']:.2f}, working memory x{ratio['working_memory']:.2f}, "
            f"disk x{ratio['disk']:.2f}"
        )
    for name, r in results.items():
        if "split" not in r:
            continue
        print(
            f"\n{name} time split ({r['dtype']}, {r['counts_t_groups']} countsT feature group(s), "
            f"counts shards {r['layout']['counts_shards']}, "
            f"countsT shards {r['layout']['counts_t_shards']}):"
        )
        for phase, seconds in r["split"].items():
            share = seconds / r["seconds"] * 100 if r["seconds"] else 0.0
            print(f"  {phase:<28} {seconds:>8.2f} s  {share:>5.1f} %")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--mem-budget", default="2G")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        help=f"comma-separated subset of {', '.join(CONTENDERS)}",
    )
    parser.add_argument(
        "--tmpdir", default=None, help="parent of the scratch directory (default: $TMPDIR or /tmp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="write results as JSON ('-': stdout)",
    )
    parser.add_argument(
        "--child-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for every child (repeatable), e.g. MALLOC_MMAP_MAX_=0",
    )
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--npz", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(run_child(args.child, args.npz, args.out, args.mem_budget)))
        return 0

    from cytearc_vfs.format.sizes import parse_size

    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contenders {unknown}; choose from {', '.join(CONTENDERS)}")
    budget = parse_size(args.mem_budget, what="--mem-budget")
    child_env = dict(item.split("=", 1) for item in args.child_env)
    quiet = args.json == "-"
    log: Callable[[str], None] = (lambda s: print(s, file=sys.stderr)) if quiet else print

    scratch = Path(tempfile.mkdtemp(prefix="cytearc-bench-", dir=args.tmpdir))
    try:
        log(f"building {args.cells:,} x {args.features:,} at density {args.density} ...")
        started = time.perf_counter()
        counts = realistic_counts(args.cells, args.features, args.density, seed=args.seed)
        build_seconds = time.perf_counter() - started
        npz = scratch / "counts.npz"
        started = time.perf_counter()
        sp.save_npz(npz, counts, compressed=False)
        save_seconds = time.perf_counter() - started
        matrix = {
            "cells": args.cells,
            "features": args.features,
            "nnz": int(counts.nnz),
            "density": counts.nnz / max(1, args.cells * args.features),
            "bytes": int(counts.data.nbytes + counts.indices.nbytes + counts.indptr.nbytes),
            "max_value": float(counts.data.max()) if counts.nnz else 0.0,
            "build_seconds": build_seconds,
            "save_seconds": save_seconds,
            "npz_bytes": npz.stat().st_size,
        }
        log(f"built in {build_seconds:.1f} s: nnz {counts.nnz:,}, {fmt_bytes(matrix['bytes'])}")
        del counts

        busy = system_busy_seconds()
        time.sleep(1.0)
        after = system_busy_seconds()
        if busy is not None and after is not None and after - busy > 0.3:
            log(
                f"warning: other processes keep {after - busy:.1f} cores busy; "
                "timings will be noisy (see the 'others' column)"
            )
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
        for repeat in range(args.repeat):
            for contender in contenders:
                out = scratch / STORE_NAMES[contender]
                log(f"[{repeat + 1}/{args.repeat}] {contender} ...")
                result = spawn(contender, npz, out, args.mem_budget, child_env)
                log(
                    f"    {result['seconds']:.1f} s, "
                    f"working memory {fmt_bytes(result['working_memory'])}, "
                    f"disk {fmt_bytes(result['disk_allocated'])}"
                )
                runs[contender].append(result)
                shutil.rmtree(out, ignore_errors=True)
        results = {c: summarise(r) for c, r in runs.items()}
        ratios: dict[str, dict[str, float]] = {}
        if "anndata" in results:
            base = results["anndata"]
            for name, r in results.items():
                if name.startswith("cytearc"):
                    ratios[f"{name}/anndata"] = {
                        "time": r["seconds"] / base["seconds"],
                        "working_memory": r["working_memory"] / max(1, base["working_memory"]),
                        "disk": r["disk_allocated"] / max(1, base["disk_allocated"]),
                    }
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "command": " ".join(
                ["benchmarks/bench_write.py", *(argv if argv is not None else sys.argv[1:])]
            ),
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "versions": _versions(),
            "child_env": child_env,
            "mem_budget": args.mem_budget,
            "mem_budget_bytes": budget,
            "repeat": args.repeat,
            "matrix": matrix,
            "results": results,
            "ratios": ratios,
        }
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"kept {scratch}")

    if not quiet:
        print_report(report)
    if args.json == "-":
        print(json.dumps(report, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        name: version(name)
        for name in ("cytearc-vfs", "zarr", "anndata", "numpy", "scipy", "numcodecs")
    }


if __name__ == "__main__":
    sys.exit(main())
