"""zarr's store state machine, through the conformance harness, on the writable
stores: a composite's writable area and a mounted target.

Both run over an in-memory copy of a real composite or target (zarr's random
keys may name a file and a directory alike, which a local filesystem cannot
hold), and over real local sources. Runs are short (a few examples of a
few dozen steps) so the suite stays fast on two cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts
from cytearc_vfs_conformance.stateful import OverlayStoreStateMachine
from hypothesis import HealthCheck, settings
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, MemoryStore

import cytearc_vfs as cv
from cytearc_vfs.format.paths import AssayPaths
from cytearc_vfs.format.source_store import verify_assay

PROTO = default_buffer_prototype()
PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
RUNS = settings(
    max_examples=8,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _in_memory(root: Path) -> MemoryStore:
    async def copy() -> MemoryStore:
        local, memory = LocalStore(root, read_only=True), MemoryStore()
        async for key in local.list():
            value = await local.get(key, prototype=PROTO)
            assert value is not None
            await memory.set(key, value)
        return memory

    return sync(copy())


@pytest.fixture(scope="module")
def writable_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("machines")
    for name, seed in (("a", 4), ("b", 5)):
        cv.write_counts(base / f"{name}.zarr", realistic_counts(30, 10, density=0.25, seed=seed))
    cv.create_composite(base / "comp.zarr", {"a": base / "a.zarr", "b": base / "b.zarr"})
    source = cv.open_store(base / "a.zarr", mode="r+")
    with cv.publish_artifact(source, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.zeros((30, 2)))
    cv.mount_datastore(base / "a.zarr", base / "tgt.zarr")
    return {"composite": base / "comp.zarr", "target": base / "tgt.zarr", "source": base / "a.zarr"}


def _composite(paths: dict[str, Path]) -> Store:
    return cv.CompositeStore.from_location(_in_memory(paths["composite"]), mode="r+")


def _mount(paths: dict[str, Path]) -> Store:
    source = LocalStore(paths["source"], read_only=True)
    return cv.MountStore(
        _in_memory(paths["target"]),
        source,
        cv.MountStore.from_location(paths["target"]).record,
        {"RNA": verify_assay(source, AssayPaths("RNA"), where="source")},
    )


@pytest.mark.parametrize("build", [_composite, _mount], ids=["composite", "mount"])
def test_store_state_machine(writable_stores: dict[str, Path], build: object) -> None:
    """Random writes, reads, deletes and listings match a dict model plus the
    store's own keys, which never change; clear() is always refused."""
    assert callable(build)

    class Machine(OverlayStoreStateMachine):
        def __init__(self) -> None:
            super().__init__(build(writable_stores))

    Machine.TestCase.settings = RUNS
    Machine.TestCase().runTest()
