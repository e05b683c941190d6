"""Which store holds each artifact a mount lists: found by resolution when it
is listed, never recorded (spec, "Mounted targets": nothing in the target
records which store holds an artifact).

A real mount whose source and target both hold artifacts, one of a kind both
have, and a target group that shadows a source group at the same path (an
outside copy, as when a result is copied between the two stores).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.artifacts.records import ArtifactRecord
from cytearc_vfs.cli import main


def _provenance(operation: str) -> dict[str, object]:
    return {"operation": operation, "parameters": {}, "inputs": {}}


@pytest.fixture
def mounted(tmp_path: Path) -> dict[str, object]:
    """A source with an RNA ``pca`` and a datastore-scoped ``cell_selection``; its
    mount with its own RNA ``pca`` and ``umap``."""
    source, target = tmp_path / "src.zarr", tmp_path / "mine.zarr"
    cv.write_counts(source, realistic_counts(40, 12, density=0.2, seed=5))
    src = cv.open_store(source, mode="r+")
    with cv.publish_artifact(src, "RNA/artifacts", "pca", provenance=_provenance("pca")) as pca:
        pca.write_array("data", np.ones((40, 2)))
    with cv.publish_artifact(
        src, "artifacts", "cell_selection", provenance=_provenance("select")
    ) as selection:
        selection.write_array("mask", np.ones(40, dtype=bool))
    mount = cv.mount_datastore(source, target)
    with cv.publish_artifact(
        mount, "RNA/artifacts", "pca", provenance=_provenance("pca.mine")
    ) as mine:
        mine.write_array("data", np.zeros((40, 3)))
    with cv.publish_artifact(
        mount, "RNA/artifacts", "umap", provenance=_provenance("umap")
    ) as umap:
        umap.write_array("data", np.zeros((40, 2)))
    mount.close()
    return {
        "source": source,
        "target": target,
        "source_paths": {pca.path, selection.path},
        "target_paths": {mine.path, umap.path},
    }


def test_list_artifacts_through_a_mount_says_which_store_holds_each(
    mounted: dict[str, object],
) -> None:
    mount = cv.open_store(mounted["target"])
    assert isinstance(mount, cv.MountStore)
    listed = cv.list_artifacts(mount, "RNA/artifacts") + cv.list_artifacts(mount, "artifacts")
    held = {art.path: art.held_by for art in listed}
    assert held == {
        **dict.fromkeys(mounted["source_paths"], "source"),  # type: ignore[arg-type]
        **dict.fromkeys(mounted["target_paths"], "target"),  # type: ignore[arg-type]
    }
    # read_artifact and find_artifact resolve it the same way
    (source_pca,) = [a for a in listed if a.held_by == "source" and a.kind == "pca"]
    assert cv.read_artifact(mount, source_pca.path).held_by == "source"
    assert repr(source_pca).endswith(", held by the source>")
    found = cv.find_artifact(mount, "RNA/artifacts", "pca", _provenance("pca.mine"))
    assert found is not None and found.held_by == "target"
    # a zarr Group over the mount: its path prefixes the artifact paths
    group = zarr.open_group(mount, mode="r", path="RNA")
    assert {a.held_by for a in cv.list_artifacts(group, "artifacts", "umap")} == {"target"}


def test_an_ordinary_store_or_a_mounts_path_lists_no_holder(mounted: dict[str, object]) -> None:
    # the source as a store, and the target's path (the target alone, as zarr sees it)
    assert {a.held_by for a in cv.list_artifacts(mounted["source"], "RNA/artifacts")} == {None}
    assert {a.held_by for a in cv.list_artifacts(mounted["target"], "RNA/artifacts")} == {None}
    (art, *_) = cv.list_artifacts(mounted["source"], "RNA/artifacts")
    assert "held by" not in repr(art)


def test_the_holder_is_no_field_of_the_record(mounted: dict[str, object]) -> None:
    """The record's fields are the spec's, exactly; the holder is the listing's."""
    mount = cv.open_store(mounted["target"])
    (art, *_) = cv.list_artifacts(mount, "RNA/artifacts")
    assert "held_by" not in ArtifactRecord.__slots__
    on_disk = (
        json.loads(Path(mounted["target"], art.path, "zarr.json").read_text())
        if (art.held_by == "target")
        else json.loads(Path(mounted["source"], art.path, "zarr.json").read_text())
    )
    assert "held_by" not in on_disk["attributes"]
    # equal Artifacts stay equal: the holder is no part of the identity
    assert cv.read_artifact(mount, art.path) == art


