"""MountStore: zarr's StoreTests, resolution rules, source immutability, escaping keys."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from store_copies import copy_stores
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.storage import LocalStore
from zarr.testing.store import StoreTests

import cytearc_vfs as cv
from cytearc_vfs.format.paths import AssayPaths
from cytearc_vfs.format.source_store import verify_assay
from cytearc_vfs.mount.records import MountRecord

PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}


def make_source(path: Path, *, with_artifact: bool = True) -> str | None:
    cv.write_counts(path, realistic_counts(60, 15, density=0.2, seed=3))
    if not with_artifact:
        return None
    store = cv.open_store(path, mode="r+")
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(120, dtype=np.float64).reshape(60, 2))
    return art.artifact_id


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def mounted_source(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, MountRecord, dict[str, Any]]:
    """A real source, its mount's verified record and its verified assay: built
    once, as the suite only reads them (the source is opened read-only)."""
    root = tmp_path_factory.mktemp("contract")
    make_source(root / "src.zarr", with_artifact=False)
    mount = cv.mount_datastore(root / "src.zarr", root / "tgt.zarr")
    infos = {
        "RNA": verify_assay(
            LocalStore(root / "src.zarr", read_only=True), AssayPaths("RNA"), where="src"
        )
    }
    return root / "src.zarr", mount.record, infos


class TestMountStoreContract(StoreTests[cv.MountStore, cpu.Buffer]):
    """zarr's own store test-suite, on a real mount of a real source."""

    store_cls = cv.MountStore
    buffer_cls = cpu.Buffer

    async def set(self, store: cv.MountStore, key: str, value: Buffer) -> None:
        await store.target.set(key, value)

    async def get(self, store: cv.MountStore, key: str) -> Buffer:
        value = await store.target.get(key, prototype=default_buffer_prototype())
        assert value is not None
        return value

    @pytest.fixture
    def store_kwargs(
        self, tmp_path: Path, mounted_source: tuple[Path, MountRecord, dict[str, Any]]
    ) -> dict[str, Any]:
        source, record, infos = mounted_source
        # The suite expects to start from an empty store: give the mount's
        # verified record and source an empty target of its own.
        return {
            "target": LocalStore(tmp_path / "suite-target"),
            "source": LocalStore(source, read_only=True),
            "record": record,
            "infos": infos,
        }

    def test_store_repr(self, store: cv.MountStore) -> None:
        assert "MountStore" in repr(store)

    def test_store_supports_writes(self, store: cv.MountStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: cv.MountStore) -> None:
        assert store.supports_listing

    async def test_clear(self, store: cv.MountStore) -> None:
        # clear() is delete_dir(""), which would remove the root document and
        # its matrixSource record: every store of the package refuses it
        # (docs/errors.md, "Keys"); the suite's version expects it to empty the store.
        await self.set(store, "key", self.buffer_cls.from_bytes(b"something"))
        with pytest.raises(ValueError, match="deleting the whole store"):
            await store.clear()
        assert await store.exists("key")

    async def test_serializable_store(self, store: cv.MountStore) -> None:
        """A pickled mount is opened (verified) again where it is unpickled
        (tests/test_mount_pickle.py round-trips real mounts): this suite's store
        puts a verified record over an empty target, which holds no matrixSource
        record, so it is refused as an open of that target is."""
        import pickle

        data = pickle.dumps(store)
        with pytest.raises(ValueError, match="is not a mounted target"):
            pickle.loads(data)


# ------------------------------------------------------------------ rules


