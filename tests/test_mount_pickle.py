"""A pickled mount is verified again where it is unpickled, as a composite is.

The process that unpickles a mount (a dask worker, a process pool) opens it
with the checks an open makes and records the source's file identities, so a
source replaced before or after the unpickling is refused with the errors an
open mount gives. A process keeps the mounts it verified and reuses one while
its local source's documents are the files verified (``stat`` only). Real
stores in temporary directories, a real pool of spawned processes, a real
loopback S3 server.
"""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from s3_server import S3Server
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.read import opened_files

SMALL = cv.LayoutPolicy(64 * 1024, 4096)  # 300 x 40 int64: several row shards
ROWS = np.arange(250, 270)


def counts(seed: int, *, scale: int = 1) -> sp.csr_array:
    return realistic_counts(300, 40, density=0.1, seed=seed, dtype="int64") * scale


def write(source: Path, matrix: sp.csr_array, *, overwrite: bool = False) -> None:
    cv.write_counts(
        source,
        matrix,
        cells=pd.DataFrame(index=[f"cell{i}" for i in range(matrix.shape[0])]),
        features=pd.DataFrame(index=[f"gene{j}" for j in range(matrix.shape[1])]),
        layout=SMALL,
        overwrite=overwrite,
    )


def mounted(tmp_path: Path, *, seed: int = 1) -> tuple[Path, Path, sp.csr_array]:
    """A local source and a mount of it: their paths and the source's counts."""
    matrix = counts(seed)
    write(tmp_path / "s.zarr", matrix)
    cv.mount_datastore(tmp_path / "s.zarr", tmp_path / "m.zarr").close()
    return tmp_path / "s.zarr", tmp_path / "m.zarr", matrix


def read_rows(data: bytes, rows: npt.NDArray[Any] = ROWS) -> npt.NDArray[Any]:
    """In a worker process: unpickle a mount and read its ``rows``."""
    mount = pickle.loads(data)
    assert isinstance(mount, cv.MountStore)
    return np.asarray(mount.reader().read(cells=rows))


def spawned() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))


@contextmanager
def local_requests() -> Iterator[Counter[str]]:
    """Count the requests every LocalStore (target and source) answers, by method."""
    made: Counter[str] = Counter()
    patches = []
    for method in ("get", "exists", "getsize", "get_partial_values"):
        original = getattr(LocalStore, method)

        def counting(
            self: LocalStore, *args: Any, _o: Any = original, _m: str = method, **kwargs: Any
        ) -> Any:
            made[_m] += 1
            return _o(self, *args, **kwargs)

        patches.append(mock.patch.object(LocalStore, method, counting))
    for patch in patches:
        patch.start()
    try:
        yield made
    finally:
        for patch in patches:
            patch.stop()


def test_a_round_trip_reads_the_same_values_in_the_same_mode(tmp_path: Path) -> None:
    _, target, matrix = mounted(tmp_path)
    for mode in ("r", "r+"):
        mount = cv.open_store(target, mode=mode)
        copy = pickle.loads(pickle.dumps(mount))
        assert isinstance(copy, cv.MountStore) and copy == mount
        assert copy.read_only is (mode == "r")
        np.testing.assert_array_equal(copy.reader().read(), matrix.toarray())
        assert copy.with_read_only(True).read_only
        np.testing.assert_array_equal(
            copy.with_read_only(True).reader().read(cells=ROWS), matrix.toarray()[ROWS]
        )


def test_a_writable_mount_stays_writable_and_unpickling_writes_nothing(tmp_path: Path) -> None:
    source, target, _ = mounted(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in (*source.rglob("*"), *target.rglob("*"))}
    data = pickle.dumps(cv.open_store(target, mode="r+"))
    copy = pickle.loads(data)
    after = {p: p.stat().st_mtime_ns for p in (*source.rglob("*"), *target.rglob("*"))}
    assert after == before  # unpickling (a full open here) wrote nothing
    assert not copy.read_only
    buffer = default_buffer_prototype().buffer.from_bytes(b"{}")
    sync(copy.set("notes/zarr.json", buffer))
    assert (target / "notes" / "zarr.json").read_bytes() == b"{}"
    reread = pickle.loads(data)  # the process's kept verification, in the pickled mode
    assert not reread.read_only
    sync(reread.delete("notes/zarr.json"))
    assert not (target / "notes" / "zarr.json").exists()
    assert pickle.loads(pickle.dumps(cv.open_store(target))).read_only


