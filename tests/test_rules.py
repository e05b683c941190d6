"""One test per spec rule that this layer owns.

The rules are the sentences of the spec (CyteArc "Zarr internals") holding
"fails closed", "refuses", "raises", "never", "exactly", "immutable" or
"strict", and a few of the same sections saying "fail closed", "refused" or
"rejected". They are copied, with the decision whether this layer owns them,
into ``cytearc_vfs_conformance/rules.json``. Each test is marked
``@pytest.mark.rule(id)`` and its docstring quotes its sentence; the last
test checks that every owned rule has exactly one test and every test quotes
its rule. ``python -m cytearc_vfs_conformance report`` runs this file and
writes docs/conformance.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts
from cytearc_vfs_conformance.rules import load_rules
from s3_server import S3Server
from zarr.core.buffer import default_buffer_prototype

import cytearc_vfs as cv
from cytearc_vfs.write import destinations

PROVENANCE: dict[str, Any] = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
PROTO = default_buffer_prototype()


def _source(path: Path, *, seed: int = 0, assay: str = "RNA") -> Path:
    cv.write_counts(path, realistic_counts(40, 12, density=0.2, seed=seed), assay=assay)
    return path


def _edit_root(path: Path, attr: str, change: Any) -> None:
    document = json.loads((path / "zarr.json").read_text())
    change(document["attributes"][attr])
    (path / "zarr.json").write_text(json.dumps(document))


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def composite(tmp_path: Path) -> Path:
    sources = {n: _source(tmp_path / f"{n}.zarr", seed=i) for i, n in enumerate("ab")}
    cv.create_composite(tmp_path / "comp.zarr", sources)
    return tmp_path / "comp.zarr"


@pytest.fixture
def mounted(tmp_path: Path) -> tuple[Path, Path, str]:
    source = _source(tmp_path / "src.zarr")
    with cv.publish_artifact(
        cv.open_store(source, mode="r+"), "RNA/artifacts", "pca", provenance=PROVENANCE
    ) as art:
        art.write_array("data", np.ones((40, 2)))
    cv.mount_datastore(source, tmp_path / "tgt.zarr")
    return source, tmp_path / "tgt.zarr", art.artifact_id


# ------------------------------------------------------------------ composite


@pytest.mark.remote
@pytest.mark.rule("composite.credentials-never-persisted")
def test_source_credentials_never_persisted(tmp_path: Path, s3_server: S3Server) -> None:
    """Source credentials are supplied at reopen through DataStore(source_storage_options={source_name: options}) and are never persisted."""
    options = s3_server.storage_options()
    url = f"s3://{s3_server.new_bucket()}/a.zarr"
    cv.write_counts(url, realistic_counts(30, 8, seed=1), storage_options=options)
    cv.create_composite(tmp_path / "comp.zarr", {"a": url}, source_storage_options={"a": options})
    written = b"".join(_tree(tmp_path / "comp.zarr").values())
    for secret in (options["secret_access_key"], options["access_key_id"]):
        assert secret.encode() not in written
    reopened = cv.open_store(tmp_path / "comp.zarr", source_storage_options={"a": options})
    assert reopened.reader().read().shape == (30, 8)


@pytest.mark.rule("composite.published-immutable")
def test_published_mappings_and_count_metadata_immutable(composite: Path) -> None:
    """Published mappings and count metadata are immutable; analysis artifacts remain writable."""
    store = cv.open_store(composite, mode="r+")
    before = _tree(composite)
    for key in ("_composite/rowSources/zarr.json", "RNA/counts/zarr.json", "RNA/countsT/c/0/0"):
        with pytest.raises(PermissionError):
            zarr.core.sync.sync(store.set(key, PROTO.buffer.from_bytes(b"{}")))
    with pytest.raises(PermissionError):
        zarr.core.sync.sync(store.delete("_composite/sourceRows/zarr.json"))
    assert _tree(composite) == before
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.zeros((80, 2)))
    assert [a.artifact_id for a in cv.list_artifacts(store, "RNA/artifacts")] == [art.artifact_id]


@pytest.mark.rule("composite.incomplete-refused")
def test_failed_creation_refused(composite: Path) -> None:
    """A failed creation leaves complete=False, and CyteArc refuses to reopen it."""
    _edit_root(composite, "composite", lambda record: record.update(complete=False))
    with pytest.raises(cv.IncompleteStoreError, match="not complete"):
        cv.open_store(composite)


@pytest.mark.rule("composite.manifest-strict")
def test_manifest_strict_unversioned(composite: Path) -> None:
    """The manifest uses a strict, unversioned shape."""
    _edit_root(composite, "composite", lambda record: record.update(version=1))
    with pytest.raises(cv.RecordShapeError, match="version"):
        cv.open_store(composite)


@pytest.mark.rule("composite.manifest-fields-fail-closed")
def test_manifest_missing_field_fails_closed(composite: Path) -> None:
    """Missing or unknown fields fail closed; there is no automatic migration."""
    _edit_root(composite, "composite", lambda record: record.pop("maps"))
    with pytest.raises(cv.RecordShapeError, match="maps"):
        cv.open_store(composite)
    _edit_root(composite, "composite", lambda record: record.update(maps={}, extra=True))
    with pytest.raises(cv.RecordShapeError):
        cv.open_store(composite)


# ------------------------------------------------------------------ artifacts


@pytest.mark.rule("artifact.non-finite-refused")
def test_non_finite_artifact_refused(tmp_path: Path) -> None:
    """Producers check the arrays that must hold only finite values as they write them (cytearc.storage.finite_values): a NaN or infinite value raises NonFiniteArtifactError, a ValueError that names the operation, the array, and the row, and nothing is published."""
    store = cv.open_store(_source(tmp_path / "s.zarr"), mode="r+")
    values = np.ones((40, 2))
    values[7, 1] = np.inf
    with (
        pytest.raises(cv.NonFiniteArtifactError) as caught,
        cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art,
    ):
        art.write_array("data", values)
    assert isinstance(caught.value, ValueError)
    assert all(word in str(caught.value) for word in ("test.pca", "'data'", "row 7"))
    assert cv.list_artifacts(store, "RNA/artifacts") == []


@pytest.mark.rule("moments.m2-never-negative")
def test_feature_m2_never_negative_and_exactly_zero() -> None:
    """Each stored row band adds its sums and merges its feature_m2 with the deviation of its mean from the running mean (cytearc.utils.moments.ColumnMoments), so the variance never subtracts a squared mean from a mean of squares: it is never negative, and a feature whose stored values are all equal has a feature_m2 of exactly zero and a scale of 1."""
    moments = cv.ColumnMoments(3)
    rng = np.random.default_rng(0)
    for _ in range(7):
        band = np.column_stack(
            [np.full(13, 1e8 + 0.1), rng.normal(1e6, 1e-3, 13), rng.integers(0, 5, 13)]
        )
        moments.update(band)
    assert moments.feature_m2[0] == 0.0 and moments.scale[0] == 1.0
    assert (moments.feature_m2 >= 0).all()


def _publish(store: Any, provenance: dict[str, Any]) -> str:
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=provenance) as art:
        art.write_array("data", np.ones((40, 2)))
    return art.artifact_id


@pytest.mark.rule("artifact.revision-1-never-reused")
def test_revision_one_never_reused(tmp_path: Path) -> None:
    """An artifact that records revision 1, or a revision that is not an integer, is not current and is never reused."""
    path = _source(tmp_path / "s.zarr")
    store = cv.open_store(path, mode="r+")
    artifact_id = _publish(store, PROVENANCE)
    assert cv.find_artifact(store, "RNA/artifacts", "pca", PROVENANCE) is not None
    document = path / "RNA/artifacts/pca" / artifact_id / "zarr.json"
    original = document.read_text()
    for revision in (1, "2", 2.0):
        meta = json.loads(original)
        meta["attributes"]["provenance"]["revision"] = revision
        document.write_text(json.dumps(meta))
        reopened = cv.open_store(path)
        for wanted in (PROVENANCE, {**PROVENANCE, "revision": 2}):
            assert cv.find_artifact(reopened, "RNA/artifacts", "pca", wanted) is None
    with pytest.raises(ValueError, match="revision"):
        cv.find_artifact(store, "RNA/artifacts", "pca", {**PROVENANCE, "revision": 1})


@pytest.mark.rule("artifact.reuse-exact-provenance")
def test_reuse_compares_whole_provenance_exactly(tmp_path: Path) -> None:
    """Reuse compares the whole provenance mapping exactly; execution_options, created_at_ns, and cytearc_version never affect it."""
    path = _source(tmp_path / "s.zarr")
    store = cv.open_store(path, mode="r+")
    artifact_id = _publish(store, PROVENANCE)
    for near in (
        {**PROVENANCE, "parameters": {"k": 3}},
        {**PROVENANCE, "parameters": {"k": 2, "seed": 0}},
        {**PROVENANCE, "inputs": {"cells": "x"}},
    ):
        assert cv.find_artifact(store, "RNA/artifacts", "pca", near) is None
    document = path / "RNA/artifacts/pca" / artifact_id / "zarr.json"
    meta = json.loads(document.read_text())
    meta["attributes"].update(
        execution_options={"workers": 99}, created_at_ns=1, cytearc_version="0.0.0"
    )
    document.write_text(json.dumps(meta))
    found = cv.find_artifact(cv.open_store(path), "RNA/artifacts", "pca", PROVENANCE)
    assert found is not None and found.artifact_id == artifact_id


@pytest.mark.rule("artifact.creation-diagnostics")
def test_new_artifacts_store_creation_time_and_version(tmp_path: Path) -> None:
    """New artifacts store immutable creation time and creator CyteArc version for diagnostics only."""
    path = _source(tmp_path / "s.zarr")
    artifact_id = _publish(cv.open_store(path, mode="r+"), PROVENANCE)
    attrs = json.loads((path / "RNA/artifacts/pca" / artifact_id / "zarr.json").read_text())[
        "attributes"
    ]
    assert isinstance(attrs["created_at_ns"], int) and attrs["created_at_ns"] > 0
    assert attrs["cytearc_version"] == cv.__version__
    # diagnostics only: they are not part of what reuse compares (see the rule above)
    assert "created_at_ns" not in attrs["provenance"]


@pytest.mark.rule("artifact.id-256-bit")
def test_artifact_ids_are_random_256_bit(mounted: tuple[Path, Path, str]) -> None:
    """Artifact IDs are random 256-bit tokens, so a group that the source holds is exactly the artifact a copy in the target would be."""
    source, target, source_id = mounted
    target_id = _publish(cv.open_store(target, mode="r+"), PROVENANCE)
    for artifact_id in (source_id, target_id):
        assert len(artifact_id) == 64 and int(artifact_id, 16) >= 0
    assert source_id != target_id
    assert (source / "RNA/artifacts/pca" / source_id / "zarr.json").exists()
    assert (target / "RNA/artifacts/pca" / target_id / "zarr.json").exists()


# ---------------------------------------------------------------------- mount


@pytest.mark.rule("mount.record-exact-fields")
def test_mount_record_holds_exactly_its_fields(mounted: tuple[Path, Path, str]) -> None:
    """The record holds exactly location (an absolute path or URI), workspace, and assays, and each assay entry holds exactly datasetFingerprint, countsFingerprint, and requiresTranspose."""
    source, target, _ = mounted
    record = json.loads((target / "zarr.json").read_text())["attributes"]["matrixSource"]
    assert set(record) == {"location", "workspace", "assays"}
    assert Path(record["location"]).is_absolute() and Path(record["location"]) == source
    for entry in record["assays"].values():
        assert set(entry) == {"datasetFingerprint", "countsFingerprint", "requiresTranspose"}


@pytest.mark.rule("mount.record-other-shape-rejected")
def test_mount_record_other_shape_rejected(mounted: tuple[Path, Path, str], tmp_path: Path) -> None:
    """Any other shape, including a field that a later release adds, is rejected rather than ignored, and a source that is itself a mount is refused."""
    _, target, _ = mounted
    with pytest.raises((cv.UnsupportedSourceError, ValueError)):
        cv.mount_datastore(target, tmp_path / "chained.zarr")
    _edit_root(target, "matrixSource", lambda record: record.update(addedLater=True))
    with pytest.raises(cv.RecordShapeError, match="addedLater"):
        cv.open_store(target)


@pytest.mark.rule("mount.no-fallback-outside-artifacts")
def test_outside_artifacts_never_fall_back(mounted: tuple[Path, Path, str]) -> None:
    """Cell and feature tables, counts, and pipeline/ never fall back to the source."""
    source, target, _ = mounted
    (source / "pipeline/runs/r1").mkdir(parents=True)
    (source / "pipeline/runs/r1/zarr.json").write_text("{}")
    shutil.rmtree(target / "cellData" / "names")
    mount = cv.open_store(target)
    for key in (
        "RNA/counts/zarr.json",
        "pipeline/runs/r1/zarr.json",
        "cellData/names/zarr.json",
    ):
        assert (source / key).exists()
        assert zarr.core.sync.sync(mount.get(key, PROTO)) is None
        assert not zarr.core.sync.sync(mount.exists(key))


@pytest.mark.rule("mount.source-group-permission")
def test_writes_inside_source_groups_refused(mounted: tuple[Path, Path, str]) -> None:
    """Writing or deleting inside a source group raises PermissionError, so the source is never modified."""
    source, target, artifact_id = mounted
    before = _tree(source)
    mount = cv.open_store(target, mode="r+")
    group = f"RNA/artifacts/pca/{artifact_id}"
    for key in (f"{group}/zarr.json", f"{group}/data/c/0/0", f"{group}/new/zarr.json"):
        with pytest.raises(PermissionError):
            zarr.core.sync.sync(mount.set(key, PROTO.buffer.from_bytes(b"{}")))
        with pytest.raises(PermissionError):
            zarr.core.sync.sync(mount.delete(key))
    assert _tree(source) == before


@pytest.mark.rule("mount.no-location-recorded")
def test_nothing_records_where_an_artifact_is(mounted: tuple[Path, Path, str]) -> None:
    """Refs, provenance, and run records never record a location, and nothing in the target records which store holds an artifact."""
    source, target, source_id = mounted
    mount = cv.open_store(target, mode="r+")
    own = _publish(mount, {**PROVENANCE, "inputs": {"pca": source_id}})
    for name, data in _tree(target).items():
        if name == "zarr.json":
            continue  # the matrixSource record binds the target to its source
        assert str(source).encode() not in data, name
        assert b"src.zarr" not in data, name
    assert not (target / "RNA/artifacts/pca" / source_id).exists()
    assert (target / "RNA/artifacts/pca" / own).exists()


@pytest.mark.rule("mount.removed-source-artifact-missing")
def test_removed_source_artifact_fails_closed(mounted: tuple[Path, Path, str]) -> None:
    """Results that use source artifacts therefore need the source, as counts do, and a source artifact removed by an outside edit fails closed as a missing input."""
    source, target, artifact_id = mounted
    assert cv.find_artifact(cv.open_store(target), "RNA/artifacts", "pca", PROVENANCE)
    shutil.rmtree(source / "RNA/artifacts/pca" / artifact_id)
    mount = cv.open_store(target)
    assert cv.find_artifact(mount, "RNA/artifacts", "pca", PROVENANCE) is None
    with pytest.raises((FileNotFoundError, KeyError, zarr.errors.NodeNotFoundError)):
        zarr.open_array(mount, path=f"RNA/artifacts/pca/{artifact_id}/data", mode="r")


@pytest.mark.rule("mount.counts-t-exactly-rna")
def test_mount_requires_counts_t_exactly_for_rna(tmp_path: Path) -> None:
    """A mount opens each target assay as its assay_types entry, or else as the source declares it, and requires the source’s countsT for exactly the assays that open as RNA."""  # noqa: RUF002 (quoted verbatim)
    for assay, needs in (("RNA", True), ("ADT", False)):
        source = _source(tmp_path / f"{assay}.zarr", assay=assay)
        cv.mount_datastore(source, tmp_path / f"{assay}-tgt.zarr")
        record = json.loads((tmp_path / f"{assay}-tgt.zarr/zarr.json").read_text())
        assert record["attributes"]["matrixSource"]["assays"][assay]["requiresTranspose"] is needs
        assert (source / assay / "countsT").exists() is needs


@pytest.mark.rule("membership.copies-carry-attributes")
def test_mount_copies_membership_column_with_attributes(tmp_path: Path) -> None:
    """Only imports, DataStoreMerge, and derived assays write the column, directly in storage and with its attributes in its first metadata write, so a reader never finds the column without them; the copies that SubsetZarr, mount_datastore, and repack_zarr make carry them the same way."""
    source = _source(tmp_path / "s.zarr")
    cells = zarr.open_group(source / "cellData", mode="a")
    column = cells.create_array("RNA_I", shape=(40,), dtype=bool)
    column[:] = np.arange(40) % 3 > 0
    column.attrs.update(role="assay_membership", assay="RNA")
    cv.mount_datastore(source, tmp_path / "tgt.zarr")
    copied = zarr.open_array(tmp_path / "tgt.zarr", path="cellData/RNA_I", mode="r")
    assert dict(copied.attrs) == {"role": "assay_membership", "assay": "RNA"}
    np.testing.assert_array_equal(copied[:], column[:])


# ------------------------------------------------------------------- writers


@pytest.mark.rule("destination.w-minus")
def test_destination_created_with_w_minus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination without keys is created with mode "w-", which refuses keys that appear after the check."""
    real = destinations.check_destination

    def check_then_race(location: Any, **options: Any) -> Any:
        mode = real(location, **options)
        zarr.open_group(tmp_path / "d.zarr", mode="w")  # another writer, after the check
        return mode

    monkeypatch.setattr(destinations, "check_destination", check_then_race)
    with pytest.raises((FileExistsError, zarr.errors.ContainsGroupError)):
        destinations.create_destination(tmp_path / "d.zarr", overwrite=False, writer="test")


