"""A source that is gone or cannot be read is one of the package's own errors.

``except cv.VfsError`` catches every failure this layer names; a composite's
or mount's source that is deleted, moved or unreachable used to surface as a
plain ``OSError`` or ``FileNotFoundError`` (and a source deleted from an
object store, which leaves no directory to miss, as a ``ValueError`` saying
"replaced"). Now: ``cv.SourceGoneError`` (a ``FileNotFoundError``) for a
source or object that is not there, ``cv.SourceUnavailableError`` (an
``OSError``) for one that cannot be reached; both name the source, and the
command line exits 4 with one line.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pytest
from obstore.store import S3Store
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def _two_sources(a: Any, b: Any, **options: Any) -> None:
    cv.write_counts(a, np.ones((20, 10), np.uint32), **options)
    cells = [f"b{i}" for i in range(30)]
    cv.write_counts(b, np.full((30, 10), 2, np.uint32), cells=cells, **options)


def _gone(error: BaseException, source: str) -> None:
    assert isinstance(error, cv.SourceGoneError), repr(error)
    assert isinstance(error, (cv.SourceUnavailableError, cv.VfsError, FileNotFoundError))
    assert source in str(error), str(error)


def _delete(s3_server: S3Server, bucket: str, prefix: str, *, chunks_only: bool = False) -> None:
    raw = S3Store(bucket, **s3_server.storage_options())
    for batch in obstore.list(raw, prefix=prefix):
        paths = [item["path"] for item in batch]
        if chunks_only:
            paths = [path for path in paths if "/c/" in path]
        if paths:
            obstore.delete(raw, paths)


def _remote_composite(s3_server: S3Server, tmp_path: Path) -> tuple[str, Path]:
    """A bucket holding sources ``a.zarr`` and ``b.zarr``, and a local composite of them."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    a, b = f"s3://{bucket}/a.zarr", f"s3://{bucket}/b.zarr"
    _two_sources(a, b, storage_options=options)
    composite = tmp_path / "c.zarr"
    per_source = {"a": options, "b": options}
    cv.create_composite(composite, {"a": a, "b": b}, source_storage_options=per_source)
    return bucket, composite


def test_a_local_source_deleted_is_gone_at_open_and_on_a_read(tmp_path: Path) -> None:
    a, b, composite = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr"
    _two_sources(a, b)
    cv.create_composite(composite, {"a": a, "b": b})
    reader = cv.VirtualArrayReader(composite)
    shutil.rmtree(b)
    with pytest.raises(cv.SourceGoneError) as raised:
        reader.read()
    _gone(raised.value, str(b))
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(composite)
    _gone(raised.value, "source 'b'")
    assert "must be restored at that path" in str(raised.value)


def test_a_source_error_pickles_back_whole(tmp_path: Path) -> None:
    a, b, composite = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr"
    _two_sources(a, b)
    cv.create_composite(composite, {"a": a, "b": b})
    shutil.rmtree(a)
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(composite)
    back = pickle.loads(pickle.dumps(raised.value))
    assert type(back) is cv.SourceGoneError and str(back) == str(raised.value)


def test_the_command_line_says_a_gone_source_in_one_line_and_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, composite = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr"
    _two_sources(a, b)
    cv.create_composite(composite, {"a": a, "b": b})
    shutil.rmtree(b)
    assert main(["verify", str(composite)]) == 4
    err = capsys.readouterr().err.strip()
    assert "source 'b'" in err and "restored" in err and len(err.splitlines()) == 1, err


