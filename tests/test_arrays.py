"""cytearc_vfs.arrays: read with missing values, ArrayWriter, resize, promote, the journal.

Everything runs on real stores (zarr's MemoryStore, LocalStore, the loopback
S3 server) against a numpy reference. Renames are checked to move bytes,
not re-encode them: every renamed chunk's payload hash is unchanged, and a
counting wrapper counts each set and delete. An operation interrupted
before each of its writes in turn must leave an array that zarr refuses or
reads exactly as before, and that reads exactly as before or after once
recovered. (Real crashes, a SIGKILL after each write in a child process,
are in ``test_arrays_crash.py``.)
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr
from array_helpers import (
    CountingStore,
    WriteInterruptedError,
    digest,
    expected_read,
    keys_of,
    leftovers,
    memory_copy,
    open_plain,
    payloads,
    same_masked,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from zarr.codecs import TransposeCodec
from zarr.errors import MetadataValidationError
from zarr.storage import LocalStore, MemoryStore, ZipStore

import cytearc_vfs as cv
from cytearc_vfs import IncompleteStoreError, RecordShapeError
from cytearc_vfs.arrays import (
    ArrayWriter,
    hierarchy,
    info,
    promote,
    read,
    recover,
    resize,
)
from cytearc_vfs.arrays.documents import JOURNAL_NAME, MARKER_FIELD, PROGRESS_NAME
from cytearc_vfs.arrays.journal import identify
from cytearc_vfs.arrays.resizing import applied_low, resize_array
from cytearc_vfs.arrays.selection import region_of
from cytearc_vfs.cli import main
from cytearc_vfs.remote.locations import open_location


def make(
    store: Any,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    path: str = "a",
    shards: tuple[int, ...] | None = None,
    dtype: str = "i4",
    fill: Any = -1,
    transpose: tuple[int, ...] | None = None,
    encoding: dict[str, str] | None = None,
    values: np.ndarray | None = None,
) -> tuple[zarr.Array[Any], np.ndarray]:
    """A written array and its values (``arange`` unless given)."""
    array = zarr.create_array(
        store,
        name=path,
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        fill_value=fill,
        filters=[TransposeCodec(order=transpose)] if transpose else None,
        chunk_key_encoding=encoding,
    )
    if values is None:
        values = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    array[...] = values
    return array, values


# ------------------------------------------------------------------ selections and read


@pytest.mark.parametrize(
    ("selection", "shape", "key", "out"),
    [
        (None, (4, 3), (slice(0, 4, 1), slice(0, 3, 1)), (4, 3)),
        ([range(1, 3), None], (4, 3), (slice(1, 3, 1), slice(0, 3, 1)), (2, 3)),
        ([2, range(0, 3, 2)], (4, 3), (slice(2, 3, 1), slice(0, 3, 2)), (1, 2)),
        ([slice(-2, None), 0], (4, 3), (slice(2, 4, 1), slice(0, 1, 1)), (2, 1)),
        ((1, slice(None)), (4, 3), (1, slice(0, 3, 1)), (3,)),
        ((-1,), (4, 3), (3, slice(0, 3, 1)), (3,)),
        ((Ellipsis, 2), (4, 3, 5), (slice(0, 4, 1), slice(0, 3, 1), 2), (4, 3)),
        (slice(1, 3), (4,), (slice(1, 3, 1),), (2,)),
        ([range(2, 2)], (4,), (slice(2, 2, 1),), (0,)),
        ((), (), (), ()),
    ],
)
def test_selection_spellings(selection: Any, shape: Any, key: Any, out: Any) -> None:
    region = region_of(selection, shape)
    assert region.key() == key
    assert region.shape == out


@pytest.mark.parametrize(
    ("selection", "error"),
    [
        ([range(0, 5), None], IndexError),  # R refuses ranges out of bounds
        ([range(-1, 2), None], IndexError),
        ([range(3, 0, -1), None], IndexError),
        ([None], IndexError),  # one entry per dimension
        ((5, 0), IndexError),
        ((slice(None, None, -1),), IndexError),
        (([0, 1], 0), TypeError),  # index arrays: zarr's oindex
        ([True, None], TypeError),
    ],
)
def test_selection_refusals(selection: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        region_of(selection, (4, 3))


def test_read_masks_the_fill_value_and_raw_keeps_it() -> None:
    array, _ = make(MemoryStore(), (3, 4), (2, 2), fill=0, values=np.zeros((3, 4), "i4"))
    array[0, :2] = [7, 0]
    got = read(array)
    assert isinstance(got, np.ma.MaskedArray)
    assert got[0, 0] == 7 and got.mask.sum() == 11
    assert read(array, [range(0, 1), range(0, 2)]).tolist() == [[7, None]]
    assert np.array_equal(read(array, raw=True), array[...])
    assert type(read(array, raw=True)) is np.ndarray
    # numpy-style ints drop dimensions; list entries never do
    assert read(array, (0, 0)).shape == ()
    assert read(array, [0, 0]).shape == (1, 1)


def test_booleans_cannot_be_missing() -> None:
    array = zarr.create_array(MemoryStore(), shape=(4,), chunks=(2,), dtype=bool, fill_value=False)
    array[:] = [True, False, False, True]
    got = read(array)
    assert type(got) is np.ndarray and got.tolist() == [True, False, False, True]
    ArrayWriter(array).write(
        np.ma.masked_array([True, True], mask=[True, False]), slice(0, 2), flush=True
    )
    assert read(array, slice(0, 2)).tolist() == [False, True]  # NA is written as False


def test_masked_nan_written_into_integers_without_a_warning() -> None:
    # masked cells were cast with the rest: NaN there warned "invalid value encountered in cast"
    array = zarr.create_array(MemoryStore(), shape=(3,), chunks=(3,), dtype="i8", fill_value=-7)
    with ArrayWriter(array) as writer:  # warnings are errors in this suite
        writer.write(np.ma.masked_invalid(np.array([1.0, np.nan, 2.0**60])))
    assert array[...].tolist() == [1, -7, 2**60]
    assert read(array).mask.tolist() == [False, True, False]


def test_writer_names_data_that_does_not_fit_its_selection() -> None:
    # numpy's "operands could not be broadcast together with remapped shapes" named neither
    array = zarr.create_array(MemoryStore(), shape=(4, 3), chunks=(2, 3), dtype="i4")
    writer = ArrayWriter(array)
    with pytest.raises(ValueError, match=r"data of shape \(4,\) does not fit .* \(2, 3\) cells"):
        writer.write([1, 2, 3, 4], [range(0, 2), None])
    with pytest.raises(ValueError, match=r"data of shape \(2, 2\) does not fit the selection 1"):
        writer.write(np.ones((2, 2)), 1)
    assert writer.stale_units == 0


def test_nan_fill_and_the_nan_option() -> None:
    array = zarr.create_array(MemoryStore(), shape=(4,), chunks=(2,), dtype="f4", fill_value=np.nan)
    array[:2] = [1.5, np.nan]
    masked = read(array)
    assert masked.mask.tolist() == [False, True, True, True]
    as_nan = read(array, missing="nan")
    assert type(as_nan) is np.ndarray and np.isnan(as_nan[1:]).all() and as_nan[0] == 1.5
    zero_fill = zarr.create_array(MemoryStore(), shape=(2,), chunks=(2,), dtype="f8", fill_value=0)
    assert np.isnan(read(zero_fill, missing="nan")).all()
    with pytest.raises(TypeError, match="float"):
        read(make(MemoryStore(), (2,), (2,))[0], missing="nan")


# ------------------------------------------------------------------ resize


@pytest.mark.parametrize(
    ("low", "grid", "applied"),
    [
        ((3,), (10,), (10,)),  # growth rounds up: more space added
        ((10,), (10,), (10,)),
        ((11,), (10,), (20,)),
        ((-3,), (10,), (0,)),  # shrink rounds towards 0: less removed
        ((-12,), (10,), (-10,)),
        ((-20,), (10,), (-20,)),
        ((0, 1, -1), (4, 4, 4), (0, 4, 0)),
    ],
)
def test_low_rounds_outward_to_whole_chunks(
    low: tuple[int, ...], grid: tuple[int, ...], applied: tuple[int, ...]
) -> None:
    assert applied_low(low, grid) == applied


def reference_resize(
    values: np.ndarray, low: list[int], high: list[int], grid: tuple[int, ...], fill: Any
) -> np.ndarray:
    """What the array must hold after resize(low, high): the seed's semantics in numpy."""
    low_applied = applied_low(low, grid)
    shape = [n + lo + hi for n, lo, hi in zip(values.shape, low_applied, high, strict=True)]
    out = np.full(shape, fill, dtype=values.dtype)
    old, new = [], []
    for n, lo, hi in zip(values.shape, low_applied, high, strict=True):
        start, stop = max(0, -lo), n + min(0, hi)
        stop = max(start, stop)
        old.append(slice(start, stop))
        new.append(slice(start + lo, stop + lo))
    out[tuple(new)] = values[tuple(old)]
    return out


