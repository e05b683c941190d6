"""Reading artifacts back with lazy arrays, refusing read-only publication, describing a store."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.artifacts.arrays import Artifact
from cytearc_vfs.artifacts.catalog import (
    describe_artifacts,
    find_artifact,
    list_artifacts,
    publish_artifact,
    read_artifact,
)

ROOT = "RNA/artifacts"
PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {"counts": "RNA"}}
DATA = np.arange(40, dtype=np.float64).reshape(20, 2)
VARIANCE = np.array([3.0, 1.0])


class ObservedStore(WrapperStore[LocalStore]):
    """A real LocalStore that logs every key read, and can refuse writes or deletes.

    Derived stores (``with_read_only``) share the log and the settings, as
    the artifact functions derive a read-only store from the one given.
    """

    def __init__(self, store: LocalStore, shared: dict[str, Any] | None = None) -> None:
        super().__init__(store)
        self.shared: dict[str, Any] = (
            {"reads": [], "fail_under": None, "deletes": True} if shared is None else shared
        )

    def _with_store(self, store: LocalStore) -> ObservedStore:
        return ObservedStore(store, self.shared)

    @property
    def reads(self) -> list[str]:
        reads: list[str] = self.shared["reads"]
        return reads

    @property
    def supports_deletes(self) -> bool:
        return bool(self.shared["deletes"])

    async def get(
        self, key: str, prototype: Any, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.reads.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def set(self, key: str, value: Buffer) -> None:
        prefix = self.shared["fail_under"]
        if prefix is not None and key.startswith(prefix):
            raise OSError(f"injected failure writing {key}")
        await self._store.set(key, value)


def publish_pca(store: Any, root: str = ROOT, **parameters: Any) -> str:
    provenance = {**PROVENANCE, "parameters": {"k": 2, **parameters}}
    with publish_artifact(store, root, "pca", provenance=provenance) as art:
        art.write_array("data", DATA, chunks=(5, 2))
        art.write_array("variance", VARIANCE)
    return art.path


def chunk_reads(reads: list[str]) -> list[str]:
    return [key for key in reads if "/c/" in key]


@pytest.fixture
def observed(tmp_path: Path) -> ObservedStore:
    # A real store with assay RNA, so ROOT is one of its artifact roots.
    cv.write_counts(tmp_path / "store.zarr", realistic_counts(20, 6, seed=0))
    return ObservedStore(LocalStore(tmp_path / "store.zarr"))


# ---------------------------------------------------------------- lazy arrays


def test_reading_reads_the_record_alone_and_arrays_when_asked(observed: ObservedStore) -> None:
    path = publish_pca(observed)
    observed.reads.clear()

    art = read_artifact(observed, path)
    assert observed.reads == [f"{path}/zarr.json"]
    assert isinstance(art, Artifact)

    data = art["data"]
    assert isinstance(data, zarr.Array)
    assert data.shape == (20, 2)
    assert data.read_only
    assert observed.reads[1:] == [f"{path}/data/zarr.json"]

    assert art.names == ("data", "variance")
    assert list(art) == ["data", "variance"]
    assert len(art) == 2
    assert "variance" in art
    assert "counts" not in art
    assert art.array("data") is data
    assert chunk_reads(observed.reads) == []

    np.testing.assert_array_equal(art.load("data"), DATA)
    assert len(chunk_reads(observed.reads)) == 4
    np.testing.assert_array_equal(art.load("variance"), VARIANCE)
    np.testing.assert_array_equal(art.arrays["data"][2:4], DATA[2:4])


def test_listing_and_finding_open_no_array(observed: ObservedStore) -> None:
    paths = [publish_pca(observed, seed=i) for i in range(3)]
    observed.reads.clear()

    listed = list_artifacts(observed, ROOT)
    found = find_artifact(observed, ROOT, "pca", {**PROVENANCE, "parameters": {"k": 2, "seed": 1}})
    assert [art.path for art in listed] == paths
    assert found == listed[1]
    assert all(key.endswith("zarr.json") for key in observed.reads)
    assert not any("/data/" in key or "/variance/" in key for key in observed.reads)
    np.testing.assert_array_equal(found.load("variance"), VARIANCE)  # type: ignore[union-attr]


def test_the_record_fields_stay_available(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(20, 6, seed=0))
    path = publish_pca(tmp_path / "s.zarr")
    art = read_artifact(tmp_path / "s.zarr", path)
    record = art.record
    assert (art.artifact_id, art.kind, art.path) == (record.artifact_id, "pca", path)
    assert art.provenance == record.provenance == PROVENANCE
    assert art.execution_options == {}
    assert art.created_at_ns == record.created_at_ns > 0
    assert art.cytearc_version == record.cytearc_version
    assert art.is_current
    # Two reads of one artifact are equal, and usable as keys.
    again = read_artifact(str(tmp_path / "s.zarr"), path)
    assert again == art
    assert {art: 1}[again] == 1
    assert "pca" in repr(art)


def test_the_arrays_mapping_is_read_only(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(20, 6, seed=0))
    art = read_artifact(tmp_path / "s.zarr", publish_pca(tmp_path / "s.zarr"))
    assert isinstance(art.arrays, Mapping)
    with pytest.raises(TypeError):
        art.arrays["more"] = art["data"]  # type: ignore[index]
    assert dict(art.arrays.items()).keys() == {"data", "variance"}


def test_a_missing_array_names_the_artifact_and_its_arrays(tmp_path: Path) -> None:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, seed=0))
    path = publish_pca(location)
    zarr.open_group(LocalStore(location), path=path, mode="r+").create_group("notes")
    art = read_artifact(location, path)
    for name in ("counts", "notes", "data/c", ""):
        with pytest.raises(KeyError) as caught:
            art[name]
        message = caught.value.args[0]
        assert path in message
        assert f"no array {name!r}" in message
        assert "it has 'data', 'variance'" in message
    with pytest.raises(KeyError, match="counts"):
        art.load("counts")
    assert art.names == ("data", "variance")


def test_groups_paths_and_stores_read_the_same_arrays(tmp_path: Path) -> None:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, seed=0), workspace="ws")
    workspace = zarr.open_group(LocalStore(location), path="ws", mode="r+")
    nested = publish_pca(workspace)
    for store, path in (
        (location, f"ws/{nested}"),
        (str(location), f"ws/{nested}"),
        (LocalStore(location), f"ws/{nested}"),
        (zarr.open_group(LocalStore(location), path="ws", mode="r"), nested),
        (zarr.open_group(LocalStore(location), path="ws", mode="r+"), nested),
    ):
        art = read_artifact(store, path)
        assert art.path == path
        np.testing.assert_array_equal(art.load("data"), DATA)
        assert art["data"].read_only


def test_a_mount_reads_source_arrays_through(tmp_path: Path) -> None:
    source, target = tmp_path / "src.zarr", tmp_path / "tgt.zarr"
    cv.write_counts(source, realistic_counts(20, 6, density=0.3, seed=4))
    path = publish_pca(cv.open_store(source, mode="r+"))
    cv.mount_datastore(source, target)
    mount = cv.open_store(target)

    art = read_artifact(mount, path)
    np.testing.assert_array_equal(art.load("data"), DATA)
    assert [a.path for a in list_artifacts(mount, ROOT)] == [path]
    # A path opens the target alone; the error says how to see the source's artifacts.
    with pytest.raises(FileNotFoundError, match=r"is a mount.*cv\.open_store\(location\)"):
        read_artifact(target, path)


def test_an_artifact_removed_after_it_was_found_fails_not_zeros(
    observed: ObservedStore, tmp_path: Path
) -> None:
    """zarr reads a chunk it does not find as the fill value: an artifact found, then
    removed by an outside edit, read as zeros with its record in hand."""
    import shutil

    path = publish_pca(observed)
    art = read_artifact(observed, path)
    data = art["data"]  # opened: its document read before the removal
    shutil.rmtree(tmp_path / "store.zarr" / path)
    with pytest.raises(cv.MissingChunkError, match=r"was removed after it was found.*find_"):
        art.load("data")
    with pytest.raises(cv.MissingChunkError, match=path):
        data[2:4]


def test_absent_chunks_of_a_present_artifact_read_as_the_fill_value(
    observed: ObservedStore,
) -> None:
    """All-zero chunks are not stored: while the artifact is there they read as zeros,
    at one existence check of its group for the read (a group found is trusted for a
    second), and a stored chunk costs none."""

    class CountedExists(WrapperStore[Any]):
        checks = 0

        async def exists(self, key: str) -> bool:
            type(self).checks += 1
            return bool(await self._store.exists(key))

    values = np.zeros((20, 2))
    values[:5] = 1.0
    with publish_artifact(observed, ROOT, "mask", provenance=PROVENANCE) as writer:
        writer.write_array("data", values, chunks=(5, 2))
    counted = CountedExists(observed)
    art = read_artifact(counted, writer.path)
    observed.reads.clear()
    np.testing.assert_array_equal(art.load("data"), values)
    assert len(chunk_reads(observed.reads)) == 4  # one stored, three absent
    assert CountedExists.checks == 1


def test_a_mount_source_artifact_removed_while_open_fails(tmp_path: Path) -> None:
    import shutil

    source, target = tmp_path / "src.zarr", tmp_path / "tgt.zarr"
    cv.write_counts(source, realistic_counts(20, 6, density=0.3, seed=4))
    path = publish_pca(cv.open_store(source, mode="r+"))
    cv.mount_datastore(source, target)
    art = read_artifact(cv.open_store(target), path)
    assert art["data"].shape == (20, 2)
    shutil.rmtree(source / path)
    with pytest.raises(cv.MissingChunkError, match="was removed after it was found"):
        art.load("data")


def test_an_artifact_removed_before_its_arrays_were_opened_says_so(
    observed: ObservedStore, tmp_path: Path
) -> None:
    """Found, removed, then read: its arrays' documents are gone with it, so opening
    one said the artifact had no such array and 'its arrays cannot be listed in this
    store' (KeyError), names raised zarr's GroupNotFoundError, and ``in`` said False."""
    import shutil

    path = publish_pca(observed)
    art = read_artifact(observed, path)
    shutil.rmtree(tmp_path / "store.zarr" / path)
    for read in (lambda: art.load("data"), lambda: art["data"], lambda: art.names):
        with pytest.raises(cv.MissingChunkError, match=r"was removed after it was found.*find_"):
            read()
    with pytest.raises(cv.MissingChunkError, match=path):
        "data" in art  # noqa: B015
    # present, an array it does not have is still a KeyError naming the ones it has
    path = publish_pca(observed)
    with pytest.raises(KeyError, match="has no array 'nope'; it has 'data'"):
        read_artifact(observed, path)["nope"]


def test_a_mount_whose_source_moved_away_names_the_source(tmp_path: Path) -> None:
    """Listed through a mount, then the source directory moved: reading a source
    artifact said it had no array 'data' (KeyError); it now says the source is gone."""
    source, target = tmp_path / "src.zarr", tmp_path / "tgt.zarr"
    cv.write_counts(source, realistic_counts(20, 6, density=0.3, seed=4))
    path = publish_pca(cv.open_store(source, mode="r+"))
    cv.mount_datastore(source, target)
    (art,) = list_artifacts(cv.open_store(target), ROOT)
    assert art.held_by == "source"
    source.rename(tmp_path / "moved.zarr")
    with pytest.raises(cv.MissingChunkError, match=rf"{path}.*from its source.*restore the source"):
        art.load("data")


def test_a_composite_reads_its_own_artifacts(tmp_path: Path) -> None:
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(tmp_path / f"{name}.zarr", realistic_counts(20, 6, seed=seed))
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"})
    path = publish_pca(cv.open_store(tmp_path / "c.zarr", mode="r+"))
    art = read_artifact(cv.open_store(tmp_path / "c.zarr"), path)
    np.testing.assert_array_equal(art.load("data"), DATA)


# ---------------------------------------------------------------- read-only publication


def store_keys(location: Path) -> list[str]:
    return sorted(str(p.relative_to(location)) for p in location.rglob("*"))


@pytest.mark.parametrize("how", ["open_store", "read-only LocalStore", "mount"])
def test_publishing_into_a_read_only_store_writes_nothing(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, density=0.3, seed=4))
    if how == "mount":
        cv.mount_datastore(location, tmp_path / "m.zarr")
        location = tmp_path / "m.zarr"
    store = LocalStore(location, read_only=True) if how.endswith("LocalStore") else None
    store = store or cv.open_store(location)
    before = store_keys(location)

    with (
        caplog.at_level(logging.DEBUG, logger="cytearc_vfs"),
        pytest.raises(PermissionError) as caught,
    ):
        publish_artifact(store, ROOT, "pca", provenance=PROVENANCE)
    message = str(caught.value)
    assert "\n" not in message
    assert "artifact of kind 'pca' under 'RNA/artifacts'" in message
    assert "read-only" in message
    assert "cv.open_store(location, mode='r+')" in message
    assert store_keys(location) == before
    assert "complete=False" not in caplog.text

    # The remedy the message names works.
    publish_pca(cv.open_store(location, mode="r+"))
    assert len(list_artifacts(cv.open_store(location), ROOT)) == 1


def test_publishing_into_a_read_only_group_names_the_group(tmp_path: Path) -> None:
    location = tmp_path / "s.zarr"
    zarr.open_group(LocalStore(location), mode="a").require_group("ws")
    before = store_keys(location)
    group = zarr.open_group(LocalStore(location), path="ws", mode="r")
    with pytest.raises(PermissionError, match=r"zarr\.open_group\(.*path='ws', mode='r\+'\)"):
        publish_artifact(group, ROOT, "pca", provenance=PROVENANCE)
    assert store_keys(location) == before


def test_a_failure_before_any_write_logs_what_happened(
    observed: ObservedStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    observed.shared["deletes"] = False
    writer = publish_artifact(observed, ROOT, "pca", provenance=PROVENANCE)
    observed.shared["fail_under"] = writer.path
    with (
        caplog.at_level(logging.DEBUG, logger="cytearc_vfs"),
        pytest.raises(OSError, match="injected") as caught,
        writer,
    ):
        pass
    assert "stays" not in caplog.text
    assert "before any of its keys was written; nothing to delete" in caplog.text
    assert not getattr(caught.value, "__notes__", [])
    assert not ((tmp_path / "store.zarr") / writer.path).exists()


def test_an_undeletable_group_is_said_to_stay(
    observed: ObservedStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    observed.shared["deletes"] = False
    with (  # noqa: PT012 - the block under test is the with-body
        caplog.at_level(logging.WARNING, logger="cytearc_vfs"),
        pytest.raises(RuntimeError, match="producer crashed") as caught,
        publish_artifact(observed, ROOT, "pca", provenance=PROVENANCE) as art,
    ):
        art.write_array("data", DATA)
        raise RuntimeError("producer crashed")
    assert f"incomplete artifact {art.path!r} stays with complete=False" in caplog.text
    assert any("stays with complete=False" in note for note in caught.value.__notes__)
    assert ((tmp_path / "store.zarr") / art.path / "zarr.json").is_file()


# ---------------------------------------------------------------- messages


def test_messages_name_states_not_internals(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(20, 6, seed=0))
    writer = publish_artifact(tmp_path / "s.zarr", ROOT, "pca", provenance=PROVENANCE)
    with pytest.raises(RuntimeError, match="with-block has not started"):
        _ = writer.group
    with writer:
        pass
    with pytest.raises(RuntimeError, match=r"not being written \(it is published"):
        writer.write_array("late", DATA)


def test_provenance_errors_are_short_and_to_the_point(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^provenance has unknown field\(s\) \['note'\];"):
        publish_artifact(tmp_path, ROOT, "pca", provenance={**PROVENANCE, "note": 1})
    big = np.zeros((1000, 1000))
    with pytest.raises(TypeError, match=r"numpy array of shape \(1000, 1000\).*tolist") as caught:
        publish_artifact(
            tmp_path, ROOT, "pca", provenance={**PROVENANCE, "parameters": {"init": big}}
        )
    assert len(str(caught.value)) < 300
    assert not (tmp_path / "RNA").exists()


# ---------------------------------------------------------------- describing


def test_describe_covers_every_root_of_a_store(tmp_path: Path) -> None:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, seed=1), assay="RNA")
    cv.write_counts(
        tmp_path / "w.zarr", realistic_counts(20, 6, seed=2), assay="ADT", workspace="ws"
    )
    store = cv.open_store(location, mode="r+")
    in_assay = publish_pca(store)
    with publish_artifact(store, "artifacts", "selection", provenance=PROVENANCE) as art:
        art.write_array("mask", np.ones(20, dtype=bool), finite=False)
    workspace = cv.open_store(tmp_path / "w.zarr", mode="r+")
    in_workspace = publish_pca(workspace, "ws/ADT/artifacts")
    at_workspace = publish_pca(workspace, "ws/artifacts")

    described = describe_artifacts(location)
    assert [entry["path"] for entry in described] == [art.path, in_assay]
    first = described[1]
    assert json.loads(json.dumps(first)) == first
    assert first["root"] == ROOT
    assert first["kind"] == "pca"
    assert first["artifact_id"] == in_assay.rsplit("/", 1)[1]
    assert first["provenance"] == PROVENANCE
    assert first["current"] is True
    assert first["error"] is None
    assert first["created_at"].endswith("Z")
    assert first["arrays"] == [
        {"name": "data", "shape": [20, 2], "dtype": "float64", "chunks": [5, 2]},
        {"name": "variance", "shape": [2], "dtype": "float64", "chunks": [2]},
    ]
    assert described[0]["arrays"][0]["dtype"] == "bool"

    roots = [(e["root"], e["path"]) for e in describe_artifacts(workspace)]
    assert roots == [("ws/artifacts", at_workspace), ("ws/ADT/artifacts", in_workspace)]


def test_describe_a_mount_shows_both_stores_and_reads_no_chunk(tmp_path: Path) -> None:
    source, target = tmp_path / "src.zarr", tmp_path / "tgt.zarr"
    cv.write_counts(source, realistic_counts(20, 6, density=0.3, seed=4))
    theirs = publish_pca(cv.open_store(source, mode="r+"))
    cv.mount_datastore(source, target)
    ours = publish_pca(cv.open_store(target, mode="r+"), seed=1)
    assert sorted(e["path"] for e in describe_artifacts(target)) == sorted([theirs, ours])
    # The target's own store, given as a Store, is read as it is.
    assert [e["path"] for e in describe_artifacts(LocalStore(target))] == [ours]


def test_describe_reports_a_damaged_array_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, seed=1))
    store = cv.open_store(location, mode="r+")
    damaged = publish_pca(store)
    intact = publish_pca(store, seed=1)
    (location / damaged / "variance" / "zarr.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs"):
        described = {e["path"]: e for e in describe_artifacts(location)}
    assert described[damaged]["arrays"] is None
    assert described[damaged]["error"]
    assert damaged in caplog.text
    assert described[intact]["error"] is None


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "artifacts.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(example, "artifacts.md", "exec"), namespace)
    assert namespace["found"].names == ("data", "feature_m2", "feature_sum")
    assert namespace["first_rows"].shape == (5, 20)
    described = namespace["describe_artifacts"]("data.zarr")
    assert [entry["path"] for entry in described] == [namespace["art"].path]


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
@pytest.mark.parametrize("consolidated", ["RNA/artifacts/pca", ""])
def test_publishing_keeps_consolidated_metadata_above_true(
    observed: ObservedStore, tmp_path: Path, consolidated: str
) -> None:
    """A group above an artifact holding consolidated metadata (zarr.consolidate_metadata,
    as users run for remote opens) listed only the artifacts of its copy after a
    publication: zarr.open_group showed the older artifacts while cv.list_artifacts
    showed all, and a repack copied the stale document."""
    store = LocalStore(tmp_path / "store.zarr")
    first = publish_pca(observed, seed=1)
    zarr.consolidate_metadata(store, path=consolidated or None)
    second = publish_pca(observed, seed=2)
    kind = zarr.open_group(store, path="RNA/artifacts/pca", mode="r")
    ids = {first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]}
    assert set(kind.group_keys()) == ids
    assert set(zarr.open_group(store, mode="r")["RNA/artifacts/pca"].group_keys()) == ids
    document = json.loads((tmp_path / "store.zarr" / consolidated / "zarr.json").read_text())
    assert document.get("consolidated_metadata") is not None  # kept, made true again
