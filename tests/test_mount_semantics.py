"""A mount used as an ordinary zarr client would use it: the spec's rules
("Mounted targets") checked through zarr's own API, where a store-level test
(test_mount_store.py, test_mount_state_machine.py) cannot see them."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from s3_server import S3Server
from store_copies import copy_stores
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location

PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A source with a PCA artifact and an empty ``umap`` kind, and its mount;
    built once, each test works on a copy."""
    root = tmp_path_factory.mktemp("semantics")
    cv.write_counts(root / "src.zarr", realistic_counts(60, 15, density=0.2, seed=3))
    store = cv.open_store(root / "src.zarr", mode="r+")
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(120, dtype=np.float64).reshape(60, 2))
    zarr.open_group(root / "src.zarr", mode="r+").create_group("RNA/artifacts/umap")
    cv.mount_datastore(root / "src.zarr", root / "tgt.zarr").close()
    return root, art.artifact_id


@pytest.fixture
def stores(pristine: tuple[Path, str], tmp_path: Path) -> tuple[Path, Path, str]:
    template, artifact_id = pristine
    copy_stores(template, tmp_path)
    return tmp_path / "src.zarr", tmp_path / "tgt.zarr", artifact_id


def open_mount(target: Path) -> cv.MountStore:
    mount = cv.open_store(target, mode="r+")
    assert isinstance(mount, cv.MountStore)
    return mount


def test_a_copied_kind_document_drops_the_sources_consolidated_metadata(stores) -> None:
    """A source whose kind group holds consolidated metadata: the target's copy
    of that document must not carry it, or zarr opening the target directly
    would list the source's artifacts (absent there) and hide the target's own
    (spec: "A target group opened directly ... shows only the target's own")."""
    source, target, source_id = stores
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(source), path="RNA/artifacts/pca")
    before = tree_hashes(source)
    mount = open_mount(target)
    recipe = {**PROVENANCE, "parameters": {"k": 3}}
    with cv.publish_artifact(mount, "RNA/artifacts", "pca", provenance=recipe) as mine:
        mine.write_array("data", np.zeros((60, 3)))
    document = json.loads((target / "RNA/artifacts/pca/zarr.json").read_text())
    assert document.get("consolidated_metadata") is None
    direct = zarr.open_group(target, path="RNA/artifacts/pca", mode="r")
    assert sorted(direct.keys()) == [mine.artifact_id]
    through = zarr.open_group(mount, path="RNA/artifacts/pca", mode="r")
    assert sorted(through.keys()) == sorted([mine.artifact_id, source_id])
    assert tree_hashes(source) == before


@pytest.mark.parametrize("path", ["RNA/artifacts/umap", "RNA/artifacts"])
def test_deleting_what_the_source_shows_is_refused_not_ignored(stores, path: str) -> None:
    """``del group[kind]`` of a kind the source holds (here empty, so no source
    artifact group is in the way) cannot take effect: the source's document
    would still show. It raises, as a delete inside a source group does,
    instead of returning while the next listing shows the kind again."""
    source, target, _ = stores
    before = tree_hashes(source)
    mount = open_mount(target)
    group = zarr.open_group(mount, mode="r+")
    parent, name = path.rsplit("/", 1)
    with pytest.raises(PermissionError, match="mounted source"):
        del group[path]
    assert name in zarr.open_group(mount, path=parent, mode="r")
    with pytest.raises(PermissionError, match="mounted source"):
        zarr.open_group(mount, path=path, mode="w")
    with pytest.raises(PermissionError, match="mounted source"):
        sync(mount.delete(f"{path}/zarr.json"))
    assert sync(mount.exists(f"{path}/zarr.json"))
    assert tree_hashes(source) == before


def _objects(url: str, options: dict) -> dict[str, bytes]:
    """Every object below ``url``, with its bytes."""
    store = open_location(url, read_only=True, storage_options=options)

    async def read() -> dict[str, bytes]:
        found = {}
        async for key in store.list():
            value = await store.get(key, prototype=default_buffer_prototype())
            assert value is not None
            found[key] = value.to_bytes()
        return found

    return sync(read())


