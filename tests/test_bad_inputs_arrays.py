"""Bad values and objects given to cytearc_vfs.arrays and to artifact writers.

A value an array's dtype cannot hold is refused, never stored as another
value (numpy and zarr wrap 300 to 44 in ``uint8`` without a word); what is
not a ``zarr.Array`` is named as such; nothing is changed by a refusal.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from zarr.core.dtype import VariableLengthBytes

import cytearc_vfs as cv
from cytearc_vfs.arrays import ArrayWriter, hierarchy, info, promote, read, resize


def _array(tmp_path: Path, dtype: str, fill: object = 0) -> zarr.Array[Any]:
    array = zarr.create_array(
        str(tmp_path / f"{dtype}.zarr"), shape=(4,), chunks=(2,), dtype=dtype, fill_value=fill
    )
    array[:] = np.arange(4).astype(dtype)
    return array


@pytest.mark.parametrize(
    ("dtype", "data", "message"),
    [
        ("u1", np.array([300, 1]), r"value 300 at position \(0,\) .* would be stored as 44"),
        ("u1", [300, 1], r"value 300 at position \(0,\) .* would be stored as 44"),
        ("u1", np.array([1, -1]), r"value -1 at position \(1,\) .* would be stored as 255"),
        ("i8", np.array([2**64 - 1], dtype=np.uint64), r"value 18446744073709551615 .* as -1"),
        ("u2", np.array([1.5, 2.0]), r"value 1\.5 at position \(0,\) .* would be stored as 1"),
        ("i4", np.array([np.nan, 1.0]), r"value nan at position \(0,\) .* dtype int32"),
        ("i4", np.array([np.inf, 1.0]), r"value inf at position \(0,\) .* dtype int32"),
        ("f4", np.array([1e39]), r"value 1e\+39 at position \(0,\) .* would be stored as inf"),
        ("f4", ["1.5", "1e39"], r"value '1e39' at position \(1,\) .* would be stored as inf"),
        ("c8", [b"1e400", b"2"], r"value b'1e400' at position \(0,\) .* stored as \(inf"),
        ("i4", np.array([1 + 2j]), r"value \(1\+2j\) .* is complex, .* drop its imaginary part"),
        ("u1", np.ma.masked_array([7.5, 1.0], mask=[False, True]), r"value 7\.5 at position"),
        ("f8", np.array(["a", "b"]), r"dtype <U1\) cannot be stored as its dtype float64"),
        # integers a float cannot hold exactly are rounded by numpy without a word
        ("f8", np.array([2**53 + 1, 1]), r"value 9007199254740993 at .* as 9007199254740992\.0"),
        ("f4", np.array([2**24 + 1, 1], dtype="i4"), r"value 16777217 .* as 16777216\.0"),
        ("f2", np.array([2049, 1]), r"value 2049 .* float16: it would be stored as 2048\.0"),
        ("f8", [2**70 + 1, 1], r"value 1180591620717411303425 .* float64: it would be stored"),
        ("c8", np.array([2**24 + 1, 1]), r"value 16777217 .* complex64: it would be stored"),
        ("f8", np.array([2**64 - 1, 1], dtype="u8"), r"value 18446744073709551615 at"),
        # fixed-length text cut short, times truncated to a coarser unit
        ("U2", ["abc", "d"], r"value 'abc' at position \(0,\) .* would be stored as 'ab'"),
        pytest.param(
            "S2",
            [b"d", b"abc"],
            r"value b'abc' at position \(1,\) .* would be stored as b'ab'",
            marks=pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
        ),
        ("U2", np.array([123, 1]), r"value 123 at position \(0,\) .* would be stored as '12'"),
        ("M8[s]", np.array(["2020-01-01T00:00:00.5"] * 2, dtype="M8[ms]"), r"500000\) at"),
        ("m8[s]", np.array([1500, 2000], dtype="m8[ms]"), r"position \(0,\) .* timedelta64"),
        ("M8[ns]", np.array(["3000-01-01"] * 2, dtype="M8[s]"), r"cannot be stored .*Overflow"),
        # ... and given as text or as Python's dates and durations
        (
            "M8[D]",
            ["2020-01-01", "2020-01-01T12:00"],
            r"value '2020-01-01T12:00' at position \(1,\)",
        ),
        ("M8[s]", [datetime(2020, 1, 1, 0, 0, 0, 500000)] * 2, r"500000\) at position \(0,\)"),
        ("m8[s]", [timedelta(milliseconds=1500)] * 2, r"at position \(0,\) .* timedelta64"),
        # missing values not masked: numpy stores None as NaN or "None", NaN in bool as True
        ("f8", [1.0, None], r"value None at position \(1,\) .* mask the cell"),
        ("str", ["a", None], r"value None at position \(1,\) .* mask the cell"),
        ("bool", np.array([np.nan, 1.0]), r"value nan at position \(0,\) .* stored as True"),
    ],
)
def test_a_value_the_dtype_cannot_hold_is_refused_and_nothing_changes(
    tmp_path: Path, dtype: str, data: Any, message: str
) -> None:
    array = _array(tmp_path, dtype)
    before = array[:].copy()
    with ArrayWriter(array) as writer:
        writer.write(np.arange(2), [range(2, 4)])  # pending, then discarded with the refusal
        with pytest.raises((ValueError, TypeError), match=message):
            writer.write(data, [range(0, 2)], flush=True)
        writer.discard()
    after = zarr.open_array(array.store, mode="r")[:]
    assert np.array_equal(after, before, equal_nan=before.dtype.kind in "fc")


@pytest.mark.parametrize(
    ("dtype", "data", "expected"),
    [
        ("u1", np.array([255.0, 0.0]), [255, 0]),  # whole floats are whole numbers
        ("u8", np.array([2**64 - 1], dtype=np.uint64), [2**64 - 1]),
        ("i4", np.array([3 + 0j]), [3]),  # no imaginary part to lose
        ("u1", np.ma.masked_array([np.nan, 9.0], mask=[True, False]), [0, 9]),  # masked: fill
        ("f4", np.array([np.inf]), [np.inf]),  # an infinity stays one
        ("bool", np.array([0, 2]), [False, True]),  # numpy's truth, as before
        ("f8", np.array([2**53, -(2**53)]), [2.0**53, -(2.0**53)]),  # whole and exact
        ("f8", np.array([2**63 - 1024, -(2**63)]), [2.0**63 - 1024, -(2.0**63)]),
        ("f8", [2**70, 3], [2.0**70, 3.0]),
        ("U2", ["ab", "c"], ["ab", "c"]),
        ("f4", ["-inf", "1.5"], [-np.inf, 1.5]),  # an infinity spelled out is one
        (
            "M8[s]",
            ["2020-01-01", "2020-01-01T00:00:01"],
            [datetime(2020, 1, 1, 0, 0, s) for s in (0, 1)],
        ),
        ("bool", np.ma.masked_array([np.nan, 1.0], mask=[True, False]), [False, True]),
        ("str", np.ma.masked_array(np.array([None, "b"], dtype=object), [1, 0]), ["0", "b"]),
        (
            "M8[ms]",
            np.array(["2020-01-01T00:00:01"] * 2, dtype="M8[s]"),
            [datetime(2020, 1, 1, 0, 0, 1)] * 2,
        ),
    ],
)
def test_values_the_dtype_holds_are_written_exactly(
    tmp_path: Path, dtype: str, data: Any, expected: list[Any]
) -> None:
    array = _array(tmp_path, dtype)
    with ArrayWriter(array) as writer:
        writer.write(data, [range(0, len(expected))])
    assert array[: len(expected)].tolist() == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (["text", b"b"], r"value 'text' at position \(0,\) .* is str, not bytes; encode"),
        ([b"a", None], r"value None at position \(1,\) .* mask a cell"),
    ],
)
@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
def test_a_bytes_array_takes_bytes_at_the_write_not_a_flush_that_fails_forever(
    data: Any, message: str
) -> None:
    """zarr refuses text in ``variable_length_bytes`` only when it encodes the chunk.

    The writer used to take it: every flush then raised zarr's bare
    ``TypeError: Expected bytes, got str`` and kept the unit, so no flush
    could succeed until ``discard()`` dropped the good edits with it.
    """
    array = zarr.create_array({}, shape=(4,), chunks=(2,), dtype=VariableLengthBytes())
    writer = ArrayWriter(array)
    writer.write([b"c", b"d"], [range(2, 4)])
    with pytest.raises(ValueError, match=message):
        writer.write(data, [range(0, 2)])
    assert writer.flush() == 1  # the good edits, unharmed
    assert array[:].tolist() == [b"", b"", b"c", b"d"]


@pytest.mark.parametrize(
    "call",
    [
        lambda given: read(given),
        lambda given: info(given),
        lambda given: resize(given, high=[1]),
        lambda given: promote(given, 0),
        lambda given: ArrayWriter(given),
    ],
    ids=["read", "info", "resize", "promote", "ArrayWriter"],
)
@pytest.mark.parametrize("given", [np.arange(3), None, [1, 2]], ids=["ndarray", "None", "list"])
def test_what_is_not_a_zarr_array_is_named(call: Any, given: object) -> None:
    # AttributeError: 'numpy.ndarray' object has no attribute 'store_path'
    with pytest.raises(TypeError, match=r"expected a zarr\.Array, not .*zarr\.open_array"):
        call(given)


@pytest.mark.parametrize("given", [np.arange(3), None, "data.zarr"], ids=["ndarray", "None", "str"])
def test_hierarchy_of_what_is_not_a_zarr_node_is_named(given: object) -> None:
    # AttributeError: 'numpy.ndarray' object has no attribute 'store_path'
    with pytest.raises(TypeError, match=r"hierarchy takes a zarr\.Group or zarr\.Array, not "):
        hierarchy(given)  # type: ignore[arg-type]


def test_an_index_array_in_a_tuple_selection_is_named(tmp_path: Path) -> None:
    array = _array(tmp_path, "f4")
    # "The truth value of an array with more than one element is ambiguous"
    for selection in (np.array([0, 1]), (np.array([0, 1]), ...)):
        with pytest.raises(TypeError, match=r"in a tuple selection; .* use zarr's oindex"):
            read(array, selection)
    assert read(array, (..., slice(1, 3)), raw=True).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bound", ["64M", 1.5, None])
def test_max_stale_bytes_must_be_a_byte_count(tmp_path: Path, bound: object) -> None:
    # "'<' not supported between instances of 'str' and 'int'"
    with pytest.raises(TypeError, match=r"max_stale_bytes is a number of bytes"):
        ArrayWriter(_array(tmp_path, "f4"), max_stale_bytes=bound)  # type: ignore[arg-type]


# ------------------------------------------------------------------ artifacts

PROVENANCE = {"operation": "normalize", "parameters": {}, "inputs": {}}


@pytest.mark.parametrize(
    ("arrays", "error", "message"),
    [
        # "array 'x' has no rows (shape ())": np.asarray of a sparse matrix is a 0-d object
        (
            [("x", sp.csr_matrix(np.eye(3)))],
            TypeError,
            r"scipy\.sparse csr_matrix; .*values\.toarray\(\)",
        ),
        # zarr's "Zarr data type resolution from object failed..."
        ([("x", np.array([1, "a"], dtype=object))], TypeError, r"would have dtype object"),
        # zarr's ContainsArrayError naming its FinishingStore
        ([("x", np.ones(3)), ("x", np.zeros(3))], ValueError, r"already holds an array 'x'"),
    ],
    ids=["sparse", "object", "repeated-name"],
)
def test_artifact_arrays_that_cannot_be_stored_are_named_and_nothing_is_published(
    tmp_path: Path, arrays: list[tuple[str, Any]], error: type[Exception], message: str
) -> None:
    location = cv.write_counts(tmp_path / "a.zarr", np.ones((3, 2))).location
    store = cv.open_store(location, mode="r+")

    def publish() -> None:
        with cv.publish_artifact(
            store, "RNA/artifacts", "normalized", provenance=PROVENANCE
        ) as art:
            for name, values in arrays:
                art.write_array(name, values)

    with pytest.raises(error, match=message):
        publish()
    assert cv.list_artifacts(store, "RNA/artifacts") == []


@pytest.mark.parametrize(
    ("shape", "error", "message"),
    [
        # int(2.5) made a 2-row array without a word
        ((2.5, 2), TypeError, r"shape \(2\.5, 2\) must hold whole lengths \(ints\), not 2\.5"),
        # tuple(int(d) for d in "3") made a 3-row array
        ("3", TypeError, r"shape '3' must hold whole lengths \(ints\), not '3' \(str\)"),
        ((True, 2), TypeError, r"not True \(bool\)"),
        # zarr's "Expected all values to be non-negative. Got (-1, 2) instead."
        ((-1, 2), ValueError, r"shape \(-1, 2\) holds a negative length"),
    ],
)
def test_an_artifact_array_shape_of_lengths_that_are_not_whole_is_refused(
    tmp_path: Path, shape: object, error: type[Exception], message: str
) -> None:
    location = cv.write_counts(tmp_path / "a.zarr", np.ones((3, 2))).location
    store = cv.open_store(location, mode="r+")

    def publish() -> None:
        with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
            art.create_array("x", shape, np.float32)  # type: ignore[arg-type]

    with pytest.raises(error, match=message):
        publish()
    assert cv.list_artifacts(store, "RNA/artifacts") == []
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.create_array("x", (np.int64(2), 0), np.float32).write(np.ones((2, 0)))
    assert [found.load("x").shape for found in cv.list_artifacts(store, "RNA/artifacts")] == [
        (2, 0)
    ]


@contextmanager
def _refusing_writes(folder: Path) -> Iterator[Path]:
    """A view of ``folder`` that refuses writes: the folder without write permission, or,
    for the root user (who writes anywhere), a read-only bind mount of it."""
    if os.geteuid() != 0:
        for path in (folder, *folder.rglob("*")):
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield folder
        finally:
            for path in (folder, *folder.rglob("*")):
                path.chmod(0o755 if path.is_dir() else 0o644)
        return
    view = folder.with_name(folder.name + "-view")
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True).returncode:
        pytest.skip("the root user writes anywhere, and cannot make a read-only bind mount here")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(view)]
        if subprocess.run(remount, capture_output=True).returncode:
            pytest.skip("cannot make the bind mount read-only here")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[str]:
    """A CyteArc store in a folder that refuses writes."""
    folder = tmp_path / "folder"
    folder.mkdir()
    cv.write_counts(folder / "a.zarr", np.ones((3, 2)))
    with _refusing_writes(folder) as view:
        yield str(view / "a.zarr")


def test_publishing_into_a_folder_that_refuses_writes_names_the_store(read_only_store: str) -> None:
    def publish(store: object) -> None:
        with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
            art.write_array("x", np.ones(3))

    for store in (read_only_store, cv.open_store(read_only_store, mode="r+")):
        # OSError: [Errno 30] Read-only file system: '.../a.zarr/zarr.<uuid>.partial'
        with pytest.raises(PermissionError, match=r"cannot publish an artifact of kind 'pca' in "):
            publish(store)
    assert cv.list_artifacts(read_only_store, "RNA/artifacts") == []


@pytest.mark.parametrize("kind", [None, "", "a/b"])
def test_find_artifact_takes_one_kind(tmp_path: Path, kind: object) -> None:
    location = cv.write_counts(tmp_path / "a.zarr", np.ones((3, 2))).location
    with cv.publish_artifact(location, "RNA/artifacts", "normalized", provenance=PROVENANCE) as art:
        art.write_array("x", np.ones(3))
    # kind=None listed every kind and returned the 'normalized' artifact
    with pytest.raises(ValueError, match=r"artifact kind .* is not a valid name"):
        cv.find_artifact(location, "RNA/artifacts", kind, PROVENANCE)  # type: ignore[arg-type]
    assert cv.find_artifact(location, "RNA/artifacts", "pca", PROVENANCE) is None
    found = cv.find_artifact(location, "RNA/artifacts", "normalized", PROVENANCE)
    assert found is not None and found.path == art.path


@pytest.fixture
def read_only_array(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(writable folder, its read-only view) holding ``arr.zarr``, a 4 x 4 int32 array."""
    folder = tmp_path / "folder"
    folder.mkdir()
    array = zarr.create_array(folder / "arr.zarr", shape=(4, 4), chunks=(2, 2), dtype="int32")
    array[:] = np.arange(16, dtype=np.int32).reshape(4, 4)
    with _refusing_writes(folder) as view:
        yield folder, view


