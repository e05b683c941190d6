"""The benchmarks leave nothing behind in the temporary folder.

- A folder a benchmark makes with ``tempfile.mkdtemp`` is removed by it
  (read from the source, nothing run): ``bench_checksums.py`` and
  ``bench_shard_tables.py`` left their stores in ``/tmp`` on every run.
- The memory-budget benchmarks (``bench_memory_budgets.py``,
  ``bench_export_budget.py``) measure in children started by
  ``checkout_runs.run_in_checkout``, which write their stores and exports
  under ``tempfile.mkdtemp()``: one run of the two at their smallest sizes
  left 24 folders, 1.2 GB. A child that only makes a temporary folder is run
  (nothing timed).
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

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


def _called(node: ast.AST, name: str) -> bool:
    """``node`` is a call of ``name`` (``f(...)`` or ``module.f(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    return (isinstance(function, ast.Name) and function.id == name) or (
        isinstance(function, ast.Attribute) and function.attr == name
    )


def _kept_folders(path: Path) -> dict[str, int]:
    """Names bound to a ``mkdtemp()`` folder that no ``rmtree`` call names
    (read, not run), with the line of each."""
    made: dict[str, int] = {}
    removed: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(
            _called(call, "mkdtemp") for call in ast.walk(node.value)
        ):
            made.update({t.id: node.lineno for t in node.targets if isinstance(t, ast.Name)})
        if isinstance(node, ast.Call) and _called(node, "rmtree") and node.args:
            removed.update(n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name))
    return {name: line for name, line in made.items() if name not in removed}


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda path: path.name)
def test_a_benchmarks_temporary_folders_are_removed(path: Path) -> None:
    assert _kept_folders(path) == {}


def test_a_kept_folder_is_found(tmp_path: Path) -> None:
    """The check itself, on the code bench_checksums.py had."""
    script = tmp_path / "bench_kept.py"
    script.write_text(
        "import shutil, tempfile\n"
        "from pathlib import Path\n"
        "def main():\n"
        "    folder = tempfile.mkdtemp(prefix='bench-')\n"
        "    other = Path(tempfile.mkdtemp())\n"
        "    shutil.rmtree(other, ignore_errors=True)\n"
    )
    assert _kept_folders(script) == {"folder": 4}
