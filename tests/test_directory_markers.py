"""Directory markers of object stores, through ``mount-fs`` and ``serve``.

S3 consoles ("Create folder"), Hadoop's S3A and some sync tools write a
zero-byte object named like a prefix (``store.zarr/RNA/counts/``). obstore
lists it as the key ``RNA/counts`` beside the prefix ``RNA/counts/``, and
finds it (``exists``). The FUSE tree showed such a name as a zero-byte file,
twice in its directory, so the array below it could not be opened through the
mount, though it reads in process; the server's listings showed it as a
key, and its ``GET`` (a ranged read of an empty object, which S3 refuses
with ``416``) was a ``503``. A Zarr key never has keys below it: both show
the directory, and an empty value reads as empty.

The other kind of listed name with nothing below it: an empty directory of a
local store. zarr's deletes leave them (writing the fill value over a chunk
deletes its file, not its directory), and ``LocalStore`` lists them; the tree
listed such a name as a directory and then answered ``ENOENT`` for it (so
``cp -r`` and ``find`` of the mount failed), and the server linked to a
listing it answered ``404``. Both show it as an empty directory now.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import stat
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pytest
import zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
from cytearc_vfs_adapters.serve import StoreServer
from obstore.store import from_url
from test_mount_fs import fuse_works, mount_fs

import cytearc_vfs as cv

__all__ = ["fuse_works"]  # a fixture of test_mount_fs, used here


def _store_with_a_marker(s3_server: Any) -> tuple[str, dict[str, Any], np.ndarray]:
    """An ordinary store on S3 with a directory marker at ``RNA/counts/``."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    counts = realistic_counts(200, 30, seed=41)
    url = f"s3://{bucket}/m.zarr"
    cv.write_counts(url, counts, storage_options=options)
    obstore.put(from_url(f"s3://{bucket}", **options), "m.zarr/RNA/counts/", b"")
    return url, options, counts.toarray()


def test_a_directory_marker_is_a_directory_of_the_tree(s3_server: Any) -> None:
    url, options, _ = _store_with_a_marker(s3_server)
    store = cv.open_store(url, storage_options=options)
    operations = TreeOperations(StoreTree(store))
    try:
        assert stat.S_ISDIR(operations.getattr("/RNA/counts")["st_mode"])
        entries = [e for e in operations.readdir("/RNA", 0) if isinstance(e, tuple)]
        named = [(name, kind) for name, kind, _ in entries if name == "counts"]
        assert named == [("counts", stat.S_IFDIR)]  # once, as a directory
        document = operations.getattr("/RNA/counts/zarr.json")
        assert stat.S_ISREG(document["st_mode"]) and document["st_size"] > 0
    finally:
        store.close()


def test_an_array_under_a_directory_marker_reads_through_the_mount(
    fuse_works: None, s3_server: Any, tmp_path: Path
) -> None:
    url, options, expected = _store_with_a_marker(s3_server)
    (tmp_path / "s3.json").write_text(json.dumps(options))
    with mount_fs(url, tmp_path / "mp", "--storage-options", f"@{tmp_path / 's3.json'}") as mounted:
        counts = mounted.mountpoint / "RNA" / "counts"
        assert (
            counts.is_dir() and sorted(p.name for p in counts.parent.iterdir()).count("counts") == 1
        )
        values = zarr.open_array(counts, mode="r")[:]
        np.testing.assert_array_equal(values, expected.astype(values.dtype))
        code, _, err = mounted.stop()
    assert code == 0, err


def test_the_server_lists_a_directory_marker_as_a_directory(s3_server: Any) -> None:
    url, options, _ = _store_with_a_marker(s3_server)
    bucket = url.removeprefix("s3://").partition("/")[0]
    obstore.put(from_url(f"s3://{bucket}", **options), "m.zarr/empty.bin", b"")
    store = cv.open_store(url, storage_options=options)
    try:
        with StoreServer.start(store) as server:
            index = urllib.request.Request(server.url + "RNA/", headers={"Accept": "text/html"})
            links = re.findall(r'href="([^"]+)"', urllib.request.urlopen(index).read().decode())
            assert "counts/" in links and "counts" not in links
            dav = urllib.request.Request(server.url + "RNA", method="PROPFIND")
            dav.add_header("Depth", "1")
            hrefs = re.findall(
                r"<D:href>([^<]+)</D:href>", urllib.request.urlopen(dav).read().decode()
            )
            assert "/RNA/counts/" in hrefs and "/RNA/counts" not in hrefs
            # an empty value is an empty answer, not the refusal of its first piece's range
            with urllib.request.urlopen(server.url + "empty.bin") as answer:
                assert (answer.status, answer.read()) == (200, b"")
            assert server.stats().statuses == {200: 2, 207: 1}
    finally:
        store.close()


def _store_with_an_empty_directory(root: Path) -> tuple[Path, np.ndarray]:
    """A local CyteArc store holding an array whose chunk directory ``a/c/0`` zarr left empty."""
    where = root / "e.zarr"
    cv.write_counts(where, realistic_counts(20, 8, seed=42))
    array = zarr.create_array(
        where, name="a", shape=(4, 4), chunks=(2, 2), dtype="i4", fill_value=0
    )
    array[:] = np.arange(16).reshape(4, 4) + 1
    array[0:2, :] = 0  # all fill: zarr deletes both chunk files of c/0, not c/0 itself
    assert (where / "a" / "c" / "0").is_dir() and not any((where / "a" / "c" / "0").iterdir())
    return where, array[:]


def test_an_empty_local_directory_is_an_empty_directory_of_the_tree(tmp_path: Path) -> None:
    where, _ = _store_with_an_empty_directory(tmp_path)
    operations = TreeOperations(StoreTree(cv.open_store(where)))
    names = [e[:2] for e in operations.readdir("/a/c", 0) if isinstance(e, tuple)]
    assert ("0", stat.S_IFDIR) in names
    assert stat.S_ISDIR(operations.getattr("/a/c/0")["st_mode"])  # was ENOENT
    assert operations.readdir("/a/c/0", 0) == [".", ".."]
    with pytest.raises(OSError) as absent:
        operations.getattr("/a/c/9")
    assert absent.value.errno == errno.ENOENT


def test_an_empty_local_directory_copies_through_the_mount(
    fuse_works: None, tmp_path: Path
) -> None:
    where, values = _store_with_an_empty_directory(tmp_path)
    with mount_fs(where, tmp_path / "mp") as mounted:
        shutil.copytree(mounted.mountpoint, tmp_path / "copy")  # failed: cannot stat c/0
        code, _, err = mounted.stop()
    assert code == 0, err
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "copy" / "a", mode="r")[:], values)


def test_the_server_lists_an_empty_local_directory_as_empty(tmp_path: Path) -> None:
    where, _ = _store_with_an_empty_directory(tmp_path)

    def answer(path: str, **fields: str) -> tuple[int, bytes]:
        method = fields.pop("method", "GET")
        request = urllib.request.Request(server.url + path, headers=fields, method=method)
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as refused:
            with refused:
                return refused.code, refused.read()

    with StoreServer.start(cv.open_store(where)) as server:
        status, index = answer("a/c/", Accept="text/html")
        assert status == 200 and "0/" in re.findall(r'href="([^"]+)"', index.decode())
        status, listing = answer("a/c/0/", Accept="application/json")
        assert (status, json.loads(listing)["names"]) == (200, [])  # was 404
        assert answer("a/c/0/", method="PROPFIND", Depth="1")[0] == 207
        assert answer("a/c/9/")[0] == 404
        assert answer("a/zarr.json/")[0] == 404  # a key is no directory