def test_array_writes_a_folder_refuses_name_the_array_and_keep_what_they_can(
    read_only_array: tuple[Path, Path],
) -> None:
    from cytearc_vfs.arrays import ArrayWriter, promote, resize

    folder, view = read_only_array
    before = np.arange(16, dtype=np.int32).reshape(4, 4)
    # OSError: [Errno 30] Read-only file system: '.../arr.zarr/c/0/0.<hex>.partial'
    array = zarr.open_array(view / "arr.zarr", mode="r+")
    writer = ArrayWriter(array)
    writer.write(np.array([[7, 8]]), (slice(0, 1), slice(0, 2)))
    with pytest.raises(PermissionError, match=r"flush of .*arr\.zarr.* refuses writes .*kept"):
        writer.flush()
    assert writer.stale_units == 1  # the edits are still there to flush again
    writer.discard()
    with pytest.raises(PermissionError, match=r"resize of .*arr\.zarr.* refuses writes"):
        resize(array, high=(2, 0))
    with pytest.raises(PermissionError, match=r"promote of .*arr\.zarr.* refuses writes"):
        promote(array, 0)
    np.testing.assert_array_equal(zarr.open_array(folder / "arr.zarr", mode="r")[:], before)


@pytest.mark.parametrize(
    "action", [["info"], ["promote", "--dimension", "0"], ["resize", "--high=1"]]
)
def test_cli_names_an_array_document_zarr_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    """zarr's own refusal ("Expected an iterable of integers") named no array and no file."""
    from cytearc_vfs.cli import main

    array = zarr.create_array(str(tmp_path / "s.zarr"), name="x", shape=(4,), dtype="i4")
    document = tmp_path / "s.zarr" / "x" / "zarr.json"
    document.write_text(document.read_text().replace('"shape": [\n    4\n  ]', '"shape": [-3]'))
    before = document.read_bytes()
    assert main(["array", action[0], str(tmp_path / "s.zarr"), "x", *action[1:]]) == 3
    err = capsys.readouterr().err
    assert f"{tmp_path / 's.zarr'} x: x/zarr.json is not a valid Zarr v3 array document" in err
    assert "restore it from a copy" in err and "Traceback" not in err
    assert document.read_bytes() == before and array.path == "x"
