"""Resize and promote under groups with consolidated metadata (anndata writes it by default).

zarr opens such a group from the consolidated copy of its members' documents:
it read an array being resized with its old document, past the marker that
makes readers refuse it (half-moved chunks read as valid), and a resized array
with its old shape (shifted values). The consolidated metadata above the array
is removed right after the journal is written, before the marker, and
consolidated again once the new ``zarr.json`` is written, before the journal
goes: the store is left consolidated, as it was found.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import zarr
from anndata_files import write_anndata_zarr
from array_helpers import CountingStore, WriteInterruptedError, leftovers
from zarr.errors import MetadataValidationError
from zarr.storage import LocalStore

from cytearc_vfs.arrays import recover, resize
from cytearc_vfs.arrays.documents import JOURNAL_NAME, PROGRESS_NAME, marked
from cytearc_vfs.arrays.promotion import promote_array
from cytearc_vfs.arrays.resizing import resize_array
from cytearc_vfs.cli import main
from cytearc_vfs.errors import RecordShapeError, VfsWarning

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")


def _consolidate(where: Path, groups: tuple[str, ...]) -> None:
    """``zarr.consolidate_metadata`` of ``groups``, innermost first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for group in groups:
            zarr.consolidate_metadata(LocalStore(where), path=group or None)


def _consolidated(
    where: Path, path: str, values: np.ndarray, groups: tuple[str, ...] = ("",)
) -> None:
    group = zarr.open_group(LocalStore(where), mode="w")
    group.create_group("other").create_array("y", shape=(2,), dtype="i4")
    array = group.create_array(path, shape=values.shape, chunks=(2,), dtype="i4", fill_value=-1)
    array[:] = values
    _consolidate(where, groups)


def _groups_of(path: str) -> tuple[str, ...]:
    """A nested array's group consolidated too: both levels, innermost first."""
    return ("g", "") if "/" in path else ("",)


def _documents(where: Path, groups: tuple[str, ...]) -> dict[str, Any]:
    return {group: json.loads((where / group / "zarr.json").read_text()) for group in groups}


def assert_consolidated_as_fresh(where: Path, groups: tuple[str, ...]) -> None:
    """Each group holds consolidated metadata, exactly what zarr.consolidate_metadata
    gives on the store as it is, and zarr.open_consolidated opens the root."""
    found = _documents(where, groups)
    for group, document in found.items():
        assert document.get("consolidated_metadata") is not None, group
    _consolidate(where, groups)
    assert _documents(where, groups) == found
    zarr.open_consolidated(LocalStore(where), mode="r")


def _through_the_group(where: Path, path: str) -> np.ndarray | None:
    """What zarr reads opening the root group (consolidated if it still is); None: refused."""
    try:
        return np.asarray(zarr.open_group(LocalStore(where), mode="r")[path][...])
    except MetadataValidationError:
        return None


@pytest.mark.filterwarnings("ignore::cytearc_vfs.errors.VfsWarning")
@pytest.mark.parametrize("path", ["x", "g/x"])
def test_an_interrupted_resize_is_never_read_through_consolidated_metadata(
    tmp_path: Path, path: str
) -> None:
    """Interrupted before each write in turn (a write failing at the consolidation
    warns, then the journal's delete fails too): before recovery zarr reads
    through the groups exactly before or after or refuses; after it, the groups
    are consolidated again with exactly zarr's own consolidated metadata."""
    values = np.arange(8, dtype="i4")
    after = np.concatenate([np.full(2, -1, "i4"), values])
    groups = _groups_of(path)
    point, seen = 1, set()
    while True:
        where = tmp_path / f"s{point}.zarr"
        _consolidated(where, path, values, groups)
        store = CountingStore(LocalStore(where), fail_at=point)
        try:
            resize(zarr.open_array(store, path=path, mode="r+"), low=[2])
        except WriteInterruptedError:
            got = _through_the_group(where, path)
            if got is not None:  # refused, or exactly before or after
                state = "before" if np.array_equal(got, values) else "after"
                assert np.array_equal(got, values) or np.array_equal(got, after), (point, got)
                seen.add(state)
            recover(LocalStore(where), path)
            finished = _through_the_group(where, path)
            # failing the first write (the journal) leaves nothing to finish
            assert finished is not None, point
            assert np.array_equal(finished, values if point == 1 else after), point
            assert_consolidated_as_fresh(where, groups)
            point += 1
            continue
        assert np.array_equal(_through_the_group(where, path), after)
        assert_consolidated_as_fresh(where, groups)
        break
    # every write of the operation was a failure point, the consolidations included
    assert point > 8 + 2 * len(groups) and seen == {"before", "after"}