@pytest.mark.parametrize(
    ("low", "high", "shape"),
    [
        ([3], [0], (35,)),
        ([-3], [0], (25,)),
        ([-12], [0], (15,)),
        ([0], [-2], (23,)),
        ([0], [7], (32,)),
        ([10], [-3], (32,)),
        ([-20], [-5], (0,)),
        ([0], [-25], (0,)),
    ],
)
def test_resize_one_dimension_as_the_seed_says(
    low: list[int], high: list[int], shape: tuple[int, ...]
) -> None:
    array, values = make(MemoryStore(), (25,), (10,))
    resize(array, low, high)
    assert array.shape == shape == open_plain(array.store, "a").shape
    assert np.array_equal(array[...], reference_resize(values, low, high, (10,), -1))
    assert leftovers(array.store) == []


def test_a_shrunk_edge_reads_missing_when_grown_again() -> None:
    array, values = make(MemoryStore(), (25,), (10,))
    resize(array, high=[-2])
    resize(array, high=[4])
    got = read(array)
    assert got.mask.tolist() == [False] * 23 + [True] * 4
    assert got[:23].tolist() == values[:23].tolist()


def test_growth_clears_what_zarrs_own_resize_left_behind() -> None:
    """zarr's Array.resize keeps the cut-off cells of an edge chunk; growing must not show them."""
    array, values = make(MemoryStore(), (25, 3), (10, 3))
    array.resize((23, 3))
    store = CountingStore(array.store)
    ours = zarr.open_array(store, path="a", mode="r+")
    resize(ours, high=[2, 0])
    assert read(ours)[23:].mask.all() and np.array_equal(read(ours)[:23], values[:23])
    assert "a/c/2/0" in store.set_keys  # the one edge chunk holding stray cells, rewritten
    again = CountingStore(ours.store)
    resize(zarr.open_array(again, path="a", mode="r+"), high=[1, 0])
    assert [k for k in again.set_keys if "/c/" in k] == []  # nothing stray left: read, not written


def test_resize_every_dimension_at_both_ends_at_once() -> None:
    array, values = make(MemoryStore(), (7, 9, 4), (2, 4, 3), transpose=(2, 0, 1))
    low, high = [2, -4, 1], [-3, 2, -1]
    resize(array, low, high)
    expected = reference_resize(values, low, high, (2, 4, 3), -1)
    assert array.shape == expected.shape == (6, 7, 6)
    assert np.array_equal(array[...], expected)
    assert np.array_equal(open_plain(array.store, "a")[...], expected)


def test_sharded_low_moves_in_whole_shards() -> None:
    array, values = make(MemoryStore(), (20, 6), (4, 3), shards=(8, 6))
    resize(array, low=[3, 0], high=[-5, 0])
    assert array.shape == (23, 6)
    assert np.array_equal(array[...], reference_resize(values, [3, 0], [-5, 0], (8, 6), -1))
    # old shard 2 fell outside; old shard 1 moved to 2, rewritten first: the new
    # edge (old index 15) cut it
    assert sorted(k for k in keys_of(array.store, "a/") if "/c/" in k) == ["a/c/1/0", "a/c/2/0"]


def test_resize_renames_bytes_and_counts_every_write() -> None:
    base, values = make(MemoryStore(), (6, 5), (2, 2))
    before = payloads(base.store, "a/")
    store = CountingStore(base.store)
    array = zarr.open_array(store, path="a", mode="r+")
    resize(array, low=[1, 0])  # one chunk row prepended: every chunk moves one row up
    after = payloads(store, "a/")
    moved = {f"c/{i}/{j}": f"c/{i + 1}/{j}" for i in range(3) for j in range(3)}
    assert {digest(after[t]) for t in moved.values()} == {digest(before[s]) for s in moved}
    for source, target in moved.items():
        assert after[target] == before[source]
    # journal, marked zarr.json, progress, zarr.json; one set per chunk (its own bytes)
    assert store.counts["set"] == 4 + len(moved)
    assert store.bytes_set - sum(len(before[s]) for s in moved) < 4096
    # one delete per chunk, then progress and journal
    assert store.counts["delete"] == len(moved) + 2
    assert np.array_equal(array[2:], values)


def test_resize_refusals_change_nothing(tmp_path: Path) -> None:
    array, values = make(MemoryStore(), (5, 4), (2, 2))
    before = payloads(array.store)
    with pytest.raises(ValueError, match="dimension 0 with length -1"):
        resize(array, high=[-6, 0])
    with pytest.raises(ValueError, match="one change per dimension"):
        resize(array, low=[1])
    with pytest.raises(TypeError, match="integers"):
        resize(array, low=[1.5, 0])  # type: ignore[list-item]
    read_only = zarr.open_array(array.store.with_read_only(True), path="a", mode="r")
    with pytest.raises(ValueError, match="read-only"):
        resize(read_only, high=[1, 0])
    assert payloads(array.store) == before and np.array_equal(array[...], values)


