"""A mount's source artifact read by zarr (not through ``Artifact``) after the
source went away: the reads ``cytearc-vfs serve`` and ``mount-fs`` make.

``MountStore.get`` of a chunk key inside a group the source owned answered
``None`` once the source's files were gone, so zarr read the fill value
(zeros), and a served mount answered ``404``, which a client reads as zeros
too. A chunk the source does not hold is now checked against the group's
document (one ``exists``, trusted for a second): a group that is gone raises
``SourceGoneError``; an all-fill chunk of a group that is there still reads as
the fill value.
"""

from __future__ import annotations

import pickle
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.serve import StoreServer

import cytearc_vfs as cv
from cytearc_vfs.artifacts import artifact_reads
from cytearc_vfs.errors import SourceGoneError
from cytearc_vfs.mount import owners
from cytearc_vfs.mount.store import MountStore


def _mounted_ones(tmp_path: Path, values: np.ndarray) -> tuple[Path, Path, str]:
    """A source with an artifact array ``data`` of ``values``, mounted: (source, target,
    the array's path)."""
    source, target = tmp_path / "src.zarr", tmp_path / "mine.zarr"
    cv.write_counts(source, realistic_counts(20, 6, density=0.3, seed=4))
    recipe = {"operation": "ones", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(
        cv.open_store(source, mode="r+"), "RNA/artifacts", "ones", provenance=recipe
    ) as art:
        art.write_array("data", values, chunks=(5, 2))
    cv.mount_datastore(source, target).close()
    return source, target, f"{art.path}/data"


def _counted_sparse_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[np.ndarray, MountStore, str, list[str]]:
    """A mount over an artifact with two never-written (all-fill) chunks, whose
    source's ``exists`` calls are recorded and whose found groups are trusted for
    an hour: (values, mount, the array's path, the keys asked)."""
    values = np.ones((20, 2), np.float32)
    values[5:15] = 0  # two chunks of zeros: never written
    _, target, path = _mounted_ones(tmp_path, values)
    mount = cv.open_store(target)
    assert isinstance(mount, MountStore)
    checks: list[str] = []
    real_exists = type(mount.source).exists

    async def counted(store: object, key: str) -> bool:
        checks.append(key)
        return await real_exists(store, key)  # type: ignore[arg-type]

    monkeypatch.setattr(type(mount.source), "exists", counted)
    monkeypatch.setattr(owners, "RECHECK_SECONDS", 3600.0)
    return values, mount, path, checks


def test_a_source_artifact_read_by_zarr_after_the_source_moved_fails_not_zeros(
    tmp_path: Path,
) -> None:
    source, target, path = _mounted_ones(tmp_path, np.ones((20, 2), np.float32))
    mount = cv.open_store(target)
    data = zarr.open_array(mount, path=path, mode="r")
    assert np.asarray(data[:]).sum() == 40
    source.rename(tmp_path / "moved.zarr")
    with pytest.raises(SourceGoneError, match="no longer holds the artifact") as caught:
        data[:]
    assert str(source) in str(caught.value) and "never as zeros" in str(caught.value)
    with pytest.raises(SourceGoneError):  # and so does the size of a chunk (serve's HEAD)
        zarr.core.sync.sync(mount.getsize(f"{path}/c/0/0"))


def test_an_all_fill_chunk_of_a_present_source_group_still_reads_as_fill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values, mount, path, checks = _counted_sparse_mount(tmp_path, monkeypatch)
    data = zarr.open_array(mount, path=path, mode="r")
    assert np.array_equal(data[:5], values[:5])  # the group's owner is settled
    checks.clear()
    assert np.array_equal(data[:], values)
    # the two missing chunks of one read share one check of the group's document
    group_document = path.rsplit("/", 1)[0] + "/zarr.json"
    assert checks == [group_document]
    assert np.array_equal(data[:], values)
    assert checks == [group_document]  # and a group found there is trusted a while


def test_a_served_mount_answers_a_gone_source_group_with_502_not_404(tmp_path: Path) -> None:
    source, target, path = _mounted_ones(tmp_path, np.ones((20, 2), np.float32))
    mount = cv.open_store(target)
    server = StoreServer.start(mount)
    try:
        chunk = f"{server.url}{path}/c/0/0"
        with urllib.request.urlopen(chunk) as answer:
            assert answer.status == 200
        source.rename(tmp_path / "moved.zarr")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(chunk)
        caught.value.close()
        # 404 would tell a client "an all-fill chunk": zarr over HTTP would read zeros
        assert caught.value.code == 502
    finally:
        server.close()
        mount.close()


def test_an_artifact_read_through_a_mount_checks_its_source_group_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Artifact reads check the group on a miss (artifact_reads.py), and so does the
    # mount under them (owners.py): the two questions are one, asked of the source once
    values, mount, _, checks = _counted_sparse_mount(tmp_path, monkeypatch)
    monkeypatch.setattr(artifact_reads, "RECHECK_SECONDS", 3600.0)
    (art,) = cv.list_artifacts(mount, "RNA/artifacts")
    assert art.held_by == "source"
    checks.clear()
    assert np.array_equal(np.asarray(art["data"][:]), values)
    assert checks == [f"{art.path}/zarr.json"]
    mount.close()


@pytest.mark.parametrize("ranged", [False, True])
def test_a_served_mount_over_an_s3_source_answers_a_gone_artifact_with_502(
    s3_server: Any, tmp_path: Path, ranged: bool
) -> None:
    # a remote source's key is described by its pin, without its size: a ranged read
    # (zarr's shard index reads over HTTP) asks the size, and the size's refusal of a
    # gone source (SourceGoneError, a FileNotFoundError) must not read as "not found"
    import obstore
    from obstore.store import from_url

    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/src.zarr"
    cv.write_counts(url, realistic_counts(20, 6, density=0.3, seed=4), storage_options=options)
    recipe = {"operation": "ones", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(
        cv.open_store(url, mode="r+", storage_options=options),
        "RNA/artifacts",
        "ones",
        provenance=recipe,
    ) as art:
        art.write_array("data", np.ones((20, 2), np.float32), chunks=(5, 2))
    target = tmp_path / "mine.zarr"
    cv.mount_datastore(url, target, source_storage_options=options).close()
    mount = cv.open_store(target, source_storage_options=options)
    server = StoreServer.start(mount)
    headers = {"Range": "bytes=0-3"} if ranged else {}
    chunk = f"{server.url}{art.path}/data/c/1/0"
    try:
        with urllib.request.urlopen(f"{server.url}{art.path}/data/c/0/0") as answer:
            assert answer.status == 200  # a client read the artifact: its holder is known
        raw = from_url(f"s3://{bucket}", **options)
        gone = [m["path"] for m in obstore.list(raw, prefix=f"src.zarr/{art.path}").collect()]
        obstore.delete(raw, gone)  # the artifact removed from the source
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(chunk, headers=headers))
        caught.value.close()
        # 404 would tell a client "an all-fill chunk": zarr over HTTP would read zeros
        assert caught.value.code == 502
    finally:
        server.close()
        mount.close()


def test_a_pickled_array_of_a_source_artifact_removed_since_fails_not_zeros(
    tmp_path: Path,
) -> None:
    # a dask worker or a process pool gets the zarr array pickled: its metadata with
    # it, and a mount opened again there, which had not seen the artifact's group: it
    # found neither store holding the group's zarr.json and read the target (zeros)
    source, target, path = _mounted_ones(tmp_path, np.ones((20, 2), np.float32))
    mount = cv.open_store(target)
    data = zarr.open_array(mount, path=path, mode="r")
    assert np.asarray(data[:]).sum() == 40
    shutil.rmtree(source / path.rsplit("/", 1)[0])  # the artifact removed from the source
    again = pickle.loads(pickle.dumps(data))
    assert again.store is not mount
    with pytest.raises(SourceGoneError, match="no longer holds the artifact") as caught:
        again[:]
    assert "never as zeros" in str(caught.value)
    mount.close()


def test_a_pickled_array_of_a_target_artifact_still_reads_its_fill_chunks(
    tmp_path: Path,
) -> None:
    _, target, _ = _mounted_ones(tmp_path, np.ones((20, 2), np.float32))
    values = np.zeros((20, 2), np.float32)
    values[:5] = 2  # three chunks of zeros: never written
    mount = cv.open_store(target, mode="r+")
    recipe = {"operation": "mine", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(mount, "RNA/artifacts", "mine", provenance=recipe) as art:
        art.write_array("data", values, chunks=(5, 2))
    data = zarr.open_array(mount, path=f"{art.path}/data", mode="r")
    again = pickle.loads(pickle.dumps(data))
    assert again.store is not mount
    assert np.array_equal(again[:], values)
    mount.close()
