"""Identity everywhere it matters (issue 12, items 4 and 5).

Each defect of the adversarial review is reproduced on real stores (temporary
directories, and a real S3 API server on loopback) and must now be refused:
tables and records a composite or mount depends on are checked at open, and
remote source objects are pinned for the life of an open store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from store_copies import copy_stores

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import DEFAULT_TIMEOUT, TIMEOUT_ENV, timeouts

SMALL = cv.LayoutPolicy(64 * 1024, 4096)


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a zarr.json document on disk, as an outside tool would."""
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stores below, built once and never opened after: each test gets a copy."""
    root = tmp_path_factory.mktemp("pristine")
    made = {}
    for index, name in enumerate(("a", "b")):
        counts = realistic_counts(200 + 50 * index, 60, seed=index, dtype="int64")
        cells = pd.DataFrame(index=[f"{name}-cell{i}" for i in range(counts.shape[0])])
        features = pd.DataFrame(index=[f"gene{i}" for i in range(counts.shape[1])])
        made[name] = root / f"{name}.zarr"
        cv.write_counts(made[name], counts, cells=cells, features=features, layout=SMALL)
    cv.create_composite(root / "comp.zarr", made).close()
    cv.mount_datastore(made["a"], root / "mount.zarr").close()
    return root


@pytest.fixture
def copied(pristine: Path, tmp_path: Path) -> Path:
    """A copy of the stores of ``pristine`` in ``tmp_path``, the records naming the
    copied sources: tests edit and rewrite them (a new build was ~2 s a test)."""
    return copy_stores(pristine, tmp_path)


@pytest.fixture
def sources(copied: Path) -> dict[str, Path]:
    """Two small ordinary stores with distinct cell ids."""
    return {name: copied / f"{name}.zarr" for name in ("a", "b")}


@pytest.fixture
def composite(copied: Path) -> Path:
    """A composite of both sources."""
    return copied / "comp.zarr"


@pytest.fixture
def mount(copied: Path) -> Path:
    """A mounted target of source ``a``."""
    return copied / "mount.zarr"


# ------------------------------------------------------ composite records


def test_a_composite_records_its_ids_fingerprints(composite: Path) -> None:
    store = cv.open_store(composite)
    assert isinstance(store, cv.CompositeStore)
    # beside the record (whose five fields the spec fixes), in the protected _composite group
    assert store.record.ids is None and "ids" not in store.record.to_json()
    root = zarr.open_group(store, mode="r")
    ids = root["_composite"].attrs["cytearc:ids"]
    from cytearc_vfs.format.fingerprints import ids_fingerprint

    assert ids["cells"] == ids_fingerprint(np.asarray(root["cellData/ids"][:]))
    assert ids["features"] == ids_fingerprint(np.asarray(root["RNA/featureData/ids"][:]))


@pytest.mark.parametrize("table", ["cellData", "RNA/featureData"])
def test_ids_rewritten_through_the_store_are_refused_at_open(composite: Path, table: str) -> None:
    writable = cv.open_store(composite, mode="r+")
    ids = zarr.open_array(writable, path=f"{table}/ids", mode="r+")
    values = np.asarray(ids[:])
    ids[:] = values[::-1]  # same ids, other order: rows would be read under wrong names
    with pytest.raises(cv.IdentityMismatchError, match=rf"{table}/ids.*composite's ids record"):
        cv.open_store(composite)
    with pytest.raises(cv.IdentityMismatchError):
        deep_verify(open_location(composite, read_only=True), where=str(composite))


def test_ids_and_their_attribute_rewritten_together_are_refused(composite: Path) -> None:
    writable = cv.open_store(composite, mode="r+")
    ids = zarr.open_array(writable, path="cellData/ids", mode="r+")
    from cytearc_vfs.format.fingerprints import ids_fingerprint

    fresh = np.asarray([f"x{i}" for i in range(ids.shape[0])])
    ids[:] = fresh
    ids.attrs["fingerprint"] = ids_fingerprint(fresh)
    with pytest.raises(cv.IdentityMismatchError, match="composite's ids record"):
        cv.open_store(composite)


def test_a_composite_written_before_ids_were_recorded_still_opens(composite: Path) -> None:
    edit_json(composite / "_composite" / "zarr.json", lambda d: d["attributes"].pop("cytearc:ids"))
    store = cv.open_store(composite)
    assert isinstance(store, cv.CompositeStore) and store.record.ids is None
    # its ids arrays' own fingerprint attributes still guard them
    writable = cv.open_store(composite, mode="r+")
    ids = zarr.open_array(writable, path="cellData/ids", mode="r+")
    ids[:] = np.asarray(ids[:])[::-1]
    with pytest.raises(cv.IdentityMismatchError, match="fingerprint attribute"):
        cv.open_store(composite)


def test_an_unknown_field_in_the_ids_record_is_refused(composite: Path) -> None:
    edit_json(
        composite / "_composite" / "zarr.json",
        lambda d: d["attributes"]["cytearc:ids"].update(x=1),
    )
    with pytest.raises(cv.RecordShapeError, match="unknown field"):
        cv.open_store(composite)


def test_a_record_shape_that_drops_rows_is_refused(composite: Path) -> None:
    def drop_rows(document: dict[str, Any]) -> None:
        arrays = document["attributes"]["composite"]["arrays"]
        arrays["RNA/counts"]["shape"][0] -= 100
        arrays["RNA/countsT"]["shape"][1] -= 100

    edit_json(composite / "zarr.json", drop_rows)
    with pytest.raises(cv.RecordShapeError, match=r"RNA/counts.*shape \[350, 60\].*\[450, 60\]"):
        cv.open_store(composite)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: a["RNA/countsT"].update(fill_value=1), "fill_value 1"),
        (lambda a: a["RNA/countsT"].update(data_type="float64"), "data types"),
        (lambda a: a.pop("RNA/countsT"), "needs countsT"),
        (lambda a: a.update({"RNA/other": a["RNA/counts"]}), "arrays are"),
        (
            lambda a: a["RNA/counts"]["chunk_grid"]["configuration"].update(chunk_shape=[8, 8]),
            "span every column",
        ),
    ],
)
def test_virtual_array_documents_are_checked(
    composite: Path, change: Callable[[dict[str, Any]], None], match: str
) -> None:
    edit_json(composite / "zarr.json", lambda d: change(d["attributes"]["composite"]["arrays"]))
    with pytest.raises(cv.RecordShapeError, match=match):
        cv.open_store(composite)


@pytest.fixture(scope="module")
def pristine_uint16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uint16 store a.zarr and its composite comp.zarr, built once and never opened after."""
    root = tmp_path_factory.mktemp("uint16")
    cv.write_counts(root / "a.zarr", np.array([[1, 300]], dtype=np.uint16))
    cv.create_composite(root / "comp.zarr", {"a": root / "a.zarr"}).close()
    return root


