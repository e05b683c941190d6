"""Resize and promote under groups with consolidated metadata (anndata writes it by default).

zarr opens such a group from the consolidated copy of its members' documents:
it read an array being resized with its old document, past the marker that
makes readers refuse it (half-moved chunks read as valid), and a resized array
with its old shape (shifted values). The consolidated metadata above the array
is now removed before the operation writes anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from array_helpers import CountingStore, WriteInterruptedError
from zarr.errors import MetadataValidationError
from zarr.storage import LocalStore

from cytearc_vfs.arrays import promote, recover, resize
from cytearc_vfs.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")


def _consolidated(where: Path, path: str, values: np.ndarray) -> None:
    group = zarr.open_group(LocalStore(where), mode="w")
    group.create_group("other").create_array("y", shape=(2,), dtype="i4")
    array = group.create_array(path, shape=values.shape, chunks=(2,), dtype="i4", fill_value=-1)
    array[:] = values
    zarr.consolidate_metadata(LocalStore(where))


def _through_the_group(where: Path, path: str) -> np.ndarray | None:
    """What zarr reads opening the root group (consolidated if it still is); None: refused."""
    try:
        return np.asarray(zarr.open_group(LocalStore(where), mode="r")[path][...])
    except MetadataValidationError:
        return None


@pytest.mark.parametrize("path", ["x", "g/x"])
def test_an_interrupted_resize_is_never_read_through_consolidated_metadata(
    tmp_path: Path, path: str
) -> None:
    values = np.arange(8, dtype="i4")
    after = np.concatenate([np.full(2, -1, "i4"), values])
    point, seen = 1, set()
    while True:
        where = tmp_path / f"s{point}.zarr"
        _consolidated(where, path, values)
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
            assert finished is not None
            assert np.array_equal(finished, values) or np.array_equal(finished, after)
            point += 1
            continue
        assert np.array_equal(_through_the_group(where, path), after)
        break
    assert point > 8 and "before" in seen  # every write of the operation was a kill point


def test_resize_and_promote_remove_consolidated_metadata_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "s.zarr"
    values = np.arange(6, dtype="i4")
    _consolidated(where, "g/x", values)
    assert main(["array", "resize", str(where), "g/x", "--low=2", "--json"]) == 0
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert payload["unconsolidated"] == ["/"] and payload["shapeAfter"] == [8]
    assert json.loads((where / "zarr.json").read_text()).get("consolidated_metadata") is None
    assert _through_the_group(where, "g/x").tolist() == [-1, -1, *values.tolist()]
    zarr.consolidate_metadata(LocalStore(where))  # as the message says, when wanted
    array = zarr.open_group(LocalStore(where), mode="r+")["g/x"]
    promote(array, 0)
    assert _through_the_group(where, "g/x").tolist() == [[-1, -1, *values.tolist()]]
    assert main(["array", "resize", str(where), "g/x", "--json"]) == 0  # a no-op writes nothing
    assert json.loads(capsys.readouterr().out)["unconsolidated"] == []
