"""Shard tables: a deleted, swapped, resized or re-encoded shard is refused, never read.

Checksums inside a shard catch flipped bytes, but a shard that is missing
(read as zeros by zarr), moved to another key, or replaced by a well-formed
shard encoded anew is valid on its own. The writer records each count
array's shards (stored, size, index crc32c) in ``cytearc:shardTable``;
``open_store`` compares the files with it, and the gather reader compares
each index it reads (``cytearc_vfs.format.shard_tables``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from s3_server import S3Server
from zarr.storage import LocalStore, MemoryStore

import cytearc_vfs as cv
from cytearc_vfs.format.object_keys import object_key
from cytearc_vfs.format.shard_tables import (
    SHARD_TABLE_ATTR,
    ShardTable,
    check_stored_shards,
    scan_shards,
)
from cytearc_vfs.inspection.deep_verify import deep_verify

LAYOUT = cv.LayoutPolicy(16 << 10, 2 << 10)  # many small shards


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    base = tmp_path_factory.mktemp("shard-tables")
    counts = realistic_counts(2000, 64, density=0.15, seed=5, dtype="int32")
    cv.write_counts(base / "s.zarr", counts, layout=LAYOUT)
    return base / "s.zarr", counts.toarray()


def _copy(written: tuple[Path, np.ndarray], tmp_path: Path) -> Path:
    root = tmp_path / "copy.zarr"
    shutil.copytree(written[0], root)
    return root


def _shard(root: Path, array: str, n: int) -> Path:
    return root / "RNA" / array / "c" / str(n) / "0"


def _table(root: Path, array: str) -> ShardTable:
    attrs = json.loads((root / "RNA" / array / "zarr.json").read_text())["attributes"]
    shards = len(list((root / "RNA" / array / "c").iterdir()))
    return ShardTable.from_json(attrs[SHARD_TABLE_ATTR], shards=shards, where=array)


def test_the_writer_records_every_shard(written: tuple[Path, np.ndarray]) -> None:
    root, _ = written
    for array in ("counts", "countsT"):
        table = _table(root, array)
        assert table.stored.all() and len(table.stored) > 4
        found = scan_shards(LocalStore(root), f"RNA/{array}", len(table.stored))
        assert np.array_equal(found.sizes, table.sizes)
        assert np.array_equal(found.crc32c, table.crc32c)
        sizes = [_shard(root, array, n).stat().st_size for n in range(len(table.stored))]
        assert table.sizes.tolist() == sizes


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda root: _shard(root, "counts", 2).unlink(),
            r"'RNA/counts/c/2/0' was written .* missing",
        ),
        (lambda root: _shard(root, "countsT", 0).unlink(), r"'RNA/countsT/c/0/0' was written"),
        (
            lambda root: _swap(_shard(root, "counts", 1), _shard(root, "counts", 3)),
            r"RNA/counts/c/1/0",
        ),
        (
            lambda root: _shard(root, "counts", 0).write_bytes(
                _shard(root, "counts", 0).read_bytes()[:-10]
            ),
            r"'RNA/counts/c/0/0' holds \d+ bytes, \d+ were written",
        ),
        (lambda root: _extra_shard(root), r"shard .*never written|not one of the"),
        # names that int() reads as a shard number but are not a chunk key's
        (lambda root: _extra_shard(root, "01"), r"c/01 is not one of the"),
        (lambda root: _extra_shard(root, "\u00b2"), "c/\u00b2 is not one of the"),
    ],
    ids=["deleted counts", "deleted countsT", "swapped", "truncated", "extra", "zero", "sup"],
)
def test_open_store_refuses_shards_that_are_not_the_written_ones(
    written: tuple[Path, np.ndarray], tmp_path: Path, damage, message: str
) -> None:
    root = _copy(written, tmp_path)
    damage(root)
    with pytest.raises(cv.IdentityMismatchError, match=message) as caught:
        cv.open_store(root)
    assert "restore the store from a copy or re-import" in str(caught.value)


def _swap(a: Path, b: Path) -> None:
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


def _extra_shard(root: Path, name: str | None = None) -> None:
    last = max(int(p.name) for p in (root / "RNA" / "counts" / "c").iterdir())
    target = _shard(root, "counts", last + 1)
    if name is not None:
        target = target.parent.with_name(name) / target.name
    target.parent.mkdir()
    shutil.copy(_shard(root, "counts", 0), target)


def test_a_shard_re_encoded_through_zarr_is_refused(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root = _copy(written, tmp_path)
    array = zarr.open_array(root, path="RNA/countsT", mode="r+")
    values = np.asarray(array[:2])
    values[0, :100] = np.arange(100) * 7919 % 1000  # a well-formed shard, valid checksums
    array[:2] = values
    with pytest.raises(cv.IdentityMismatchError, match=r"RNA/countsT/c/0/0"):
        cv.open_store(root)


def test_an_edit_of_equal_length_is_left_to_deep_verify(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """The boundary of a cheap check: +1 on one value, re-encoded through zarr,
    can compress to chunks of the same lengths, so the shard's index, size and
    checksum stay the same. Only reading every value sees it: deep verify."""
    root = _copy(written, tmp_path)
    array = zarr.open_array(root, path="RNA/countsT", mode="r+")
    values = np.asarray(array[:2])
    values[0, int(np.argmax(values[0]))] += 1
    array[:2] = values
    table = _table(root, "countsT")
    found = scan_shards(LocalStore(root), "RNA/countsT", len(table.stored))
    if not np.array_equal(found.crc32c, table.crc32c):
        pytest.skip("this edit changed a chunk's length; the open check refuses it")
    reports = deep_verify(cv.open_store(root), where=str(root))
    assert any("countsT" in problem for report in reports for problem in report.problems)


def test_the_reader_of_a_composite_refuses_a_swapped_source_shard(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """Composite opens stay cheap (no per-shard reads): the gather reader checks
    each shard index it reads, for its own reads and for plain zarr's."""
    root = _copy(written, tmp_path)
    original = written[1]
    comp = cv.create_composite(tmp_path / "c.zarr", {"a": root})
    np.testing.assert_array_equal(comp.reader().read(), original)
    _swap(_shard(root, "counts", 1), _shard(root, "counts", 2))
    _swap(_shard(root, "countsT", 1), _shard(root, "countsT", 2))
    reopened = cv.open_store(tmp_path / "c.zarr")
    with pytest.raises(cv.IdentityMismatchError, match=r"RNA/counts(T)?/c/[12]/0"):
        cv.VirtualArrayReader(reopened).read()
    with pytest.raises(cv.IdentityMismatchError):
        zarr.open_array(reopened, path="RNA/counts", mode="r")[:]


