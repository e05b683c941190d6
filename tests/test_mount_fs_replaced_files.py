"""``mount-fs``: a file replaced while a reader has it open is ``EIO``, never mixed bytes.

Each read of a mounted file reads the store's key anew (by path), so a
local file replaced by a rename, or rewritten in place, with as many bytes
between two reads of one open file handed the reader the old file's first
bytes and the new file's last: a value no file ever held, read without an
error (a local directory's open file keeps reading the file it opened). A
mount's target is written by analyses in other processes while it is
mounted, so this is no corner. Now every read of a local file checks the
``stat`` identity (size, ``mtime_ns``, inode, device) the file was opened
with; a file opened after the change reads the new bytes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
from test_mount_fs import fuse_works, mount_fs
from zarr.storage import LocalStore

import cytearc_vfs as cv

__all__ = ["fuse_works"]  # the fixture, imported for the kernel test

MiB = 1 << 20
PIECE = 128 * 1024


def _replace(path: Path, data: bytes) -> None:
    other = path.with_name(path.name + ".new")
    other.write_bytes(data)
    os.replace(other, path)


def _rewrite(path: Path, data: bytes) -> None:
    with path.open("r+b") as rewritten:
        rewritten.write(data)


CHANGES: dict[str, Callable[[Path, bytes], None]] = {
    "replaced by a rename": _replace,
    "rewritten in place": _rewrite,
}


def _store(root: Path) -> tuple[Path, bytes, bytes]:
    """An ordinary store with a 2 MiB file ``blob`` beside its arrays."""
    cv.write_counts(root / "store", realistic_counts(40, 20, seed=1))
    old = np.random.default_rng(1).bytes(2 * MiB)
    new = np.random.default_rng(2).bytes(2 * MiB)
    (root / "store" / "blob").write_bytes(old)
    (root / "store" / "small").write_bytes(b"unchanged")
    return root / "store", old, new


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_file_changed_while_open_is_eio(tmp_path: Path, change: str) -> None:
    root, old, new = _store(tmp_path)
    operations = TreeOperations(StoreTree(LocalStore(root, read_only=True)))
    handle = operations.open_file("/blob", os.O_RDONLY)
    assert operations.read_file("/blob", PIECE, 0, handle) == old[:PIECE]
    CHANGES[change](root / "blob", new)
    with pytest.raises(OSError) as refused:
        operations.read_file("/blob", PIECE, PIECE, handle)
    assert refused.value.errno == errno.EIO
    assert "replaced or rewritten since it was opened" in str(refused.value)
    # every later read of that handle too: it was opened on the old file
    with pytest.raises(OSError):
        operations.read_file("/blob", PIECE, 0, handle)
    operations.release_file("/blob", handle)
    # opened again, the file reads as it is now, whole
    handle = operations.open_file("/blob", os.O_RDONLY)
    pieces = [operations.read_file("/blob", PIECE, at, handle) for at in range(0, 2 * MiB, PIECE)]
    assert b"".join(pieces) == new
    operations.release_file("/blob", handle)
    # other files read on
    small = operations.open_file("/small", os.O_RDONLY)
    assert operations.read_file("/small", PIECE, 0, small) == b"unchanged"


def test_a_file_changed_while_open_through_the_kernel(fuse_works: None, tmp_path: Path) -> None:
    root, old, new = _store(tmp_path)
    with mount_fs(root, tmp_path / "mp") as mounted:
        with (mounted.mountpoint / "blob").open("rb", buffering=0) as reader:
            assert reader.read(4096) == old[:4096]
            _replace(root / "blob", new)
            reader.seek(MiB + 512 * 1024)  # past any read-ahead of the first read
            with pytest.raises(OSError) as refused:
                reader.read(4096)
            assert refused.value.errno == errno.EIO
        assert (mounted.mountpoint / "blob").read_bytes() == new
        code, _, err = mounted.stop()
    assert code == 0, err
    assert "replaced or rewritten since it was opened" in err