def test_zarr_ignores_the_journal_and_refuses_the_marker() -> None:
    array, values = make(MemoryStore(), (4, 4), (2, 2))
    store = array.store
    store._store_dict[f"a/{JOURNAL_NAME}"] = store._store_dict["a/zarr.json"]
    assert array.nchunks_initialized == 4
    assert np.array_equal(open_plain(store, "a")[...], values)
    assert list(zarr.open_group(store, mode="r").array_keys()) == ["a"]
    del store._store_dict[f"a/{JOURNAL_NAME}"]
    marked = json.loads(store._store_dict["a/zarr.json"].to_bytes())
    marked[MARKER_FIELD] = {"must_understand": True}
    store._store_dict["a/zarr.json"] = store._store_dict["a/zarr.json"].from_bytes(
        json.dumps(marked).encode()
    )
    with pytest.raises(MetadataValidationError, match=MARKER_FIELD):
        open_plain(store, "a")


# ------------------------------------------------------------------ promote


@pytest.mark.parametrize("dimension", [0, 1, 2])
@pytest.mark.parametrize(
    ("shards", "transpose"),
    [(None, None), (None, (1, 0)), ((4, 6), None), ((4, 6), (1, 0))],
    ids=["plain", "transpose", "sharded", "sharded-transpose"],
)
def test_promote_renames_chunks_bytes_unchanged(
    dimension: int, shards: tuple[int, ...] | None, transpose: tuple[int, ...] | None
) -> None:
    base, values = make(MemoryStore(), (7, 6), (2, 3), shards=shards, transpose=transpose)
    before = payloads(base.store, "a/")
    store = CountingStore(base.store)
    array = zarr.open_array(store, path="a", mode="r+")
    promote(array, dimension)
    expected = np.expand_dims(values, dimension)
    assert array.shape == expected.shape
    assert np.array_equal(array[...], expected)
    assert np.array_equal(open_plain(base.store, "a")[...], expected)
    after = payloads(base.store, "a/")
    chunk_keys = [k for k in before if k.startswith("c/")]
    for key in chunk_keys:
        coords = key.split("/")[1:]
        coords.insert(dimension, "0")
        assert after["c/" + "/".join(coords)] == before[key]
    # flat memory keys: one set per chunk, plus journal, marker, progress, zarr.json
    assert store.counts["set"] == len(chunk_keys) + 4
    assert store.counts["delete"] == len(chunk_keys) + 2


def test_promote_a_scalar_and_v2_chunk_keys() -> None:
    scalar = zarr.create_array(MemoryStore(), name="s", shape=(), dtype="f8", fill_value=0)
    scalar[()] = 2.5
    promote(scalar, 0)
    assert scalar.shape == (1,) and scalar[0] == 2.5
    array, values = make(MemoryStore(), (5, 4), (2, 2), encoding={"name": "v2", "separator": "."})
    promote(array, 2)
    assert np.array_equal(array[..., 0], values)
    assert "a/0.0.0" in keys_of(array.store)


def test_promote_through_staging_on_a_directory(tmp_path: Path) -> None:
    array, values = make(LocalStore(tmp_path / "d.zarr"), (5, 4), (2, 2))
    promote(array, 0)
    promote(array, 3)
    assert np.array_equal(array[0, :, :, 0], values)
    assert not (tmp_path / "d.zarr" / "a" / "cytearc.staging").exists()
    files = sorted(
        p.relative_to(tmp_path / "d.zarr").as_posix()
        for p in (tmp_path / "d.zarr").rglob("*")
        if p.is_file()
    )
    assert [f for f in files if "/c/" in f] == [
        f"a/c/0/{i}/{j}/0" for i in range(3) for j in range(2)
    ]


def test_promote_refuses_codecs_it_cannot_vouch_for() -> None:
    from zarr.codecs.numcodecs import FixedScaleOffset

    array = zarr.create_array(
        MemoryStore(),
        name="a",
        shape=(4,),
        chunks=(2,),
        dtype="f8",
        filters=[FixedScaleOffset(offset=0, scale=10, dtype="<f8", astype="<i4")],
    )
    array[:] = [1.0, 2.0, 3.0, 4.0]
    before = payloads(array.store)
    with pytest.raises(ValueError, match=r"numcodecs\.fixedscaleoffset"):
        promote(array, 0)
    assert payloads(array.store) == before


def test_promote_longer_than_one_only_without_chunks() -> None:
    array, _ = make(MemoryStore(), (4,), (2,))
    with pytest.raises(ValueError, match="length 1, then grow"):
        promote(array, 0, length=3)
    empty = zarr.create_array(MemoryStore(), name="e", shape=(4,), chunks=(2,), dtype="i2")
    promote(empty, 1, length=3)
    assert empty.shape == (4, 3) and empty.chunks == (2, 3)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        promote(array, 2)
    # a negative length was "outside 0..4611686018427387904", a range whose 0 is refused
    for length in (-1, 0, 2**62 + 1):
        with pytest.raises(ValueError, match=rf"^length {length} is outside 1\.\.{2**62} "):
            promote(empty, 0, length=length)


def test_grow_a_promoted_dimension() -> None:
    """(lat, lon) -> (time, lat, lon), then a second time step appended."""
    array, values = make(MemoryStore(), (4, 5), (2, 5))
    promote(array, 0)
    resize(array, high=[1, 0, 0])
    ArrayWriter(array).write(values + 100, (1,), flush=True)
    assert np.array_equal(array[...], np.stack([values, values + 100]))


def test_promote_names_the_new_dimension(tmp_path: Path) -> None:
    """(lat, lon) -> (time, lat, lon) with its name: it was always unnamed (None)."""
    named = zarr.create_array(
        tmp_path / "n.zarr", shape=(4, 5), chunks=(2, 5), dtype="i2", dimension_names=["lat", "lon"]
    )
    named[:] = 1
    promote(named, 0, name="time")
    assert named.metadata.dimension_names == ("time", "lat", "lon")
    reopened = zarr.open_array(tmp_path / "n.zarr", mode="r")
    assert reopened.metadata.dimension_names == ("time", "lat", "lon")
    assert np.array_equal(reopened[0], np.ones((4, 5), "i2"))
    promote(named, 3)  # unnamed, as before
    assert named.metadata.dimension_names == ("time", "lat", "lon", None)
    # an array without names gets them
    bare, _ = make(MemoryStore(), (4,), (2,))
    promote(bare, 1, name="sample")
    assert bare.metadata.dimension_names == (None, "sample")


