"""Peak memory of ``export_anndata`` against its budget, and its time, before and after.

Before (by default the ``main`` branch, its files extracted by
``git archive`` into a temporary folder) ``--mem-budget`` only sized a band's dense bytes (``band_bytes``);
after, it bounds the export. Each export (an ordinary store of half-non-zero
uint8 counts, a tall uint16 one, a composite of two, a wide float32 one; to
``.zarr`` and ``.h5ad``) runs in a child process once with Python's
allocations traced (the peak, against the budget) and, untraced, timed (best
of ``--repeat``). Printed: peak / budget before and after, and the time
ratio after / before (the bands after are smaller where the sparse form of
a band is larger than its dense form).

    uv run python benchmarks/bench_export_budget.py [--baseline-ref main] [--repeat 3]
        [--budgets 64M,256M] [--outputs zarr,h5ad]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout_runs import baseline_checkout, report_times, run_in_checkout, size_bytes

HERE = Path(__file__).resolve().parent.parent
MiB = 1 << 20
#: name: (cells, features, density, dtype) of the counts; "composite" joins two.
STORES = {
    "uint8 half": (8_000, 2_000, 0.5, "uint8"),
    "uint16 tall": (60_000, 500, 0.1, "uint16"),
    "composite": (20_000, 1_000, 0.1, "uint16"),
    "float32 wide": (1_000, 20_000, 0.05, "float32"),
}

BUILD = r"""
import json, sys
from pathlib import Path
import numpy as np, scipy.sparse as sp
import cytearc_vfs as cv

root = Path(sys.argv[1])
for name, (n, m, density, dtype) in json.loads(sys.argv[2]).items():
    rng = np.random.default_rng(0)
    x = sp.random_array((n, m), density=density, format="csr", dtype=np.float64, rng=rng)
    x.data = x.data * 3.7 if dtype.startswith("float") else np.ceil(x.data * 200)
    x = sp.csr_matrix(x.astype(dtype))
    folder = root / name.replace(" ", "-")
    if name == "composite":
        half = n // 2
        cv.write_counts(root / "part-a.zarr", x[:half])
        cv.write_counts(root / "part-b.zarr", x[half:])
        cv.create_composite(folder.with_suffix(".zarr"),
                            {"a": root / "part-a.zarr", "b": root / "part-b.zarr"})
    else:
        cv.write_counts(folder.with_suffix(".zarr"), x)
"""

CHILD = r"""
import inspect, json, sys, tempfile, uuid
from pathlib import Path
from checkout_runs import peak_and_seconds
from cytearc_vfs_adapters.anndata_output.export import export_anndata

store, output, budget, repeat = json.loads(sys.argv[1])
tmp = Path(tempfile.mkdtemp())
bounded = "mem_budget" in inspect.signature(export_anndata).parameters
options = {"mem_budget": budget} if bounded else {"band_bytes": budget}

def run():
    return export_anndata(store, tmp / f"{uuid.uuid4().hex}.{output}", **options)

info = run()  # imports and first-use caches
print(json.dumps({**peak_and_seconds(run, repeat), "bands": info.bands}))
"""


def _measure(code: Path, store: Path, output: str, budget: int, repeat: int) -> dict[str, Any]:
    return run_in_checkout(code, CHILD, json.dumps([str(store), output, budget, repeat])) or {}


def _peak(measured: dict[str, Any], budget: int) -> str:
    if "error" in measured:
        return f"{'refused':>9} {'':>6} {'':>5}"
    return (
        f"{measured['peak'] / MiB:5.1f} MiB {measured['peak'] / budget:6.2f} {measured['bands']:5}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main", help="git ref of the code before")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best kept)")
    parser.add_argument("--budgets", default="64M,256M", help="budgets, comma-separated (M or G)")
    parser.add_argument("--outputs", default="zarr,h5ad", help="zarr and/or h5ad")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp())
    with baseline_checkout(HERE, args.baseline_ref) as baseline:
        try:
            _compare(args, scratch, baseline)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _compare(args: argparse.Namespace, scratch: Path, baseline: Path) -> None:
    """Measure every case before (``baseline``) and after (this checkout), and print."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE / "adapters")]))
    subprocess.run(
        [sys.executable, "-c", BUILD, str(scratch), json.dumps(STORES)], env=env, check=True
    )
    print(
        f"{'store':13} {'out':4} {'budget':>6} | {'peak before':>11} {'/budget':>6} "
        f"{'bands':>5} | {'peak after':>10} {'/budget':>6} {'bands':>5} | "
        f"{'s before':>8} {'s after':>7} {'after/before':>12}"
    )
    for name in STORES:
        store = scratch / f"{name.replace(' ', '-')}.zarr"
        for output in args.outputs.split(","):
            for budget in args.budgets.split(","):
                limit = size_bytes(budget)
                before = _measure(baseline, store, output, limit, args.repeat)
                after = _measure(HERE, store, output, limit, args.repeat)
                peaks = f"{_peak(before, limit)} | {_peak(after, limit)}"
                report_times(f"{name:13} {output:4} {budget:>6}", peaks, before, after)


if __name__ == "__main__":
    main()