def test_stores_without_a_table_still_open_and_read(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root = _copy(written, tmp_path)
    for array in ("counts", "countsT"):
        document = root / "RNA" / array / "zarr.json"
        content = json.loads(document.read_text())
        del content["attributes"][SHARD_TABLE_ATTR]
        document.write_text(json.dumps(content))
    store = cv.open_store(root)
    np.testing.assert_array_equal(cv.VirtualArrayReader(store).read(), written[1])


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.update(version=2),
        lambda t: t.update(shards=t["shards"] + 1),
        lambda t: t.update(crc32c="not base64!"),
        lambda t: t.update(sizes=t["crc32c"]),
        lambda t: t.pop("stored"),
        lambda t: t.update(extra=1),
    ],
    ids=["version", "shards", "crc32c", "sizes", "missing field", "unknown field"],
)
def test_a_malformed_table_is_a_record_error(
    written: tuple[Path, np.ndarray], tmp_path: Path, change
) -> None:
    root = _copy(written, tmp_path)
    document = root / "RNA" / "counts" / "zarr.json"
    content = json.loads(document.read_text())
    change(content["attributes"][SHARD_TABLE_ATTR])
    document.write_text(json.dumps(content))
    with pytest.raises(cv.RecordShapeError, match=SHARD_TABLE_ATTR) as raised:
        cv.open_store(root)
    # the store is named once and the remedy given once, the data-only rewrite
    # included (it reads a store whose table does not parse)
    message = str(raised.value)
    assert message.count(str(root)) == 1, message
    assert message.count("re-import the dataset") == 1, message
    assert "repack --data-only" in message


