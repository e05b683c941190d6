"""The remote source cache: budget, eviction, faults, cleanup, and composites and
mounts over a real S3 API server on loopback."""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts
from decode_counting import decoding_jobs
from loopback_proxy import LoopbackProxy
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.read import range_requests, shard_reader
from cytearc_vfs.remote.cache_owners import OWNER_FILE, owner_is_gone, sweep_orphans
from cytearc_vfs.remote.source_cache import (
    BLOCK_BYTES,
    CACHE_ENV,
    DEFAULT_CACHE_BYTES,
    SourceCache,
    cache_bytes_from_env,
    parse_cache_bytes,
)

SMALL = cv.LayoutPolicy(64 * 1024, 4096)
# source URLs, their storage options, and the composite's expected values
RemoteSources = tuple[dict[str, str], dict[str, object], np.ndarray]


@pytest.fixture(autouse=True)
def default_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the default budget, whatever the environment says."""
    monkeypatch.delenv(CACHE_ENV, raising=False)


# ------------------------------------------------------------------ budget


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1048576", 1 << 20),
        ("512M", 512 << 20),
        ("2G", 2 << 30),
        ("2 GiB", 2 << 30),
        ("1.5g", 3 << 29),
        ("64kB", 64 << 10),
    ],
)
def test_cache_sizes(text: str, expected: int) -> None:
    assert parse_cache_bytes(text) == expected
    assert cache_bytes_from_env({CACHE_ENV: text}) == expected


def test_an_unset_or_empty_budget_is_2_gib() -> None:
    assert cache_bytes_from_env({}) == cache_bytes_from_env({CACHE_ENV: " "}) == DEFAULT_CACHE_BYTES
    assert DEFAULT_CACHE_BYTES == 2 << 30


@pytest.mark.parametrize("bad", ["lots", "-1", "5X", "2 G B", "1e9"])
def test_a_bad_budget_names_the_variable_and_the_remedy(bad: str) -> None:
    with pytest.raises(
        ValueError, match=rf"CYTEARC_SOURCE_CACHE_BYTES='{bad}' is not a size.*512M"
    ):
        cache_bytes_from_env({CACHE_ENV: bad})


# ------------------------------------------------------------------- cache


def _in_subprocess(script: str, *, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter whose TMPDIR is ``tmpdir``."""
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        capture_output=True,
        text=True,
    )


def test_least_recently_used_entries_go_first_within_the_budget() -> None:
    cache = SourceCache(100)
    info = cache.info()
    assert info.enabled and info.directory is None  # made by the first fetch only
    cache.put("a", b"a" * 40)
    cache.put("b", b"b" * 40)
    assert cache.get("a") == b"a" * 40  # a is now the most recently used
    cache.put("c", b"c" * 40)  # b goes
    assert cache.get("b") is None
    assert cache.get_range("c", 38, 45) == b"cc"
    cache.put("huge", b"h" * 101)  # larger than the budget: not kept, nothing evicted
    info = cache.info()
    assert (info.hits, info.misses, info.evictions, info.bytes_cached) == (2, 1, 1, 80)
    assert info.directory is not None
    # no half-written entries left behind; beside the entries only the owner record
    assert sorted(os.listdir(info.directory)) == sorted(
        [name for name in os.listdir(info.directory) if not name.startswith(".")] + [OWNER_FILE]
    )
    assert len(os.listdir(info.directory)) == 3
    cache.close()
    assert not os.path.exists(info.directory)
    assert cache.info().bytes_cached == 0


def test_a_budget_of_zero_caches_nothing() -> None:
    cache = SourceCache(0)
    cache.put("a", b"x")
    assert cache.get("a") is None
    info = cache.info()
    assert not info.enabled and info.directory is None and info.misses == 0


# a process that makes a cache with one entry and prints its directory
ONE_ENTRY = (
    "from cytearc_vfs.remote.source_cache import SourceCache\n"
    "cache = SourceCache(1000)\n"
    "cache.put('k', b'v' * 10)\n"
    "print(cache.info().directory, flush=True)\n"
)


def test_the_directory_is_in_tmpdir_and_gone_when_the_process_exits(tmp_path: Path) -> None:
    run = _in_subprocess(ONE_ENTRY, tmpdir=tmp_path)
    assert run.returncode == 0, run.stderr
    directory = Path(run.stdout.strip())
    assert directory.parent == tmp_path
    assert not directory.exists()


