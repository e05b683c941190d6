"""Artifact groups a killed producer left unpublished: listed, and removed on the
operator's word.

Readers never list a ``complete=False`` group, and its random id is never
reused, so such a group only held space, with no way to find or remove it
short of walking the store by hand. ``cv.list_incomplete_artifacts`` shows
them with their creation time (nothing is removed by age: a group still being
written looks the same), and ``cv.remove_incomplete_artifact`` removes the one
named, never a published artifact.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cli_harness import run_in_terminal

import cytearc_vfs as cv
from cytearc_vfs.cli import main

PROVENANCE = {"operation": "scale", "parameters": {}, "inputs": {"counts": "RNA/counts"}}


def _killed_publication(location: Path, root: str = "RNA/artifacts") -> str:
    """The path of the group a producer killed inside its ``with`` block left."""
    script = textwrap.dedent(
        f"""
        import os, numpy as np, cytearc_vfs as cv
        with cv.publish_artifact({str(location)!r}, {root!r}, "scaled",
                                 provenance={PROVENANCE!r}) as art:
            art.write_array("data", np.ones((20, 3)))
            print(art.path, flush=True)
            os._exit(9)  # killed before the publishing write
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 9, done.stderr
    return done.stdout.strip()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    location = tmp_path / "s.zarr"
    cv.write_counts(location, np.ones((20, 6), np.uint32))
    return location


def _published(location: Path) -> str:
    with cv.publish_artifact(location, "RNA/artifacts", "scaled", provenance=PROVENANCE) as art:
        art.write_array("data", np.zeros((20, 3)))
    return art.path


def test_a_killed_publication_is_listed_and_removed_with_every_key(store: Path) -> None:
    left = _killed_publication(store)
    published = _published(store)
    assert [a.path for a in cv.list_artifacts(store, "RNA/artifacts")] == [published]
    found = cv.list_incomplete_artifacts(store)
    assert [group.path for group in found] == [left]
    assert found[0].kind == "scaled" and found[0].created_at.endswith("Z")
    assert (store / left / "data").is_dir()
    removed = cv.remove_incomplete_artifact(store, left)
    assert removed.path == left
    assert not (store / left).exists()
    assert cv.list_incomplete_artifacts(store) == []
    # the published one is untouched, and is never removed here
    assert cv.read_artifact(store, published).load("data").shape == (20, 3)
    with pytest.raises(ValueError, match="no unpublished artifact at"):
        cv.remove_incomplete_artifact(store, published)
    assert cv.read_artifact(store, published).load("data").shape == (20, 3)


def test_removal_refuses_what_it_must_not_remove(store: Path) -> None:
    left = _killed_publication(store)
    with pytest.raises(ValueError, match="must be '\\{root\\}/\\{kind\\}/\\{artifact_id\\}'"):
        cv.remove_incomplete_artifact(store, "RNA/artifacts/scaled")
    with pytest.raises(ValueError, match="no unpublished artifact"):
        cv.remove_incomplete_artifact(store, "RNA/artifacts/scaled/" + "0" * 64)
    with pytest.raises(PermissionError, match="cannot delete keys"):
        cv.remove_incomplete_artifact(cv.open_store(store), left)
    assert (store / left / "zarr.json").is_file()


def test_an_interrupted_removal_can_be_run_again(store: Path) -> None:
    left = _killed_publication(store)
    # the arrays go first and the record last: a removal that stopped between
    # them leaves the group listed, and a second run finishes it
    shutil.rmtree(store / left / "data")
    assert [group.path for group in cv.list_incomplete_artifacts(store)] == [left]
    cv.remove_incomplete_artifact(store, left)
    assert not (store / left).exists()


def test_the_roots_and_kinds_of_the_layout_are_searched(store: Path) -> None:
    at_root = _killed_publication(store, "artifacts")
    in_assay = _killed_publication(store, "RNA/artifacts")
    assert {g.path for g in cv.list_incomplete_artifacts(store)} == {at_root, in_assay}
    assert [g.path for g in cv.list_incomplete_artifacts(store, "artifacts")] == [at_root]
    assert cv.list_incomplete_artifacts(store, kind="other") == []


def test_the_command_line_lists_and_removes_them(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    left = _killed_publication(store)
    assert main(["artifacts", str(store)]) == 0
    assert "0 complete artifacts" in capsys.readouterr().out
    assert main(["artifacts", str(store), "--incomplete", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [entry["path"] for entry in payload["incomplete"]] == [left]
    assert main(["artifacts", str(store), "--remove-incomplete", "RNA/artifacts/x"]) == 2
    assert "must be '{root}/{kind}/{artifact_id}'" in capsys.readouterr().err
    assert (store / left).exists()
    assert main(["artifacts", str(store), "--remove-incomplete", left]) == 0
    assert f"removed the unpublished artifact group {left}" in capsys.readouterr().out
    assert not (store / left).exists()


def test_the_listing_in_a_terminal_says_how_to_remove(store: Path) -> None:
    left = _killed_publication(store)
    run = run_in_terminal(["artifacts", str(store), "--incomplete"])
    assert run.returncode == 0, run.output
    assert left in run.output and "--remove-incomplete PATH" in run.output, run.output


def test_a_refused_removal_says_which_case_it_is(store: Path) -> None:
    # "no group, a published artifact, or a record not written by publish_artifact"
    # left an operator to guess which, and pointed a command-line user at a Python
    # function for the paths
    published = _published(store)
    with pytest.raises(ValueError, match="is a published artifact") as caught:
        cv.remove_incomplete_artifact(store, published)
    # in Python the function that lists them; at a shell the command (test_cli_refusals)
    assert "list_incomplete_artifacts gives the paths" in str(caught.value)
    assert "cytearc-vfs" not in str(caught.value)
    with pytest.raises(ValueError, match="no artifact group is there"):
        cv.remove_incomplete_artifact(store, "RNA/artifacts/scaled/" + "0" * 64)
    foreign = store / "RNA/artifacts/scaled" / ("1" * 64)
    foreign.mkdir(parents=True)
    (foreign / "zarr.json").write_text(
        json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {"x": 1}})
    )
    with pytest.raises(ValueError, match="not written by publish_artifact"):
        cv.remove_incomplete_artifact(store, f"RNA/artifacts/scaled/{'1' * 64}")
    assert (foreign / "zarr.json").is_file()
    assert cv.read_artifact(store, published).load("data").shape == (20, 3)


def test_the_listing_names_the_location_in_its_remedy(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _killed_publication(store)
    assert main(["artifacts", str(store), "--incomplete"]) == 0
    out = capsys.readouterr().out
    assert f"cytearc-vfs artifacts {store} --remove-incomplete PATH" in out, out
