"""The benchmarks' helpers leave nothing behind in the temporary folder.

The memory-budget benchmarks (``bench_memory_budgets.py``,
``bench_export_budget.py``) measure in children started by
``checkout_runs.run_in_checkout``; each child writes its stores and exports
under ``tempfile.mkdtemp()`` and never removed them: one run at the smallest
sizes left 24 folders, 1.2 GB, in ``/tmp``. Nothing is timed here: a child
that only makes a temporary folder is run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, tempfile
from pathlib import Path
folder = Path(tempfile.mkdtemp())
(folder / "store.zarr").write_bytes(b"x")
print(json.dumps({"folder": str(folder)}))
"""


def test_a_child_run_in_a_checkout_leaves_no_temporary_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from checkout_runs import run_in_checkout

    before = set(Path(tempfile.gettempdir()).iterdir())
    found = run_in_checkout(ROOT, CHILD)
    assert found is not None and "error" not in found, found
    folder = Path(found["folder"])
    assert not folder.exists()
    # nor the folder the child's temporary files were put in
    new = set(Path(tempfile.gettempdir()).iterdir()) - before
    assert [path for path in new if folder.is_relative_to(path)] == []
