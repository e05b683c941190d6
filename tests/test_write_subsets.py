"""Crash safety of the concurrent writes: any subset of them, without the commit, is refused.

A writer's writes between its marker and its commit go out together
(``write/write_behind.py``), so a crash can leave any subset of them stored,
not only a prefix (which ``tests/test_crash_sweep.py`` kills at). Here each
writer writes once into a real directory through :class:`RecordingStore`,
which records every write and delete in the order the store finished them.
Then, for many random subsets of the writes before the commit, and for
every group the subset of all writes but those below it, a fresh directory
receives the first write (the marker: stored before anything else goes
out) and that subset: every open must refuse it with
``IncompleteStoreError``, and ``check_destination(overwrite=True)`` must
accept it. The full record replayed opens and reads the input.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts
from zarr.core.buffer import Buffer, cpu
from zarr.core.sync import sync
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.format.records import PENDING_STORE_ATTR
from cytearc_vfs.write.destination_checks import check_destination

SUBSETS = 25
#: The writer each refusal names, where the parameter is not that name.
NAMES = {
    "write_counts_workspace": "write_counts",
    "write_counts_anndata": "write_counts",
    "repack_mount": "repack",
    "repack_workspace": "repack",
    "mount_datastore_workspace": "mount_datastore",
    "create_composite_workspace": "create_composite",
}


class RecordingStore(WrapperStore[LocalStore]):
    """A LocalStore that records each write (key, bytes) and delete (key, None) as it finishes."""

    def __init__(self, store: LocalStore) -> None:
        super().__init__(store)
        self.record: list[tuple[str, bytes | None]] = []

    def _with_store(self, store: LocalStore) -> RecordingStore:
        clone = type(self)(store)
        clone.record = self.record
        return clone

    async def set(self, key: str, value: Buffer) -> None:
        await self._store.set(key, value)
        self.record.append((key, value.to_bytes()))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        # the destination's root marker (recorded as written: the destination was empty)
        if not await self._store.exists(key):
            await self._store.set_if_not_exists(key, value)
            self.record.append((key, value.to_bytes()))

    async def delete(self, key: str) -> None:
        await self._store.delete(key)
        self.record.append((key, None))


def _replay(where: Path, writes: list[tuple[str, bytes | None]]) -> None:
    store = LocalStore(where)
    for key, value in writes:
        if value is None:
            sync(store.delete(key))
        else:
            sync(store.set(key, cpu.Buffer.from_bytes(value)))


def _is_commit(key: str, value: bytes | None) -> bool:
    if key != "zarr.json" or value is None:
        return False
    return PENDING_STORE_ATTR not in json.loads(value).get("attributes", {})


def _writers(tmp_path: Path) -> dict[str, Any]:
    a = realistic_counts(240, 90, density=0.08, seed=11)
    b = realistic_counts(120, 90, density=0.08, seed=12)
    genes = [f"gene{i}" for i in range(90)]
    layout = (8192, 2048)
    cv.write_counts(tmp_path / "a.zarr", a, features=genes, layout=layout)
    cv.write_counts(
        tmp_path / "b.zarr", b, cells=[f"b{i}" for i in range(120)], features=genes, layout=layout
    )
    mount = tmp_path / "mount.zarr"
    provenance = {"operation": "pca", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(
        cv.mount_datastore(tmp_path / "a.zarr", mount),
        "RNA/artifacts",
        "pca",
        provenance=provenance,
    ) as art:
        art.write_array("embedding", np.ones((240, 2)))
    adata = _anndata(a, genes)
    ws_source = tmp_path / "ws.zarr"
    cv.write_counts(ws_source, a, features=genes, layout=layout, workspace="ws1")
    return {
        "write_counts": (lambda dest: cv.write_counts(dest, a, layout=layout), a.toarray()),
        # obs columns of three kinds (categorical, float, bool), counts from raw/X
        "write_counts_anndata": (
            lambda dest: cv.write_counts(dest, adata, layer="raw/X", layout=layout),
            a.toarray(),
        ),
        # the workspace layout: its workspace group may land before its cell table
        "write_counts_workspace": (
            lambda dest: cv.write_counts(dest, a, layout=layout, workspace="ws1"),
            a.toarray(),
        ),
        "create_composite": (
            lambda dest: cv.create_composite(
                dest, {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}
            ).close(),
            np.vstack([a.toarray(), b.toarray()]),
        ),
        "mount_datastore": (
            lambda dest: cv.mount_datastore(tmp_path / "a.zarr", dest),
            a.toarray(),
        ),
        "repack": (lambda dest: cv.repack(tmp_path / "a.zarr", dest), a.toarray()),
        # the mount's artifact and the source's counts, gathered
        "repack_mount": (lambda dest: cv.repack(mount, dest), a.toarray()),
        # stores of the workspace layout, copied, mounted and composed
        "repack_workspace": (lambda dest: cv.repack(ws_source, dest), a.toarray()),
        "mount_datastore_workspace": (
            lambda dest: cv.mount_datastore(ws_source, dest, workspace="ws1"),
            a.toarray(),
        ),
        "create_composite_workspace": (
            lambda dest: cv.create_composite(
                dest,
                {"a": ws_source, "b": tmp_path / "b.zarr"},
                source_workspaces={"a": "ws1"},
            ).close(),
            np.vstack([a.toarray(), b.toarray()]),
        ),
    }


def _anndata(counts: Any, genes: list[str]) -> Any:
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    n = counts.shape[0]
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical([f"b{i % 3}" for i in range(n)]),
            "score": np.linspace(0.0, 1.0, n),
            "kept": np.arange(n) % 2 == 0,
        },
        index=[f"cell{i}" for i in range(n)],
    )
    var = pd.DataFrame(index=genes)
    adata = ad.AnnData(X=sp.csr_matrix(counts * 0.5), obs=obs, var=var)
    adata.raw = ad.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var)
    return adata


@pytest.mark.parametrize(
    "writer",
    [
        "write_counts",
        "write_counts_workspace",
        "write_counts_anndata",
        "create_composite",
        "mount_datastore",
        "repack",
        "repack_mount",
        "repack_workspace",
        "mount_datastore_workspace",
        "create_composite_workspace",
    ],
)
def test_any_subset_of_the_writes_before_the_commit_is_refused(tmp_path: Path, writer: str) -> None:
    write, expected = _writers(tmp_path)[writer]
    (tmp_path / "written").mkdir()
    recording = RecordingStore(LocalStore(tmp_path / "written"))
    write(recording)
    record = recording.record
    commit = max(i for i, (key, value) in enumerate(record) if _is_commit(key, value))
    assert commit == len(record) - 1  # nothing is stored after the commit
    marker, middle = record[0], record[1:commit]
    assert marker[0] == "zarr.json" and not _is_commit(*marker)
    assert len(middle) > 10
    rng = random.Random(writer)
    subsets = [
        [w for w in middle if rng.random() < rng.choice((0.1, 0.5, 0.9, 1.0))]
        for _ in range(SUBSETS)
    ]
    # and every write but those below one group: a group's members not yet stored
    # while its parent's other members are (a workspace without its cell table)
    groups = sorted({key.rsplit("/", 1)[0] for key, _ in middle if key.endswith("/zarr.json")})
    subsets += [[w for w in middle if not w[0].startswith(f"{group}/")] for group in groups]
    for number, chosen in enumerate(subsets):
        where = tmp_path / f"subset{number}.zarr"
        _replay(where, [marker, *chosen])
        with pytest.raises(cv.IncompleteStoreError, match=NAMES.get(writer, writer)):
            cv.open_store(where)
        assert check_destination(where, overwrite=True) == "w"
    whole = tmp_path / "whole.zarr"
    _replay(whole, record)
    store = cv.open_store(whole)
    # a composite's cells are its own (no workspace); the others keep the source's
    workspace = "ws1" if writer.endswith("_workspace") and "composite" not in writer else None
    reader = (
        store.reader()
        if hasattr(store, "reader")
        else cv.VirtualArrayReader(whole, workspace=workspace)
    )
    np.testing.assert_array_equal(reader.read(), expected)
