"""Directory markers of object stores in the ``mount-fs`` tree.

S3 consoles ("Create folder"), Hadoop's S3A and some sync tools write a
zero-byte object named like a prefix (``store.zarr/RNA/counts/``). obstore
lists it as the key ``RNA/counts`` beside the prefix ``RNA/counts/``, and
finds it (``exists``). The tree showed such a name as a zero-byte file, twice
in its directory, so the array below it could not be opened through the
mount, though it reads in process. A Zarr key never has keys below it: the
tree shows the directory.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
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
