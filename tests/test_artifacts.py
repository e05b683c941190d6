"""Artifact publication, listing and reuse (spec, "Artifact publication")."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest
from zarr.core.attributes import Attributes
from zarr.core.buffer import Buffer
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.artifacts.catalog import (
    Artifact,
    ArtifactRecord,
    canonical_json,
    check_provenance,
    find_artifact,
    list_artifacts,
    publish_artifact,
    read_artifact,
)
from cytearc_vfs.errors import IncompleteStoreError, NonFiniteArtifactError, RecordShapeError

ROOT = "RNA/artifacts"
KIND = "normalized"


def provenance(**parameters: Any) -> dict[str, Any]:
    return {"operation": "normalize", "parameters": parameters, "inputs": {"counts": "RNA"}}


class RecordingStore(WrapperStore[LocalStore]):
    """A real LocalStore that records every write and can fail one key's ``set``."""

    def __init__(self, store: LocalStore, log: list[str] | None = None) -> None:
        super().__init__(store)
        self.log: list[str] = [] if log is None else log
        self.fail_key: str | None = None
        self.persist_before_failing = False

    def _with_store(self, store: LocalStore) -> RecordingStore:
        return RecordingStore(store, self.log)

    async def set(self, key: str, value: Buffer) -> None:
        self.log.append(key)
        if key == self.fail_key:
            if self.persist_before_failing:
                await self._store.set(key, value)
            raise OSError(f"injected failure writing {key}")
        await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self.log.append(f"{key} (if not exists)")
        await self._store.set_if_not_exists(key, value)

    async def get(
        self, key: str, prototype: Any, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await self._store.get(key, prototype, byte_range)


def counts_store(location: Path, **layout: Any) -> Path:
    """A small real store whose layout has the artifact roots publication accepts."""
    cv.write_counts(location, np.arange(12, dtype=np.int32).reshape(4, 3), **layout)
    return location


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    # Assay RNA at the root: artifacts go under RNA/artifacts (ROOT) or artifacts.
    return counts_store(tmp_path / "store.zarr")


@pytest.fixture
def store(store_dir: Path) -> LocalStore:
    return LocalStore(store_dir)


def attributes_on_disk(store_dir: Path, path: str) -> dict[str, Any]:
    document = json.loads((store_dir / path / "zarr.json").read_text())
    attributes: dict[str, Any] = document["attributes"]
    return attributes


def children(store_dir: Path, *parts: str) -> list[str]:
    directory = store_dir.joinpath(*parts)
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def publish(store: Any, kind: str = KIND, **parameters: Any) -> str:
    with publish_artifact(store, ROOT, kind, provenance=provenance(**parameters)) as art:
        art.write_array("data", np.arange(6, dtype=np.float32).reshape(3, 2))
    return art.path


# ---------------------------------------------------------------- publication


def test_id_is_a_random_256_bit_token_ending_the_path(store: LocalStore, store_dir: Path) -> None:
    ids = set()
    for _ in range(3):
        with publish_artifact(store, ROOT, KIND, provenance=provenance()) as art:
            assert re.fullmatch(r"[0-9a-f]{64}", art.artifact_id)
            assert art.path == f"{ROOT}/{KIND}/{art.artifact_id}"
            assert art.group.path == art.path
        ids.add(art.artifact_id)
        assert (store_dir / art.path / "zarr.json").is_file()
    assert len(ids) == 3


def test_record_holds_exactly_the_spec_fields(store: LocalStore, store_dir: Path) -> None:
    with publish_artifact(
        store, ROOT, KIND, provenance=provenance(target=1e4), execution_options={"workers": 4}
    ) as art:
        art.write_array("data", np.ones((2, 2)))
    attributes = attributes_on_disk(store_dir, art.path)
    assert sorted(attributes) == sorted(
        [
            "artifact_id",
            "kind",
            "provenance",
            "execution_options",
            "created_at_ns",
            "cytearc_version",
            "complete",
        ]
    )
    assert attributes["artifact_id"] == art.artifact_id
    assert attributes["kind"] == KIND
    assert attributes["provenance"] == {
        "inputs": {"counts": "RNA"},
        "operation": "normalize",
        "parameters": {"target": 10000.0},
    }
    assert attributes["execution_options"] == {"workers": 4}
    assert isinstance(attributes["created_at_ns"], int)
    assert attributes["created_at_ns"] > 0
    assert attributes["cytearc_version"]
    assert attributes["complete"] is True
    assert art.published


def test_incomplete_while_the_block_runs(store: LocalStore, store_dir: Path) -> None:
    with publish_artifact(store, ROOT, KIND, provenance=provenance()) as art:
        art.write_array("data", np.ones((4, 2)))
        # A second, independent open sees the group but not as an artifact.
        second = zarr.open_group(LocalStore(store_dir, read_only=True), path=art.path, mode="r")
        assert second.attrs["complete"] is False
        assert list_artifacts(str(store_dir), ROOT) == []
        assert find_artifact(str(store_dir), ROOT, KIND, provenance()) is None
        with pytest.raises(IncompleteStoreError, match="not complete"):
            read_artifact(str(store_dir), art.path)
    assert [r.artifact_id for r in list_artifacts(str(store_dir), ROOT)] == [art.artifact_id]


def test_publication_is_one_metadata_write(store_dir: Path) -> None:
    recording = RecordingStore(LocalStore(store_dir))
    with publish_artifact(recording, ROOT, KIND, provenance=provenance()) as art:
        art.write_array("data", np.ones((10, 2)), chunks=(4, 2))
        before = len(recording.log)
        assert any(key.startswith(f"{art.path}/data/c/") for key in recording.log)
    assert recording.log[before:] == [f"{art.path}/zarr.json"]
    assert attributes_on_disk(store_dir, art.path)["complete"] is True


def test_failure_in_the_block_deletes_the_group(store: LocalStore, store_dir: Path) -> None:
    with (  # noqa: PT012 - the block under test is the with-body
        pytest.raises(RuntimeError, match="producer crashed"),
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("data", np.ones((3, 2)))
        assert (store_dir / art.path).is_dir()
        raise RuntimeError("producer crashed")
    assert children(store_dir, ROOT, KIND) == ["zarr.json"]
    assert not (store_dir / art.path).exists()
    # The identity stays readable for messages after the block.
    assert re.fullmatch(r"[0-9a-f]{64}", art.artifact_id)
    assert art.path.endswith(art.artifact_id)
    assert not art.published


def test_group_stays_when_the_publishing_write_fails(
    store: LocalStore, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Attributes, d: dict[str, Any]) -> None:
        raise OSError("injected: metadata write failed")

    with (  # noqa: PT012 - the block under test is the with-body
        pytest.raises(OSError, match="injected"),
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("data", np.ones((3, 2)))
        monkeypatch.setattr(Attributes, "put", refuse)
    monkeypatch.undo()
    assert (store_dir / art.path / "data" / "zarr.json").is_file()
    assert attributes_on_disk(store_dir, art.path)["complete"] is False
    assert list_artifacts(store, ROOT) == []
    assert not art.published


def test_a_failed_publishing_write_that_persisted_stays_published(store_dir: Path) -> None:
    recording = RecordingStore(LocalStore(store_dir))
    with (  # noqa: PT012 - the block under test is the with-body
        pytest.raises(OSError, match="injected"),
        publish_artifact(recording, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("data", np.ones((3, 2)))
        recording.fail_key = f"{art.path}/zarr.json"
        recording.persist_before_failing = True
    # The write reported an error but landed: the group is never deleted then.
    assert attributes_on_disk(store_dir, art.path)["complete"] is True
    assert [r.artifact_id for r in list_artifacts(store_dir, ROOT)] == [art.artifact_id]


def test_paths_groups_and_stores_address_the_same_artifacts(tmp_path: Path) -> None:
    location = counts_store(tmp_path / "ws.zarr", workspace="ws")
    with publish_artifact(str(location), f"ws/{ROOT}", KIND, provenance=provenance()) as art:
        pass
    assert [r.path for r in list_artifacts(location, f"ws/{ROOT}")] == [art.path]
    root = zarr.open_group(LocalStore(location), mode="r+")
    workspace = root["ws"]
    assert isinstance(workspace, zarr.Group)
    nested = publish(workspace)
    assert (location / "ws" / nested / "zarr.json").is_file()
    # Paths are relative to what was passed: the group, or the store.
    assert [r.path for r in list_artifacts(workspace, ROOT)] == [art.path[len("ws/") :], nested]
    assert read_artifact(location, f"ws/{nested}").path == f"ws/{nested}"
    assert [r.path for r in list_artifacts(location, f"ws/{ROOT}")] == [
        art.path,
        f"ws/{nested}",
    ]


@pytest.mark.parametrize(
    ("root", "kind"),
    [("", KIND), ("../artifacts", KIND), ("RNA//artifacts", KIND), (ROOT, "a/b"), (ROOT, "")],
)
def test_bad_roots_and_kinds_are_refused_before_writing(
    store: LocalStore, store_dir: Path, root: str, kind: str
) -> None:
    with pytest.raises(ValueError, match=r"not a valid name|non-empty"):
        publish_artifact(store, root, kind, provenance=provenance())
    assert not (store_dir / ROOT).exists()


# ---------------------------------------------------------------- finite values


def test_nan_raises_naming_operation_array_and_row(store: LocalStore, store_dir: Path) -> None:
    values = np.ones((5, 3), dtype=np.float32)
    values[3, 1] = np.nan
    with (
        pytest.raises(NonFiniteArtifactError) as caught,
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("data", values)
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.operation, error.array, error.row) == ("normalize", "data", 3)
    message = str(error)
    assert "normalize" in message
    assert "'data'" in message
    assert "row 3" in message
    assert children(store_dir, ROOT, KIND) == ["zarr.json"]


def test_inf_in_a_later_row_band_is_found_after_earlier_bands(store_dir: Path) -> None:
    recording = RecordingStore(LocalStore(store_dir))
    # Ones, not zeros: zarr skips writing chunks that equal the fill value.
    values = np.ones((12, 2))
    values[9, 0] = -np.inf
    with (
        pytest.raises(NonFiniteArtifactError, match="row 9") as caught,
        publish_artifact(recording, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("data", values, chunks=(4, 2))
    assert caught.value.row == 9
    written = sorted(key for key in recording.log if key.startswith(f"{art.path}/data/c/"))
    # Rows 0:4 and 4:8 were written as their bands were checked; the band of row 9 was not.
    assert written == [f"{art.path}/data/c/0/0", f"{art.path}/data/c/1/0"]
    assert children(store_dir, ROOT, KIND) == ["zarr.json"]


def test_overflow_in_the_stored_dtype_is_infinite(store: LocalStore) -> None:
    with (
        pytest.raises(NonFiniteArtifactError) as caught,
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.write_array("feature_sum", np.array([1.0, 2.0, 1e300]), dtype=np.float32)
    assert (caught.value.array, caught.value.row) == ("feature_sum", 2)


def test_non_finite_values_are_kept_when_not_required_finite(store: LocalStore) -> None:
    with publish_artifact(store, ROOT, "scores", provenance=provenance()) as art:
        art.write_array("score", np.array([np.nan, 1.0]), finite=False)
        art.write_array("labels", np.array([3, 4], dtype=np.int64))
    score = np.asarray(zarr.open_array(store, path=f"{art.path}/score", mode="r")[:])
    assert np.isnan(score[0])
    assert read_artifact(store, art.path).kind == "scores"


def test_a_swallowed_write_error_still_publishes_nothing(
    store: LocalStore, store_dir: Path
) -> None:
    with (
        pytest.raises(IncompleteStoreError, match="not published") as caught,
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
        # The producer swallows the refusal; the partly written array must not publish.
        contextlib.suppress(NonFiniteArtifactError),
    ):
        art.write_array("data", np.array([[np.nan]]))
    assert isinstance(caught.value.__cause__, NonFiniteArtifactError)
    assert children(store_dir, ROOT, KIND) == ["zarr.json"]


def test_row_band_writer_streams_and_must_finish(store: LocalStore, store_dir: Path) -> None:
    with publish_artifact(store, ROOT, KIND, provenance=provenance()) as art:
        writer = art.create_array("data", (5, 2), np.float32, chunks=(2, 2))
        writer.write(np.ones((2, 2)))
        writer.write(np.full((3, 2), 2.0))
        assert writer.complete
    data = np.asarray(zarr.open_array(store, path=f"{art.path}/data", mode="r")[:])
    np.testing.assert_array_equal(data, [[1, 1], [1, 1], [2, 2], [2, 2], [2, 2]])

    published = art.artifact_id
    with (
        pytest.raises(IncompleteStoreError, match=r"1 of 5 rows"),
        publish_artifact(store, ROOT, KIND, provenance=provenance()) as art,
    ):
        art.create_array("data", (5, 2), np.float32).write(np.ones((1, 2)))
    assert children(store_dir, ROOT, KIND) == sorted(["zarr.json", published])
    assert not (store_dir / art.path).exists()


# ---------------------------------------------------------------- provenance


@pytest.mark.parametrize(
    ("revision", "match"),
    [
        (1, "revision 1 is recorded by omitting"),
        (0, "2 or more"),
        (-3, "2 or more"),
        (2.0, "must be an integer"),
        ("2", "must be an integer"),
        (True, "must be an integer"),
        (None, "must be an integer"),
    ],
)
def test_revision_rules(store: LocalStore, store_dir: Path, revision: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        publish_artifact(store, ROOT, KIND, provenance={**provenance(), "revision": revision})
    assert not (store_dir / ROOT).exists()


def test_revision_two_or_more_is_recorded(store: LocalStore, store_dir: Path) -> None:
    with publish_artifact(
        store, ROOT, KIND, provenance={**provenance(), "revision": np.int64(3)}
    ) as art:
        pass
    assert attributes_on_disk(store_dir, art.path)["provenance"]["revision"] == 3


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ({"operation": "x", "parameters": {}}, ValueError, r"missing field\(s\) \['inputs'\]"),
        ({**provenance(), "note": 1}, ValueError, r"unknown field\(s\) \['note'\]"),
        ({**provenance(), "operation": ""}, ValueError, "non-empty string"),
        ({**provenance(), "inputs": ["counts"]}, TypeError, "inputs must be a mapping"),
        (provenance(x=float("nan")), ValueError, r"\['x'\] is nan"),
        (provenance(x=[1, np.float32("inf")]), ValueError, "is inf"),
        (provenance(x={1, 2}), TypeError, "set"),
        (provenance(x=b"raw"), TypeError, "bytes"),
        (provenance(x={1: "a"}), TypeError, "non-string key"),
        ([("operation", "x")], TypeError, "must be a mapping"),
    ],
)
def test_provenance_must_be_canonical_json(
    store: LocalStore, store_dir: Path, bad: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        publish_artifact(store, ROOT, KIND, provenance=bad)
    assert not (store_dir / ROOT).exists()


def test_execution_options_must_be_json(store: LocalStore) -> None:
    with pytest.raises(ValueError, match="finite"):
        publish_artifact(
            store, ROOT, KIND, provenance=provenance(), execution_options={"t": np.inf}
        )
    with pytest.raises(TypeError, match="mapping"):
        publish_artifact(store, ROOT, KIND, provenance=provenance(), execution_options=[1])  # type: ignore[arg-type]


def test_provenance_is_canonicalised() -> None:
    value = check_provenance(
        {
            "parameters": {"b": (1, np.float64(0.5)), "a": np.bool_(True)},
            "inputs": {},
            "operation": "pca",
        }
    )
    assert value == {"inputs": {}, "operation": "pca", "parameters": {"a": True, "b": [1, 0.5]}}
    assert list(value) == ["inputs", "operation", "parameters"]
    assert canonical_json(value) == (
        '{"inputs":{},"operation":"pca","parameters":{"a":true,"b":[1,0.5]}}'
    )


# ---------------------------------------------------------------- listing


def forge(
    store_dir: Path,
    kind: str,
    attributes: dict[str, Any],
    *,
    name: str | None = None,
    drop: tuple[str, ...] = (),
) -> str:
    """Write an artifact group by hand, as an older or foreign producer might."""
    artifact_id = secrets.token_hex(32)
    path = f"{ROOT}/{kind}/{name or artifact_id}"
    record = {
        "artifact_id": artifact_id,
        "kind": kind,
        "provenance": provenance(),
        "execution_options": {},
        "created_at_ns": 1,
        "cytearc_version": "0.0.1",
        "complete": True,
    }
    record.update(attributes)
    for field in drop:
        del record[field]
    zarr.create_group(LocalStore(store_dir), path=path, attributes=record, zarr_format=3)
    return path


def test_list_skips_incomplete_and_malformed_groups(
    store: LocalStore, store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = publish(store, "normalized", step=1)
    second = publish(store, "reduction", step=2)
    third = publish(store, "normalized", step=3)
    incomplete = forge(store_dir, "normalized", {"complete": False})
    malformed = forge(store_dir, "normalized", {"extra": 1})
    missing = forge(store_dir, "reduction", {}, drop=("cytearc_version",))
    misnamed = forge(store_dir, "reduction", {"artifact_id": "0" * 64}, name="f" * 64)
    (store_dir / ROOT / "normalized" / "stray.txt").write_text("not a group")

    with caplog.at_level(logging.WARNING, logger="cytearc_vfs.artifacts.catalog"):
        records = list_artifacts(store_dir, ROOT)
    assert [r.path for r in records] == [first, third, second]
    assert all(isinstance(r, Artifact) and isinstance(r.record, ArtifactRecord) for r in records)
    assert [r.path for r in list_artifacts(store_dir, ROOT, "reduction")] == [second]
    warned = caplog.text
    for bad in (malformed, missing, misnamed):
        assert bad in warned
    assert incomplete not in warned

    with pytest.raises(RecordShapeError, match=r"unknown field\(s\) \['extra'\]"):
        read_artifact(store_dir, malformed)
    with pytest.raises(RecordShapeError, match=r"missing field\(s\) \['cytearc_version'\]"):
        read_artifact(store_dir, missing)
    with pytest.raises(RecordShapeError, match="group name"):
        read_artifact(store_dir, misnamed)
    with pytest.raises(IncompleteStoreError):
        read_artifact(store_dir, incomplete)
    with pytest.raises(FileNotFoundError):
        read_artifact(store_dir, f"{ROOT}/normalized/{'a' * 64}")


def test_list_of_a_missing_root_is_empty(store_dir: Path) -> None:
    zarr.open_group(LocalStore(store_dir), mode="a")
    assert list_artifacts(store_dir, "artifacts") == []


def test_a_location_without_a_group_is_named_not_listed_empty(tmp_path: Path) -> None:
    mistyped = tmp_path / "dta.zarr"
    with pytest.raises(
        FileNotFoundError, match=r"dta\.zarr holds no Zarr group.*check the location"
    ):
        list_artifacts(mistyped, ROOT)
    # A local backend refuses to open the missing directory itself, which is as plain.
    with pytest.raises(FileNotFoundError, match=r"does not exist|check the location"):
        read_artifact(mistyped, f"{ROOT}/{KIND}/{'a' * 64}")
    with pytest.raises(FileNotFoundError, match=r"does not exist|check the location"):
        find_artifact(mistyped, ROOT, KIND, provenance())
    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no Zarr group"):
        read_artifact(tmp_path / "empty.zarr", f"{ROOT}/{KIND}/{'a' * 64}")
    assert not mistyped.exists()


def test_records_order_is_deterministic(store: LocalStore) -> None:
    paths = [publish(store, step=i) for i in range(4)]
    records = list_artifacts(store, ROOT, KIND)
    assert [r.path for r in records] == paths
    assert [r.created_at_ns for r in records] == sorted(r.created_at_ns for r in records)
    assert records == list_artifacts(store, ROOT, KIND)


# ---------------------------------------------------------------- reuse


def test_find_matches_the_whole_provenance_exactly(store: LocalStore) -> None:
    with publish_artifact(
        store, ROOT, KIND, provenance=provenance(target=1, log=True), execution_options={"w": 1}
    ) as art:
        pass
    found = find_artifact(store, ROOT, KIND, provenance(log=True, target=1))
    assert found is not None
    assert found.artifact_id == art.artifact_id
    assert found.execution_options == {"w": 1}
    # Int 1 and float 1.0 are different parameters, exactly as JSON records them.
    assert find_artifact(store, ROOT, KIND, provenance(target=1.0, log=True)) is None
    assert find_artifact(store, ROOT, KIND, provenance(target=1)) is None
    assert (
        find_artifact(store, ROOT, KIND, {**provenance(target=1, log=True), "inputs": {}}) is None
    )
    assert find_artifact(store, ROOT, "reduction", provenance(target=1, log=True)) is None
    assert (
        find_artifact(store, ROOT, KIND, {**provenance(target=1, log=True), "revision": 2}) is None
    )


def test_execution_options_time_and_version_never_affect_reuse(
    store: LocalStore, store_dir: Path
) -> None:
    forged = forge(
        store_dir,
        KIND,
        {"execution_options": {"workers": 64}, "created_at_ns": 5, "cytearc_version": "9.9"},
    )
    found = find_artifact(store_dir, ROOT, KIND, provenance())
    assert found is not None
    assert found.path == forged


def test_revision_one_or_non_integer_revisions_are_never_reused(store_dir: Path) -> None:
    for revision in (1, "2", 2.0):
        forge(store_dir, KIND, {"provenance": {**provenance(), "revision": revision}})
    records = list_artifacts(store_dir, ROOT, KIND)
    assert len(records) == 3
    assert not any(r.is_current for r in records)
    assert find_artifact(store_dir, ROOT, KIND, provenance()) is None
    assert find_artifact(store_dir, ROOT, KIND, {**provenance(), "revision": 2}) is None
    with pytest.raises(ValueError, match="revision 1"):
        find_artifact(store_dir, ROOT, KIND, {**provenance(), "revision": 1})


def test_an_artifact_without_revision_is_revision_one(store: LocalStore) -> None:
    path = publish(store)
    current = {**provenance(), "revision": 2}
    assert find_artifact(store, ROOT, KIND, current) is None
    with publish_artifact(store, ROOT, KIND, provenance=current) as art:
        pass
    assert find_artifact(store, ROOT, KIND, current).path == art.path  # type: ignore[union-attr]
    assert find_artifact(store, ROOT, KIND, provenance()).path == path  # type: ignore[union-attr]


def test_arrays_cannot_be_written_outside_the_block(store: LocalStore) -> None:
    with publish_artifact(store, ROOT, KIND, provenance=provenance()) as art:
        writer = art.create_array("data", (4,), np.float64)
        writer.write(np.ones(4))
    with pytest.raises(RuntimeError, match="not being written"):
        writer.write(np.ones(1))
    with pytest.raises(RuntimeError, match="not being written"):
        art.write_array("more", np.ones(2))
    with pytest.raises(RuntimeError, match="already entered"), art:
        pass