@pytest.mark.parametrize("path", ["x", "g/x"])
def test_one_write_more_per_consolidated_group(tmp_path: Path, path: str) -> None:
    """Against the same resize under unconsolidated groups: one write removing each
    group's consolidated metadata, one consolidating it again."""
    values = np.arange(6, dtype="i4")
    groups = _groups_of(path)
    counted: dict[tuple[str, ...], CountingStore] = {}
    for consolidated in ((), groups):
        where = tmp_path / f"s{len(consolidated)}.zarr"
        _consolidated(where, path, values, consolidated)
        counted[consolidated] = store = CountingStore(LocalStore(where))
        change = resize_array(zarr.open_array(store, path=path, mode="r+"), low=[2])
        shown = tuple(group or "/" for group in consolidated)
        assert change.unconsolidated == change.reconsolidated == shown
    plain, consolidated = counted[()], counted[groups]
    writes = {name: store.counts["set"] + store.counts["delete"] for name, store in counted.items()}
    assert writes[groups] == writes[()] + 2 * len(groups)
    group_documents = [f"{g}/zarr.json" if g else "zarr.json" for g in groups]
    extra = [key for key in consolidated.set_keys if key in group_documents]
    assert extra == group_documents * 2  # removed innermost first, then consolidated again
    assert not [key for key in plain.set_keys if key in group_documents]


def test_resize_and_promote_consolidate_again_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "s.zarr"
    values = np.arange(6, dtype="i4")
    _consolidated(where, "g/x", values, ("g", ""))
    assert main(["array", "resize", str(where), "g/x", "--low=2", "--json"]) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert payload["shapeAfter"] == [8]
    assert payload["unconsolidated"] == payload["reconsolidated"] == ["g", "/"]
    assert payload["notReconsolidated"] == []
    assert_consolidated_as_fresh(where, ("g", ""))
    assert _through_the_group(where, "g/x").tolist() == [-1, -1, *values.tolist()]
    assert main(["array", "promote", str(where), "g/x", "--dimension", "0"]) == 0
    text = capsys.readouterr().out
    assert "consolidated metadata of g, / removed while it ran" in text
    assert "and consolidated again" in text
    assert_consolidated_as_fresh(where, ("g", ""))
    opened = zarr.open_consolidated(LocalStore(where), mode="r")
    assert opened["g/x"].shape == (1, 8)
    assert opened["g/x"][...].tolist() == [[-1, -1, *values.tolist()]]
    assert main(["array", "resize", str(where), "g/x", "--json"]) == 0  # a no-op writes nothing
    payload = json.loads(capsys.readouterr().out)
    assert payload["unconsolidated"] == payload["reconsolidated"] == []


def test_an_anndata_store_stays_consolidated(tmp_path: Path) -> None:
    """anndata writes consolidated metadata and reads through it: after growing
    obsm's columns it reads the new shape, and zarr.open_consolidated still works."""
    n_obs = 6
    data = ad.AnnData(
        X=np.arange(n_obs * 3, dtype="f4").reshape(n_obs, 3),
        obsm={"X_pca": np.arange(n_obs * 2, dtype="f8").reshape(n_obs, 2)},
    )
    where = write_anndata_zarr(data, tmp_path / "a.zarr", 3)
    assert json.loads((where / "zarr.json").read_text())["consolidated_metadata"] is not None
    array = zarr.open_array(LocalStore(where), path="obsm/X_pca", mode="r+")
    change = resize_array(array, high=[0, 3])
    assert change.reconsolidated == ("/",) and change.shape_after == (n_obs, 5)
    back = ad.read_zarr(where)
    assert back.obsm["X_pca"].shape == (n_obs, 5)
    assert np.array_equal(back.obsm["X_pca"][:, :2], data.obsm["X_pca"])
    assert (back.obsm["X_pca"][:, 2:] == array.fill_value).all()  # missing: the fill value
    assert np.array_equal(back.X, data.X)
    assert_consolidated_as_fresh(where, ("",))


def test_a_version_1_journal_is_finished(tmp_path: Path) -> None:
    """A resize the version before left unfinished (it removed the consolidated
    metadata before writing its journal, which has no ``reconsolidate``): recovery
    finishes it, and consolidates nothing (the old journal records nothing)."""
    where = tmp_path / "s.zarr"
    _consolidated(where, "x", np.arange(4, dtype="i4"))
    root = json.loads((where / "zarr.json").read_text())
    del root["consolidated_metadata"]
    (where / "zarr.json").write_text(json.dumps(root))
    before = json.loads((where / "x" / "zarr.json").read_text())
    after = {**before, "shape": [6]}
    journal = {  # as version 1 wrote it: resize(low=[2]) of 4 cells in chunks of 2
        "cytearc_array_journal": 1,
        "operation": "resize",
        "arguments": {"low": [2], "high": [0], "low_applied": [2]},
        "before": before,
        "after": after,
        "clear_bounds": [],
        "clear_chunks": [],
        "drops": [],
        "moves": [["c/1", "c/2"], ["c/0", "c/1"]],
        "marks": [1],
    }
    (where / "x" / JOURNAL_NAME).write_text(json.dumps(journal))
    (where / "x" / "zarr.json").write_text(json.dumps(marked(before, "resize")))
    (where / "x" / PROGRESS_NAME).write_text(json.dumps({"done": 0}))
    (where / "x" / "c" / "1").rename(where / "x" / "c" / "2")  # killed after one rename
    assert recover(LocalStore(where), "x")
    assert zarr.open_array(LocalStore(where), path="x", mode="r")[...].tolist() == [
        -1, -1, 0, 1, 2, 3
    ]  # fmt: skip
    assert leftovers(LocalStore(where)) == []
    assert json.loads((where / "zarr.json").read_text()).get("consolidated_metadata") is None
    (where / "x" / JOURNAL_NAME).write_text(json.dumps({**journal, "cytearc_array_journal": 3}))
    with pytest.raises(RecordShapeError, match=r"journal version 3 is not one of \[1, 2\]"):
        recover(LocalStore(where), "x")