FORKED_CHILD = (
    "import os, sys\n"
    "from cytearc_vfs.remote.source_cache import SourceCache\n"
    "cache = SourceCache(1000)\n"
    "cache.put('k', b'v' * 10)\n"
    "parent = cache.info().directory\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    # the child neither serves nor touches the parent's entries\n"
    "    assert cache.get('k') is None, 'child served the parent entry'\n"
    "    cache.put('c', b'c' * 10)\n"
    "    own = cache.info().directory\n"
    "    assert own not in (None, parent), own\n"
    "    print(own, flush=True)\n"
    "    cache.close()\n"
    "    sys.exit(0)  # a normal exit: its exit handlers run\n"
    "_, status = os.waitpid(pid, 0)\n"
    "assert status == 0, status\n"
    "assert os.path.isdir(parent), 'the child removed the parent directory'\n"
    "assert cache.get('k') == b'v' * 10 and cache.info().enabled\n"
    "print(parent, flush=True)\n"
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_leaves_the_parents_directory_alone(tmp_path: Path) -> None:
    run = _in_subprocess(FORKED_CHILD, tmpdir=tmp_path)
    assert run.returncode == 0, run.stderr
    child, parent = (Path(line) for line in run.stdout.split())
    assert child.parent == parent.parent == tmp_path
    # each directory went with the process that made it
    assert not child.exists() and not parent.exists()


def test_a_fault_of_the_directory_turns_the_cache_off() -> None:
    cache = SourceCache(1000)
    cache.put("a", b"a" * 10)
    directory = cache.info().directory
    assert directory is not None
    shutil.rmtree(directory)  # e.g. a tmp cleaner, or a full or failed disk
    assert cache.get("a") is None
    cache.put("b", b"b")
    info = cache.info()
    assert not info.enabled and info.bytes_cached == 0 and info.directory is None
    assert cache.get("b") is None


def test_an_entry_changed_on_disk_is_not_served() -> None:
    cache = SourceCache(1000)
    cache.put("a", b"a" * 10)
    directory = cache.info().directory
    assert directory is not None
    (entry,) = [name for name in os.listdir(directory) if name != OWNER_FILE]
    Path(directory, entry).write_bytes(b"tampered")
    assert cache.get("a") is None
    assert not cache.info().enabled


def _entry_file(cache: SourceCache) -> Path:
    directory = cache.info().directory
    assert directory is not None
    (entry,) = [name for name in os.listdir(directory) if name != OWNER_FILE]
    return Path(directory, entry)


def test_an_entry_altered_in_place_is_not_served_and_turns_the_cache_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = SourceCache(1 << 20)
    data = bytes(range(256)) * 1024  # four checksummed blocks
    cache.put("a", data)
    path = _entry_file(cache)
    damaged = bytearray(data)
    damaged[100_000] ^= 1  # one bit, same size: only a checksum sees it
    path.write_bytes(bytes(damaged))
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs.remote.source_cache"):
        assert cache.get("a") is None
        assert cache.get("a") is None
    assert not cache.info().enabled and cache.info().directory is None
    (record,) = caplog.records  # one warning, naming the file
    assert str(path) in record.getMessage() and "checksums" in record.getMessage()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_range_of_a_damaged_entry_is_not_served(
    caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    cache = SourceCache(1 << 20)
    data = os.urandom(3 * BLOCK_BYTES + 10)
    cache.put("a", data)
    assert cache.get_range("a", BLOCK_BYTES + 5, BLOCK_BYTES + 9) == data[BLOCK_BYTES + 5 :][:4]
    path = _entry_file(cache)
    if damage == "flip":
        damaged = bytearray(data)
        damaged[BLOCK_BYTES + 1000] ^= 0x80  # in the block the range reads, not in the range
        path.write_bytes(bytes(damaged))
    else:
        path.write_bytes(data[: 3 * BLOCK_BYTES])  # the range itself is intact
    with caplog.at_level(logging.WARNING, logger="cytearc_vfs.remote.source_cache"):
        assert cache.get_range("a", BLOCK_BYTES + 5, BLOCK_BYTES + 9) is None
    assert not cache.info().enabled
    assert len(caplog.records) == 1 and str(path) in caplog.records[0].getMessage()


# ---------------------------------------------------------------- sweeping


def _owned_cache_process(tmpdir: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that fills a cache in ``tmpdir`` and then waits; and its directory."""
    process = subprocess.Popen(
        [sys.executable, "-c", ONE_ENTRY + "import time\ntime.sleep(120)\n"],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    directory = Path(process.stdout.readline().strip())
    assert directory.is_dir() and directory.parent == tmpdir
    return process, directory


def test_caches_of_killed_processes_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    killed, orphan = _owned_cache_process(tmp_path)
    alive, kept = _owned_cache_process(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)  # no cleanup runs
        killed.wait(timeout=30)
        assert orphan.is_dir()
        unowned = tmp_path / "cytearc-source-cache-unowned"  # no record: never ours to judge
        unowned.mkdir()
        # a new cache in the same TMPDIR sweeps when it makes its directory
        run = _in_subprocess(ONE_ENTRY, tmpdir=tmp_path)
        assert run.returncode == 0, run.stderr
        assert not orphan.exists()
        assert kept.is_dir() and (kept / OWNER_FILE).is_file()
        assert unowned.is_dir()
    finally:
        for process in (alive, killed):
            process.kill()
            process.wait(timeout=30)
            assert process.stdout is not None
            process.stdout.close()


def test_a_cache_of_a_process_being_killed_is_swept_once_reaped_or_zombie(tmp_path: Path) -> None:
    process, directory = _owned_cache_process(tmp_path)
    process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while directory.is_dir() and time.monotonic() < deadline:
        # a zombie (killed, not yet reaped) owns nothing any more
        sweep_orphans(str(tmp_path))
        time.sleep(0.05)
    process.wait(timeout=30)
    assert process.stdout is not None
    process.stdout.close()
    assert not directory.exists()


def test_owner_records_guard_against_reused_pids_and_reboots() -> None:
    stat_fields = Path(f"/proc/{os.getpid()}/stat").read_text()
    started = stat_fields[stat_fields.rfind(")") + 2 :].split()[19]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    me = {"pid": os.getpid(), "pid_ns": namespace, "boot_id": boot, "start_time": started}
    assert not owner_is_gone(me)
    assert owner_is_gone({**me, "start_time": str(int(started) + 1)})  # the pid was reused
    assert owner_is_gone({**me, "boot_id": "another-boot"})  # recorded before a restart
    assert not owner_is_gone({**me, "start_time": None})  # unknown: kept
    assert not owner_is_gone({"pid": "12"}) and not owner_is_gone(None)
    # another pid namespace's ids name other processes here: kept, whatever they name
    assert not owner_is_gone({**me, "pid_ns": namespace + 1, "start_time": "1"})
    assert not owner_is_gone({**me, "pid": 1, "pid_ns": namespace + 1})
    # a record without one (an older version) is uncertain too, unless from another boot
    unrecorded = {key: value for key, value in me.items() if key != "pid_ns"}
    assert not owner_is_gone({**unrecorded, "start_time": str(int(started) + 1)})
    assert owner_is_gone({**unrecorded, "boot_id": "another-boot"})


def test_the_cache_of_a_process_in_another_pid_namespace_is_kept(tmp_path: Path) -> None:
    """A container or ``unshare -p`` sharing TMPDIR: its owner record says pid 1, which
    here is init, started at another time; its cache is alive and must stay."""
    directory = tmp_path / "cytearc-source-cache-contained"
    directory.mkdir()
    (directory / "entry").write_bytes(b"x")
    here = os.stat("/proc/self/ns/pid").st_ino
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    record = {"pid": 1, "pid_ns": here + 1, "boot_id": boot, "start_time": "999999999"}
    (directory / OWNER_FILE).write_text(json.dumps(record))
    assert sweep_orphans(str(tmp_path)) == []
    assert (directory / "entry").is_file()
    # in this namespace, a pid now held by a process started at another time: gone
    (directory / OWNER_FILE).write_text(json.dumps({**record, "pid": os.getpid(), "pid_ns": here}))
    assert sweep_orphans(str(tmp_path)) == [str(directory)]


# ------------------------------------------------------- remote composites


@pytest.fixture(scope="module")
def remote_sources(s3_server: S3Server) -> RemoteSources:
    """Two sources on the S3 server, written once for the module: the tests read
    them (each through a composite and a cache of its own), none changes them."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    a = realistic_counts(300, 40, density=0.2, seed=11)
    b = realistic_counts(200, 30, density=0.2, seed=12)
    cv.write_counts(
        f"s3://{bucket}/a.zarr",
        a,
        features=[f"g{i}" for i in range(40)],
        layout=SMALL,
        storage_options=options,
    )
    cv.write_counts(
        f"s3://{bucket}/b.zarr",
        b,
        features=[f"g{i}" for i in range(10, 40)],
        layout=SMALL,
        storage_options=options,
    )
    expected = np.zeros((500, 40), dtype=np.float64)
    expected[:300] = a.toarray()
    expected[300:, 10:40] = b.toarray()
    sources = {"a": f"s3://{bucket}/a.zarr", "b": f"s3://{bucket}/b.zarr"}
    return sources, {name: options for name in sources}, expected


def _open(tmp_path: Path, remote_sources: RemoteSources) -> cv.CompositeStore:
    sources, options, _ = remote_sources
    if not (tmp_path / "c.zarr").exists():
        cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=options)
    store = cv.open_store(tmp_path / "c.zarr", source_storage_options=options)
    assert isinstance(store, cv.CompositeStore)
    return store


def _read_once(
    tmp_path: Path, remote_sources: RemoteSources
) -> tuple[cv.CompositeStore, np.ndarray, str]:
    """The opened composite after one whole read (checked), its expected
    values, and its cache directory."""
    _, _, expected = remote_sources
    store = _open(tmp_path, remote_sources)
    np.testing.assert_array_equal(store.reader().read(), expected)
    directory = store.cache_info().directory
    assert directory is not None
    return store, expected, directory


@pytest.mark.remote
def test_a_second_read_of_a_remote_composite_comes_from_the_cache(
    tmp_path: Path,
    remote_sources: RemoteSources,
) -> None:
    _, _, expected = remote_sources
    store = _open(tmp_path, remote_sources)
    assert store.cache_info().directory is None  # nothing fetched yet
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(), expected)
    first = store.cache_info()
    assert first.enabled and first.misses > 0 and first.bytes_cached > 0
    assert first.directory is not None and Path(first.directory).is_dir()
    # the same read again, through a fresh reader (its shard indexes not kept)
    again = store.reader()
    np.testing.assert_array_equal(again.read(), expected)
    second = store.cache_info()
    assert second.misses == first.misses  # nothing fetched again
    assert second.hits >= first.misses
    # plain zarr reads the computed chunks through the same sources and cache
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], expected)
    assert store.cache_info().misses == first.misses
    store.close()
    assert not Path(first.directory).exists()