def test_promote_refuses_a_name_taken_or_not_a_string_before_any_change(tmp_path: Path) -> None:
    named = zarr.create_array(
        tmp_path / "n.zarr", shape=(4,), chunks=(2,), dtype="i2", dimension_names=["cell"]
    )
    named[:] = 3
    before = (tmp_path / "n.zarr" / "zarr.json").read_bytes()
    with pytest.raises(ValueError, match="dimension 0 is named 'cell' already"):
        promote(named, 0, name="cell")
    with pytest.raises(TypeError, match="a string, not 3"):
        promote(named, 0, name=3)  # type: ignore[arg-type]
    assert (tmp_path / "n.zarr" / "zarr.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "n.zarr" / "c").iterdir()) == ["0", "1"]


def test_the_command_line_names_the_new_dimension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytearc_vfs.cli import main

    zarr.create_array(tmp_path / "g.zarr", name="t", shape=(3,), chunks=(3,), dtype="i2")
    code = main(["array", "promote", str(tmp_path / "g.zarr"), "t", "--dimension", "0",
                 "--name", "time"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    assert zarr.open_array(tmp_path / "g.zarr", path="t").metadata.dimension_names == (
        "time",
        None,
    )


# ------------------------------------------------------------------ ArrayWriter


def test_writer_ignores_the_selection_of_a_scalar() -> None:
    """The seed: the selection is ignored when the array is scalar (it raised IndexError)."""
    scalar = zarr.create_array(MemoryStore(), name="s", shape=(), dtype="i4", fill_value=0)
    writer = ArrayWriter(scalar)
    writer.write(5, [range(0, 1)], flush=True)
    assert scalar[()] == 5
    writer.write(7, [range(3, 9)], flush=True)
    assert scalar[()] == 7


def test_writer_keeps_chunks_stale_until_flushed() -> None:
    store = CountingStore(MemoryStore())
    array = zarr.create_array(
        store, name="a", shape=(6, 6), chunks=(3, 3), dtype="i2", fill_value=0
    )
    store.reset()
    writer = ArrayWriter(array)
    writer.write(np.ones((2, 2)), [range(0, 2), range(0, 2)])
    writer.write(np.full((1, 6), 5), [range(2, 3), None])
    assert writer.stale_units == 2 and store.counts["set"] == 0
    assert writer.flush() == 2
    assert store.counts["set"] == 2  # one write per chunk, whatever the number of writes
    expected = np.zeros((6, 6))
    expected[:2, :2] = 1
    expected[2] = 5
    assert np.array_equal(array[...], expected)


def test_writer_read_modify_write_keeps_unwritten_cells() -> None:
    array, values = make(MemoryStore(), (5, 5), (3, 3))
    writer = ArrayWriter(array)
    writer.write(np.ma.masked_array([9, 9], mask=[False, True]), (4, slice(3, 5)), flush=True)
    expected = values.copy()
    expected[4, 3:] = [9, -1]
    assert np.array_equal(array[...], expected)
    assert read(array).mask.sum() == 1


def test_writer_bound_flushes_the_least_recent() -> None:
    array = zarr.create_array(MemoryStore(), name="a", shape=(8,), chunks=(2,), dtype="i8")
    per_unit = 2 * 8 + 2  # values and written mask of one chunk
    writer = ArrayWriter(array, max_stale_bytes=2 * per_unit)
    for start in range(0, 8, 2):
        writer.write([start, start + 1], slice(start, start + 2))
    assert writer.stale_units == 2 and writer.stale_bytes == 2 * per_unit
    assert array[:4].tolist() == [0, 1, 2, 3] and array[4:].tolist() == [0, 0, 0, 0]
    writer.flush()
    assert array[:].tolist() == list(range(8))


def test_sharded_writer_writes_each_shard_once() -> None:
    store = CountingStore(MemoryStore())
    array = zarr.create_array(
        store, name="a", shape=(8, 4), chunks=(2, 2), shards=(4, 4), dtype="u2", fill_value=0
    )
    with ArrayWriter(array) as writer:
        store.reset()  # after the writer's one look for an unfinished operation
        for row in range(8):
            writer.write(np.full(4, row + 1), (row,))
        assert writer.stale_units == 2
    assert sorted(store.set_keys) == ["a/c/0/0", "a/c/1/0"]
    assert store.get_keys == ["a/zarr.json"]  # the flush's check; whole shards: none read back
    assert array[:, 0].tolist() == list(range(1, 9))


def test_writer_context_discards_on_error_and_refuses_a_changed_array() -> None:
    array, values = make(MemoryStore(), (4,), (2,))

    def fail() -> None:
        with ArrayWriter(array) as writer:
            writer.write([7, 7], slice(0, 2))
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        fail()
    assert np.array_equal(array[...], values)
    writer = ArrayWriter(array)
    writer.write([7], slice(0, 1))
    resize(array, high=[2])
    with pytest.raises(ValueError, match="flush the writer before"):
        writer.flush()
    writer.discard()  # the refused edit: dropped on purpose, not lost unawares


@pytest.mark.parametrize(
    "change",
    [lambda b: resize(b, low=[2]), lambda b: promote(b, 0)],
    ids=["resize", "promote"],
)
def test_writer_refuses_an_array_changed_through_another_handle(
    tmp_path: Path, change: Callable[[zarr.Array[Any]], object]
) -> None:
    where = tmp_path / "s.zarr"
    array, values = make(LocalStore(where), (4,), (2,))
    other = zarr.open_array(LocalStore(where), path="a", mode="r+")
    writer = ArrayWriter(array)
    writer.write([9], [range(0, 1)])
    change(other)
    files = {p: p.read_bytes() for p in where.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"zarr.json changed since this ArrayWriter"):
        writer.flush()
    assert {p: p.read_bytes() for p in where.rglob("*") if p.is_file()} == files
    assert writer.stale_units == 1  # kept: nothing was written
    with pytest.raises(ValueError, match=r"open the array again"):
        ArrayWriter(array)  # a writer on the stale object is refused from the start
    fresh = zarr.open_array(LocalStore(where), path="a", mode="r+")
    assert np.array_equal(fresh[...].ravel()[-4:], values)
    writer.discard()  # the refused edit: dropped on purpose, not lost unawares


def test_writer_flushes_after_attributes_changed_through_any_handle(tmp_path: Path) -> None:
    # attributes place no cell: the writer refused to flush, calling them a resize
    where = tmp_path / "s.zarr"
    array, values = make(LocalStore(where), (4,), (2,))
    writer = ArrayWriter(array)
    writer.write([9], [range(0, 1)])
    array.attrs["units"] = "counts"
    zarr.open_array(LocalStore(where), path="a", mode="r+").attrs["note"] = "other handle"
    assert writer.flush() == 1
    assert ArrayWriter(array).stale_units == 0  # the stale object's attributes are no refusal
    fresh = zarr.open_array(LocalStore(where), path="a", mode="r")
    assert fresh[...].tolist() == [9, *values[1:].tolist()]
    assert fresh.attrs["note"] == "other handle"


def test_stores_that_cannot_delete_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    where = tmp_path / "z.zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zip's duplicate-name warnings are not ours
        store = ZipStore(where, mode="w")
        array = zarr.create_array(store, shape=(6,), chunks=(2,), dtype="i4", fill_value=0)
        array[:] = np.arange(1, 7)
        for operation in (lambda: resize(array, low=[2]), lambda: promote(array, 0)):
            with pytest.raises(ValueError, match=r"cannot delete keys .* nothing was changed"):
                operation()
        assert keys_of(store) == ["c/0", "c/1", "c/2", "zarr.json"]
        store.close()
        reopened = zarr.open_array(ZipStore(where, mode="r"), mode="r")
        assert reopened[...].tolist() == [1, 2, 3, 4, 5, 6]


def test_lengths_past_2_53_keep_every_chunk_and_past_int64_are_refused() -> None:
    store = MemoryStore()
    n = 2**53 + 1  # n / 1 as a float is 2**53: the last chunk was dropped as outside
    array = zarr.create_array(store, shape=(n,), chunks=(1,), dtype="i4", fill_value=0)
    array[n - 3 : n] = [7, 8, 9]
    change = resize_array(array, high=[1])
    assert change.dropped == 0 and array.shape == (n + 1,)
    assert array[n - 3 : n + 1].tolist() == [7, 8, 9, 0]
    small = zarr.create_array(MemoryStore(), shape=(5,), chunks=(2,), dtype="i4", fill_value=0)
    small[:] = [1, 2, 3, 4, 5]
    resize(small, low=[2**62])  # the chunks move 2**61 places: every one kept
    assert small[2**62 - 1 :].tolist() == [0, 1, 2, 3, 4, 5]
    resize(small, low=[-(2**62)])
    assert small[...].tolist() == [1, 2, 3, 4, 5]
    before = dict(small.store._store_dict)
    with pytest.raises(ValueError, match=r"at most 2\*\*63 - 1 = 9223372036854775807"):
        resize(small, high=[2**64])
    assert dict(small.store._store_dict) == before and small.shape == (5,)
    resize(small, high=[2**63 - 1 - 5])  # the largest length is allowed
    assert small.shape == (2**63 - 1,)


@pytest.mark.parametrize("dtype", ["M8[s]", "m8[s]"])
def test_nat_fill_reads_missing_and_needs_no_edge_rewrite(dtype: str) -> None:
    nat = np.array("NaT", dtype=dtype)[()]
    store = CountingStore(MemoryStore())
    array = zarr.create_array(store, shape=(5,), chunks=(2,), dtype=dtype, fill_value=nat)
    array[:] = np.array([1, 2, 3, 4, 5]).astype(dtype)
    array[1] = nat
    assert np.ma.getmaskarray(read(array)).tolist() == [False, True, False, False, False]
    store.reset()
    change = resize_array(array, high=[1])  # from a non-aligned edge: cells past it are NaT
    assert change.edge_chunks == 0 and not any(k.startswith("c/") for k in store.set_keys)
    assert np.ma.getmaskarray(read(array)).tolist()[-1] is True


# ------------------------------------------------------------------ the journal


def test_identify_tells_every_state_of_a_chain_apart() -> None:
    moves = [("c/2", "c/3"), ("c/1", "c/2"), ("c/0", "c/1")]
    marks = [1, 2]  # each rename refills the source of the one before
    keys = {"c/0", "c/1", "c/2"}
    states = [(0, keys), (0, keys | {"c/3"})]  # nothing; first copy only
    assert identify(moves, marks, 0, keys, where="a") == 0
    assert identify(moves, marks, 0, keys | {"c/3"}, where="a") == 0
    assert identify(moves, marks, 1, {"c/0", "c/1", "c/3"}, where="a") == 1
    assert identify(moves, marks, 1, {"c/0", "c/1", "c/2", "c/3"}, where="a") == 1
    assert identify(moves, marks, 2, {"c/1", "c/2", "c/3"}, where="a") == 3
    with pytest.raises(RecordShapeError, match="changed by something else"):
        identify(moves, marks, 0, {"c/9"}, where="a")
    del states


Operation = Callable[[zarr.Array[Any]], object]

SCENARIOS: dict[str, tuple[dict[str, Any], Operation]] = {
    "resize-2d": (
        {"shape": (7, 5), "chunks": (2, 2)},
        lambda a: resize(a, low=[1, -2], high=[-1, 3]),
    ),
    "resize-chain": ({"shape": (9,), "chunks": (2,)}, lambda a: resize(a, low=[4], high=[-2])),
    "resize-sharded": (
        {"shape": (12, 4), "chunks": (2, 2), "shards": (4, 4)},
        lambda a: resize(a, low=[-4, 0], high=[3, 0]),
    ),
    "promote": ({"shape": (5, 4), "chunks": (2, 2), "transpose": (1, 0)}, lambda a: promote(a, 1)),
    # the shape, so zarr.json, stays the same while chunks move
    "resize-same-shape": (
        {"shape": (7,), "chunks": (1,), "shards": (2,)},
        lambda a: resize(a, low=[-4], high=[4]),
    ),
}


def _interrupt_everywhere(name: str) -> dict[str, int]:
    """Interrupt ``name`` before each of its writes in turn; recover; classify."""
    setup, operation = SCENARIOS[name]
    base, values = make(MemoryStore(), **setup)
    done = memory_copy(base.store)
    operation(zarr.open_array(done, path="a", mode="r+"))
    after = done._store_dict and open_plain(done, "a")[...]
    outcomes = {"before": 0, "after": 0, "refused": 0}
    point = 1
    while True:
        store = memory_copy(base.store)
        try:
            operation(zarr.open_array(CountingStore(store, fail_at=point), path="a", mode="r+"))
        except WriteInterruptedError:
            pass
        else:
            break
        try:  # plain zarr before recovery: refused, or exactly one of the two states
            seen = open_plain(store, "a")[...]
            assert np.array_equal(seen, values) or np.array_equal(seen, after), point
        except MetadataValidationError:
            outcomes["refused"] += 1
        recover(store, "a")
        got = open_plain(store, "a")[...]
        state = "before" if np.array_equal(got, values) and got.shape == values.shape else "after"
        assert state == "before" or (got.shape == after.shape and np.array_equal(got, after)), point
        assert leftovers(store) == []
        outcomes[state] += 1
        point += 1
    outcomes["points"] = point - 1
    return outcomes


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_interrupted_before_any_write_recovers_before_or_after(name: str) -> None:
    outcomes = _interrupt_everywhere(name)
    # interrupted before the journal: as before; from then on: rolled forward
    assert outcomes["before"] == 1
    assert outcomes["after"] == outcomes["points"] - 1 >= 6
    assert outcomes["refused"] == outcomes["points"] - 4  # marker on, until zarr.json is new


def test_a_progress_key_left_without_journal_is_never_read_as_the_next_operations() -> None:
    """A crash between step 6's deletes leaves the progress; it must not stand for the next op."""
    array, values = make(MemoryStore(), (9,), (2,))
    store = array.store
    full = CountingStore(memory_copy(store))
    resize(zarr.open_array(full, path="a", mode="r+"), low=[4], high=[-2])
    last = full.counts["set"] + full.counts["delete"]
    assert full.deleted_keys[-1] == f"a/{PROGRESS_NAME}"  # the journal goes first
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(store, fail_at=last), path="a", mode="r+"), [4], [-2])
    first = reference_resize(values, [4], [-2], (2,), -1)
    assert leftovers(store) == [f"a/{PROGRESS_NAME}"]
    assert np.array_equal(open_plain(store, "a")[...], first)  # complete, and readable
    spare = memory_copy(store)
    assert recover(spare, "a") is False and leftovers(spare) == []  # tidied
    # the next operation, interrupted right after its journal: recovery must roll it
    # forward from the start, not from the stale {"done": N}
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(store, fail_at=3), path="a", mode="r+"), [-4], [4])
    assert recover(store, "a") is True and leftovers(store) == []
    assert np.array_equal(open_plain(store, "a")[...], reference_resize(first, [-4], [4], (2,), -1))


