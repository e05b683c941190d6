"""repack: standalone copies of ordinary stores and mounts, data-only repair, CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import main

PCA = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
UMAP = {"operation": "test.umap", "parameters": {}, "inputs": {}}


def snapshot(store) -> dict[str, object]:
    """Every node of a store: arrays' values and attributes, groups' attributes."""
    result: dict[str, object] = {}
    root = zarr.open_group(store, mode="r")
    result["/"] = root.attrs.asdict()

    def walk(group: zarr.Group, prefix: str) -> None:
        for name, node in sorted(group.members(), key=lambda item: item[0]):
            path = f"{prefix}{name}"
            if isinstance(node, zarr.Array):
                result[path] = (node.attrs.asdict(), np.asarray(node[...]).tolist())
            else:
                result[path] = node.attrs.asdict()
                walk(node, path + "/")

    walk(root, "")
    return result


def publish(store, root: str, kind: str, provenance: dict, value: float) -> str:
    with cv.publish_artifact(store, root, kind, provenance=provenance) as art:
        art.write_array("data", np.full((50, 2), value))
    return art.artifact_id


def test_repack_of_a_mount_equals_a_store_built_directly(tmp_path: Path) -> None:
    matrix = realistic_counts(50, 12, density=0.3, seed=5)
    cv.write_counts(tmp_path / "src.zarr", matrix)
    source_artifact = publish(
        cv.open_store(tmp_path / "src.zarr", mode="r+"), "RNA/artifacts", "pca", PCA, 1.0
    )
    mount = cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "tgt.zarr")
    target_artifact = publish(mount, "RNA/artifacts", "umap", UMAP, 2.0)
    zarr.open_group(mount, mode="r+").create_group("pipeline/runs")

    repacked = cv.repack(tmp_path / "tgt.zarr", tmp_path / "out.zarr")

    # the same store built directly: source store + both artifacts + the runs group
    shutil.copytree(tmp_path / "src.zarr", tmp_path / "direct.zarr")
    for path in ("RNA/artifacts/umap",):
        shutil.copytree(tmp_path / "tgt.zarr" / path, tmp_path / "direct.zarr" / path)
    zarr.open_group(tmp_path / "direct.zarr", mode="a").create_group("pipeline/runs")
    zarr.open_group(tmp_path / "direct.zarr", path="artifacts", mode="a")
    got, expected = snapshot(repacked), snapshot(cv.open_store(tmp_path / "direct.zarr"))
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == expected[key], key
    ids = {a.artifact_id for a in cv.list_artifacts(repacked, "RNA/artifacts")}
    assert ids == {source_artifact, target_artifact}
    shutil.rmtree(tmp_path / "src.zarr")
    reopened = cv.open_store(tmp_path / "out.zarr")  # no longer needs the source
    np.testing.assert_array_equal(cv.VirtualArrayReader(reopened).read(), matrix.toarray())


def test_repack_of_ordinary_store_omits_state_and_keeps_identity(tmp_path: Path) -> None:
    matrix = realistic_counts(40, 10, density=0.3, seed=6)
    info = cv.write_counts(tmp_path / "src.zarr", matrix, workspace="ws")
    publish(cv.open_store(tmp_path / "src.zarr", mode="r+"), "ws/RNA/artifacts", "pca", PCA, 3.0)
    out = cv.repack(tmp_path / "src.zarr", tmp_path / "out.zarr")
    assert cv.dataset_fingerprint(out, workspace="ws") == info.dataset_fingerprint
    assert len(cv.list_artifacts(out, "ws/RNA/artifacts")) == 1
    zarr.open_group(tmp_path / "src.zarr", mode="a")["ws/RNA"].create_group("state")
    with pytest.raises(cv.UnsupportedSourceError, match="state"):
        cv.repack(tmp_path / "src.zarr", tmp_path / "out2.zarr")


def test_repack_of_a_mount_omits_the_state_group_a_client_wrote_into_its_target(
    tmp_path: Path,
) -> None:
    # scarf (6151ec1) writes RNA/state/zarr.json through the mount with plain zarr
    # when it normalizes; the mount accepts it, and its repack once copied it and
    # then refused its own output ("t.zarr.rp: ... holds a retired RNA/state group")
    matrix = realistic_counts(40, 10, density=0.3, seed=9)
    info = cv.write_counts(tmp_path / "src.zarr", matrix)
    mount = cv.open_store(
        cv.mount_datastore(tmp_path / "src.zarr", tmp_path / "tgt.zarr"), mode="r+"
    )
    assay = zarr.open_group(mount, mode="r+")["RNA"]
    assert isinstance(assay, zarr.Group)
    assay.create_group("state", attributes={"feature_scaling": {"artifact_id": "x"}})
    assert (tmp_path / "tgt.zarr" / "RNA" / "state" / "zarr.json").is_file()

    out = cv.repack(tmp_path / "tgt.zarr", tmp_path / "out.zarr")

    assert not (tmp_path / "out.zarr" / "RNA" / "state").exists()
    assert cv.dataset_fingerprint(out) == info.dataset_fingerprint
    np.testing.assert_array_equal(cv.VirtualArrayReader(out).read(), matrix.toarray())


@pytest.mark.parametrize("through", ["store", "mount"])
def test_repack_fits_the_layout_to_the_budget(tmp_path: Path, through: str) -> None:
    matrix = realistic_counts(4000, 300, density=0.05, seed=7)
    info = cv.write_counts(tmp_path / "src.zarr", matrix, layout=cv.LayoutPolicy(1 << 20, 64 << 10))
    repacked = tmp_path / "src.zarr"
    if through == "mount":
        # a mount's own copy of the assay group carries the layout record too: it
        # once overwrote the refitted record (the output then refused to open)
        repacked = tmp_path / "mine.zarr"
        cv.mount_datastore(tmp_path / "src.zarr", repacked)
    out = cv.repack(repacked, tmp_path / "out.zarr", mem_budget="1M")
    layout = zarr.open_group(out, mode="r")["RNA"].attrs["cytearc:countMatrixLayout"]
    assert layout["unitBytes"] < info.layout.unit_bytes
    assert layout["unitBytes"] // layout["chunkBytes"] == 16  # halved together
    assert cv.dataset_fingerprint(out) == info.dataset_fingerprint
    np.testing.assert_array_equal(cv.VirtualArrayReader(out).read(), matrix.toarray())


def test_data_only_repairs_a_store_that_does_not_open(tmp_path: Path) -> None:
    matrix = realistic_counts(30, 8, density=0.4, seed=8)
    info = cv.write_counts(tmp_path / "src.zarr", matrix)
    document = tmp_path / "src.zarr" / "RNA" / "countSummaries" / "zarr.json"
    content = json.loads(document.read_text())
    content["attributes"]["source_fingerprint"] = "sha256:" + "0" * 64
    document.write_text(json.dumps(content))
    with pytest.raises(cv.IdentityMismatchError):
        cv.repack(tmp_path / "src.zarr", tmp_path / "bad.zarr")
    out = cv.repack(tmp_path / "src.zarr", tmp_path / "out.zarr", data_only=True)
    assert cv.dataset_fingerprint(out) == info.dataset_fingerprint


@pytest.mark.parametrize(
    "document", ["RNA/counts/zarr.json", "cellData/zarr.json", "RNA/featureData/ids/zarr.json"]
)
def test_data_only_names_a_document_that_is_not_json(
    tmp_path: Path, document: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged metadata document: the ordinary repack named it (exit 3); data-only,
    which the remedy of every other command proposes, exited 2 with json's bare
    'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)'."""
    cv.write_counts(tmp_path / "src.zarr", realistic_counts(30, 8, density=0.4, seed=8))
    (tmp_path / "src.zarr" / document).write_text("{not json")
    with pytest.raises(cv.RecordShapeError, match=rf"{re.escape(document)!s}' is not valid JSON"):
        cv.repack(tmp_path / "src.zarr", tmp_path / "out.zarr", data_only=True)
    assert not (tmp_path / "out.zarr").exists()
    argv = ["repack", str(tmp_path / "src.zarr"), str(tmp_path / "out.zarr"), "--data-only"]
    assert main(argv) == 3
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"cytearc-vfs repack: {tmp_path / 'src.zarr'}: '{document}' is not")
    assert line.endswith("restore it from a copy of the store, or re-import the dataset")
    assert not (tmp_path / "out.zarr").exists()


def test_repack_refuses_composites_and_overlaps(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(10, 4, seed=1))
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    with pytest.raises(cv.UnsupportedSourceError, match="repacking composites is unsupported"):
        cv.repack(tmp_path / "c.zarr", tmp_path / "out.zarr")
    with pytest.raises(ValueError, match="overlaps"):
        cv.repack(tmp_path / "a.zarr", tmp_path / "a.zarr" / "inner")
    assert not (tmp_path / "out.zarr").exists()


def test_cli_mount_and_repack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(20, 5, seed=2))
    assert main(["mount", str(tmp_path / "a.zarr"), str(tmp_path / "m.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assays"] == ["RNA"]
    assert main(["info", str(tmp_path / "m.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "mount"
    assert main(["verify", str(tmp_path / "m.zarr")]) == 0
    capsys.readouterr()
    assert main(["repack", str(tmp_path / "m.zarr"), str(tmp_path / "r.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dataOnly"] is False
    assert main(["mount", str(tmp_path / "m.zarr"), str(tmp_path / "m2.zarr")]) == 2
    assert "do not chain" in capsys.readouterr().err