@pytest.mark.remote
def test_concurrent_readers_of_a_shard_share_one_fetch(
    tmp_path: Path,
    remote_sources: RemoteSources,
    s3_server: S3Server,
) -> None:
    """Eight threads reading the same cells of one open composite, each with its own
    reader (a threaded dask scheduler, a server's requests): each shard is fetched
    once, as for one reader, not once per thread."""
    sources, options, expected = remote_sources
    cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=options).close()
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        proxied = {name: {**o, "endpoint": proxy.endpoint} for name, o in options.items()}  # type: ignore[dict-item]
        store = cv.open_store(tmp_path / "c.zarr", source_storage_options=proxied)
        proxy.take()
        np.testing.assert_array_equal(store.reader().read(), expected)
        alone = len(proxy.take())
        store.close()
        store = cv.open_store(tmp_path / "c.zarr", source_storage_options=proxied)
        proxy.take()
        proxy.delay = 0.05  # each request in flight long enough for the others to meet it
        together = threading.Barrier(8)

        def read(_: int) -> np.ndarray:
            reader = store.reader()
            together.wait()
            return reader.read()

        with ThreadPoolExecutor(8) as pool:
            for values in pool.map(read, range(8)):
                np.testing.assert_array_equal(values, expected)
        assert len(proxy.take()) == alone
        info = store.cache_info()
        assert info.misses == alone and info.hits == 7 * alone
        store.close()
    finally:
        proxy.close()


