"""``mount-fs``: a name longer than the store's file system allows is ``ENAMETOOLONG``.

The mount says names may be 255 bytes long (``statfs``), but the kernel
hands FUSE longer ones (up to 1024 bytes or more). Looking one up in a local
store made the store's ``stat`` fail with ``ENAMETOOLONG``, which the mount
answered ``EIO`` with a stderr line echoing the whole name, so
``ls``/``find``/zarr-python saw an I/O error where a directory of the store
itself says "File name too long". The HTTP server answers such keys ``404``
(``tests/test_serve.py``).
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
from test_mount_fs import fuse_works, make_composite, make_mount, mount_fs

import cytearc_vfs as cv

__all__ = ["fuse_works"]  # the fixture, imported for the kernel test

LONG_NAMES = ("a" * 256, "RNA/" + "b" * 300 + "/zarr.json", "cellData/" + "c" * 1100)


def _stores(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    cv.write_counts(root / "ordinary.zarr", realistic_counts(40, 20, seed=1))
    mount, _, _ = make_mount(root)
    return {
        "ordinary": root / "ordinary.zarr",
        "composite": make_composite(root, monkeypatch).path,
        "mount": mount,
    }


def test_long_names_are_enametoolong_not_eio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for kind, location in _stores(tmp_path, monkeypatch).items():
        operations = TreeOperations(StoreTree(cv.open_store(location)))
        caplog.clear()
        for name in LONG_NAMES:
            with pytest.raises(OSError) as refused:
                operations.getattr("/" + name)
            assert refused.value.errno == errno.ENAMETOOLONG, (kind, name[:20], refused.value)
            with pytest.raises(OSError) as listed:
                operations.readdir("/" + name, 0)
            assert listed.value.errno == errno.ENAMETOOLONG, (kind, name[:20], listed.value)
        # nothing went wrong that an operator must hear of
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == [], kind
        # a name of exactly 255 bytes is an ordinary absent name
        with pytest.raises(OSError) as absent:
            operations.getattr("/" + "d" * 255)
        assert absent.value.errno == errno.ENOENT


def test_long_names_through_the_kernel(fuse_works: None, tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(40, 20, seed=1))
    with mount_fs(tmp_path / "a.zarr", tmp_path / "mp") as mounted:
        for name in LONG_NAMES:
            with pytest.raises(OSError) as refused:
                os.stat(mounted.mountpoint / name)
            assert refused.value.errno == errno.ENAMETOOLONG, (name[:20], refused.value)
        assert (mounted.mountpoint / "zarr.json").stat().st_size > 0
        code, _, err = mounted.stop()
    assert code == 0, err
    assert "EIO" not in err, err