@pytest.mark.parametrize(
    ("codec", "match"),
    [
        ({"endian": "big"}, r"configuration \{'endian': 'big'\}.*served little-endian"),
        (None, "configuration None"),
    ],
)
def test_a_multi_byte_virtual_array_must_be_little_endian(
    pristine_uint16: Path, tmp_path: Path, codec: dict[str, str] | None, match: str
) -> None:
    # computed chunks are little-endian: with endian big plain zarr read a uint16 1 as 256
    copy_stores(pristine_uint16, tmp_path)  # each case edits its own copy
    destination = tmp_path / "comp.zarr"
    bytes_codec = {"name": "bytes"} if codec is None else {"name": "bytes", "configuration": codec}

    def reorder(document: dict[str, Any]) -> None:
        for array in document["attributes"]["composite"]["arrays"].values():
            array["codecs"] = [bytes_codec]

    edit_json(destination / "zarr.json", reorder)
    with pytest.raises(cv.RecordShapeError, match=match):
        cv.open_store(destination)


def test_a_one_byte_virtual_array_needs_no_byte_order(composite: Path) -> None:
    document = json.loads((composite / "zarr.json").read_text())
    arrays = document["attributes"]["composite"]["arrays"]
    assert arrays["RNA/counts"]["data_type"] == "uint8"
    assert arrays["RNA/counts"]["codecs"] == [{"name": "bytes"}]  # as creation writes it
    cv.open_store(composite).close()