@pytest.mark.remote
def test_the_budget_bounds_the_cache(
    tmp_path: Path,
    remote_sources: RemoteSources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unbounded, expected, directory = _read_once(tmp_path, remote_sources)
    sizes = [entry.stat().st_size for entry in Path(directory).iterdir()]
    unbounded.close()
    # room for the largest entry, not for all of them
    budget = max(max(sizes), sum(sizes) // 2) + 1
    assert budget < sum(sizes)
    monkeypatch.setenv(CACHE_ENV, str(budget))
    store = _open(tmp_path, remote_sources)
    for _ in range(2):
        np.testing.assert_array_equal(store.reader().read(), expected)
    info = store.cache_info()
    assert info.max_bytes == budget
    assert 0 < info.bytes_cached <= budget
    assert info.evictions > 0
    store.close()


@pytest.mark.remote
def test_no_cache_with_a_budget_of_zero(
    tmp_path: Path,
    remote_sources: RemoteSources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, _, expected = remote_sources
    monkeypatch.setenv(CACHE_ENV, "0")
    store = _open(tmp_path, remote_sources)
    np.testing.assert_array_equal(store.reader().read(), expected)
    info = store.cache_info()
    assert not info.enabled and info.directory is None and info.bytes_cached == 0


@pytest.mark.remote
def test_reads_go_on_from_the_sources_when_the_cache_directory_fails(
    tmp_path: Path,
    remote_sources: RemoteSources,
) -> None:
    store, expected, directory = _read_once(tmp_path, remote_sources)
    shutil.rmtree(directory)
    np.testing.assert_array_equal(store.reader().read(), expected)
    assert not store.cache_info().enabled


def test_local_sources_are_not_cached(tmp_path: Path) -> None:
    a = realistic_counts(50, 20, density=0.2, seed=3)
    cv.write_counts(tmp_path / "a.zarr", a, layout=SMALL)
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    store = cv.open_store(tmp_path / "c.zarr")
    assert isinstance(store, cv.CompositeStore)
    np.testing.assert_array_equal(store.reader().read(), a.toarray())
    info = store.cache_info()
    assert info.directory is None and info.hits == info.misses == 0


def _remote_mount(
    tmp_path: Path, s3_server: S3Server, *, seed: int
) -> tuple[cv.MountStore, sp.csr_array, dict[str, object]]:
    """A mount (opened as mounted) of a new source on the S3 server; its counts
    and the source's storage options."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    matrix = realistic_counts(200, 30, density=0.2, seed=seed)
    url = f"s3://{bucket}/s.zarr"
    cv.write_counts(url, matrix, layout=SMALL, storage_options=options)
    mount = cv.mount_datastore(url, tmp_path / "m.zarr", source_storage_options=options)
    assert isinstance(mount, cv.MountStore)
    return mount, matrix, options


@pytest.mark.remote
def test_a_mount_of_a_remote_source_reads_through_its_cache(
    tmp_path: Path, s3_server: S3Server
) -> None:
    mount, matrix, _ = _remote_mount(tmp_path, s3_server, seed=5)
    np.testing.assert_array_equal(mount.reader().read(), matrix.toarray())
    first = mount.cache_info()
    assert first.enabled and first.misses > 0 and first.bytes_cached > 0
    np.testing.assert_array_equal(mount.reader().read(), matrix.toarray())
    assert mount.cache_info().misses == first.misses
    assert mount.cache_info().hits > first.hits
    directory = first.directory
    assert directory is not None
    mount.close()
    assert not Path(directory).exists()


def test_a_full_disk_turns_the_cache_off(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes writes past a size fail with "File too large", as a
    # full disk would (running as root, chmod cannot make a directory unwritable)
    script = (
        "import resource, signal\n"
        "from cytearc_vfs.remote.source_cache import SourceCache\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "cache = SourceCache(1 << 20)\n"
        "cache.put('small', b's' * 10)\n"
        "assert cache.get('small') == b's' * 10\n"
        "cache.put('large', b'l' * 5000)\n"
        "info = cache.info()\n"
        "assert not info.enabled and info.bytes_cached == 0 and info.directory is None, info\n"
        "assert cache.get('small') is None\n"
        "print('ok')\n"
    )
    run = _in_subprocess(script, tmpdir=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
    assert list(tmp_path.iterdir()) == []  # the fault removed the directory


@pytest.mark.remote
def test_an_unpickled_composite_makes_its_own_cache(
    tmp_path: Path,
    remote_sources: RemoteSources,
) -> None:
    _, _, expected = remote_sources
    store = _open(tmp_path, remote_sources)
    np.testing.assert_array_equal(store.reader().read(), expected)
    copy = pickle.loads(pickle.dumps(store))
    assert copy.cache_info().directory is None and copy.cache_info().hits == 0
    np.testing.assert_array_equal(copy.reader().read(), expected)
    assert copy.cache_info().directory not in (None, store.cache_info().directory)
    copy.close()
    store.close()


def test_a_mount_of_a_local_source_reports_an_unused_cache(tmp_path: Path) -> None:
    matrix = realistic_counts(40, 10, density=0.3, seed=6)
    cv.write_counts(tmp_path / "s.zarr", matrix, layout=SMALL)
    mount = cv.mount_datastore(tmp_path / "s.zarr", tmp_path / "m.zarr")
    assert isinstance(mount, cv.MountStore)
    np.testing.assert_array_equal(mount.reader().read(), matrix.toarray())
    info = mount.cache_info()
    assert info.directory is None and info.hits == info.misses == info.bytes_cached == 0
    assert info.max_bytes == cache_bytes_from_env()
    assert mount.with_read_only(True).cache_info() == info  # derived stores share it


@pytest.mark.remote
def test_a_sparse_read_caches_the_shard_index_and_its_ranges(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # shards this small are fetched whole (one request); the ranged path is tested here
    monkeypatch.setattr(range_requests, "SMALL_SHARD_BYTES", 0)
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    matrix = realistic_counts(2000, 40, density=0.3, seed=8)
    cv.write_counts(f"s3://{bucket}/s.zarr", matrix, layout=SMALL, storage_options=options)
    sources = {"s": f"s3://{bucket}/s.zarr"}
    cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options={"s": options})
    store = cv.open_store(tmp_path / "c.zarr", source_storage_options={"s": options})
    assert isinstance(store, cv.CompositeStore)
    cells = [1000]  # one chunk of a shard of many: read by range, not whole
    np.testing.assert_array_equal(store.reader().read(cells, None), matrix[cells].toarray())
    first = store.cache_info()
    assert first.misses == 2 and first.hits == 0  # the shard index and the chunk's range
    assert 0 < first.bytes_cached < 4000  # an index and a chunk, not a shard
    np.testing.assert_array_equal(store.reader().read(cells, None), matrix[cells].toarray())
    second = store.cache_info()
    assert (second.misses, second.hits) == (2, 2)  # both again, from the cache
    assert second.bytes_cached == first.bytes_cached
    store.close()


# ------------------------------------------------------ damage, verification


@pytest.mark.remote
def test_a_damaged_cache_file_falls_back_to_the_source_with_one_warning(
    tmp_path: Path,
    remote_sources: RemoteSources,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, expected, directory = _read_once(tmp_path, remote_sources)
    for entry in Path(directory).iterdir():
        if entry.name != OWNER_FILE:  # same size, other bytes: only checksums tell
            data = bytearray(entry.read_bytes())
            data[len(data) // 2] ^= 0xFF
            entry.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        # the right values, from the source: no error blaming the dataset
        np.testing.assert_array_equal(store.reader().read(), expected)
        counts = zarr.open_array(store, path="RNA/counts", mode="r")
        np.testing.assert_array_equal(counts[:], expected)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and directory in warnings[0].getMessage()
    assert "cache" in warnings[0].getMessage()
    assert not store.cache_info().enabled and not Path(directory).exists()
    store.close()


@pytest.mark.remote
def test_deep_verify_of_an_open_remote_composite_keeps_its_credentials(
    tmp_path: Path, remote_sources: RemoteSources
) -> None:
    _, options, _ = remote_sources
    store = _open(tmp_path, remote_sources)
    # the sources cannot be read without their options (endpoint and keys)
    with pytest.raises(OSError, match="source_storage_options"):
        cv.open_store(tmp_path / "c.zarr")
    reports = deep_verify(store, where=str(tmp_path / "c.zarr"))
    assert [r.ok for r in reports] == [True]
    # the virtual counts once, then each source's counts and countsT whole
    assert reports[0].checked_values == 500 * 40 + 2 * 300 * 40 + 2 * 200 * 30
    # a plain backing store verifies with the options given
    backing = zarr.storage.LocalStore(tmp_path / "c.zarr", read_only=True)
    reports = deep_verify(backing, where="c.zarr", source_storage_options=options)
    assert [r.ok for r in reports] == [True]
    store.close()


@pytest.mark.remote
def test_deep_verify_of_an_open_remote_mount_keeps_its_credentials(
    tmp_path: Path, s3_server: S3Server
) -> None:
    created, _, options = _remote_mount(tmp_path, s3_server, seed=9)
    created.close()
    mount = cv.open_store(tmp_path / "m.zarr", source_storage_options=options)
    assert isinstance(mount, cv.MountStore)
    reports = deep_verify(mount, where=str(tmp_path / "m.zarr"))
    assert reports and all(r.ok for r in reports)
    backing = zarr.storage.LocalStore(tmp_path / "m.zarr", read_only=True)
    reports = deep_verify(backing, where="m.zarr", source_storage_options=options)
    assert reports and all(r.ok for r in reports)
    mount.close()


# ------------------------------------------------- bytes damaged on the way


def _proxied(
    tmp_path: Path, remote_sources: RemoteSources, proxy: LoopbackProxy
) -> cv.CompositeStore:
    """The composite of ``remote_sources``, its sources read through ``proxy``."""
    sources, options, _ = remote_sources
    cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=options)
    through = {name: {**opts, "endpoint": proxy.endpoint} for name, opts in options.items()}
    store = cv.open_store(tmp_path / "c.zarr", source_storage_options=through)
    assert isinstance(store, cv.CompositeStore)
    return store


@pytest.fixture(params=["one job", "pieces"])
def decoding(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row chunks of each decoding job of a shard: one job per shard, or
    (``pieces``) each shard's job cut in pieces for 4 threads, however small."""
    if request.param == "pieces":
        monkeypatch.setattr(shard_reader, "PIECE_BYTES", 1)
        monkeypatch.setattr(shard_reader, "decoder_threads", lambda: 4)
    else:
        monkeypatch.setattr(shard_reader, "decoder_threads", lambda: 1)
    return decoding_jobs(monkeypatch)


def _cut_as_asked(jobs: list[int], request: pytest.FixtureRequest) -> None:
    """The decoding jobs were pieces or whole shards. The sources' shards hold 2 or
    3 row chunks: cut for 4 threads, each is a piece of its own."""
    if request.node.callspec.params["decoding"] == "pieces":
        assert set(jobs) == {1}
    else:
        assert jobs and max(jobs) > 1


@pytest.mark.remote
@pytest.mark.parametrize("how", ["flip", "short"])
def test_a_shard_damaged_on_the_way_is_fetched_again_not_cached(
    tmp_path: Path,
    remote_sources: RemoteSources,
    s3_server: S3Server,
    how: str,
    decoding: list[int],
    request: pytest.FixtureRequest,
) -> None:
    _, _, expected = remote_sources
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        store = _proxied(tmp_path, remote_sources, proxy)
        proxy.take()
        proxy.corrupt(1, how=how, match="/c/")  # exactly one answer of a shard damaged
        np.testing.assert_array_equal(store.reader().read(), expected)
        assert proxy.faulted == 1
        first = store.cache_info()
        assert first.refetches == 1
        gets = [seen.path for seen in proxy.take() if seen.method == "GET"]
        assert len(gets) == len(set(gets)) + 1  # one shard fetched twice, the rest once
        _cut_as_asked(decoding, request)
        # the damaged bytes were not kept: a fresh reader reads it all from the cache
        np.testing.assert_array_equal(store.reader().read(), expected)
        assert [seen for seen in proxy.take() if "/c/" in seen.path] == []
        assert store.cache_info().misses == first.misses
        assert store.cache_info().refetches == 1
        store.close()
    finally:
        proxy.close()


@pytest.mark.remote
def test_a_shard_damaged_at_every_fetch_is_named_as_such(
    tmp_path: Path,
    remote_sources: RemoteSources,
    s3_server: S3Server,
    decoding: list[int],
    request: pytest.FixtureRequest,
) -> None:
    _, _, expected = remote_sources
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        store = _proxied(tmp_path, remote_sources, proxy)
        proxy.corrupt(1000, match="/c/")
        with pytest.raises(cv.RecordShapeError) as caught:
            store.reader().read()
        message = str(caught.value)
        assert "again when fetched anew from the source" in message
        assert "stored bytes are damaged, or every transfer" in message
        assert "cytearc-vfs verify" in message
        assert store.cache_info().refetches >= 1
        proxy.clear()  # the transfers heal: the same store reads right, nothing damaged kept
        np.testing.assert_array_equal(store.reader().read(), expected)
        _cut_as_asked(decoding, request)
        store.close()
    finally:
        proxy.close()
