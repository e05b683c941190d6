"""What publication refuses before it can corrupt a store or publish wrong values.

Three audited defects (spec, "Artifact publication"; docs/artifacts.md):
values an integer or boolean array cannot hold were cast to arbitrary ones;
names that are Zarr's own keys (``zarr.json``) replaced a group's metadata;
roots outside the store's layout published artifacts nothing ever lists.
Each is checked on a plain local store and through a mount (whose writes go
to its target), for ``write_array`` and for streamed ``create_array`` bands.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from store_copies import copy_stores
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.artifacts.catalog import list_artifacts, publish_artifact
from cytearc_vfs.errors import NonFiniteArtifactError
from cytearc_vfs.format.paths import AssayPaths, check_name

ROOT = "RNA/artifacts"
KIND = "scores"
PROVENANCE = {"operation": "test.score", "parameters": {}, "inputs": {"counts": "RNA"}}
COUNTS = np.arange(12, dtype=np.int32).reshape(4, 3)


def store_keys(location: Path) -> list[str]:
    return sorted(str(p.relative_to(location)) for p in location.rglob("*"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store and its mount, built once and never opened after: each test
    below writes to a copy of its own."""
    root = tmp_path_factory.mktemp("pristine")
    cv.write_counts(root / "source.zarr", COUNTS)
    cv.mount_datastore(root / "source.zarr", root / "mount.zarr").close()
    return root


@pytest.fixture(params=["local", "mount"])
def place(request: pytest.FixtureRequest, pristine: Path, tmp_path: Path) -> tuple[Any, Path]:
    """(writable store, directory its writes land in): a store, or a mount's target."""
    # copies, not new builds: 190 tests each wrote a store (and a mount)
    source = tmp_path / "source.zarr"
    if request.param == "local":
        shutil.copytree(pristine / "source.zarr", source)
        return cv.open_store(source, mode="r+"), source
    target = tmp_path / "mount.zarr"
    copy_stores(pristine, tmp_path)  # the target's record names the copied source
    return cv.open_store(target, mode="r+"), target


def write(store: Any, how: str, values: Any, dtype: Any, finite: bool = True) -> Any:
    with publish_artifact(store, ROOT, KIND, provenance=PROVENANCE) as art:
        if how == "write_array":
            art.write_array("x", np.asarray(values), dtype=dtype, finite=finite, chunks=2)
        else:
            values = np.asarray(values)
            writer = art.create_array("x", values.shape, dtype, finite=finite, chunks=2)
            for start in range(0, values.shape[0], 2):
                writer.write(values[start : start + 2])
    return art


# ---------------------------------------------------------------- values


NAN, INF = float("nan"), float("inf")

# (stored dtype, values, error, first offending row, words of the message)
REFUSED = [
    # NaN and infinity into every integer family and bool: non-finite
    (np.int32, [1.0, NAN, 2.0], NonFiniteArtifactError, 1, "is NaN"),
    (np.int64, [1.0, 2.0, INF], NonFiniteArtifactError, 2, "is infinite"),
    (np.int16, [1.0, 2.0, 3.0, -INF], NonFiniteArtifactError, 3, "is infinite"),
    (np.int8, [NAN], NonFiniteArtifactError, 0, "is NaN"),
    (np.uint8, [0.0, 0.0, NAN], NonFiniteArtifactError, 2, "is NaN"),
    (np.uint64, [INF], NonFiniteArtifactError, 0, "is infinite"),
    (np.bool_, [0.0, NAN], NonFiniteArtifactError, 1, "is NaN"),
    # out of range: counts as infinite, never wraps
    (np.uint8, [-1, 300], NonFiniteArtifactError, 0, "range 0..255"),
    (np.uint8, [1, 2, 300], NonFiniteArtifactError, 2, "range 0..255"),
    (np.uint16, [-1.0], NonFiniteArtifactError, 0, "range 0..65535"),
    (np.int8, [127.0, 128.0], NonFiniteArtifactError, 1, "range -128..127"),
    (np.int8, [-129], NonFiniteArtifactError, 0, "range -128..127"),
    (np.int32, [2.0**31], NonFiniteArtifactError, 0, "range"),
    (np.int64, [2.0**63], NonFiniteArtifactError, 0, "range"),
    (np.int64, np.array([2**64 - 1], dtype=np.uint64), NonFiniteArtifactError, 0, "range"),
    (np.uint32, np.array([0, -5], dtype=np.int64), NonFiniteArtifactError, 1, "range"),
    # not representable: a plain ValueError, the artifact still unpublished
    (np.int32, [1.0, 1.5], ValueError, 1, "not a whole number"),
    (np.uint8, [0.25], ValueError, 0, "not a whole number"),
    (np.bool_, [0, 1, 2], ValueError, 2, "neither 0 nor 1"),
    (np.bool_, [0.5], ValueError, 0, "not a whole number"),
    (np.int16, np.array([1 + 0j, 2 + 1j]), ValueError, 1, "imaginary"),
    (np.float64, np.array([1 + 0j, 0 + 1j]), ValueError, 1, "imaginary"),
    # floating and complex targets: caught after the cast, as before
    (np.float16, [1.0, 1e6], NonFiniteArtifactError, 1, "non-finite"),
    (np.float32, [1e300], NonFiniteArtifactError, 0, "non-finite"),
    (np.complex64, np.array([1 + 1j, complex(NAN, 0)]), NonFiniteArtifactError, 1, "non-finite"),
]


