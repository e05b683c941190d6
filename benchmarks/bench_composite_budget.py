"""``create_composite``'s peak memory against ``mem_budget``, and its time, before and after.

Sources (two CyteArc stores sharing part of their features, AnnData Zarr
stores in CSR and CSC) are written once; each composite (whole, the
features' intersection, a third of one source's cells, AnnData sources) is
created in a child process, once with Python's allocations traced (the
peak, against the budget) and, untraced, timed (best of ``--repeat``), with
this checkout's code and with the baseline's (by default the ``main``
branch, its files extracted by ``git archive`` into a temporary directory). Printed: peak / budget
of each, and time after / before. A budget the new code refuses is shown
with the smallest it names.

    uv run python benchmarks/bench_composite_budget.py [--baseline-ref main] [--repeat 3]
        [--budgets 64M,512M] [--cells 60000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout_runs import baseline_checkout, report_times, run_in_checkout, size_bytes

HERE = Path(__file__).resolve().parent.parent
MiB = 1 << 20
CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "whole": (["a", "b"], {}),
    "intersection": (["a", "b"], {"features": "intersection"}),
    "cells": (["a", "b"], {"cells": "a:third"}),
    "anndata": (["csr", "csc"], {}),
}

SOURCES = r"""
import json, sys
from pathlib import Path
import anndata as ad, numpy as np, pandas as pd, scipy.sparse as sp
import cytearc_vfs as cv

root, n = Path(sys.argv[1]), int(sys.argv[2])
def counts(seed, n_cells):
    x = sp.random_array((n_cells, 500), density=0.1, format="csr", dtype=np.float64,
                        rng=np.random.default_rng(seed))
    x.data = np.ceil(x.data * 300)
    return x
def tables(name, n_cells, offset):
    cells = pd.DataFrame({"depth": np.arange(n_cells, dtype=np.float64),
                          "kind": pd.Categorical(np.array(["a", "b"])[np.arange(n_cells) % 2])},
                         index=[f"{name}-cell{i}" for i in range(n_cells)])
    return cells, pd.DataFrame(index=[f"gene{i + offset}" for i in range(500)])
for seed, (name, offset) in enumerate([("a", 0), ("b", 200)]):
    cells, features = tables(name, n, offset)
    cv.write_counts(root / f"{name}.zarr", counts(seed, n), cells=cells, features=features)
for seed, encoding in enumerate(["csr", "csc"]):
    cells, features = tables(encoding, n // 2, 0)
    x = counts(10 + seed, n // 2)
    x = sp.csr_matrix(x) if encoding == "csr" else sp.csc_matrix(x)
    ad.AnnData(X=x, obs=cells[["depth"]], var=features).write_zarr(root / f"{encoding}.zarr")
"""

CHILD = r"""
import json, re, sys, uuid
from pathlib import Path
from checkout_runs import peak_and_seconds
import numpy as np
import cytearc_vfs as cv

root, names, options, budget, repeat = json.loads(sys.argv[1])
root = Path(root)
if "cells" in options:  # "a:third:<cells of a>": every third cell of source a
    options["cells"] = {"a": np.arange(0, int(options["cells"].split(":")[2]), 3)}
locations = [root / f"{name}.zarr" for name in names]
out = Path(sys.argv[2])

def run():
    cv.create_composite(out / uuid.uuid4().hex, locations, mem_budget=budget, **options)

try:
    run()  # imports and first-use caches
except ValueError as exc:
    found = re.search(r"\((\d+) bytes\)", str(exc))
    print(json.dumps({"refused": int(found[1]) if found else None}))
    sys.exit(0)
print(json.dumps(peak_and_seconds(run, repeat)))
"""


def _peak(measured: dict[str, Any], budget: int) -> str:
    if "refused" in measured:
        return f"refused, needs {measured['refused'] / MiB:.1f} MiB".rjust(24)
    if "error" in measured:
        return f"{'error':>24}"
    return f"{measured['peak'] / MiB:9.1f} MiB {measured['peak'] / budget:10.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main", help="git ref of the code before")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best kept)")
    parser.add_argument("--budgets", default="64M,512M", help="budgets, comma-separated (M or G)")
    parser.add_argument("--cells", type=int, default=60_000, help="cells of each CyteArc source")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    with baseline_checkout(HERE, args.baseline_ref) as baseline:
        try:
            _compare(args, work, baseline)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _compare(args: argparse.Namespace, work: Path, baseline: Path) -> None:
    """Measure every case before (``baseline``) and after (this checkout), and print."""
    (work / "sources").mkdir()
    (work / "out").mkdir()
    run_in_checkout(HERE, SOURCES, str(work / "sources"), str(args.cells))
    print(
        f"{'case':12} {'budget':>6} | {'peak before':>13} {'/budget':>10} | "
        f"{'peak after':>13} {'/budget':>10} | {'s before':>8} {'s after':>7} "
        f"{'after/before':>12}"
    )
    for budget_text in args.budgets.split(","):
        budget = size_bytes(budget_text)
        for case, (names, options) in CASES.items():
            given = {k: f"{v}:{args.cells}" if k == "cells" else v for k, v in options.items()}
            argument = json.dumps([str(work / "sources"), names, given, budget, args.repeat])
            before = run_in_checkout(baseline, CHILD, argument, str(work / "out")) or {}
            after = run_in_checkout(HERE, CHILD, argument, str(work / "out")) or {}
            peaks = f"{_peak(before, budget)} | {_peak(after, budget)}"
            report_times(f"{case:12} {budget_text:>6}", peaks, before, after)


if __name__ == "__main__":
    main()