def test_a_group_that_cannot_be_consolidated_again_warns_and_leaves_no_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another array below the root is in the middle of its own resize (its marked
    document makes zarr refuse it, so the root cannot be consolidated): the resize
    completes, warns naming the group, the reason and the remedy, and leaves no journal.
    Finishing the other resize consolidates the root again (it recorded it too)."""
    where = tmp_path / "s.zarr"
    _consolidated(where, "x", np.arange(6, dtype="i4"))
    consolidated_root = (where / "zarr.json").read_text()
    other = CountingStore(LocalStore(where), fail_at=5)  # journal, root, marker, 2 renames
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(other, path="other/y", mode="r+"), low=[2])
    # as if the other resize had begun after this one read the root's document
    (where / "zarr.json").write_text(consolidated_root)
    array = zarr.open_array(LocalStore(where), path="x", mode="r+")
    with pytest.warns(VfsWarning) as caught:
        change = resize_array(array, low=[2])
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # the line that asked for the resize
    assert "group '/'" in message and "other/y" in message
    assert "zarr.consolidate_metadata(store, path='')" in message
    # a Python caller is told the function, not the command
    assert "(cytearc_vfs.arrays.recover)" in message and "cytearc-vfs" not in message
    assert change.reconsolidated == () and [g for g, _ in change.not_reconsolidated] == ["/"]
    assert leftovers(LocalStore(where), "x") == []
    assert zarr.open_array(LocalStore(where), path="x", mode="r")[...].tolist() == [
        -1, -1, 0, 1, 2, 3, 4, 5
    ]  # fmt: skip
    assert json.loads((where / "zarr.json").read_text()).get("consolidated_metadata") is None
    assert recover(LocalStore(where), "other/y")  # its journal records the root
    assert_consolidated_as_fresh(where, ("",))
    assert zarr.open_consolidated(LocalStore(where), mode="r")["other/y"].shape == (4,)
    # the command line says so in its report, besides the warning (the root is
    # consolidated again now; the other array is marked as if under way)
    (where / "other" / "y" / "zarr.json").write_text(
        json.dumps(marked(json.loads((where / "other/y/zarr.json").read_text()), "resize"))
    )
    assert main(["array", "resize", str(where), "x", "--high=1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["reconsolidated"] == [] and payload["notReconsolidated"][0]["group"] == "/"
    assert "other/y" in payload["notReconsolidated"][0]["reason"]


def test_promote_under_a_consolidated_root_and_group(tmp_path: Path) -> None:
    where = tmp_path / "s.zarr"
    _consolidated(where, "g/x", np.arange(4, dtype="i4"), ("g", ""))
    change = promote_array(zarr.open_array(LocalStore(where), path="g/x", mode="r+"), 1)
    assert change.unconsolidated == change.reconsolidated == ("g", "/")
    assert_consolidated_as_fresh(where, ("g", ""))
    nested = zarr.open_consolidated(LocalStore(where), path="g", mode="r")
    assert nested["x"].shape == (4, 1)


def test_a_group_consolidated_while_the_resize_ran_is_consolidated_again(
    tmp_path: Path,
) -> None:
    """The root was not consolidated when the resize was planned, so the journal
    records nothing; someone consolidated it before the marker (another resize
    finishing below it), so its copy holds the old document. Finishing consolidates
    it again: no consolidated copy outlives the change with the old shape."""
    where = tmp_path / "s.zarr"
    _consolidated(where, "x", np.arange(6, dtype="i4"), ())
    with pytest.raises(WriteInterruptedError):  # the journal only
        resize(zarr.open_array(CountingStore(LocalStore(where), fail_at=2), path="x"), low=[2])
    _consolidate(where, ("",))
    assert zarr.open_consolidated(LocalStore(where), mode="r")["x"].shape == (6,)
    assert recover(LocalStore(where), "x")
    assert zarr.open_consolidated(LocalStore(where), mode="r")["x"].shape == (8,)
    assert_consolidated_as_fresh(where, ("",))