@pytest.mark.parametrize("how", ["write_array", "create_array"])
@pytest.mark.parametrize(
    ("dtype", "values", "error", "row", "words"),
    REFUSED,
    ids=[f"{np.dtype(case[0]).name}-{i}" for i, case in enumerate(REFUSED)],
)
def test_values_the_dtype_cannot_hold_are_refused_and_nothing_is_published(
    place: tuple[Any, Path],
    how: str,
    dtype: Any,
    values: Any,
    error: type[Exception],
    row: int,
    words: str,
) -> None:
    store, directory = place
    with pytest.raises(error, match=words) as caught:
        write(store, how, values, dtype)
    message = str(caught.value)
    assert "'x'" in message
    assert f"row {row}" in message
    assert "nothing is published" in message
    if isinstance(caught.value, NonFiniteArtifactError):
        assert (caught.value.operation, caught.value.array, caught.value.row) == (
            "test.score",
            "x",
            row,
        )
    assert list_artifacts(store, ROOT) == []
    assert [p.name for p in (directory / ROOT / KIND).iterdir()] == ["zarr.json"]


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64, np.bool_])
def test_integer_and_boolean_arrays_refuse_nan_even_when_finite_is_false(
    place: tuple[Any, Path], dtype: Any
) -> None:
    store, _ = place
    with pytest.raises(NonFiniteArtifactError, match="float dtype with finite=False"):
        write(store, "write_array", [0.0, NAN], dtype, finite=False)
    assert list_artifacts(store, ROOT) == []


ACCEPTED = [
    (np.int8, [-128.0, 0.0, 127.0], [-128, 0, 127]),
    (np.int8, np.array([-128, 127], dtype=np.int64), [-128, 127]),
    (np.uint8, [0, 255], [0, 255]),
    (np.uint64, np.array([0, 2**64 - 1], dtype=np.uint64), [0, 2**64 - 1]),
    (np.int64, [2.0**53, -(2.0**63)], [2**53, -(2**63)]),
    (np.int32, np.array([True, False]), [1, 0]),
    (np.int16, np.array([3 + 0j]), [3]),
    (np.bool_, [0, 1, 1], [False, True, True]),
    (np.bool_, [1.0, 0.0], [True, False]),
    (np.float32, [1.5, -2.0], [1.5, -2.0]),
    (np.float32, np.array([1.5 + 0j]), [1.5]),
]


@pytest.mark.parametrize("how", ["write_array", "create_array"])
@pytest.mark.parametrize(("dtype", "values", "stored"), ACCEPTED)
def test_values_the_dtype_holds_exactly_are_published_unchanged(
    place: tuple[Any, Path], how: str, dtype: Any, values: Any, stored: list[Any]
) -> None:
    store, _ = place
    art = write(store, how, values, dtype)
    [found] = list_artifacts(store, ROOT)
    assert found.path == art.path
    loaded = found.load("x")
    assert loaded.dtype == np.dtype(dtype)
    assert loaded.tolist() == stored


def test_a_refused_value_in_a_later_band_is_named_by_its_row(place: tuple[Any, Path]) -> None:
    store, _ = place
    values = np.zeros((6, 2))
    values[5, 1] = 256
    with pytest.raises(NonFiniteArtifactError) as caught:
        write(store, "create_array", values, np.uint8)
    assert caught.value.row == 5