def test_a_spawned_process_pool_reads_the_same_values(tmp_path: Path) -> None:
    _, target, matrix = mounted(tmp_path)
    data = pickle.dumps(cv.open_store(target))
    with spawned() as pool:
        for rows in pool.map(read_rows, [data] * 4):
            np.testing.assert_array_equal(rows, matrix.toarray()[ROWS])


def open_error(target: Path) -> str:
    """The message an open of the mount at ``target`` gives now."""
    with pytest.raises(cv.IdentityMismatchError) as caught:
        cv.open_store(target)
    return str(caught.value)


def test_a_source_replaced_before_the_unpickling_is_refused_as_an_open_refuses_it(
    tmp_path: Path,
) -> None:
    source, target, _ = mounted(tmp_path)
    data = pickle.dumps(cv.open_store(target))
    write(source, counts(7, scale=100), overwrite=True)
    expected = open_error(target).replace(str(target), f"file://{target}")
    with pytest.raises(cv.IdentityMismatchError) as caught:
        pickle.loads(data)
    assert str(caught.value) == expected
    assert "counts fingerprint" in expected or "dataset fingerprint" in expected
    with spawned() as pool, pytest.raises(cv.IdentityMismatchError) as in_worker:
        pool.submit(read_rows, data).result()
    assert str(in_worker.value) == expected


def test_a_kept_verification_is_not_reused_for_a_replaced_source(tmp_path: Path) -> None:
    source, target, matrix = mounted(tmp_path)
    data = pickle.dumps(cv.open_store(target))
    np.testing.assert_array_equal(read_rows(data), matrix.toarray()[ROWS])  # kept now
    # the same values written again: new files, and the same fingerprints
    write(source, matrix, overwrite=True)
    np.testing.assert_array_equal(read_rows(data), matrix.toarray()[ROWS])  # opened again
    write(source, counts(7, scale=100), overwrite=True)
    with pytest.raises(cv.IdentityMismatchError, match="the source changed after it was mounted"):
        pickle.loads(data)


def test_a_source_replaced_after_the_unpickling_is_refused_on_read(tmp_path: Path) -> None:
    source, target, matrix = mounted(tmp_path)
    data = pickle.dumps(cv.open_store(target))
    copy = pickle.loads(data)
    late = pickle.loads(data)  # unpickled before the replacement, read only after it
    reader = copy.reader()
    np.testing.assert_array_equal(reader.read(cells=ROWS[:5]), matrix.toarray()[ROWS[:5]])
    write(source, counts(7, scale=100), overwrite=True)
    for rows in (ROWS[:5], np.arange(0, 10)):  # a shard read before, and one not
        with pytest.raises(cv.IdentityMismatchError) as caught:
            reader.read(cells=rows)
        message = str(caught.value)
        assert f"the mount's source at {source}: the file {source}/RNA/" in message
        assert "Reopen the mount" in message
    with pytest.raises(cv.IdentityMismatchError):
        late.reader().read(cells=ROWS)


def test_an_unpickling_costs_an_open_and_then_a_few_stats(tmp_path: Path) -> None:
    _, target, _ = mounted(tmp_path)
    mount = cv.open_store(target)
    data = pickle.dumps(mount)
    with local_requests() as opening:
        cv.open_store(target)
    with local_requests() as first:
        pickle.loads(data)
    # the first unpickling in a process is a full open (cv.open_store also reads
    # what kind of store the target is, which an unpickled mount knows)
    assert 0 < first["get"] <= opening["get"] and set(first) == set(opening) == {"get"}
    stats = Counter[str]()
    original = opened_files._identity_at

    def counting(path: str) -> Any:
        stats[path] += 1
        return original(path)

    with local_requests() as later, mock.patch.object(opened_files, "_identity_at", counting):
        for _ in range(5):
            pickle.loads(data)
    assert sum(later.values()) == 0  # no read of the target or the source
    # a stat of each count array's document per unpickling
    assert sorted(stats.values()) == [5, 5]
    assert all(path.endswith(("RNA/counts/zarr.json", "RNA/countsT/zarr.json")) for path in stats)


