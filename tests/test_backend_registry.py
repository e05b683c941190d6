"""The core finds its backends through entry points, once, whichever thread asks first."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import scipy.sparse as sp

import cytearc_vfs as cv


def test_concurrent_first_opens_all_find_the_backends(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    script = textwrap.dedent(
        f"""
        from concurrent.futures import ThreadPoolExecutor
        from cytearc_vfs.remote.locations import open_location
        with ThreadPoolExecutor(16) as pool:
            stores = list(pool.map(lambda _: open_location({str(tmp_path / "s.zarr")!r}, read_only=True), range(64)))
        print(len(stores))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "64"


def test_importing_the_package_loads_neither_zarr_nor_anndata() -> None:
    script = (
        "import sys, cytearc_vfs; "
        "print(sorted(m for m in ('zarr', 'anndata', 'pandas', 'scipy', 'dask') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_public_names_are_what_they_say_whatever_was_imported_first() -> None:
    """A submodule named like a public function must not shadow it on the package."""
    script = (
        "import importlib, pkgutil, types, cytearc_vfs as cv\n"
        "for info in pkgutil.walk_packages(cv.__path__, 'cytearc_vfs.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "bad = [n for n in cv.__all__ if isinstance(getattr(cv, n), types.ModuleType)]\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_packages_ship_py_typed() -> None:
    """A user's mypy sees the package's types (PEP 561)."""
    from importlib.resources import files

    for package in ("cytearc_vfs", "cytearc_vfs_adapters", "cytearc_vfs_conformance"):
        assert files(package).joinpath("py.typed").is_file(), package