def test_recovery_itself_interrupted_anywhere() -> None:
    """An interrupted recovery is recovered like the operation (every pair of points)."""
    setup, operation = SCENARIOS["resize-chain"]
    base, values = make(MemoryStore(), **setup)
    expected = reference_resize(values, [4], [-2], (2,), -1)
    first = 1
    while True:
        crashed = memory_copy(base.store)
        try:
            operation(zarr.open_array(CountingStore(crashed, fail_at=first), path="a", mode="r+"))
        except WriteInterruptedError:
            pass
        else:
            break
        second = 1
        while True:
            store = memory_copy(crashed)
            try:
                recover(CountingStore(store, fail_at=second), "a")
            except WriteInterruptedError:
                recover(store, "a")
                got = open_plain(store, "a")[...]
                assert np.array_equal(got, expected) or np.array_equal(got, values)
                second += 1
                continue
            break
        first += 1
    assert first > 10


def test_an_unfinished_operation_is_refused_until_recovered() -> None:
    """read, ArrayWriter, resize and promote never recover (the operation may be live)."""
    array, values = make(MemoryStore(), (6,), (2,))
    store = memory_copy(array.store)
    handle = zarr.open_array(store, path="a", mode="r+")
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(store, fail_at=8), path="a", mode="r+"), low=[2])
    snapshot = dict(store._store_dict)
    for attempt in (  # handle was opened before the marker, so zarr does not refuse it
        lambda: read(handle),
        lambda: ArrayWriter(handle),
        lambda: resize(handle, high=[1]),
        lambda: promote(handle, 0),
    ):
        with pytest.raises(IncompleteStoreError, match=r"under way or was interrupted.*recover"):
            attempt()
    assert dict(store._store_dict) == snapshot  # nothing written
    assert recover(handle)  # the explicit call finishes it and refreshes the handle
    got = read(handle, raw=True)
    assert handle.shape == (8,) and np.array_equal(got[2:], values)