def test_any_store_is_checked_through_the_store_api(written: tuple[Path, np.ndarray]) -> None:
    """Non-local stores are scanned with list, getsize and suffix reads."""
    root, _ = written
    memory = MemoryStore()
    for path in root.rglob("*"):
        if path.is_file():
            key = path.relative_to(root).as_posix()
            memory._store_dict[key] = memory_buffer(path.read_bytes())
    table = _table(root, "counts")
    check_stored_shards(memory, "RNA/counts", table, where="memory")
    del memory._store_dict["RNA/counts/c/3/0"]
    with pytest.raises(cv.IdentityMismatchError, match="'RNA/counts/c/3/0' was written"):
        check_stored_shards(memory, "RNA/counts", table, where="memory")


def memory_buffer(data: bytes):
    from zarr.core.buffer import default_buffer_prototype

    return default_buffer_prototype().buffer.from_bytes(data)


def test_repack_writes_a_table_for_its_new_shards(tmp_path: Path) -> None:
    matrix = realistic_counts(4000, 300, density=0.05, seed=7)
    cv.write_counts(tmp_path / "src.zarr", matrix, layout=cv.LayoutPolicy(1 << 20, 64 << 10))
    before = _table(tmp_path / "src.zarr", "counts")
    out = cv.repack(tmp_path / "src.zarr", tmp_path / "out.zarr", mem_budget="1M")
    after = _table(tmp_path / "out.zarr", "counts")
    assert len(after.stored) > len(before.stored)  # re-laid-out: new shards, new table
    assert after.stored.all()
    np.testing.assert_array_equal(cv.VirtualArrayReader(out).read(), matrix.toarray())
    _shard(tmp_path / "out.zarr", "counts", 0).unlink()
    with pytest.raises(cv.IdentityMismatchError):
        cv.open_store(tmp_path / "out.zarr")


def test_repack_refuses_a_source_with_damaged_shards(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root = _copy(written, tmp_path)
    _shard(root, "counts", 1).unlink()
    for data_only in (False, True):
        with pytest.raises(cv.IdentityMismatchError, match="was written"):
            cv.repack(root, tmp_path / f"out-{data_only}.zarr", data_only=data_only)
        assert not (tmp_path / f"out-{data_only}.zarr").exists()


def test_a_remote_store_is_checked_by_one_listing(s3_server: S3Server) -> None:
    """An object store's listing carries the sizes: a deleted or resized shard is
    refused on open without a request per shard; a swapped one of equal size is
    refused by the gather reader on the first read of its index."""
    import obstore

    counts = realistic_counts(2000, 64, density=0.15, seed=5, dtype="int32")
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    url = f"s3://{bucket}/s.zarr"
    cv.write_counts(url, counts, layout=LAYOUT, storage_options=options)
    store = cv.open_store(url, storage_options=options)
    raw = store.store  # the obstore client under zarr's ObjectStore (shared by the bucket)
    key = object_key(store, "RNA/counts/c/2/0")
    first, other = (
        bytes(obstore.get(raw, key).bytes()),
        bytes(obstore.get(raw, object_key(store, "RNA/counts/c/3/0")).bytes()),
    )
    obstore.delete(raw, key)
    with pytest.raises(cv.IdentityMismatchError, match="'RNA/counts/c/2/0' was written"):
        cv.open_store(url, storage_options=options)
    # equal size, not the written shard: refused by the reader on the first read of it
    obstore.put(raw, key, other[: len(first)].ljust(len(first), b"\0"))
    reopened = cv.open_store(url, storage_options=options)
    rows = zarr.open_array(reopened, path="RNA/counts", mode="r").shards[0]
    with pytest.raises((cv.IdentityMismatchError, cv.RecordShapeError), match="RNA/counts/c/2/0"):
        cv.VirtualArrayReader(reopened).read(cells=np.arange(2 * rows, 3 * rows))


def test_a_mount_reader_refuses_a_source_whose_shards_changed(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """A mount's counts are read through the gather reader, which compares each
    source shard index it reads: the mount's open stays a metadata read."""
    root = _copy(written, tmp_path)
    cv.mount_datastore(root, tmp_path / "m.zarr")
    np.testing.assert_array_equal(cv.VirtualArrayReader(tmp_path / "m.zarr").read(), written[1])
    for array in ("counts", "countsT"):
        _swap(_shard(root, array, 1), _shard(root, array, 2))
    with pytest.raises(cv.IdentityMismatchError, match=r"RNA/counts(T)?/c/[12]/0"):
        cv.VirtualArrayReader(tmp_path / "m.zarr").read()