def test_an_s3_source_under_a_local_target_as_a_zarr_client_sees_it(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The rules through zarr, with the source on (loopback) S3: union listings at
    every level without repeats, reads through, writes in the local target,
    deletes of what the source shows refused, the source's objects unchanged."""
    options = s3_server.storage_options()
    url = f"s3://{s3_server.new_bucket()}/src.zarr"
    cv.write_counts(url, realistic_counts(60, 15, density=0.2, seed=3), storage_options=options)
    store = cv.open_store(url, mode="r+", storage_options=options)
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(120, dtype=np.float64).reshape(60, 2))
    zarr.open_group(store, mode="r+").create_group("RNA/artifacts/umap")
    before = _objects(url, options)
    mount = cv.mount_datastore(url, tmp_path / "t.zarr", source_storage_options=options)
    recipe = {**PROVENANCE, "parameters": {"k": 3}}
    with cv.publish_artifact(mount, "RNA/artifacts", "pca", provenance=recipe) as mine:
        mine.write_array("data", np.zeros((60, 3)))

    async def listed(directory: str) -> list[str]:
        return [name async for name in mount.list_dir(directory)]

    assert sorted(sync(listed("RNA/artifacts"))) == ["pca", "umap", "zarr.json"]
    pca = sync(listed("RNA/artifacts/pca"))
    assert sorted(pca) == sorted([art.artifact_id, mine.artifact_id, "zarr.json"])
    keys = sync(_all_keys(mount))
    assert len(keys) == len(set(keys))
    root = zarr.open_group(mount, mode="r+")
    data = root[f"RNA/artifacts/pca/{art.artifact_id}/data"]
    assert isinstance(data, zarr.Array)
    np.testing.assert_array_equal(data[:], np.arange(120).reshape(60, 2))
    for path in ("RNA/artifacts/umap", f"RNA/artifacts/pca/{art.artifact_id}"):
        with pytest.raises(PermissionError, match="mounted source"):
            del root[path]
    del root[f"RNA/artifacts/pca/{mine.artifact_id}"]  # the target's own: deleted
    assert sorted(sync(listed("RNA/artifacts/pca"))) == sorted([art.artifact_id, "zarr.json"])
    assert (tmp_path / "t.zarr/RNA/artifacts/pca/zarr.json").is_file()
    assert _objects(url, options) == before
    mount.close()


async def _all_keys(mount: cv.MountStore) -> list[str]:
    return [key async for key in mount.list_prefix("")]


def test_a_prefix_listing_of_a_memory_source_keeps_to_the_prefix(tmp_path: Path) -> None:
    """A ``memory://`` source lists every key that starts with the string it is
    given: through the mount, ``list_prefix("RNA/artifacts/pca/")`` showed the
    source's ``pca2`` artifacts, and deleting the target's own ``pca`` kind was
    refused because of them."""
    from cytearc_vfs_adapters.backends import forget_memory

    name = f"mountsem-{tmp_path.name}"
    url = f"memory://{name}"
    try:
        cv.write_counts(url, realistic_counts(60, 15, density=0.2, seed=3))
        store = cv.open_store(url, mode="r+")
        with cv.publish_artifact(store, "RNA/artifacts", "pca2", provenance=PROVENANCE) as art:
            art.write_array("data", np.ones((60, 2)))
        mount = cv.mount_datastore(url, tmp_path / "t.zarr")
        with cv.publish_artifact(mount, "RNA/artifacts", "pca", provenance=PROVENANCE) as mine:
            mine.write_array("data", np.zeros((60, 2)))

        async def listed(prefix: str) -> list[str]:
            return [key async for key in mount.list_prefix(prefix)]

        for prefix in ("RNA/artifacts/pca/", "RNA/artifacts/pca"):
            keys = sync(listed(prefix))
            assert keys and all(key.startswith("RNA/artifacts/pca/") for key in keys)
        assert sync(listed("RNA/artifacts/pca2/"))
        del zarr.open_group(mount, mode="r+")["RNA/artifacts/pca"]  # the target's own kind
        assert not (tmp_path / "t.zarr/RNA/artifacts/pca").exists()
        assert [a.kind for a in cv.list_artifacts(mount, "RNA/artifacts")] == ["pca2"]
        mount.close()
    finally:
        forget_memory(name)