# ---------------------------------------------------------------- reserved names


@pytest.mark.parametrize("name", ["zarr.json", "ZARR.JSON", "Zarr.Json"])
def test_a_kind_named_like_zarrs_metadata_is_refused_before_writing(
    place: tuple[Any, Path], name: str
) -> None:
    store, directory = place
    with publish_artifact(store, ROOT, KIND, provenance=PROVENANCE) as art:
        art.write_array("x", np.ones(3))
    before = store_keys(directory)
    with pytest.raises(ValueError, match=rf"artifact kind {name!r} is reserved.*another name"):
        publish_artifact(store, ROOT, name, provenance=PROVENANCE)
    assert store_keys(directory) == before
    # The root is still a group, to plain zarr and to listing.
    assert isinstance(zarr.open_group(LocalStore(directory), path=ROOT, mode="r"), zarr.Group)
    assert [a.path for a in list_artifacts(store, ROOT)] == [art.path]


def test_an_array_named_zarr_json_is_refused_and_nothing_is_published(
    place: tuple[Any, Path],
) -> None:
    store, _ = place
    for create in (
        lambda art: art.write_array("zarr.json", np.ones(3)),
        lambda art: art.create_array("zarr.json", (3,), np.float64),
    ):
        with (  # noqa: PT012 - the block under test is the with-body
            pytest.raises(ValueError, match=r"array name 'zarr\.json' is reserved"),
            publish_artifact(store, ROOT, KIND, provenance=PROVENANCE) as art,
        ):
            art.write_array("before", np.ones(3))
            create(art)
        assert not art.published
    assert list_artifacts(store, ROOT) == []


def test_a_root_segment_or_layout_name_like_zarrs_metadata_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        publish_artifact(tmp_path, "zarr.json/artifacts", KIND, provenance=PROVENANCE)
    with pytest.raises(ValueError, match=r"assay 'zarr\.json' is reserved"):
        check_name("zarr.json", what="assay")
    with pytest.raises(ValueError, match="reserved"):
        AssayPaths("RNA", "ZARR.json")
    # Names that merely contain it, or a chunk directory's name, stay valid.
    assert check_name("zarr.json.bak", what="kind") == "zarr.json.bak"
    assert check_name("c", what="array name") == "c"


# ---------------------------------------------------------------- roots


@pytest.mark.parametrize(
    ("root", "words"),
    [
        ("RNA/artifact", "not an artifact root"),
        ("artifact", "not an artifact root"),
        ("cellData", "not an artifact root"),
        ("RNA/counts", "not an artifact root"),
        ("RNA/artifacts/pca", "not an artifact root"),
        ("a/b/c/artifacts", "not an artifact root"),
        ("cellData/artifacts", "'cellData' is a group of the store layout"),
        ("matrices/RNA/artifacts", "'matrices' is a group of the store layout"),
    ],
)
def test_a_root_of_no_root_form_is_refused_before_writing(
    place: tuple[Any, Path], root: str, words: str
) -> None:
    store, directory = place
    before = store_keys(directory)
    with pytest.raises(ValueError, match=words) as caught:
        publish_artifact(store, root, KIND, provenance=PROVENANCE)
    assert "'{workspace}/{assay}/artifacts'" in str(caught.value)
    assert store_keys(directory) == before


@pytest.mark.parametrize(
    ("root", "words"),
    [
        ("ADT/artifacts", "'ADT' is neither an assay"),
        ("ws/artifacts", "'ws' is neither an assay"),
        ("ws/RNA/artifacts", "'ws' is not a workspace"),
    ],
)
def test_a_root_of_an_assay_or_workspace_the_store_lacks_is_refused(
    place: tuple[Any, Path], root: str, words: str
) -> None:
    store, directory = place
    before = store_keys(directory)
    with pytest.raises(ValueError, match=words) as caught:
        publish_artifact(store, root, KIND, provenance=PROVENANCE)
    assert "its artifact roots: ['artifacts', 'RNA/artifacts']" in str(caught.value)
    assert store_keys(directory) == before


