"""``read`` through an array object another one has since resized or promoted.

An array object keeps the metadata it was opened with. After a resize or
promote through another object (or process) the chunks sit in another
grid, and ``read`` through the old object used to return shifted values
without an error (a prepend of one chunk read the old first chunk's cells
as missing and every other cell one chunk off). It now reads ``zarr.json``
(one ``get``, beside the journal's) and refuses, naming the remedy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from array_helpers import CountingStore
from zarr.storage import LocalStore

from cytearc_vfs.arrays import ArrayWriter, promote, read, resize


def _two_handles(tmp_path: Path) -> tuple[zarr.Array, zarr.Array]:
    first = zarr.create_array(
        LocalStore(tmp_path / "s.zarr"),
        name="a",
        shape=(8,),
        chunks=(2,),
        dtype="i4",
        fill_value=-1,
    )
    first[:] = np.arange(8)
    return first, zarr.open_array(LocalStore(tmp_path / "s.zarr"), path="a", mode="r+")


@pytest.mark.parametrize(
    "change",
    [lambda a: resize(a, low=[2]), lambda a: resize(a, high=[-3]), lambda a: promote(a, 0)],
    ids=["prepend", "cut", "promote"],
)
def test_a_stale_object_is_refused_not_read_shifted(tmp_path: Path, change: object) -> None:
    changer, stale = _two_handles(tmp_path)
    change(changer)  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"resized or promoted .* open the array again"):
        read(stale)
    with pytest.raises(ValueError, match=r"open the array again"):
        ArrayWriter(stale)
    fresh = zarr.open_array(LocalStore(tmp_path / "s.zarr"), path="a", mode="r")
    assert np.array_equal(read(fresh, raw=True), read(changer, raw=True))


def test_attributes_set_elsewhere_do_not_stop_a_read(tmp_path: Path) -> None:
    changer, other = _two_handles(tmp_path)
    changer.attrs["units"] = "counts"
    assert read(other, raw=True).tolist() == list(range(8))


def test_a_read_costs_two_metadata_gets(tmp_path: Path) -> None:
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    zarr.create_array(store, name="a", shape=(8,), chunks=(2,), dtype="i4", fill_value=-1)[:] = 1
    array = zarr.open_array(store, path="a", mode="r+")  # "r" would count in a copy
    store.get_keys.clear()
    read(array, [range(0, 2)])
    assert store.get_keys == ["a/cytearc.journal.json", "a/zarr.json", "a/c/0"]
