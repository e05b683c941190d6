"""open_store verifies what the spec says and fails closed on tampered stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from zarr.abc.store import Store

import cytearc_vfs as cv
from cytearc_vfs.format.records import COUNT_LAYOUT_ATTR

SMALL = cv.LayoutPolicy(unit_bytes=16 * 1024, chunk_bytes=2 * 1024)


@pytest.fixture
def store_path(tmp_path: Path, counts: sp.csr_array) -> Path:
    cv.write_counts(tmp_path / "s.zarr", counts, layout=SMALL)
    return tmp_path / "s.zarr"


def edit_attrs(path: Path, node: str, change: Callable[[dict], None]) -> None:
    document_path = path / node / "zarr.json"
    document = json.loads(document_path.read_text())
    change(document.setdefault("attributes", {}))
    document_path.write_text(json.dumps(document))


def recreate_counts_t(path: Path, shape: tuple[int, int], *, sharded: bool = True) -> None:
    root = zarr.open_group(path, mode="a")
    old = root["RNA/countsT"]
    attrs = old.attrs.asdict()
    del root["RNA/countsT"]
    root["RNA"].create_array(
        "countsT",
        shape=shape,
        dtype=old.dtype,
        chunks=old.chunks,
        shards=old.shards if sharded else None,
        attributes=attrs,
        fill_value=0,
    )


def test_open_returns_verified_read_only_store(store_path: Path, snapshot_tree) -> None:
    before = snapshot_tree(store_path)
    store = cv.open_store(store_path)
    assert isinstance(store, Store) and store.read_only
    group = zarr.open_group(store, mode="r")
    assert group["RNA"].attrs["is_assay"] is True
    assert snapshot_tree(store_path) == before


def test_open_by_file_url_and_by_store(store_path: Path) -> None:
    cv.open_store(store_path.as_uri())
    cv.open_store(zarr.storage.LocalStore(store_path))


def test_open_memory_url(counts: sp.csr_array) -> None:
    info = cv.write_counts("memory://open-memory-test", counts)
    store = cv.open_store("memory://open-memory-test")
    np.testing.assert_array_equal(
        zarr.open_array(store, path="RNA/counts", mode="r")[:], counts.toarray()
    )
    assert info.location == "memory://open-memory-test"


@pytest.mark.parametrize(
    ("node", "change", "error", "message"),
    [
        (
            "RNA/counts",
            lambda a: a.pop(COUNT_LAYOUT_ATTR),
            cv.RecordShapeError,
            "no cytearc:countMatrixLayout",
        ),
        (
            "RNA",
            lambda a: a.pop(COUNT_LAYOUT_ATTR),
            cv.RecordShapeError,
            "no cytearc:countMatrixLayout",
        ),
        (
            "RNA/counts",
            lambda a: a[COUNT_LAYOUT_ATTR].update(unitBytes=999),
            cv.RecordShapeError,
            "differ",
        ),
        (
            "RNA/countsT",
            lambda a: a[COUNT_LAYOUT_ATTR].update(chunkBytes=7),
            cv.RecordShapeError,
            "differ",
        ),
        (
            "RNA/counts",
            lambda a: a[COUNT_LAYOUT_ATTR].update(extra=1),
            cv.RecordShapeError,
            "unknown field",
        ),
        ("RNA", lambda a: a[COUNT_LAYOUT_ATTR].pop("dtype"), cv.RecordShapeError, "missing field"),
        (
            "RNA",
            lambda a: a[COUNT_LAYOUT_ATTR].update(unitBytes=True),
            cv.RecordShapeError,
            "unitBytes",
        ),
        (
            "RNA/countSummaries",
            lambda a: a.update(source_fingerprint="sha256:" + "0" * 64),
            cv.IdentityMismatchError,
            "bound to other counts",
        ),
        (
            "RNA/countsT",
            lambda a: a.update(complete=False),
            cv.IncompleteStoreError,
            "not complete",
        ),
        (
            "RNA/countsT",
            lambda a: a.update(content_fingerprint="sha256:" + "1" * 64),
            cv.IdentityMismatchError,
            "not one matrix",
        ),
        (
            "RNA/counts",
            lambda a: a.pop("content_fingerprint"),
            cv.IncompleteStoreError,
            "never finished",
        ),
        (
            "RNA/counts",
            lambda a: a.update(content_fingerprint="abc"),
            cv.RecordShapeError,
            "not a fingerprint",
        ),
        (
            "RNA",
            lambda a: a.update(**{"cytearc:pending_assay": "x"}),
            cv.UnsupportedSourceError,
            "pending",
        ),
        ("", lambda a: a.update(assayTypes=["RNA"]), ValueError, "not a mapping"),
        ("", lambda a: a.update(assayTypes={"RNA": "rna"}), ValueError, "not a preset"),
    ],
)
def test_tampered_records_fail_closed(store_path: Path, node, change, error, message) -> None:
    edit_attrs(store_path, node, change)
    with pytest.raises(error, match=message) as info:
        cv.open_store(store_path)
    assert "repack --data-only" in str(info.value) or error in (
        cv.UnsupportedSourceError,
        ValueError,
    )


def test_countsT_shape_changed(store_path: Path) -> None:
    recreate_counts_t(store_path, (5, 5))
    with pytest.raises(cv.RecordShapeError, match="shape"):
        cv.open_store(store_path)


def test_countsT_unsharded(store_path: Path) -> None:
    root = zarr.open_group(store_path, mode="r")
    recreate_counts_t(store_path, root["RNA/countsT"].shape, sharded=False)
    with pytest.raises(cv.RecordShapeError, match="shards"):
        cv.open_store(store_path)


def test_countsT_missing(store_path: Path) -> None:
    del zarr.open_group(store_path, mode="a")["RNA/countsT"]
    with pytest.raises(cv.IncompleteStoreError, match="needs a complete sharded Zarr v3 countsT"):
        cv.open_store(store_path)


def test_summaries_missing(store_path: Path) -> None:
    del zarr.open_group(store_path, mode="a")["RNA/countSummaries"]
    with pytest.raises(cv.IncompleteStoreError, match="countSummaries"):
        cv.open_store(store_path)


def test_summary_array_of_wrong_length(store_path: Path) -> None:
    group = zarr.open_group(store_path, mode="a")["RNA/countSummaries"]
    del group["rowSums"]
    group.create_array("rowSums", shape=(3,), dtype="float64")
    with pytest.raises(cv.RecordShapeError, match="rowSums"):
        cv.open_store(store_path)


def test_cell_ids_of_wrong_length(store_path: Path) -> None:
    group = zarr.open_group(store_path, mode="a")["cellData"]
    del group["ids"]
    group.create_array("ids", shape=(3,), dtype="<U4")
    with pytest.raises(cv.RecordShapeError, match="ids has 3 entries"):
        cv.open_store(store_path)


def test_retired_state_group(store_path: Path) -> None:
    zarr.open_group(store_path, mode="a")["RNA"].create_group("state")
    with pytest.raises(cv.UnsupportedSourceError, match=r"retired RNA/state.*omits it"):
        cv.open_store(store_path)


def test_zarr_v2_store(tmp_path: Path) -> None:
    root = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    root.create_group("RNA").attrs["is_assay"] = True
    with pytest.raises(cv.RecordShapeError, match=r"Zarr v2.*repack --data-only"):
        cv.open_store(tmp_path / "v2.zarr")


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no Zarr group"):
        cv.open_store(tmp_path)


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        cv.open_store("x", mode="w")  # type: ignore[arg-type]


def test_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="no backend opens"):
        cv.open_store("ftp://host/x.zarr")


@pytest.mark.parametrize("attributes", [[1, 2], "RNA", 7])
def test_a_root_whose_attributes_are_not_an_object_is_refused_naming_it(
    store_path: Path, tmp_path: Path, attributes: object
) -> None:
    """A damaged root document (its attributes a list, a string, a number) is a
    record error naming the document and the remedy, for the store itself and as
    a composite's source; it was an AttributeError ("'list' object has no
    attribute 'get'") from whatever read the root's records first."""
    cv.create_composite(tmp_path / "atlas.zarr", {"s": store_path}).close()
    document = json.loads((store_path / "zarr.json").read_text())
    document["attributes"] = attributes
    (store_path / "zarr.json").write_text(json.dumps(document))
    message = r"attributes of its root document \('zarr.json'\) are not a JSON object"
    with pytest.raises(cv.RecordShapeError, match=message):
        cv.open_store(store_path)
    with pytest.raises(cv.RecordShapeError, match=rf"s.zarr: the {message}.*restore it"):
        cv.open_store(tmp_path / "atlas.zarr")