def _shadow(mounted: dict[str, object]) -> str:
    """Copy the source's RNA pca group into the target, as an outside edit would."""
    (path,) = [p for p in mounted["source_paths"] if p.startswith("RNA/")]  # type: ignore[attr-defined]
    shutil.copytree(Path(mounted["source"], path), Path(mounted["target"], path))
    return str(path)


def test_a_target_group_that_shadows_a_source_group_is_the_targets(
    mounted: dict[str, object],
) -> None:
    path = _shadow(mounted)
    mount = cv.open_store(mounted["target"])
    assert cv.read_artifact(mount, path).held_by == "target"  # resolution rule 2
    (described,) = [d for d in cv.describe_artifacts(mounted["target"]) if d["path"] == path]
    assert described["held_by"] == "target" and described["shadows"] is True
    others = [d for d in cv.describe_artifacts(mounted["target"]) if d["path"] != path]
    assert len(others) == 3 and not any(d["shadows"] for d in others)


def test_the_cli_table_and_json_say_which_store_holds_each(
    mounted: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    shadowed = _shadow(mounted)
    target = str(mounted["target"])
    assert main(["artifacts", target]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == (
        f"{target}: 4 complete artifacts (mount of {mounted['source']}: "
        "1 held by the source, 3 by the target, 1 of them shadowing the source's copy)"
    )
    for path in mounted["source_paths"]:  # type: ignore[attr-defined]
        (line,) = [line for line in lines if path in line]
        if path == shadowed:
            assert line.startswith("  target ") and "shadows the source's copy" in line
        else:
            assert line.startswith("  source ")
    for path in mounted["target_paths"]:  # type: ignore[attr-defined]
        (line,) = [line for line in lines if path in line]
        assert line.startswith("  target ")

    assert main(["artifacts", target, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    held = {entry["path"]: (entry["held_by"], entry["shadows"]) for entry in payload["artifacts"]}
    assert held == {
        **{p: ("source", False) for p in mounted["source_paths"] if p != shadowed},  # type: ignore[attr-defined]
        shadowed: ("target", True),
        **{p: ("target", False) for p in mounted["target_paths"]},  # type: ignore[attr-defined]
    }
    assert payload["mount_source"] == str(mounted["source"])
    assert payload["complete"] is True and payload["source_error"] is None

    # an ordinary store: no holder, no mount
    assert main(["artifacts", str(mounted["source"]), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {(e["held_by"], e["shadows"]) for e in payload["artifacts"]} == {(None, False)}
    assert payload["mount_source"] is None
    assert main(["artifacts", str(mounted["source"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{mounted['source']}: 2 complete artifacts"
    assert all(line.startswith("  artifacts/") or line.startswith("  RNA/") for line in lines[1:])


def test_a_mount_whose_source_moved_lists_its_own_artifacts_marked_incomplete(
    mounted: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    """``artifacts MOUNT`` exited 4 listing nothing once the source moved, though the
    target's own artifacts are readable: they are listed, marked as the target's alone,
    and the list says it is incomplete (exit 4 still), why, and how to restore."""
    source, target = Path(str(mounted["source"])), str(mounted["target"])
    moved = source.with_name("moved.zarr")
    source.rename(moved)
    assert main(["artifacts", target]) == 4
    said = capsys.readouterr()
    lines = said.out.splitlines()
    assert lines[0] == (
        f"{target}: 2 complete artifacts of the target alone (mount of {source}: the "
        "source's artifacts are not listed, it cannot be read; this list is incomplete)"
    )
    listed = {line.split()[1] for line in lines[1:]}
    assert listed == mounted["target_paths"]
    assert all(line.startswith("  target ") for line in lines[1:])
    assert said.err.startswith("cytearc-vfs artifacts: the source of the mount at")
    assert f"ln -s NEW_LOCATION {source}" in said.err and "restore it" in said.err

    assert main(["artifacts", target, "--json"]) == 4
    payload = json.loads(capsys.readouterr().out)
    assert payload["complete"] is False and payload["mount_source"] == str(source)
    assert payload["source_error"]["error"] == "SourceGoneError"
    assert "ln -s NEW_LOCATION" in payload["source_error"]["message"]
    assert {e["path"] for e in payload["artifacts"]} == mounted["target_paths"]
    # held by the target; whether the source shadows one cannot be told without it
    assert {(e["held_by"], e["shadows"]) for e in payload["artifacts"]} == {("target", None)}

    # restored: the whole listing again
    moved.rename(source)
    assert main(["artifacts", target, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["complete"] is True and len(payload["artifacts"]) == 4


def test_a_composite_whose_source_moved_still_fails_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that is no mount has no artifacts of its own apart from its sources':
    its failure stands as it was."""
    source = tmp_path / "a.zarr"
    cv.write_counts(source, realistic_counts(10, 4, density=0.3, seed=2))
    cv.create_composite(tmp_path / "c.zarr", {"a": source})
    shutil.rmtree(source)
    assert main(["artifacts", str(tmp_path / "c.zarr")]) == 4
    said = capsys.readouterr()
    assert said.out == "" and "cytearc-vfs artifacts: " in said.err


def test_an_s3_source_costs_no_request_for_the_holder_and_one_per_shadow_check(
    s3_server: Any, s3_proxy: Any, tmp_path: Path
) -> None:
    """Source on (loopback) S3 behind a counting proxy: the holder comes from the
    read of each record (no request of its own); describing asks the source once
    per target artifact whether it shadows one, and nothing else more."""
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    url = f"s3://{s3_server.new_bucket()}/src.zarr"
    cv.write_counts(url, realistic_counts(40, 12, density=0.2, seed=5), storage_options=options)
    src = cv.open_store(url, mode="r+", storage_options=options)
    with cv.publish_artifact(src, "RNA/artifacts", "pca", provenance=_provenance("pca")) as pca:
        pca.write_array("data", np.ones((40, 2)))
    mount = cv.mount_datastore(url, tmp_path / "t.zarr", source_storage_options=options)
    with cv.publish_artifact(mount, "RNA/artifacts", "pca", provenance=_provenance("mine")) as mine:
        mine.write_array("data", np.zeros((40, 2)))
    mount.close()
    mount = cv.open_store(tmp_path / "t.zarr", source_storage_options=options)
    s3_proxy.take()
    listed = cv.list_artifacts(mount, "RNA/artifacts")
    assert {a.path: a.held_by for a in listed} == {pca.path: "source", mine.path: "target"}
    listing = s3_proxy.take()
    # again, with the holders now known: the same requests, and no more
    assert [a.held_by for a in cv.list_artifacts(mount, "RNA/artifacts")] == [
        a.held_by for a in listed
    ]
    assert len(s3_proxy.take()) == len(listing)
    described = cv.describe_artifacts(mount)
    assert {d["path"]: (d["held_by"], d["shadows"]) for d in described} == {
        pca.path: ("source", False),
        mine.path: ("target", False),
    }
    shadow_checks = [
        seen for seen in s3_proxy.take() if seen.path.endswith(f"{mine.path}/zarr.json")
    ]
    assert len(shadow_checks) == 1
    mount.close()