# ------------------------------------------------------------------ properties


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 9)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 2)) for c in chunks)
    transpose = tuple(draw(st.permutations(range(ndim)))) if draw(st.booleans()) else None
    encoding = draw(
        st.sampled_from(
            [None, {"name": "default", "separator": "."}, {"name": "v2", "separator": "/"}]
        )
    )
    return {
        "shape": shape,
        "chunks": chunks,
        "shards": shards,
        "transpose": transpose,
        "encoding": encoding,
    }


steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2**31), st.booleans()),
        st.tuples(st.just("resize"), st.integers(0, 2**31), st.booleans()),
        st.tuples(st.just("promote"), st.integers(0, 2**31), st.booleans()),
    ),
    min_size=1,
    max_size=6,
)


@given(layout=layouts(), plan=steps, local=st.booleans())
@settings(deadline=None)
def test_operations_match_numpy(
    layout: dict[str, Any], plan: list[tuple[str, int, bool]], local: bool, tmp_path_factory: Any
) -> None:
    store: Any = LocalStore(tmp_path_factory.mktemp("p")) if local else MemoryStore()
    array = zarr.create_array(
        store,
        name="a",
        shape=layout["shape"],
        chunks=layout["chunks"],
        shards=layout["shards"],
        dtype="i2",
        fill_value=-1,
        filters=[TransposeCodec(order=layout["transpose"])] if layout["transpose"] else None,
        chunk_key_encoding=layout["encoding"],
    )
    reference = np.full(layout["shape"], -1, dtype="i2")
    writer = ArrayWriter(array, max_stale_bytes=200)
    for kind, seed, flag in plan:
        rng = np.random.default_rng(seed)
        grid = array.shards or array.chunks
        if kind == "write" and reference.size:
            starts = [int(rng.integers(0, n)) for n in reference.shape]
            stops = [
                int(rng.integers(s, n + 1)) for s, n in zip(starts, reference.shape, strict=True)
            ]
            region = [range(a, b) for a, b in zip(starts, stops, strict=True)]
            shape = tuple(b - a for a, b in zip(starts, stops, strict=True))
            data = np.ma.masked_array(
                rng.integers(-1, 50, shape).astype("i2"), mask=rng.random(shape) < 0.2
            )
            writer.write(data, region, flush=flag)
            reference[tuple(slice(a, b) for a, b in zip(starts, stops, strict=True))] = data.filled(
                -1
            )
        elif kind == "resize":
            writer.flush()
            low = [
                int(rng.integers(-n, 2 * g + 1)) for n, g in zip(reference.shape, grid, strict=True)
            ]
            high = [int(rng.integers(-n, 5)) for n in reference.shape]
            try:
                expected = reference_resize(reference, low, high, grid, -1)
            except ValueError:
                with pytest.raises(ValueError, match="length"):
                    resize(array, low, high)
                continue
            resize(array, low, high)
            reference = expected
            writer = ArrayWriter(array, max_stale_bytes=200)
        elif kind == "promote" and reference.ndim < 4:
            writer.flush()
            dimension = int(rng.integers(0, reference.ndim + 1))
            promote(array, dimension)
            reference = np.expand_dims(reference, dimension)
            writer = ArrayWriter(array, max_stale_bytes=200)
        else:
            continue
        if kind != "write" or flag:
            assert same_masked(read(array), expected_read(reference, -1))
    writer.flush()
    assert same_masked(read(array), expected_read(reference, -1))
    assert np.array_equal(open_plain(store, "a")[...], reference)
    assert leftovers(store) == []


# ------------------------------------------------------------------ info, hierarchy, CLI


def test_info_and_hierarchy_read_like_the_seed() -> None:
    root = zarr.open_group(MemoryStore(), mode="w")
    array, _ = make(root.store, (6, 4), (2, 2), path="RNA/counts", shards=(4, 4), transpose=(1, 0))
    summary = info(array)
    assert summary.shape == (6, 4) and summary.chunks == (2, 2) and summary.shards == (4, 4)
    assert summary.codecs == (
        "sharding_indexed(transpose(order=[1, 0]), bytes, zstd; index: bytes, crc32c)",
    )
    text = str(summary)
    assert "shards     : 4 x 4" in text and "separator '/' (c/0/0)" in text
    assert json.loads(json.dumps(summary.to_dict()))["fillValue"] == -1
    root.create_group("obs")
    tree = str(hierarchy(root))
    assert tree.splitlines() == [
        "/ (group)",
        "├── RNA (group)",
        "│   └── counts (array) int32 6 x 4, chunks 2 x 2, shards 4 x 4",
        "└── obs (group)",
    ]
    node = hierarchy(root).to_dict()["children"][0]["children"][0]
    assert node["chunks"] == [2, 2] and node["shards"] == [4, 4]
    make(root.store, (3,), (2,), path="obs/x")
    assert str(hierarchy(root)).splitlines()[-1] == "    └── x (array) int32 3, chunks 2"
    # a group below the root is named by its path, not shown as the root "/"
    assert str(hierarchy(root["obs"])).splitlines() == [
        "obs (group)",
        "└── x (array) int32 3, chunks 2",
    ]
    assert hierarchy(root["RNA"]).to_dict()["name"] == "RNA"