@pytest.mark.parametrize("root", ["RNA/artifact", "cellData/artifacts", "RNA/counts"])
def test_a_root_of_no_root_form_names_the_roots_the_store_has(
    place: tuple[Any, Path], root: str
) -> None:
    # artifacts.md: a typo such as RNA/artifact is refused naming the store's artifact
    # roots; it named only the root forms, so the user had to find the assay's name
    store, directory = place
    before = store_keys(directory)
    with pytest.raises(ValueError, match=r"not an artifact root|group of the store") as caught:
        publish_artifact(store, root, KIND, provenance=PROVENANCE)
    assert "its artifact roots: ['artifacts', 'RNA/artifacts']" in str(caught.value)
    assert store_keys(directory) == before


def test_a_refused_assay_root_leaves_the_store_rewritable(tmp_path: Path) -> None:
    # Before the fix, an orphan ADT group made write_counts(overwrite=True) refuse the store.
    location = tmp_path / "s.zarr"
    cv.write_counts(location, COUNTS)
    with pytest.raises(ValueError, match="'ADT' is neither an assay"):
        publish_artifact(location, "ADT/artifacts", KIND, provenance=PROVENANCE)
    cv.write_counts(location, COUNTS + 1, overwrite=True)
    assert not (location / "ADT").exists()


def test_a_location_without_a_group_is_refused_before_writing(tmp_path: Path) -> None:
    location = tmp_path / "empty.zarr"
    with pytest.raises(ValueError, match=r"root is not a Zarr group.*write_counts"):
        publish_artifact(location, "artifacts", KIND, provenance=PROVENANCE)
    # Opening a local store writable makes its directory; no key is written.
    assert not location.exists() or store_keys(location) == []


def test_every_root_of_a_workspace_store_and_its_mount_is_accepted(tmp_path: Path) -> None:
    source, target = tmp_path / "w.zarr", tmp_path / "wm.zarr"
    cv.write_counts(source, COUNTS, workspace="ws")
    cv.mount_datastore(source, target, workspace="ws")
    roots = ["artifacts", "ws/artifacts", "ws/RNA/artifacts"]
    for location in (source, target):
        store = cv.open_store(location, mode="r+")
        for root in roots:
            with publish_artifact(store, root, KIND, provenance=PROVENANCE) as art:
                art.write_array("x", np.ones(2))
            assert [a.path for a in list_artifacts(store, root)][-1] == art.path
        for root, words in [
            ("RNA/artifacts", "'RNA' is neither an assay"),
            ("ws/ADT/artifacts", "workspace 'ws' has no assay 'ADT'"),
            ("wz/RNA/artifacts", "'wz' is not a workspace"),
        ]:
            with pytest.raises(ValueError, match=words):
                publish_artifact(store, root, KIND, provenance=PROVENANCE)
    described = {(d["root"], d["path"].split("/")[-1]) for d in cv.describe_artifacts(target)}
    assert {root for root, _ in described} == set(roots)


def test_a_group_root_is_checked_by_its_full_path(tmp_path: Path) -> None:
    location = tmp_path / "w.zarr"
    cv.write_counts(location, COUNTS, workspace="ws")
    group = zarr.open_group(LocalStore(location), path="ws", mode="r+")
    with publish_artifact(group, ROOT, KIND, provenance=PROVENANCE) as art:
        art.write_array("x", np.ones(2))
    assert [a.path for a in list_artifacts(location, f"ws/{ROOT}")] == [f"ws/{art.path}"]
    with pytest.raises(ValueError, match=r"at 'ws/ws/RNA/artifacts', below group 'ws'"):
        publish_artifact(group, f"ws/{ROOT}", KIND, provenance=PROVENANCE)


def test_a_composite_publishes_under_its_own_roots(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", COUNTS)
    cv.create_composite(tmp_path / "c.zarr", [tmp_path / "s.zarr"])
    store = cv.open_store(tmp_path / "c.zarr", mode="r+")
    for root in ("artifacts", ROOT):
        with publish_artifact(store, root, KIND, provenance=PROVENANCE) as art:
            art.write_array("x", np.ones(4))
        assert [a.path for a in list_artifacts(store, root)] == [art.path]
    with pytest.raises(ValueError, match="'ADT' is neither an assay"):
        publish_artifact(store, "ADT/artifacts", KIND, provenance=PROVENANCE)


def test_listing_refuses_a_root_of_no_root_form(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", COUNTS)
    with pytest.raises(ValueError, match="not an artifact root"):
        list_artifacts(tmp_path / "s.zarr", "RNA/artifact")
    # A well-formed root the store has not used yet lists empty, as before.
    assert list_artifacts(tmp_path / "s.zarr", "ADT/artifacts") == []