def test_a_target_mounted_again_since_the_pickling_is_refused(tmp_path: Path) -> None:
    _, target, _ = mounted(tmp_path)
    data = pickle.dumps(cv.open_store(target))
    other = counts(3)
    write(tmp_path / "t.zarr", other)
    shutil.rmtree(target)  # a writer never replaces a mount: deleted by hand
    cv.mount_datastore(tmp_path / "t.zarr", target).close()
    with pytest.raises(cv.IdentityMismatchError, match="the target was mounted again since"):
        pickle.loads(data)


def remote_mount(
    tmp_path: Path, s3_server: S3Server, matrix: sp.csr_array
) -> tuple[cv.MountStore, str, dict[str, Any]]:
    """A mount of a new S3 source holding ``matrix``; the source's URL and options."""
    options = s3_server.storage_options()
    url = f"s3://{s3_server.new_bucket()}/s.zarr"
    cv.write_counts(url, matrix, layout=SMALL, storage_options=options)
    mount = cv.mount_datastore(url, tmp_path / "m.zarr", source_storage_options=options)
    assert isinstance(mount, cv.MountStore)
    return mount, url, options


@pytest.mark.remote
def test_a_remote_source_reads_in_a_spawned_process_with_the_pickled_options(
    tmp_path: Path, s3_server: S3Server
) -> None:
    matrix = counts(4)
    mount, _, _ = remote_mount(tmp_path, s3_server, matrix)
    np.testing.assert_array_equal(mount.reader().read(cells=ROWS), matrix.toarray()[ROWS])
    data = pickle.dumps(mount)
    assert b"testing-secret" in data  # the options travel in memory, inside the pickle
    copy = pickle.loads(data)
    assert copy.cache_info().directory is None  # a fresh cache, filled by its reads
    np.testing.assert_array_equal(copy.reader().read(cells=ROWS), matrix.toarray()[ROWS])
    assert copy.cache_info().directory not in (None, mount.cache_info().directory)
    with spawned() as pool:
        for rows in pool.map(read_rows, [data] * 2):
            np.testing.assert_array_equal(rows, matrix.toarray()[ROWS])
    copy.close()
    mount.close()


@pytest.mark.remote
def test_a_remote_source_replaced_after_a_kept_open_is_refused_then_opened_again(
    tmp_path: Path, s3_server: S3Server
) -> None:
    # several shards: the rows read first do not bring the others into the cache
    matrix = realistic_counts(3000, 40, density=0.1, seed=5, dtype="int64")
    mount, url, options = remote_mount(tmp_path, s3_server, matrix)
    data = pickle.dumps(mount)
    np.testing.assert_array_equal(read_rows(data), matrix.toarray()[ROWS])  # kept now
    replacement = realistic_counts(3000, 40, density=0.1, seed=8, dtype="int64") * 100
    cv.write_counts(url, replacement, layout=SMALL, storage_options=options, overwrite=True)
    # the kept open is reused (no request tells it the source changed): what its
    # cache holds reads as verified, and its pins refuse the replaced objects
    # it reads, as in the process that opened the mount
    np.testing.assert_array_equal(read_rows(data), matrix.toarray()[ROWS])
    with pytest.raises(cv.IdentityMismatchError, match="changed while this store was open"):
        read_rows(data, np.arange(2900, 2910))
    # that refusal drops the kept open: the next unpickling opens again, and
    # fails as an open fails
    with pytest.raises(cv.IdentityMismatchError, match="the source changed after it was mounted"):
        pickle.loads(data)
    mount.close()