@pytest.mark.parametrize("path", ["RNA/counts", "RNA/countsT", "RNA/countSummaries/rowSums"])
def test_writing_where_the_source_counts_are_read_is_refused(stores, path: str) -> None:
    """A target array at a mounted assay's counts path would be what plain zarr
    reads there while this package reads the source's, and every later open
    refuses the target for it: the write is refused, not accepted and left to
    brick the next open. Other target tables stay writable."""
    _, target, _ = stores
    mount = open_mount(target)
    root = zarr.open_group(mount, mode="r+")
    with pytest.raises(PermissionError, match=r"counts at .* are the mounted source"):
        root.create_array(path, shape=(60,), dtype="float32")
    root.create_array("cellData/score", shape=(60,), dtype="float32")
    mount.close()
    reopened = open_mount(target)  # still opens: nothing was written at the counts path
    assert not (target / path).exists()
    assert "score" in zarr.open_group(reopened, path="cellData", mode="r")


@pytest.mark.parametrize("path", ["cellData/ids", "RNA/featureData/ids"])
def test_changing_the_pinned_ids_is_refused(stores, path: str) -> None:
    """The target's cell and feature ids are pinned by the mount record's dataset
    fingerprint: one overwrite or delete through zarr made every later open
    refuse the target, with all its artifacts. It is refused up front."""
    _, target, _ = stores
    before = tree_hashes(target)
    mount = open_mount(target)
    root = zarr.open_group(mount, mode="r+")
    with pytest.raises(PermissionError, match=r"ids .* pinned"):
        root.create_array(path, shape=(3,), dtype="int32", overwrite=True)
    with pytest.raises(PermissionError, match=r"ids .* pinned"):
        del root[path]
    with pytest.raises(PermissionError, match=r"ids .* pinned"):
        del root[path.rsplit("/", 1)[0]]
    ids = root[path]
    assert isinstance(ids, zarr.Array)
    with pytest.raises(PermissionError, match=r"ids .* pinned"):
        ids[0] = "renamed"
    mount.close()
    assert tree_hashes(target) == before
    open_mount(target).close()  # still opens


async def test_a_stray_target_key_inside_a_source_group_is_listed_once(stores) -> None:
    """A key that an outside edit left in the target inside a source artifact
    group (no group document of the target's) is read from the source (rule 2),
    so a listing shows it once, as the source's, not twice."""
    _, target, source_id = stores
    key = f"RNA/artifacts/pca/{source_id}/data/c/0/0"
    stray = target / key
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"stray")
    mount = open_mount(target)
    keys = [k async for k in mount.list_prefix("")]
    assert len(keys) == len(set(keys))
    assert keys.count(key) == 1
    value = await mount.get(key, prototype=default_buffer_prototype())
    assert value is not None and value.to_bytes() != b"stray"


def test_a_mounted_assays_type_keeps_its_countsT_need_through_the_mount(stores) -> None:
    """Changing a mounted assay's ``assayTypes`` entry through the mount to a type
    of another countsT need (RNA -> ADT) was written, and every later open then
    refused the target (RecordShapeError: the record says requiresTranspose).
    It is refused up front; other root attributes still change."""
    _, target, _ = stores
    mount = open_mount(target)
    root = zarr.open_group(mount, mode="r+")
    before = (target / "zarr.json").read_bytes()
    with pytest.raises(PermissionError, match="every later open would refuse the target"):
        root.attrs["assayTypes"] = {**root.attrs["assayTypes"], "RNA": "ADT"}
    with pytest.raises(PermissionError, match="not a preset"):
        root.attrs["assayTypes"] = {**root.attrs["assayTypes"], "RNA": "rna-ish"}
    assert (target / "zarr.json").read_bytes() == before
    # zarr's group object kept the refused attributes: open it again
    root = zarr.open_group(mount, mode="r+")
    root.attrs["note"] = "mine"
    mount.close()
    reopened = zarr.open_group(open_mount(target), mode="r")
    assert reopened.attrs["note"] == "mine" and reopened.attrs["assayTypes"]["RNA"] == "RNA"


def test_a_mounted_assay_keeps_its_is_assay_through_the_mount(stores) -> None:
    """Dropping ``is_assay`` from a mounted assay's group (or deleting its
    document) through the mount made every later open refuse the target
    (IncompleteStoreError); it is refused up front. Other attributes change."""
    _, target, _ = stores
    mount = open_mount(target)
    assay = zarr.open_group(mount, path="RNA", mode="r+")
    assay.attrs["note"] = "mine"
    with pytest.raises(PermissionError, match="is_assay"):
        del assay.attrs["is_assay"]
    with pytest.raises(PermissionError, match="is_assay"):
        sync(mount.delete("RNA/zarr.json"))
    mount.close()
    reopened = open_mount(target)
    assert zarr.open_group(reopened, path="RNA", mode="r").attrs["note"] == "mine"
