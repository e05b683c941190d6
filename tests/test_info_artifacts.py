"""``cytearc-vfs info`` says which artifacts a store holds, and how to list them.

``info`` described assays, composites and mounts and said nothing of
artifacts, so a user who had published a PCA or a clustering did not learn
from it that the result was there, nor which command lists it. It now counts,
per artifact root (the datastore's, each workspace's and each assay's;
through a mount the source's and the target's apart, marked as ``artifacts``
marks them), the complete artifacts by kind and the unpublished groups, with
the command that lists them, from the listing ``cytearc-vfs artifacts`` uses
and one read of each group's ``zarr.json``.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_harness import cli_executable, run_in_terminal, run_main
from conftest import realistic_counts
from unpublished_groups import killed_producer
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.artifacts.tally import RootTally, tally_artifacts


def _provenance(operation: str) -> dict[str, object]:
    return {"operation": operation, "parameters": {}, "inputs": {}}


def _publish(store: Any, root: str, kind: str, operation: str) -> str:
    with cv.publish_artifact(store, root, kind, provenance=_provenance(operation)) as art:
        art.write_array("data", np.ones((40, 2)))
    return art.path


def _malformed(location: Path, path: str) -> None:
    """The record of the published group at ``path`` given a field no writer writes."""
    document = location / path / "zarr.json"
    parsed = json.loads(document.read_text())
    parsed["attributes"]["extra"] = 1
    document.write_text(json.dumps(parsed))


def _info(location: str, *more: str) -> tuple[list[str], dict[str, Any]]:
    """``info LOCATION``'s lines and its ``--json`` payload."""
    said = run_main("info", location, *more)
    assert said.returncode == 0, said.stderr
    shown = run_main("info", location, *more, "--json")
    assert shown.returncode == 0, shown.stderr
    return said.stdout.splitlines(), json.loads(shown.stdout)


@pytest.fixture
def workspace_store(tmp_path: Path) -> Path:
    """A store of workspace ``ws`` (roots ``artifacts``, ``ws/artifacts``,
    ``ws/RNA/artifacts``) with artifacts of three kinds, an unpublished group and
    one whose record is malformed."""
    location = tmp_path / "w.zarr"
    cv.write_counts(location, realistic_counts(40, 12, density=0.2, seed=5), workspace="ws")
    store = cv.open_store(location, mode="r+")
    _publish(store, "artifacts", "cell_selection", "select")
    _publish(store, "ws/RNA/artifacts", "pca", "pca.a")
    _publish(store, "ws/RNA/artifacts", "pca", "pca.b")
    _publish(store, "ws/RNA/artifacts", "leiden", "leiden")
    killed_producer(location, [("ws/RNA/artifacts", "umap")])
    _malformed(location, _publish(store, "ws/artifacts", "graph", "graph"))
    return location


def test_each_root_shows_its_artifacts_by_kind_and_its_unpublished_groups(
    workspace_store: Path,
) -> None:
    where = str(workspace_store)
    lines, payload = _info(where)
    assert lines[-6:] == [
        f"  artifacts (cytearc-vfs artifacts {where} lists them):",
        "    artifacts: 1 complete (1 cell_selection)",
        "    ws/artifacts: 0 complete",
        "      and 1 unreadable group (its record is malformed; "
        f"cytearc-vfs artifacts {where} names it)",
        "    ws/RNA/artifacts: 3 complete (1 leiden, 2 pca)",
        f"      and 1 unpublished group (cytearc-vfs artifacts {where} --incomplete lists it)",
    ]
    assert payload["artifacts"] == [
        {
            "root": "artifacts",
            "heldBy": None,
            "complete": {"cell_selection": 1},
            "incomplete": 0,
            "unreadable": 0,
        },
        {"root": "ws/artifacts", "heldBy": None, "complete": {}, "incomplete": 0, "unreadable": 1},
        {
            "root": "ws/RNA/artifacts",
            "heldBy": None,
            "complete": {"leiden": 1, "pca": 2},
            "incomplete": 1,
            "unreadable": 0,
        },
    ]
    # the same groups the listings show
    described = Counter((d["root"], d["kind"]) for d in cv.describe_artifacts(workspace_store))
    tallied = Counter(
        {(t["root"], kind): n for t in payload["artifacts"] for kind, n in t["complete"].items()}
    )
    assert described == tallied
    assert len(cv.list_incomplete_artifacts(workspace_store)) == 1
    # the command the unreadable group's line names does name it
    (malformed,) = [p.parent for p in workspace_store.glob("ws/artifacts/graph/*/zarr.json")]
    listed = run_main("artifacts", where)
    assert f"skipping unreadable artifact ws/artifacts/graph/{malformed.name}" in listed.stderr