@pytest.mark.rule("destination.foreign-keys-refused")
def test_foreign_keys_refused(tmp_path: Path, counts: sp.csr_array) -> None:
    """Any other key, such as a .DS_Store file or a root array, and keys without a root group are refused with FileExistsError."""
    cv.write_counts(tmp_path / "s.zarr", counts)
    (tmp_path / "s.zarr/.DS_Store").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="DS_Store"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain/notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        cv.write_counts(tmp_path / "plain", counts, overwrite=True)
    assert (tmp_path / "plain/notes.txt").read_text() == "mine"


@pytest.mark.rule("destination.no-overlap")
def test_no_writer_replaces_its_source(tmp_path: Path) -> None:
    """Every source that a writer reads is prepared, and SubsetZarr also refuses a destination that overlaps a source, so no writer replaces its source."""
    source = _source(tmp_path / "s.zarr")
    before = _tree(source)
    for write in (
        lambda: cv.mount_datastore(source, source),
        lambda: cv.mount_datastore(source, source / "inner"),
        lambda: cv.create_composite(source, {"a": source}),
        lambda: cv.repack(source, source),
    ):
        with pytest.raises((ValueError, FileExistsError)):
            write()
    assert _tree(source) == before


@pytest.mark.rule("repack.pending-refused")
def test_repack_refuses_pending_assay(tmp_path: Path) -> None:
    """Repacking refuses a pending assay."""
    source = _source(tmp_path / "s.zarr")
    zarr.open_group(source, mode="a").create_group(
        "grouped", attributes={"cytearc:pending_assay": "add_grouped_assay"}
    )
    with pytest.raises(cv.UnsupportedSourceError, match="pending"):
        cv.repack(source, tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


# ---------------------------------------------------------------- dtype, layout


@pytest.mark.rule("dtype.narrowest-unsigned")
def test_counts_stored_in_the_narrowest_unsigned_dtype(tmp_path: Path) -> None:
    """Counts are stored unsigned, in the narrowest of uint8, uint16, uint32, and uint64 that holds the largest value, exactly when every value is a non-negative integer."""
    cases = [
        ([0, 255], "int64", "uint8"),
        ([1, 256], "int32", "uint16"),
        ([1.0, 65536.0], "float64", "uint32"),
        ([1, 2**32], "int64", "uint64"),
        ([1, 2**63 + 5], "uint64", "uint64"),
        ([-1, 3], "int64", "int64"),
        ([0.5, 3], "float32", "float32"),
    ]
    for i, (values, given, stored) in enumerate(cases):
        matrix = np.zeros((3, 2), dtype=given)
        matrix[0, 0], matrix[2, 1] = values
        info = cv.write_counts(tmp_path / f"{i}.zarr", matrix)
        assert str(info.dtype) == stored, (values, given)
        back = zarr.open_array(tmp_path / f"{i}.zarr", path="RNA/counts", mode="r")[:]
        np.testing.assert_array_equal(back, matrix)


@pytest.mark.rule("dtype.duplicates-exact")
def test_duplicates_summed_exactly_in_64_bits(tmp_path: Path) -> None:
    """The scans sum duplicate coordinates as the writers do, integers exactly in 64 bits and floats in source order."""
    big = 2**62
    matrix = sp.coo_array(
        (np.array([big, big - 1, 1, 3], dtype=np.uint64), ([0, 0, 1, 1], [1, 1, 0, 0])),
        shape=(2, 2),
    )
    cv.write_counts(tmp_path / "s.zarr", matrix)
    back = zarr.open_array(tmp_path / "s.zarr", path="RNA/counts", mode="r")[:]
    assert int(back[0, 1]) == 2 * big - 1 and int(back[1, 0]) == 4
    assert back.dtype == np.uint64


@pytest.mark.rule("dtype.checked-cast")
def test_checked_cast_raises_instead_of_wrapping(tmp_path: Path) -> None:
    """Writers cast through a checked cast, so a count that the stored dtype cannot hold raises instead of wrapping."""
    matrix = sp.coo_array(
        (np.array([2**63, 2**63], dtype=np.uint64), ([0, 0], [0, 0])), shape=(2, 2)
    )
    with pytest.raises((OverflowError, ValueError)):
        cv.write_counts(tmp_path / "s.zarr", matrix)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.rule("layout.import-refuses-budget")
def test_import_refuses_a_layout_over_budget(tmp_path: Path) -> None:
    """When the policy’s counts write or countsT transpose does not fit mem_budget, an import refuses before it creates its destination and names the largest halving of the policy, with unitBytes and chunkBytes halved together, that fits; a smaller layout makes every later countsT read slower."""  # noqa: RUF002 (quoted verbatim)
    matrix = sp.random(4000, 2000, density=0.01, format="csr", random_state=0, dtype=np.float32)
    matrix.data[:] = 1
    with pytest.raises(ValueError, match=r"largest halving that fits is layout=LayoutPolicy\("):
        cv.write_counts(
            tmp_path / "s.zarr", matrix, layout=cv.LayoutPolicy(8 << 20, 128 << 10), mem_budget="4M"
        )
    assert not (tmp_path / "s.zarr").exists()


def _layout(path: Path) -> dict[str, Any]:
    attrs = zarr.open_array(path, path="RNA/counts", mode="r").attrs
    return dict(attrs["cytearc:countMatrixLayout"])  # type: ignore[arg-type]


@pytest.mark.rule("layout.explicit-policy-exact")
def test_explicit_policy_used_exactly(tmp_path: Path, counts: sp.csr_array) -> None:
    """An explicit policy is used exactly or refused before the destination exists, with the largest halving that fits named."""
    policy = cv.LayoutPolicy(1 << 20, 16 << 10)
    cv.write_counts(tmp_path / "s.zarr", counts, layout=policy)
    layout = _layout(tmp_path / "s.zarr")
    assert (layout["unitBytes"], layout["chunkBytes"]) == (1 << 20, 16 << 10)


@pytest.mark.rule("layout.identity-independent")
def test_layout_never_changes_identity(tmp_path: Path, counts: sp.csr_array) -> None:
    """The layout never changes identity: content_fingerprint, the counts fingerprint, and the dataset fingerprint are computed from the stored values, so only the layout fingerprint differs between layouts."""
    a = cv.write_counts(tmp_path / "a.zarr", counts)
    b = cv.write_counts(tmp_path / "b.zarr", counts, layout=cv.LayoutPolicy(64 << 10, 4 << 10))
    assert _layout(tmp_path / "a.zarr") != _layout(tmp_path / "b.zarr")
    assert (a.content_fingerprint, a.counts_fingerprint, a.dataset_fingerprint) == (
        b.content_fingerprint,
        b.counts_fingerprint,
        b.dataset_fingerprint,
    )
    assert cv.dataset_fingerprint(tmp_path / "a.zarr") == cv.dataset_fingerprint(
        tmp_path / "b.zarr"
    )


@pytest.mark.rule("layout.never-rewritten")
def test_existing_stores_never_rewritten(tmp_path: Path, composite: Path) -> None:
    """Existing stores are never rewritten under a new dtype or layout rule and keep their dtype, layout, and identity."""
    source = tmp_path / "a.zarr"
    trees = {path: _tree(path) for path in (source, composite)}
    for path in (source, composite):
        store = cv.open_store(path, mode="r+")
        cv.VirtualArrayReader(store, assay="RNA").read()
    assert {path: _tree(path) for path in (source, composite)} == trees


@pytest.mark.rule("identity.replaced-source-fails-closed")
def test_replaced_source_fails_closed(mounted: tuple[Path, Path, str], composite: Path) -> None:
    """A re-import of the same source can store a different dtype, and so get different fingerprints and artifact ids; mounts and mapping references bound to the replaced store fail closed."""
    source, target, _ = mounted
    counts = realistic_counts(40, 12, density=0.2, seed=0)
    cv.write_counts(source, counts.astype(np.float32) * 1.5, overwrite=True)
    with pytest.raises(cv.IdentityMismatchError, match="fingerprint"):
        cv.open_store(target)
    a = composite.parent / "a.zarr"
    cv.write_counts(
        a, realistic_counts(40, 12, density=0.2, seed=0).astype(np.int64) * 300, overwrite=True
    )
    with pytest.raises(cv.IdentityMismatchError, match="fingerprint"):
        cv.open_store(composite)


# -------------------------------------------------------------- the register


def test_every_owned_rule_has_exactly_one_test(request: pytest.FixtureRequest) -> None:
    """rules.json and this file agree: each owned rule has one test quoting it,
    each out-of-scope rule has a reason and no test."""
    tests: dict[str, list[Any]] = {}
    for function in vars(request.module).values():
        for mark in getattr(function, "pytestmark", []):
            if mark.name == "rule":
                tests.setdefault(mark.args[0], []).append(function)
    for rule in load_rules():
        if not rule.owned:
            assert rule.reason and rule.id not in tests, rule.id
            continue
        found = tests.get(rule.id, [])
        assert len(found) == 1, f"{rule.id}: {len(found)} tests"
        doc = " ".join((found[0].__doc__ or "").split())
        assert rule.sentence in doc, rule.id
    assert set(tests) <= {rule.id for rule in load_rules()}