def test_info_says_what_read_makes_of_the_fill_value(tmp_path: Path) -> None:
    # it said "cells holding it read as missing" for booleans and for no fill value
    flags = zarr.create_array(MemoryStore(), shape=(2,), dtype=bool, fill_value=False)
    assert "fill value : false (booleans are never missing)" in str(info(flags))
    assert type(read(flags)) is np.ndarray
    legacy = zarr.create_array(
        LocalStore(tmp_path / "v2.zarr"), shape=(2,), dtype="i4", fill_value=None, zarr_format=2
    )
    assert "fill value : null (none: no cell reads as missing)" in str(info(legacy))
    assert not np.ma.getmaskarray(read(legacy)).any()
    counts = zarr.create_array(MemoryStore(), shape=(2,), dtype="u2", fill_value=0)
    assert "fill value : 0 (cells holding it read as missing)" in str(info(counts))


def test_cli_array_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = tmp_path / "s.zarr"
    _, values = make(LocalStore(where), (5, 4), (2, 2), path="g/a")
    assert main(["array", "info", str(where)]) == 0
    assert "a (array) int32 5 x 4" in capsys.readouterr().out
    assert main(["array", "resize", str(where), "g/a", "--low=1,0", "--high=0,-1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["shapeAfter"] == [7, 4 - 1] and payload["lowApplied"] == [2, 0]
    assert main(["array", "promote", str(where), "g/a", "--dimension", "0"]) == 0
    assert "(7, 3) -> (1, 7, 3)" in capsys.readouterr().out
    assert main(["array", "info", str(where), "g/a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["array"]["shape"] == [1, 7, 3]
    assert np.array_equal(zarr.open_array(where, path="g/a")[0, 2:], values[:, :3])
    assert main(["array", "promote", str(where), "g/a", "--dimension", "7", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["category"] == "refused"
    assert main(["array", "info", str(where), "nothing"]) == 2
    assert "no Zarr node here" in capsys.readouterr().err


def test_cli_refuses_an_unfinished_array_and_recovers_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "s.zarr"
    array, values = make(LocalStore(where), (6,), (2,))
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(array.store, fail_at=5), path="a", mode="r+"), low=[1])
    assert main(["array", "info", str(where), "a"]) == 3
    assert "array recover" in capsys.readouterr().err
    assert main(["array", "recover", str(where), "a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] is True
    assert np.array_equal(zarr.open_array(where, path="a")[2:], values)


def test_cli_recover_of_a_group_names_the_unfinished_arrays_below_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it said "nothing to finish" for the root group while g/a was unfinished
    where = tmp_path / "s.zarr"
    array, values = make(LocalStore(where), (6,), (2,), path="g/a")
    make(LocalStore(where), (3,), (2,), path="g/b")
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(array.store, fail_at=2), path="g/a", mode="r+"), [1])
    for group in ([], ["g"]):
        assert main(["array", "recover", str(where), *group]) == 2
        err = capsys.readouterr().err
        assert "1 array below this group has an unfinished resize or promote: g/a" in err
        assert f"cytearc-vfs array recover {where} g/a" in err and "g/b" not in err
    assert main(["array", "recover", str(where), "g/a"]) == 0
    assert "finished the interrupted operation" in capsys.readouterr().out
    assert main(["array", "recover", str(where), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] is False
    assert np.array_equal(zarr.open_array(where, path="g/a")[2:], values)


def test_cli_remedy_for_an_unfinished_root_array_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "r.zarr"
    values = np.arange(1, 7, dtype="i4")
    zarr.create_array(LocalStore(where), shape=(6,), chunks=(2,), dtype="i4", fill_value=0)[:] = (
        values
    )
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(LocalStore(where), fail_at=5), mode="r+"), low=[1])
    for action in (["info"], ["resize", "/", "--high=1"], ["promote", "/", "--dimension", "0"]):
        assert main(["array", action[0], str(where), *action[1:]]) == 3
        err = capsys.readouterr().err
        remedy = err[err.index("cytearc-vfs array recover") :].split()
        assert remedy[:5] == ["cytearc-vfs", "array", "recover", str(where), "/"]
    assert main(["array", "recover", str(where)]) == 0  # PATH defaults to the root
    assert "finished the interrupted operation" in capsys.readouterr().out
    assert np.array_equal(zarr.open_array(where)[2:], values)


def test_cli_and_operations_name_v2_arrays_and_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "v2.zarr"
    group = zarr.open_group(LocalStore(where), mode="w", zarr_format=2)
    legacy = group.create_array("x", shape=(3,), chunks=(2,), dtype="i4")
    legacy[:] = [1, 2, 3]
    for operation in (lambda: resize(legacy, high=[1]), lambda: promote(legacy, 0)):
        with pytest.raises(ValueError, match=r"is Zarr v2 \(.zarray\): convert it first"):
            operation()
    assert main(["array", "info", str(where), "x", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["array"]["zarrFormat"] == 2
    assert main(["array", "info", str(where)]) == 0
    assert "x (array)" in capsys.readouterr().out
    assert main(["array", "resize", str(where), "x", "--high=1"]) == 2
    assert "Zarr v2 array; array resize works on Zarr v3 arrays" in capsys.readouterr().err
    v3 = tmp_path / "v3.zarr"
    make(LocalStore(v3), (4,), (2,))
    assert main(["array", "resize", str(v3), "/", "--high=1"]) == 2
    err = capsys.readouterr().err
    assert "is a group, not an array" in err and "node_type" not in err


# ------------------------------------------------------------------ other readers, S3


def _tensorstore(path: Path) -> np.ndarray:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return np.asarray(ts.open(spec).result().read().result())


@pytest.mark.parametrize(
    ("shards", "transpose"),
    [(None, None), ((4, 6), (1, 0))],
    ids=["plain", "sharded-transpose"],
)
def test_other_readers_read_resized_and_promoted_arrays(
    tmp_path: Path, shards: tuple[int, ...] | None, transpose: tuple[int, ...] | None
) -> None:
    array, values = make(
        LocalStore(tmp_path / "s.zarr"), (9, 7), (2, 3), shards=shards, transpose=transpose
    )
    resize(array, low=[2, -3], high=[-1, 2])
    promote(array, 1)
    grid = shards or (2, 3)
    expected = np.expand_dims(reference_resize(values, [2, -3], [-1, 2], grid, -1), 1)
    assert np.array_equal(_tensorstore(tmp_path / "s.zarr" / "a"), expected)
    assert np.array_equal(zarr.open_array(tmp_path / "s.zarr", path="a", mode="r")[...], expected)
    with zarr.config.set(
        {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}
    ):
        reopened = zarr.open_array(tmp_path / "s.zarr", path="a", mode="r")
        assert np.array_equal(reopened[...], expected)


@pytest.mark.remote
def test_resize_and_promote_on_s3_count_requests(s3_server: S3Server) -> None:
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        bucket = s3_server.new_bucket()
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        store = open_location(f"s3://{bucket}/x.zarr", read_only=False, storage_options=options)
        array, values = make(store, (6, 4), (2, 2))
        chunks = 6
        before = {k: digest(v) for k, v in payloads(store, "a/").items() if k.startswith("c/")}
        proxy.take()
        resize(array, low=[1, 0])
        seen = proxy.take()
        copies = [s for s in seen if s.method == "PUT" and s.copy_source is not None]
        puts = [s for s in seen if s.method == "PUT" and s.copy_source is None]
        # one request per key: obstore's newer releases delete through the multi-object
        # delete API (POST ?delete), 0.7 (the lowest it supports, .ci/lowest) with DELETE
        deletes = [
            s
            for s in seen
            if s.method == "DELETE" or (s.method == "POST" and s.path.endswith("?delete"))
        ]
        assert len(copies) == chunks  # server-side copies: no chunk byte uploaded
        assert len(puts) == 4  # journal, marked zarr.json, progress, zarr.json
        assert sum(s.length for s in puts) < 8192
        assert len(deletes) == chunks + 2
        # + 4 GETs (journal, zarr.json, the root's zarr.json for CyteArc records and, once
        # done, again: consolidated meanwhile, it would need consolidating again), 1 LIST
        assert len(seen) == len(copies) + len(puts) + len(deletes) + 5
        assert np.array_equal(array[2:], values)
        promote(array, 0)
        seen = proxy.take()
        assert len([s for s in seen if s.copy_source is not None]) == chunks  # no staging
        after = {k: digest(v) for k, v in payloads(store, "a/").items() if k.startswith("c/")}
        assert sorted(after.values()) == sorted(before.values())
        assert np.array_equal(array[0, 2:], values)
    finally:
        proxy.close()


def test_recover_refuses_a_marker_whose_journal_is_gone() -> None:
    array, _ = make(MemoryStore(), (6,), (2,))
    store = array.store
    with pytest.raises(WriteInterruptedError):
        resize(zarr.open_array(CountingStore(store, fail_at=4), path="a", mode="r+"), low=[1])
    del store._store_dict[f"a/{JOURNAL_NAME}"]
    with pytest.raises(RecordShapeError, match=r"journal .* is gone"):
        recover(store, "a")


# ------------------------------------------------------------------ CyteArc stores


FIXTURE = Path(__file__).with_name("fixtures") / "row_framed_before_issue14.zarr"


@pytest.mark.parametrize(
    ("path", "holder"),
    [
        ("RNA/counts", "RNA/counts"),
        ("RNA/countsT", "RNA/countsT"),
        ("RNA/countSummaries/rowSums", "RNA"),
        ("RNA/featureData/ids", "RNA"),
        ("cellData/ids", "cellData"),
    ],
)
def test_arrays_a_cytearc_store_records_describe_are_refused(
    tmp_path: Path, path: str, holder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    where = tmp_path / "s.zarr"
    shutil.copytree(FIXTURE, where)
    files = {p: p.read_bytes() for p in where.rglob("*") if p.is_file()}
    array = zarr.open_array(LocalStore(where), path=path, mode="r+")
    for operation in (lambda: resize(array, high=[1] * array.ndim), lambda: promote(array, 0)):
        with pytest.raises(ValueError, match=rf"belongs to a CyteArc store \(.*'{holder}'\)"):
            operation()
    assert main(["array", "resize", str(where), path, "--high=" + ",".join(["1"] * array.ndim)])
    refusal = capsys.readouterr().err
    assert "belongs to a CyteArc store" in refusal
    # the remedy names only commands that exist (it named 'append or delete')
    assert "cytearc-vfs write" in refusal and "append" not in refusal
    assert {p: p.read_bytes() for p in where.rglob("*") if p.is_file()} == files
    assert main(["verify", str(where)]) == 0


def test_a_users_own_array_in_a_cytearc_store_may_be_resized(tmp_path: Path) -> None:
    """A root's assayTypes declares the store, not the arrays kept beside its layout:
    every array of a store (a mount target's too) was refused, with a remedy about
    rewriting counts. Table columns and artifact arrays stay refused."""
    where = tmp_path / "s.zarr"
    cv.write_counts(where, np.ones((4, 3), dtype=np.uint8))
    cv.mount_datastore(where, tmp_path / "m.zarr")
    for store_path in (where, tmp_path / "m.zarr"):
        root = zarr.open_group(LocalStore(store_path), mode="r+")
        mine = root.create_array("mine/values", shape=(4,), chunks=(2,), dtype="i4")
        mine[:] = [1, 2, 3, 4]
        resize(mine, high=[2])
        np.testing.assert_array_equal(
            zarr.open_array(LocalStore(store_path), path="mine/values")[:], [1, 2, 3, 4, 0, 0]
        )
        assert main(["verify", str(store_path)]) == 0
    column = zarr.open_group(LocalStore(where), mode="r+").create_array(
        "cellData/extra", shape=(4,), chunks=(4,), dtype="i4"
    )
    with pytest.raises(
        ValueError, match=r"belongs to a CyteArc store \(the layout group 'cellData'\)"
    ):
        resize(column, high=[1])


@pytest.mark.parametrize(
    ("path", "attribute"),
    [
        ("RNA/counts", "cytearc:countMatrixLayout"),
        ("RNA/countsT", "cytearc:countMatrixLayout"),
        ("RNA/countSummaries/rowSums", "source_fingerprint"),
        ("RNA/featureData/ids", "fingerprint"),
        ("cellData/ids", "fingerprint"),
    ],
)
def test_arraywriter_refuses_values_a_cytearc_store_fingerprints(
    tmp_path: Path, path: str, attribute: str
) -> None:
    # it wrote them: the store then failed its identity check at every open
    import shutil

    where = tmp_path / "s.zarr"
    shutil.copytree(FIXTURE, where)
    files = {p: p.read_bytes() for p in where.rglob("*") if p.is_file()}
    array = zarr.open_array(LocalStore(where), path=path, mode="r+")
    with pytest.raises(
        ValueError, match=rf"fingerprints cover its values \(attribute '{attribute}'"
    ):
        ArrayWriter(array)
    assert {p: p.read_bytes() for p in where.rglob("*") if p.is_file()} == files


def test_arraywriter_writes_a_cytearc_store_s_other_arrays(tmp_path: Path) -> None:
    import shutil

    where = tmp_path / "s.zarr"
    shutil.copytree(FIXTURE, where)
    names = zarr.open_array(LocalStore(where), path="cellData/names", mode="r+")
    renamed = np.array([f"c-{i}" for i in range(names.shape[0])])
    with ArrayWriter(names) as writer:
        writer.write(renamed)
    assert zarr.open_array(LocalStore(where), path="cellData/names", mode="r")[:].tolist() == (
        renamed.tolist()
    )
    assert main(["verify", str(where)]) == 0


def test_a_writer_dropped_with_edits_never_flushed_warns() -> None:
    """Edits never flushed are lost with the writer: it says so, naming the remedy."""
    from cytearc_vfs.errors import VfsWarning

    array, values = make(MemoryStore(), (4,), (2,))
    writer = ArrayWriter(array)
    writer.write([9], [range(0, 1)])
    with pytest.warns(VfsWarning, match=r"1 unit\(s\) of edits never flushed.*Call flush\(\)"):
        del writer  # no cycle holds a writer: it goes at once
    assert np.array_equal(array[...], values)
    for settled in ("flush", "discard"):
        writer = ArrayWriter(array)
        writer.write([9], [range(0, 1)])
        getattr(writer, settled)()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            del writer