@pytest.fixture(scope="module")
def pristine_mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uint8 and a uint16 store and their composite comp.zarr, built once, never opened after."""
    root = tmp_path_factory.mktemp("mixed")
    cv.write_counts(root / "a.zarr", np.array([[1, 2]], dtype=np.uint8), features=["x", "y"])
    cv.write_counts(root / "b.zarr", np.array([[300, 1000]], dtype=np.uint16), features=["y", "z"])
    sources = {"a": root / "a.zarr", "b": root / "b.zarr"}
    cv.create_composite(root / "comp.zarr", sources).close()
    return root


@pytest.mark.parametrize("data_type", ["uint8", "int8", "float32", "int64"])
def test_a_record_data_type_other_than_the_sources_common_type_is_refused(
    pristine_mixed: Path, tmp_path: Path, data_type: str
) -> None:
    # both documents edited together pass the one-dtype check; reading a uint16
    # source as uint8 returned 300 as 44 and 1000 as 232
    copy_stores(pristine_mixed, tmp_path)  # each case edits its own copy
    destination = tmp_path / "comp.zarr"

    def retype(document: dict[str, Any]) -> None:
        for array in document["attributes"]["composite"]["arrays"].values():
            array["data_type"] = data_type

    edit_json(destination / "zarr.json", retype)
    with pytest.raises(
        cv.RecordShapeError,
        match=rf"'RNA/counts' data type '{data_type}'.*\['uint16', 'uint8'\].*common type is "
        r"uint16.*recreate the composite",
    ):
        cv.open_store(destination)


@pytest.mark.parametrize("kind", ["composite", "mount"])
def test_declarations_of_composites_and_mounts_are_checked(
    request: pytest.FixtureRequest, kind: str
) -> None:
    location: Path = request.getfixturevalue(kind)
    edit_json(location / "zarr.json", lambda d: d["attributes"].update(defaultAssay="ATAC"))
    with pytest.raises(cv.RecordShapeError, match="defaultAssay 'ATAC'"):
        cv.open_store(location)
    edit_json(location / "zarr.json", lambda d: d["attributes"].update(defaultAssay="RNA"))
    edit_json(location / "RNA" / "zarr.json", lambda d: d["attributes"].pop("is_assay"))
    with pytest.raises(cv.IncompleteStoreError, match="is_assay") as caught:
        cv.open_store(location)
    if kind == "mount":
        # not "mount the source again": mount_datastore never replaces a complete mount
        assert "mount the source again into a new destination" in str(caught.value)


# ----------------------------------------------------------------- mounts


def test_mount_target_ids_rewritten_are_refused(mount: Path) -> None:
    # an outside edit of the target: the mount itself refuses the write
    # (test_mount_semantics.py)
    ids = zarr.open_array(mount, path="cellData/ids", mode="r+")
    ids[:] = np.asarray(ids[:])[::-1]
    with pytest.raises(cv.IdentityMismatchError, match=r"cellData/ids.*mounted source"):
        cv.open_store(mount)


def test_mount_target_feature_ids_rewritten_are_refused(mount: Path) -> None:
    ids = zarr.open_array(mount, path="RNA/featureData/ids", mode="r+")
    values = np.asarray(ids[:])
    values[0] = "renamed"
    ids[:] = values
    with pytest.raises(cv.IdentityMismatchError, match="RNA/featureData/ids"):
        cv.open_store(mount)


@pytest.mark.parametrize("name", ["counts", "countsT", "countSummaries"])
def test_a_fake_counts_array_in_a_mount_target_is_refused(mount: Path, name: str) -> None:
    target = zarr.open_group(mount, mode="r+")
    target.create_array(f"RNA/{name}", shape=(250, 60), dtype="int64", fill_value=0)
    with pytest.raises(cv.RecordShapeError, match=rf"RNA/{name}.*source's counts"):
        cv.open_store(mount)


# -------------------------------------------------------- ordinary stores


@pytest.mark.parametrize("array", ["counts", "countsT"])
def test_a_nonzero_fill_value_of_counts_is_refused(sources: dict[str, Path], array: str) -> None:
    edit_json(sources["a"] / "RNA" / array / "zarr.json", lambda d: d.update(fill_value=7))
    with pytest.raises(cv.RecordShapeError, match=rf"{array} has fill_value 7"):
        cv.open_store(sources["a"])


def test_an_unknown_default_assay_is_refused(sources: dict[str, Path]) -> None:
    edit_json(sources["a"] / "zarr.json", lambda d: d["attributes"].update(defaultAssay="ADT"))
    with pytest.raises(cv.RecordShapeError, match=r"defaultAssay .ADT.*assays: \[.RNA.\]"):
        cv.open_store(sources["a"])


def test_a_store_whose_only_assay_lost_is_assay_is_refused(sources: dict[str, Path]) -> None:
    edit_json(sources["a"] / "RNA" / "zarr.json", lambda d: d["attributes"].pop("is_assay"))
    with pytest.raises(cv.IncompleteStoreError, match=r"assayTypes of ./. declares.*RNA"):
        cv.open_store(sources["a"])


def test_a_store_with_no_assay_and_no_declarations_is_refused(sources: dict[str, Path]) -> None:
    edit_json(sources["a"] / "RNA" / "zarr.json", lambda d: d["attributes"].pop("is_assay"))
    edit_json(sources["a"] / "zarr.json", lambda d: d.update(attributes={}))
    with pytest.raises(cv.IncompleteStoreError, match="holds no assay"):
        cv.open_store(sources["a"])


def test_intact_stores_still_open_and_read(
    sources: dict[str, Path], composite: Path, mount: Path
) -> None:
    comp = cv.open_store(composite)
    reader = cv.VirtualArrayReader(comp)
    assert reader.shape == (450, 60)
    expected = np.asarray(
        zarr.open_array(cv.open_store(sources["b"]), path="RNA/counts", mode="r")[:]
    )
    np.testing.assert_array_equal(reader.read(cells=slice(200, 450)), expected)
    assert isinstance(cv.open_store(mount), cv.MountStore)
    assert all(report.ok for report in deep_verify(comp.backing, where=str(composite)))


# --------------------------------------------------- remote sources, pinned

REMOTE_CELLS = 3000
ROWS = np.arange(0, REMOTE_CELLS, 3)  # a 1,000-cell read


@dataclass
class RemoteComposite:
    """A local composite over one S3 source ``b``, read through a counting proxy."""

    location: Path
    bucket: str
    url: str
    options: dict[str, Any]
    expected: np.ndarray
    proxy: LoopbackProxy
    server: S3Server

    def open(self) -> cv.CompositeStore:
        store = cv.open_store(self.location, source_storage_options={"b": self.options})
        assert isinstance(store, cv.CompositeStore)
        return store

    def open_reader(
        self, monkeypatch: pytest.MonkeyPatch, cache: str
    ) -> tuple[cv.CompositeStore, cv.VirtualArrayReader]:
        """The composite opened with a cache budget of ``cache``, and a reader of it."""
        monkeypatch.setenv(CACHE_ENV, cache)
        store = self.open()
        return store, cv.VirtualArrayReader(store)

    def bucket_store(self) -> Any:
        from obstore.store import from_url

        options = dict(self.server.storage_options())
        return from_url(f"s3://{self.bucket}", **options)

    def chunk_keys(self, prefix: str) -> list[str]:
        import obstore

        listed = obstore.list(self.bucket_store(), prefix=prefix).collect()
        return sorted(item["path"] for item in listed if "/c/" in item["path"])

    def replace_shards(self) -> int:
        """Overwrite b's shard objects with those of another store of the same shape."""
        import obstore

        bucket = self.bucket_store()
        replaced = 0
        for key in self.chunk_keys("other.zarr/RNA/"):
            target = key.replace("other.zarr/", "b.zarr/", 1)
            obstore.put(bucket, target, obstore.get(bucket, key).bytes())
            replaced += 1
        return replaced

    def delete_source(self) -> None:
        import obstore

        bucket = self.bucket_store()
        listed = obstore.list(bucket, prefix="b.zarr/").collect()
        obstore.delete(bucket, [item["path"] for item in listed])


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[LoopbackProxy]:
    """A counting proxy in front of the session's S3 server."""
    running = LoopbackProxy(s3_server.endpoint)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def remote(
    tmp_path: Path,
    s3_server: S3Server,
    proxy: LoopbackProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> RemoteComposite:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    b = realistic_counts(REMOTE_CELLS, 80, density=0.2, seed=21)
    other = realistic_counts(REMOTE_CELLS, 80, density=0.2, seed=22)
    for name, counts in (("b", b), ("other", other)):
        cv.write_counts(
            f"s3://{bucket}/{name}.zarr",
            counts,
            features=[f"g{i}" for i in range(80)],
            layout=SMALL,
            storage_options=direct,
        )
    options = {**direct, "endpoint": proxy.endpoint}
    url = f"s3://{bucket}/b.zarr"
    location = tmp_path / "remote-comp.zarr"
    cv.create_composite(location, {"b": url}, source_storage_options={"b": options}).close()
    return RemoteComposite(location, bucket, url, options, b.toarray(), proxy, s3_server)


@pytest.mark.remote
@pytest.mark.parametrize("cache", ["0", "64M"])
def test_a_replaced_source_object_is_refused_not_read(
    remote: RemoteComposite, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    store, reader = remote.open_reader(monkeypatch, cache)
    # a few cells first: pins the shards they touch (and caches their indexes)
    np.testing.assert_array_equal(reader.read(cells=ROWS[:5]), remote.expected[ROWS[:5]])
    assert remote.replace_shards() > 0
    with pytest.raises(
        cv.IdentityMismatchError,
        match=r"source 'b' at s3://.*/b\.zarr: RNA/counts(T)?/c/\d+/0 changed while this store "
        r"was open.*recreate the composite",
    ):
        reader.read(cells=ROWS)
    with pytest.raises(cv.IdentityMismatchError):  # a new reader of the same open store too
        cv.VirtualArrayReader(store).read(cells=ROWS)
    store.close()


@pytest.mark.remote
@pytest.mark.parametrize("cache", ["0", "64M"])
@pytest.mark.parametrize("read_first", [True, False])
def test_a_deleted_source_is_gone_not_zeros(
    remote: RemoteComposite, monkeypatch: pytest.MonkeyPatch, cache: str, read_first: bool
) -> None:
    store, reader = remote.open_reader(monkeypatch, cache)
    if read_first:
        reader.read(cells=ROWS[:5])
    remote.delete_source()
    with pytest.raises(
        cv.SourceGoneError, match=r"source 'b' at s3://.*/b\.zarr: .* no longer exists"
    ) as info:
        reader.read(cells=ROWS)
    assert isinstance(info.value, FileNotFoundError)
    store.close()


@pytest.mark.remote
def test_pins_ride_on_the_reads_themselves(
    remote: RemoteComposite, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, reader = remote.open_reader(monkeypatch, "0")
    remote.proxy.take()
    np.testing.assert_array_equal(reader.read(cells=ROWS), remote.expected[ROWS])
    first = remote.proxy.take()
    assert len(first) == reader.stats.requests  # one HTTP request per fetch, no HEAD
    assert {seen.method for seen in first} == {"GET"}
    before = reader.stats.requests
    np.testing.assert_array_equal(reader.read(cells=ROWS), remote.expected[ROWS])
    second = remote.proxy.take()
    assert len(second) == reader.stats.requests - before
    # every later read of a pinned object is conditional
    assert second and all(seen.if_match for seen in second)
    store.close()


@pytest.mark.remote
def test_a_hung_server_is_an_os_error_within_the_timeout(
    remote: RemoteComposite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "1.5")
    store, reader = remote.open_reader(monkeypatch, "0")
    remote.proxy.hang = True
    started = time.monotonic()
    with pytest.raises(
        OSError,
        match=r"source 'b' at s3://.*/b\.zarr: reading RNA/counts(T)?/c/\d+/0 failed "
        r"\(GenericError: .*CYTEARC_SOURCE_TIMEOUT",
    ) as info:
        reader.read(cells=ROWS)
    assert info.value.__cause__ is not None  # chained to the backend's error
    assert time.monotonic() - started < 10
    started = time.monotonic()
    with pytest.raises(OSError, match=r"source 'b' at .* cannot be read"):
        remote.open()
    assert time.monotonic() - started < 10
    store.close()


def test_timeouts_come_from_the_environment() -> None:
    assert timeouts({}) == (DEFAULT_TIMEOUT, 5.0)
    assert timeouts({TIMEOUT_ENV: "120"}) == (120.0, 5.0)
    for bad in ("soon", "0", "-3", "inf"):
        with pytest.raises(ValueError, match=rf"{TIMEOUT_ENV}='{bad}' is not a number of seconds"):
            timeouts({TIMEOUT_ENV: bad})


@pytest.mark.parametrize("through", ["reader", "zarr"])
def test_a_deleted_local_source_is_an_os_error_not_zeros(tmp_path: Path, through: str) -> None:
    # Local sources are not pinned: with the source directory gone, every shard
    # is absent, which once read as "never written", i.e. zeros.
    import shutil

    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(
            tmp_path / f"{name}.zarr",
            realistic_counts(300, 40, seed=seed),
            cells=[f"{name}{i}" for i in range(300)],
        )
    store = cv.create_composite(
        tmp_path / "c.zarr", [str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]
    )
    shutil.rmtree(tmp_path / "b.zarr")
    read: Callable[[], Any] = (
        (lambda: store.reader().read(cells=[0, 450]))
        if through == "reader"
        else (lambda: zarr.open_array(store, path="RNA/counts", mode="r")[:])
    )
    with pytest.raises(FileNotFoundError, match=r"b\.zarr .*deleted or moved while open"):
        read()
    # the live source still reads
    assert store.reader().read(cells=[0, 1]).shape == (2, 40)