@pytest.mark.remote
def test_a_remote_source_deleted_is_gone_on_a_read_and_at_the_next_open(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket, composite = _remote_composite(s3_server, tmp_path)
    b = f"s3://{bucket}/b.zarr"
    per_source = {"a": s3_server.storage_options(), "b": s3_server.storage_options()}
    reader = cv.VirtualArrayReader(composite, source_storage_options=per_source)
    _delete(s3_server, bucket, "b.zarr/RNA/", chunks_only=True)
    with pytest.raises(cv.SourceGoneError) as raised:
        reader.read()
    _gone(raised.value, "source 'b'")
    _delete(s3_server, bucket, "b.zarr/")
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(composite, source_storage_options=per_source)
    # not "replaced", and not "write a store there": the source is gone
    _gone(raised.value, f"source 'b' at {b} is gone")
    assert "write_counts" not in str(raised.value)


@pytest.mark.remote
def test_an_unreachable_remote_source_cannot_be_read(s3_server: S3Server, tmp_path: Path) -> None:
    _, composite = _remote_composite(s3_server, tmp_path)
    unreachable = {"a": s3_server.storage_options(), "b": s3_server.unreachable_options()}
    with pytest.raises(cv.SourceUnavailableError) as raised:
        cv.open_store(composite, source_storage_options=unreachable)
    assert not isinstance(raised.value, FileNotFoundError)
    assert "source 'b'" in str(raised.value) and "cannot be read" in str(raised.value)


@pytest.mark.remote
def test_a_mount_whose_remote_source_is_deleted_says_it_is_gone(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    source = f"s3://{bucket}/s.zarr"
    cv.write_counts(source, np.ones((20, 10), np.uint32), storage_options=options)
    target = tmp_path / "t.zarr"
    cv.mount_datastore(source, target, source_storage_options=options)
    _delete(s3_server, bucket, "s.zarr/")
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(target, source_storage_options=options)
    _gone(raised.value, source)
    assert "is gone" in str(raised.value) and "write_counts" not in str(raised.value)


def test_a_mount_whose_local_source_is_deleted_says_it_is_gone(tmp_path: Path) -> None:
    source, target = tmp_path / "s.zarr", tmp_path / "t.zarr"
    cv.write_counts(source, np.ones((20, 10), np.uint32))
    cv.mount_datastore(source, target)
    shutil.rmtree(source)
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(target)
    _gone(raised.value, str(source))


def test_a_moved_source_is_told_both_ways_out(tmp_path: Path) -> None:
    # a source renamed on purpose (its folder moved) was told only to be restored at
    # the old path; errors.md gives the other remedy, a new composite or mount
    a, b, composite = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr"
    _two_sources(a, b)
    cv.create_composite(composite, {"a": a, "b": b})
    b.rename(tmp_path / "b_moved.zarr")
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(composite)
    assert "restored at that path" in str(raised.value)
    assert "or create the composite again with its new location" in str(raised.value)
    target = tmp_path / "t.zarr"
    cv.mount_datastore(a, target)
    a.rename(tmp_path / "a_moved.zarr")
    with pytest.raises(cv.SourceGoneError) as raised:
        cv.open_store(target)
    assert "restore it at that path" in str(raised.value)
    assert "or mount its new location at a new destination" in str(raised.value)
    # the target's own analyses are not carried to a new mount: the message says
    # how to keep them (a link at the recorded path), and that remedy works
    assert f"ln -s NEW_LOCATION {a}" in str(raised.value)
    assert "this target's own artifacts stay here" in str(raised.value)
    assert "cv.list_artifacts with this target's path reads them" in str(raised.value)
    assert cv.list_artifacts(target, "RNA/artifacts") == []  # it does: the target alone
    a.symlink_to(tmp_path / "a_moved.zarr")
    cv.open_store(target).close()


def test_an_anndata_source_deleted_under_a_lazy_anndata_is_gone(tmp_path: Path) -> None:
    import anndata

    a = tmp_path / "a.zarr"
    anndata.AnnData(np.ones((20, 6), np.float32), obs={"k": ["x"] * 20}).write_zarr(a)
    composite = tmp_path / "c.zarr"
    cv.create_composite(composite, {"a": a})
    lazy = cv.to_anndata(composite)
    shutil.rmtree(a)
    with pytest.raises(cv.SourceGoneError) as raised:
        lazy.X.compute()
    _gone(raised.value, "source 'a'")
