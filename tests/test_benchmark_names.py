"""Every name the benchmarks take from the project still exists.

The benchmarks are not run by the suite (they time things, and take minutes),
so a module moved or a function renamed broke them unseen:
``bench_write.py`` imported ``cytearc_vfs.writer`` inside its child process
from the restructure into subpackages until a by-hand run found it. This test
reads each benchmark's source (nothing is run) and resolves, wherever they
appear (functions included):

- every ``import`` / ``from ... import`` of the project's packages, of a
  sibling benchmark module or of a test helper module;
- every attribute read from a project module bound to a name (``cv.write_counts``);
- every ``f(module, "name", ...)`` call naming an attribute of such a module by
  string (``timeline.wrap(cv_writer, "scan_source", ...)``).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
PROJECT = ("cytearc_vfs", "cytearc_vfs_adapters", "cytearc_vfs_conformance")
#: modules a benchmark imports from beside it (benchmarks/) or from tests/
LOCAL = {path.stem: path for path in [*BENCHMARKS.glob("*.py"), *(ROOT / "tests").glob("*.py")]}


def _top_level_names(path: Path) -> set[str]:
    """The names a module defines at its top level (read, not imported)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _has(module: ModuleType, name: str) -> bool:
    if hasattr(module, name):
        return True
    try:  # a submodule not imported by its package yet
        importlib.import_module(f"{module.__name__}.{name}")
    except ModuleNotFoundError:
        return False
    return True


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    problems: list[str] = []
    bound: dict[str, ModuleType] = {}  # local name -> project module

    def project_module(name: str, line: int) -> ModuleType | None:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            problems.append(f"line {line}: {exc}")
            return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT:
                    module = project_module(alias.name, node.lineno)
                    if module is not None and alias.asname:
                        bound[alias.asname] = module
                    elif module is not None and "." not in alias.name:
                        bound[alias.name] = module
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top in PROJECT:
                module = project_module(node.module, node.lineno)
                for alias in node.names if module is not None else []:
                    if not _has(module, alias.name):
                        problems.append(f"line {node.lineno}: {node.module} has no {alias.name}")
                    elif isinstance(member := getattr(module, alias.name, None), ModuleType):
                        bound[alias.asname or alias.name] = member
                    elif alias.name not in vars(module):
                        bound[alias.asname or alias.name] = importlib.import_module(
                            f"{node.module}.{alias.name}"
                        )
            elif node.module in LOCAL and node.module not in ("conftest",):
                defined = _top_level_names(LOCAL[node.module])
                problems.extend(
                    f"line {node.lineno}: {node.module} defines no {alias.name}"
                    for alias in node.names
                    if alias.name != "*" and alias.name not in defined
                )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and not _has(bound[node.value.id], node.attr)
        ):
            problems.append(f"line {node.lineno}: {node.value.id}.{node.attr} does not exist")
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            first, second = node.args[0], node.args[1]
            if (
                isinstance(first, ast.Name)
                and first.id in bound
                and isinstance(second, ast.Constant)
                and isinstance(second.value, str)
                and second.value.isidentifier()
                and not _has(bound[first.id], second.value)
            ):
                problems.append(
                    f"line {node.lineno}: {first.id} has no {second.value!r} (named by string)"
                )
    return problems


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda path: path.name)
def test_benchmark_names_resolve(path: Path) -> None:
    assert _problems(path) == []


def test_a_moved_module_is_found(tmp_path: Path) -> None:
    """The check itself: the import that broke bench_write.py is reported."""
    script = tmp_path / "bench_old.py"
    script.write_text(
        "import cytearc_vfs as cv\n"
        "def child():\n"
        "    from cytearc_vfs import writer as cv_writer\n"
        "    from cytearc_vfs.write import writer\n"
        "    wrap(writer, 'no_such_function')\n"
        "    cv.no_such_name\n"
    )
    assert _problems(script) == [
        "line 3: cytearc_vfs has no writer",
        "line 5: writer has no 'no_such_function' (named by string)",
        "line 6: cv.no_such_name does not exist",
    ]
