"""The import contracts of pyproject.toml hold, and catch an upward import.

``lint-imports`` (import-linter) checks that the core never imports its
adapters or the conformance suite and that its layers only import downward
(docs/architecture.md). The second test plants an upward import in a copy of
the packages and expects the check to fail, so a contract that checks
nothing cannot pass unnoticed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        str(root / part) for part in ("", "adapters", "conformance")
    )
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _copy(target: Path) -> Path:
    shutil.copytree(ROOT / "cytearc_vfs", target / "cytearc_vfs")
    for folder, package in (
        ("adapters", "cytearc_vfs_adapters"),
        ("conformance", "cytearc_vfs_conformance"),
    ):
        shutil.copytree(ROOT / folder / package, target / folder / package)
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def test_contracts_hold() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    with (copy / "cytearc_vfs" / "format" / "paths.py").open("a") as module:
        module.write(
            "\nfrom ..read import reader  # planted: the format layer importing the reader\n"
        )
    result = _lint(copy)
    assert result.returncode != 0
    assert "Layers of the core" in result.stdout and "BROKEN" in result.stdout


def test_the_core_importing_an_adapter_breaks_the_contract(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    with (copy / "cytearc_vfs" / "format" / "sizes.py").open("a") as module:
        module.write("\nimport cytearc_vfs_adapters  # planted\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "never imports its adapters" in result.stdout


def _layers() -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_the_layers_name_every_subpackage_and_nothing_else() -> None:
    subpackages = {path.parent.name for path in (ROOT / "cytearc_vfs").glob("*/__init__.py")}
    loose = {path.stem for path in (ROOT / "cytearc_vfs").glob("*.py") if path.stem != "__init__"}
    assert loose == {"errors"}, "a module outside the subpackages: give it its concept's room"
    assert sorted(_layers()) == sorted(subpackages)


def test_a_sideways_import_breaks_the_layers(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    with (copy / "cytearc_vfs" / "read" / "gather.py").open("a") as module:
        module.write("\nfrom ..write import writer  # planted: the reader importing a writer\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "Layers of the core" in result.stdout and "BROKEN" in result.stdout


def test_only_the_command_line_may_import_adapters() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "forbidden" and "cytearc_vfs_adapters" in c["forbidden_modules"]
    ]
    subpackages = {path.parent.name for path in (ROOT / "cytearc_vfs").glob("*/__init__.py")}
    expected = {f"cytearc_vfs.{name}" for name in subpackages - {"cli"}} | {"cytearc_vfs.errors"}
    assert set(contract["source_modules"]) == expected