@pytest.fixture(scope="module")
def pristine_mount(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A source with an artifact and its mount, built once and never opened after:
    each test gets a copy (tests change the source, the target and its record)."""
    root = tmp_path_factory.mktemp("pristine")
    artifact_id = make_source(root / "src.zarr")
    assert artifact_id is not None
    cv.mount_datastore(root / "src.zarr", root / "tgt.zarr").close()
    return root, artifact_id


@pytest.fixture
def mounted(
    pristine_mount: tuple[Path, str], tmp_path: Path
) -> tuple[cv.MountStore, Path, Path, str]:
    template, artifact_id = pristine_mount
    copy_stores(template, tmp_path)  # the record's source location is the copy's
    mount = cv.open_store(tmp_path / "tgt.zarr", mode="r+")
    assert isinstance(mount, cv.MountStore)
    return mount, tmp_path / "src.zarr", tmp_path / "tgt.zarr", artifact_id


def test_source_artifacts_read_through_with_identity(mounted) -> None:
    mount, _, target, artifact_id = mounted
    found = cv.find_artifact(mount, "RNA/artifacts", "pca", PROVENANCE)
    assert found is not None and found.artifact_id == artifact_id
    data = zarr.open_array(mount, path=f"RNA/artifacts/pca/{artifact_id}/data", mode="r")
    np.testing.assert_array_equal(data[:], np.arange(120).reshape(60, 2))
    # the target opened directly shows only its own artifacts
    assert cv.list_artifacts(target, "RNA/artifacts") == []
    assert artifact_id not in zarr.open_group(target, path="RNA/artifacts", mode="r")


def test_listings_are_unions_and_writes_land_in_the_target(mounted) -> None:
    mount, source, target, artifact_id = mounted
    before = tree_hashes(source)
    with cv.publish_artifact(
        mount, "RNA/artifacts", "pca", provenance={**PROVENANCE, "parameters": {"k": 3}}
    ) as mine:
        mine.write_array("data", np.zeros((60, 3)))
    with cv.publish_artifact(mount, "artifacts", "cell_selection", provenance=PROVENANCE) as sel:
        sel.write_array("mask", np.ones(60, dtype=bool), finite=False)
    ids = {a.artifact_id for a in cv.list_artifacts(mount, "RNA/artifacts")}
    assert ids == {artifact_id, mine.artifact_id}
    assert {a.artifact_id for a in cv.list_artifacts(target, "RNA/artifacts")} == {mine.artifact_id}
    assert (target / "artifacts" / "cell_selection" / sel.artifact_id / "zarr.json").is_file()
    # a kind the source has already: the target holds its own kind document, so
    # zarr opening the target directly sees the target's artifact of that kind
    assert (target / "RNA" / "artifacts" / "pca" / "zarr.json").is_file()
    kind = zarr.open_group(target, path="RNA/artifacts/pca", mode="r")
    assert [name for name, _ in kind.groups()] == [mine.artifact_id]
    assert tree_hashes(source) == before


def test_outside_roots_never_fall_back(mounted) -> None:
    mount, _, _, _ = mounted
    group = zarr.open_group(mount, mode="r")
    assert "counts" not in group["RNA"]  # counts are the source's, read through the reader
    reader = cv.VirtualArrayReader(mount)
    assert reader.shape == (60, 15)


async def test_writes_into_source_groups_are_refused_and_source_unchanged(mounted) -> None:
    mount, source, _, artifact_id = mounted
    before = tree_hashes(source)
    buffer = default_buffer_prototype().buffer.from_bytes(b"x")
    for key in (
        f"RNA/artifacts/pca/{artifact_id}/zarr.json",
        f"RNA/artifacts/pca/{artifact_id}/data/c/0/0",
        f"RNA/artifacts/pca/{artifact_id}/new",
    ):
        with pytest.raises(PermissionError, match="belongs to the mounted source"):
            await mount.set(key, buffer)
        with pytest.raises(PermissionError, match="belongs to the mounted source"):
            await mount.delete(key)
    group = zarr.open_group(mount, path=f"RNA/artifacts/pca/{artifact_id}", mode="r+")
    with pytest.raises(PermissionError):
        group.attrs["complete"] = False
    assert tree_hashes(source) == before


async def test_matrix_source_record_is_protected(mounted) -> None:
    mount, _, _, _ = mounted
    root = zarr.open_group(mount, mode="r+")
    root.attrs["note"] = "fine"
    with pytest.raises(PermissionError, match="matrixSource"):
        root.attrs["matrixSource"] = {"location": "/elsewhere"}
    with pytest.raises(PermissionError):
        await mount.delete("zarr.json")


@pytest.mark.parametrize(
    "key",
    [
        "../escape",
        "RNA/../../escape",
        "/etc/passwd",
        "RNA\\..\\x",
        "RNA//x",
        "RNA/%2e%2e/%2E%2E/x",
        "./x",
        "RNA/artifacts/pca/%2e%2e/x",
    ],
)
async def test_escaping_keys_never_reach_outside(mounted, key: str, tmp_path: Path) -> None:
    mount, _, _, _ = mounted
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    buffer = default_buffer_prototype().buffer.from_bytes(b"escaped")
    with pytest.raises(ValueError, match="key"):
        await mount.set(key, buffer)
    with pytest.raises(ValueError, match="key"):
        await mount.get(key, prototype=default_buffer_prototype())
    with pytest.raises(ValueError, match="key"):
        await mount.delete(key)
    assert sorted(p.name for p in tmp_path.iterdir()) == outside_before
    assert not any(b"escaped" in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


# --------------------------------------------------------------- refusals


def test_mount_of_a_mount_refused(mounted, tmp_path: Path) -> None:
    _, _, target, _ = mounted
    with pytest.raises(cv.UnsupportedSourceError, match="mounts do not chain"):
        cv.mount_datastore(target, tmp_path / "again.zarr")
    assert not (tmp_path / "again.zarr").exists()


def test_mount_of_a_composite_refused(tmp_path: Path) -> None:
    make_source(tmp_path / "a.zarr", with_artifact=False)
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    with pytest.raises(cv.UnsupportedSourceError, match="composite: its counts are computed"):
        cv.mount_datastore(tmp_path / "c.zarr", tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()


def test_mount_of_pending_assay_refused(tmp_path: Path) -> None:
    make_source(tmp_path / "a.zarr", with_artifact=False)
    zarr.open_group(tmp_path / "a.zarr", mode="a").create_group(
        "GS", attributes={"cytearc:pending_assay": "x"}
    )
    with pytest.raises(cv.UnsupportedSourceError, match="pending"):
        cv.mount_datastore(tmp_path / "a.zarr", tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()


def test_a_password_in_the_source_url_is_refused_before_the_source_is_read(
    tmp_path: Path,
) -> None:
    """The record keeps the source's location, so a URL carrying user:password@ is
    refused, masked, before anything is asked of the source: a source that cannot be
    read must not be reported with the password in its message."""
    with pytest.raises(ValueError, match=r"KEY:\*\*\*@.*carries a password") as raised:
        cv.mount_datastore("memory://KEY:hunter2@absent", tmp_path / "m.zarr")
    assert "hunter2" not in str(raised.value)
    assert not (tmp_path / "m.zarr").exists()


def test_destination_overlapping_source_refused(tmp_path: Path) -> None:
    make_source(tmp_path / "a.zarr", with_artifact=False)
    with pytest.raises(ValueError, match="overlaps"):
        cv.mount_datastore(tmp_path / "a.zarr", tmp_path / "a.zarr" / "inner")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        cv.mount_datastore(tmp_path / "a.zarr", tmp_path / "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


# -------------------------------------------------------- fail-closed opens


def edit_record(target: Path, change) -> None:
    document = json.loads((target / "zarr.json").read_text())
    change(document["attributes"]["matrixSource"])
    (target / "zarr.json").write_text(json.dumps(document))


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(addedLater=1),
        lambda r: r.pop("workspace"),
        lambda r: r["assays"]["RNA"].update(extra=True),
        lambda r: r["assays"]["RNA"].pop("requiresTranspose"),
        lambda r: r["assays"]["RNA"].update(requiresTranspose="yes"),
        lambda r: r.update(location="relative/path"),
        lambda r: r.update(workspace=""),
        lambda r: r.update(workspace="../up"),
    ],
)
def test_record_shape_is_strict(mounted, change) -> None:
    _, _, target, _ = mounted
    edit_record(target, change)
    with pytest.raises(cv.RecordShapeError):
        cv.open_store(target)


def test_changed_source_refused(mounted) -> None:
    _, source, target, _ = mounted
    cv.write_counts(source, realistic_counts(60, 15, density=0.2, seed=99), overwrite=True)
    with pytest.raises(cv.IdentityMismatchError, match="changed after it was mounted") as caught:
        cv.open_store(target)
    # the remedy that works: overwrite=True never replaces a complete mount
    assert "mount the changed source at a new destination" in str(caught.value)
    with pytest.raises(FileExistsError, match="mounted target"):
        cv.mount_datastore(source, target, overwrite=True)


def test_missing_source_named(mounted) -> None:
    import shutil

    _, source, target, _ = mounted
    shutil.rmtree(source)
    with pytest.raises(OSError, match=str(source.resolve())):
        cv.open_store(target)


def test_record_round_trip(mounted) -> None:
    mount, _, _, _ = mounted
    assert MountRecord.from_json(mount.record.to_json(), where="x") == mount.record


def test_membership_columns_and_assay_types_are_copied(tmp_path: Path) -> None:
    make_source(tmp_path / "src.zarr", with_artifact=False)
    cells = zarr.open_group(tmp_path / "src.zarr", path="cellData", mode="a")
    cells.create_array(
        "RNA_I",
        data=np.arange(60) % 2 == 0,
        attributes={"role": "assay_membership", "assay": "RNA", "note": "kept"},
    )
    mount = cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "tgt.zarr")
    copied = zarr.open_array(tmp_path / "tgt.zarr", path="cellData/RNA_I", mode="r")
    assert copied.attrs.asdict() == {"role": "assay_membership", "assay": "RNA", "note": "kept"}
    np.testing.assert_array_equal(copied[:], np.arange(60) % 2 == 0)
    root = zarr.open_group(mount, mode="r")
    assert root.attrs["assayTypes"] == {"RNA": "RNA"}
    assert root.attrs["defaultAssay"] == "RNA"
    assert mount.record.assays["RNA"].requires_transpose is True