def test_a_store_without_artifacts_says_so_in_one_line(tmp_path: Path) -> None:
    """As ``info`` says ``no assays`` of a store without any; roots are still in --json."""
    location = tmp_path / "s.zarr"
    cv.write_counts(location, realistic_counts(20, 6, density=0.3, seed=1))
    lines, payload = _info(str(location))
    assert lines[-1] == "  no artifacts"
    assert not any(line.startswith("  artifacts") for line in lines)
    assert payload["artifacts"] == [
        {"root": root, "heldBy": None, "complete": {}, "incomplete": 0, "unreadable": 0}
        for root in ("artifacts", "RNA/artifacts")
    ]
    # the parent groups an artifact's removal leaves are no artifacts either
    (left,) = killed_producer(location, [("RNA/artifacts", "pca")])
    cv.remove_incomplete_artifact(location, left)
    assert _info(str(location))[0][-1] == "  no artifacts"


def test_a_composite_shows_its_own_artifacts(tmp_path: Path) -> None:
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(tmp_path / f"{name}.zarr", realistic_counts(20, 6, density=0.3, seed=seed))
    composite = tmp_path / "c.zarr"
    cv.create_composite(composite, {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"})
    assert _info(str(composite))[0][-1] == "  no artifacts"
    store = cv.open_store(composite, mode="r+")
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=_provenance("p")) as art:
        art.write_array("data", np.ones((40, 2)))
    _publish(cv.open_store(tmp_path / "a.zarr", mode="r+"), "RNA/artifacts", "pca", "source's")
    lines, payload = _info(str(composite))
    # the sources' artifacts are theirs, not the composite's
    assert lines[-2:] == [
        f"  artifacts (cytearc-vfs artifacts {composite} lists them):",
        "    RNA/artifacts: 1 complete (1 pca)",
    ]
    assert payload["kind"] == "composite"
    assert [t["complete"] for t in payload["artifacts"]] == [{}, {"pca": 1}]


def test_a_mount_counts_its_sources_and_its_targets_apart(tmp_path: Path) -> None:
    """Marked ``source``/``target`` as ``artifacts MOUNT`` marks each; an unpublished
    group is listed by ``--incomplete`` of the store that holds it."""
    source, target = tmp_path / "src.zarr", tmp_path / "mine.zarr"
    cv.write_counts(source, realistic_counts(40, 12, density=0.2, seed=5))
    _publish(source, "RNA/artifacts", "pca", "pca")
    _publish(source, "artifacts", "cell_selection", "select")
    killed_producer(source, [("RNA/artifacts", "umap")])
    mount = cv.mount_datastore(source, target)
    _publish(mount, "RNA/artifacts", "pca", "pca.mine")
    _publish(mount, "RNA/artifacts", "leiden", "leiden")
    mount.close()
    killed_producer(target, [("RNA/artifacts", "pca"), ("RNA/artifacts", "leiden")])
    lines, payload = _info(str(target))
    assert lines[-6:] == [
        f"  artifacts (cytearc-vfs artifacts {target} lists them):",
        "    source artifacts: 1 complete (1 cell_selection)",
        "    source RNA/artifacts: 1 complete (1 pca)",
        f"             and 1 unpublished group (cytearc-vfs artifacts {source} --incomplete "
        "lists it)",
        "    target RNA/artifacts: 2 complete (1 leiden, 1 pca)",
        f"             and 2 unpublished groups (cytearc-vfs artifacts {target} --incomplete "
        "lists them)",
    ]
    assert [
        (t["root"], t["heldBy"], t["complete"], t["incomplete"]) for t in payload["artifacts"]
    ] == [
        ("artifacts", "source", {"cell_selection": 1}, 0),
        ("artifacts", "target", {}, 0),
        ("RNA/artifacts", "source", {"pca": 1}, 1),
        ("RNA/artifacts", "target", {"leiden": 1, "pca": 1}, 2),
    ]
    # what the commands named list
    assert len(cv.list_incomplete_artifacts(source)) == 1
    assert len(cv.list_incomplete_artifacts(target)) == 2
    held = Counter(d["held_by"] for d in cv.describe_artifacts(target))
    assert held == {"source": 2, "target": 2}


def test_in_a_terminal_and_piped_the_lines_are_the_same(workspace_store: Path) -> None:
    where = str(workspace_store)
    piped = subprocess.run(
        [cli_executable(), "info", where], capture_output=True, text=True, timeout=300, check=False
    )
    assert piped.returncode == 0, piped.stderr
    assert "    ws/RNA/artifacts: 3 complete (1 leiden, 2 pca)\n" in piped.stdout
    assert piped.stderr == ""  # the unreadable group is counted, not warned of
    run = run_in_terminal(["info", where])
    assert run.returncode == 0, run.output
    shown = run.output.replace("\r\n", "\n")
    artifacts_part = piped.stdout[piped.stdout.index("  artifacts (") :]
    assert artifacts_part in shown, shown


class _Unlisted(WrapperStore[LocalStore]):
    """A real local store that says it cannot list, as some HTTP stores cannot."""

    @property
    def supports_listing(self) -> bool:
        return False


def test_a_store_that_cannot_list_is_not_counted(workspace_store: Path) -> None:
    from cytearc_vfs.inspection.describe import describe_store

    unlisted = _Unlisted(LocalStore(workspace_store, read_only=True))
    assert tally_artifacts(unlisted, where="w") is None
    assert describe_store(unlisted, where="w")["artifacts"] is None
    listed = tally_artifacts(LocalStore(workspace_store, read_only=True), where="w")
    assert listed is not None and listed[0] == RootTally("artifacts", None, {"cell_selection": 1})


def _requests(seen: list[Any]) -> Counter[tuple[str, str]]:
    return Counter((s.method, s.path) for s in seen)


def test_on_s3_it_costs_the_listing_and_one_read_per_group(s3_server: Any, s3_proxy: Any) -> None:
    """Counted at a proxy in front of a loopback S3 server: the roots and kinds listed
    once each, one GET of each group's zarr.json, no array document, no chunk."""
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/s.zarr"
    flags = ("--storage-options", json.dumps(options))
    cv.write_counts(url, realistic_counts(40, 12, density=0.2, seed=5), storage_options=options)
    s3_proxy.take()
    _info(url, *flags)
    before = s3_proxy.take()
    store = cv.open_store(url, mode="r+", storage_options=options)
    groups = [
        _publish(store, "RNA/artifacts", "pca", "a"),
        _publish(store, "RNA/artifacts", "pca", "b"),
        _publish(store, "artifacts", "cell_selection", "c"),
        *killed_producer(url, [("RNA/artifacts", "umap")], options),
    ]
    s3_proxy.take()
    lines, payload = _info(url, *flags)
    after = s3_proxy.take()
    assert lines[-3:] == [
        "    artifacts: 1 complete (1 cell_selection)",
        "    RNA/artifacts: 2 complete (2 pca)",
        f"      and 1 unpublished group (cytearc-vfs artifacts {url} --incomplete lists it)",
    ]
    assert [t["incomplete"] for t in payload["artifacts"]] == [0, 1]
    listing = f"/{bucket}?delimiter=%2F&list-type=2&prefix=s.zarr%2F"
    kinds = (
        "artifacts%2Fcell_selection%2F",
        "RNA%2Fartifacts%2Fpca%2F",
        "RNA%2Fartifacts%2Fumap%2F",
    )
    # a top-level group is read wherever the store's contents are (as cellData's is)
    top_level_reads = _requests(before)[("GET", f"/{bucket}/s.zarr/cellData/zarr.json")]
    assert top_level_reads >= 1
    extra = Counter(
        {
            **{("GET", listing + kind): 2 for kind in kinds},
            **{("GET", f"/{bucket}/s.zarr/{group}/zarr.json"): 2 for group in groups},
            ("GET", f"/{bucket}/s.zarr/artifacts/zarr.json"): top_level_reads,
        }
    )
    # two runs each (text and --json): what info cost before, and this, and nothing else
    assert _requests(after) == _requests(before) + extra
    # the store's contents (its top-level listing) are read once a run: the kind is told
    # and the store described from the same reads (tests/test_command_reads_once.py)
    assert _requests(before)[("GET", listing)] == 2
    # each root was listed before too, once a run, empty
    assert _requests(before)[("GET", listing + "RNA%2Fartifacts%2F")] == 2
    # no array of an artifact: neither its document nor a chunk
    assert not any("/data/" in s.path for s in after)


def test_through_a_mount_of_an_s3_source_the_source_costs_the_same(
    s3_server: Any, s3_proxy: Any, tmp_path: Path
) -> None:
    """The source's groups through a mount: the listing of its kind and one GET of
    each group's zarr.json; which store holds each costs no request of its own."""
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/src.zarr"
    cv.write_counts(url, realistic_counts(40, 12, density=0.2, seed=5), storage_options=options)
    target = tmp_path / "t.zarr"
    cv.mount_datastore(url, target, source_storage_options=options).close()
    flags = ("--source-storage-options", json.dumps(options))
    s3_proxy.take()
    _info(str(target), *flags)
    before = s3_proxy.take()
    source = cv.open_store(url, mode="r+", storage_options=options)
    groups = [_publish(source, "RNA/artifacts", "pca", f"pca.{i}") for i in range(3)]
    mount = cv.open_store(target, mode="r+", source_storage_options=options)
    _publish(mount, "RNA/artifacts", "pca", "pca.mine")
    mount.close()
    s3_proxy.take()
    lines, _ = _info(str(target), *flags)
    after = s3_proxy.take()
    assert lines[-2:] == [
        "    source RNA/artifacts: 3 complete (3 pca)",
        "    target RNA/artifacts: 1 complete (1 pca)",
    ]
    listing = f"/{bucket}?delimiter=%2F&list-type=2&prefix=src.zarr%2FRNA%2Fartifacts%2Fpca%2F"
    extra = Counter(
        {
            ("GET", listing): 2,
            **{("GET", f"/{bucket}/src.zarr/{group}/zarr.json"): 2 for group in groups},
        }
    )
    assert _requests(after) == _requests(before) + extra
