"""Shared fixtures: real local directories, small generated count matrices."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, settings

# CI draws 25 cases per property (each run draws new ones, so coverage grows
# across runs): at 40, the composite property test alone took 78 s of a suite
# that must finish within 15 minutes on 2 cores
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


#: glibc tunables that keep freed memory in each process: large blocks come from the
#: heap, not mmap, and the heap is never trimmed back to the kernel.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}


def pytest_configure(config: pytest.Config) -> None:
    """Test processes keep the memory they free (the workers and every process a test
    starts inherit these variables; the suite's own, set outside, win).

    On VMs that report free pages to their host (virtio-balloon, as the machine this
    was measured on), memory handed back to the kernel is taken by the host, and
    touching a fresh block costs up to 100x more (368 MB took 2-5 s instead of 0.05 s). The
    suite allocates and frees large arrays all the time: measured on its real-data
    modules, 75 s became 67-70 s (the kernel's time, 31 s, became 19-23 s). Peak
    memory is unchanged.
    """
    for name, value in KEEP_FREED_MEMORY.items():
        os.environ.setdefault(name, value)
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        compile_project_bytecode()


#: The project's own source folders, whose bytecode the suite's processes share.
PROJECT_FOLDERS = ("cytearc_vfs", "adapters", "conformance", "tests")


def compile_project_bytecode() -> None:
    """Write the bytecode of the project's own modules once, before any test process starts.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on the CI machines), no process
    writes bytecode, so every process the suite starts (its workers, each
    ``cytearc-vfs`` command, each crash sweep's child: hundreds) compiled the
    package from source again: 0.25 s of a 2.2 s command, measured. Those
    processes still read bytecode that exists. The installed packages have
    theirs already (``uv sync --compile-bytecode`` in ``.ci/run``). A folder
    that cannot be written (a read-only checkout) is skipped as it is.
    """
    if not sys.dont_write_bytecode:
        return  # each process writes what it compiles, as usual
    import compileall

    root = Path(__file__).resolve().parent.parent
    for folder in PROJECT_FOLDERS:
        compileall.compile_dir(root / folder, quiet=2, rx=re.compile(r"node_modules"))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the machine's cores, at most 8.

    About a quarter of the suite's time is spent waiting (on the command-line
    processes it starts, the loopback servers, the crash sweeps' children).
    On 2 cores: 2 workers took about 1,000 s, 3 workers 859-961 s, and 4
    workers 750 s with 95% of both cores busy (the same machine, one run after
    the other).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(8, (cores or 1) + 2)


def realistic_counts(
    n_cells: int, n_features: int, *, density: float = 0.05, seed: int = 0, dtype: str = "float32"
) -> sp.csr_array:
    """Sparse counts of realistic shape: mostly 1-3 with a long tail."""
    rng = np.random.default_rng(seed)
    nnz = int(n_cells * n_features * density)
    rows = rng.integers(0, n_cells, nnz)
    cols = rng.integers(0, n_features, nnz)
    values = rng.geometric(0.45, nnz).astype(dtype)
    matrix = sp.coo_array((values, (rows, cols)), shape=(n_cells, n_features)).tocsr()
    matrix.sum_duplicates()
    return sp.csr_array(matrix)


@pytest.fixture
def counts() -> sp.csr_array:
    """A 300 x 120 realistic sparse matrix."""
    return realistic_counts(300, 120, density=0.08)


@pytest.fixture
def snapshot_tree():
    """Return a function listing every file under a directory with its bytes."""

    def snapshot(root: Path) -> dict[str, bytes]:
        if not root.exists():
            return {}
        return {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    return snapshot


from cloud_servers import (  # noqa: E402,F401  (fixture re-exports)
    azure_backend,
    cloud,
    gcs_backend,
    http_backend,
    https_backend,
    s3_backend,
)
from s3_server import s3_proxy, s3_server  # noqa: E402,F401  (fixture re-exports)

# rule / pending markers and the outcomes the conformance report reads
pytest_plugins = ["cytearc_vfs_conformance.pytest_plugin"]
