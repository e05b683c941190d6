"""Writers hold their memory budget: peak traced bytes <= mem_budget + BUDGET_ALLOWANCE.

Each writer (``write_counts`` from numpy, scipy, an AnnData in memory and an
AnnData Zarr store; ``repack``) writes to a local directory and to a
loopback S3 server, at a few budgets and input shapes, with Python's
allocations traced; the input the caller holds is not counted. The S3
server runs in a process of its own (moto's server mode): in this process
it would keep every object written in traced memory. A budget too small is
refused before the destination exists, naming the smallest that works, and
that budget then holds.
"""

from __future__ import annotations

import gc
import re
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from cytearc_vfs_adapters.anndata import AnnDataContainer
from zarr.core.buffer import Buffer
from zarr.storage import MemoryStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.format.layout import LayoutTooLargeError
from cytearc_vfs.write.budget import BUDGET_ALLOWANCE

MiB = 1 << 20
#: (cells, features, density) of the inputs: tall, wide and dense-ish.
SHAPES = {"tall": (20_000, 200, 0.1), "wide": (300, 20_000, 0.1), "dense": (3_000, 1_000, 0.5)}
BUDGETS = [12 * MiB, 32 * MiB]


@dataclass(frozen=True)
class Destination:
    """Where a write goes: a new location and its storage options each time."""

    kind: str
    new: Callable[[], tuple[Any, dict[str, Any] | None]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def s3_process() -> Iterator[dict[str, Any]]:
    """moto's S3 server in a process of its own, on loopback."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("moto's S3 server did not start on loopback")
                time.sleep(0.1)
        yield {
            "endpoint": f"http://127.0.0.1:{port}",
            "access_key_id": "testing-key",
            "secret_access_key": "testing-secret",
            "region": "us-east-1",
            "client_options": {"allow_http": True},
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(params=["local", "s3"])
def destination(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Destination:  # the S3 server starts only for the tests that use it
    if request.param == "local":
        return Destination("local", lambda: (tmp_path / f"{uuid.uuid4().hex}.zarr", None))
    options: dict[str, Any] = request.getfixturevalue("s3_process")

    def new() -> tuple[str, dict[str, Any]]:
        bucket = f"bkt-{uuid.uuid4().hex[:12]}"
        put = urllib.request.Request(f"{options['endpoint']}/{bucket}", method="PUT")
        urllib.request.urlopen(put, timeout=10).close()
        return f"s3://{bucket}/store", options

    return Destination("s3", new)


def counts(shape: str, seed: int = 0) -> sp.csr_array:
    n_cells, n_features, density = SHAPES[shape]
    rng = np.random.default_rng(seed)
    matrix = sp.random_array(
        (n_cells, n_features), density=density, format="csr", dtype=np.float64, rng=rng
    )
    matrix.data = np.ceil(matrix.data * 300)  # uint16 counts
    return matrix


def traced_peak(write: Callable[[], object]) -> int:
    """Peak traced bytes of ``write`` above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        write()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


def smallest_budget(error: BaseException) -> int:
    """The smallest budget a refusal names, in bytes."""
    found = re.search(r"\((\d+) bytes\)", str(error))
    assert found, f"the refusal names no smallest budget: {error}"
    return int(found[1])


class NothingWrittenError(Exception):
    """Raised by :class:`RefusesWrites` at the destination's first write."""


class RefusesWrites(WrapperStore[MemoryStore]):
    """Wraps an empty store and fails its first write: a write aimed at it runs every
    check (the destination's, the input's, the layout's) and stops there."""

    async def set(self, key: str, value: Buffer) -> None:
        raise NothingWrittenError(key)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        raise NothingWrittenError(key)


def layout_for(write: Callable[..., object], budget: int) -> cv.LayoutPolicy | None:
    """The layout a refusal at ``budget`` names (``None``: the default fits).

    ``write(destination, **options)`` is aimed at a :class:`RefusesWrites`: the
    layout is checked before the destination is created, so a layout that fits is
    answered by the destination's failed first write, without a whole write (the
    destination is checked before the input is read, so an occupied one would
    answer before the layout)."""
    try:
        write(RefusesWrites(MemoryStore()), mem_budget=budget)
    except LayoutTooLargeError as exc:
        refusal = str(exc)
    except NothingWrittenError:
        return None
    else:
        raise AssertionError("the write to a store that refuses writes succeeded")
    found = re.search(r"layout=LayoutPolicy\(unit_bytes=(\d+), chunk_bytes=(\d+)\)", refusal)
    assert found, f"no layout named: {refusal}"
    return cv.LayoutPolicy(int(found[1]), int(found[2]))


def _write_within(
    tmp_path: Path, destination: Destination, source: Any, budget: int, **options: Any
) -> None:
    """Write ``source`` at ``budget`` (in the layout a refusal names) and check the peak."""
    policy = layout_for(lambda to, **kw: cv.write_counts(to, source, **options, **kw), budget)
    location, storage = destination.new()
    peak = traced_peak(
        lambda: cv.write_counts(
            location,
            source,
            mem_budget=budget,
            layout=policy,
            storage_options=storage,
            **options,
        )
    )
    assert peak <= budget + BUDGET_ALLOWANCE, (
        f"{destination.kind}: peak {peak / MiB:.1f} MiB over budget {budget / MiB:.0f} MiB "
        f"+ allowance {BUDGET_ALLOWANCE / MiB:.0f} MiB"
    )
    reader = cv.VirtualArrayReader(cv.open_store(location, storage_options=storage))
    assert reader.shape == source.shape


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_write_counts_from_scipy_holds_its_budget(
    tmp_path: Path, destination: Destination, shape: str, budget: int
) -> None:
    _write_within(tmp_path, destination, counts(shape), budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_write_counts_from_numpy_holds_its_budget(
    tmp_path: Path, destination: Destination, budget: int
) -> None:
    _write_within(tmp_path, destination, counts("dense").toarray(), budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_write_counts_from_csc_counts_its_csr_copy(tmp_path: Path, budget: int) -> None:
    # a CSC input is copied into canonical CSR once, a copy held for the whole write
    x = sp.csc_array(counts("tall"))
    _write_within(
        tmp_path, Destination("local", lambda: (tmp_path / uuid.uuid4().hex, None)), x, budget
    )


def test_a_csc_copy_over_the_budget_is_refused(tmp_path: Path) -> None:
    x = sp.csc_array(counts("dense"))
    with pytest.raises(LayoutTooLargeError, match="smallest mem_budget that works") as refused:
        cv.write_counts(tmp_path / "s.zarr", x, mem_budget=12 * MiB)
    assert not (tmp_path / "s.zarr").exists()
    # the same counts in CSR: a halving of the layout fits 12 MiB; the copy does not
    assert smallest_budget(refused.value) > 12 * MiB
    assert layout_for(lambda to, **kw: cv.write_counts(to, counts("dense"), **kw), 12 * MiB)


def _adata(x: sp.csr_array) -> ad.AnnData:
    n, m = x.shape
    obs = pd.DataFrame({"depth": np.arange(n, dtype=np.float64)}, index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame(index=[f"g{i}" for i in range(m)])
    return ad.AnnData(X=sp.csr_matrix(x), obs=obs, var=var)


@pytest.mark.parametrize("budget", BUDGETS)
def test_write_counts_from_anndata_in_memory_holds_its_budget(
    tmp_path: Path, destination: Destination, budget: int
) -> None:
    _write_within(tmp_path, destination, _adata(counts("tall")), budget)


@pytest.mark.parametrize("budget", BUDGETS)
def test_write_counts_from_an_anndata_zarr_store_holds_its_budget(
    tmp_path: Path, destination: Destination, budget: int
) -> None:
    path = tmp_path / "in.zarr"
    _adata(counts("tall")).write_zarr(path)
    _write_within(tmp_path, destination, AnnDataContainer.open(path), budget)


def _csc_h5ad(path: Path) -> Path:
    """A CSC ``.h5ad`` of 20,000 x 1,000 with 400,000 stored entries: its row-major
    spill at the old fixed piece size (4M entries: all of them) held about 30 MiB."""
    n_cells, n_features = 20_000, 1_000
    rng = np.random.default_rng(7)
    x = sp.random_array(
        (n_cells, n_features), density=0.02, format="csc", dtype=np.float32, rng=rng
    )
    x.data = np.ceil(x.data * 30)
    data = _adata(sp.csr_array(x))
    data.X = sp.csc_matrix(x)
    data.write_h5ad(path)
    return path


@pytest.mark.parametrize("budget", BUDGETS[:1])  # the tighter one: each input is large
def test_write_counts_from_a_csc_h5ad_holds_its_budget(tmp_path: Path, budget: int) -> None:
    # the spill that serves a CSC element's row bands takes its piece size from the budget
    source = AnnDataContainer.open(_csc_h5ad(tmp_path / "in.h5ad"))
    _write_within(
        tmp_path, Destination("local", lambda: (tmp_path / uuid.uuid4().hex, None)), source, budget
    )


def test_a_csc_h5ad_too_large_for_the_budget_is_refused_naming_the_smallest(
    tmp_path: Path,
) -> None:
    path = _csc_h5ad(tmp_path / "in.h5ad")
    with pytest.raises(LayoutTooLargeError, match="row-major copy") as refused:
        cv.write_counts(tmp_path / "s.zarr", AnnDataContainer.open(path), mem_budget=1 * MiB)
    assert not (tmp_path / "s.zarr").exists()
    # a quarter of the budget named holds the spill's pointers and its least piece
    assert smallest_budget(refused.value) >= 4 * 8 * (20_000 + 2 * 1_000)


@pytest.mark.parametrize("budget", BUDGETS[:1])  # the tighter one: each input is large
def test_write_counts_from_a_dense_anndata_zarr_x_holds_its_budget(
    tmp_path: Path, budget: int
) -> None:
    # anndata's default dense Zarr X (chunks of thousands of rows in larger shards)
    # is read a few whole chunks at a time, not a band of rows across every column
    rng = np.random.default_rng(8)
    n_cells, n_features = 20_000, 400
    x = (rng.random((n_cells, n_features)) < 0.1) * rng.integers(1, 9, (n_cells, n_features))
    data = _adata(sp.csr_array(x.astype(np.float32)))
    data.X = x.astype(np.float32)
    data.write_zarr(tmp_path / "in.zarr")
    del data, x
    source = AnnDataContainer.open(tmp_path / "in.zarr")
    _write_within(
        tmp_path, Destination("local", lambda: (tmp_path / uuid.uuid4().hex, None)), source, budget
    )


@pytest.mark.parametrize("budget", [8 * MiB, 24 * MiB])
def test_repack_holds_its_budget(tmp_path: Path, destination: Destination, budget: int) -> None:
    source = tmp_path / "source.zarr"
    # a 4 MiB unit: at these budgets some are kept (copied) and some halved (rewritten)
    cv.write_counts(source, counts("dense"), layout=("4M", "256K"))
    location, storage = destination.new()
    peak = traced_peak(
        lambda: cv.repack(source, location, mem_budget=budget, destination_storage_options=storage)
    )
    assert peak <= budget + BUDGET_ALLOWANCE, f"peak {peak / MiB:.1f} MiB"
    reader = cv.VirtualArrayReader(cv.open_store(location, storage_options=storage))
    assert reader.shape == SHAPES["dense"][:2]


def test_a_budget_too_small_is_refused_naming_the_smallest_that_works(tmp_path: Path) -> None:
    x = counts("tall")
    with pytest.raises(LayoutTooLargeError, match=r"raise mem_budget to at least") as refused:
        cv.write_counts(tmp_path / "s.zarr", x, mem_budget=MiB)
    assert not (tmp_path / "s.zarr").exists()  # refused before anything was written
    least = smallest_budget(refused.value)
    with pytest.raises(LayoutTooLargeError):
        cv.write_counts(tmp_path / "s.zarr", x, mem_budget=least - 1)
    assert not (tmp_path / "s.zarr").exists()
    peak = traced_peak(lambda: cv.write_counts(tmp_path / "s.zarr", x, mem_budget=least))
    assert peak <= least + BUDGET_ALLOWANCE


def test_a_layout_over_the_budget_names_the_budget_it_needs(tmp_path: Path) -> None:
    x = counts("dense")
    with pytest.raises(LayoutTooLargeError, match="largest halving that fits") as refused:
        cv.write_counts(tmp_path / "s.zarr", x, mem_budget=8 * MiB)
    assert not (tmp_path / "s.zarr").exists()
    needed = smallest_budget(refused.value)
    peak = traced_peak(lambda: cv.write_counts(tmp_path / "s.zarr", x, mem_budget=needed))
    assert peak <= needed + BUDGET_ALLOWANCE


def test_repack_refuses_a_budget_too_small_before_writing(tmp_path: Path) -> None:
    source = tmp_path / "source.zarr"
    cv.write_counts(source, counts("dense"), layout=("4M", "256K"))
    with pytest.raises(ValueError, match=r"mem_budget") as refused:
        cv.repack(source, tmp_path / "out.zarr", mem_budget=64 << 10)
    assert re.search(r"\d+ bytes|at least", str(refused.value))
    assert not (tmp_path / "out.zarr").exists()


def test_the_write_behind_holds_its_share_of_the_budget(tmp_path: Path) -> None:
    from cytearc_vfs.write.budget import held_bytes
    from cytearc_vfs.write.destinations import create_destination
    from cytearc_vfs.write.write_behind import MAX_HELD_BYTES, WriteBehindStore

    root = create_destination(
        tmp_path / "d.zarr", overwrite=False, writer="test", held_bytes=held_bytes(16 * MiB)
    )
    assert isinstance(root.store, WriteBehindStore)
    assert root.store.max_bytes == 2 * MiB
    assert held_bytes(4 << 30) == MAX_HELD_BYTES
