"""A long-running ``serve`` or ``mount-fs`` recovers by itself when a source is restored.

A composite's source deleted or replaced is refused (``502``, ``EIO``),
never read as other bytes; put back as it was, the next read reopens the
composite (the same ``cv.open_store`` checks as at the start) and succeeds
with the exact bytes, with no restart
(:mod:`cytearc_vfs_adapters.served_store`). Real parts only: the installed
``cytearc-vfs serve`` and ``mount-fs`` commands in processes of their own, a
real FUSE mount (skipped, saying why, where FUSE does not work), real files
and a real S3 server on loopback. Reopens are counted from the lines the
commands print for each (``reopening ...``) and from ``mount-fs --json``'s
report, never timed.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import numpy as np
import pytest
from cli_harness import cli_executable, readable, run_main, stop_process
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.serve import ServeOptions, StoreServer
from cytearc_vfs_adapters.served_store import ServedStore
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from test_mount_fs import Composite, fuse_works, make_composite, mount_fs, value_of
from test_serve import replace_source
from zarr.core.sync import sync

import cytearc_vfs as cv
import cytearc_vfs.composite.create as composite_create
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV

__all__ = ["fuse_works"]  # a fixture of test_mount_fs, used here

#: The chunks every source has rows in (one row chunk: 8 MiB chunks).
KEYS = ("RNA/counts/c/0/0", "RNA/countsT/c/0/0")


# ------------------------------------------------------------------ helpers


@dataclass
class World:
    """A composite of three local sources, a copy of source 1, and the chunks' bytes."""

    composite: Composite
    kept: Path
    expected: dict[str, bytes]

    @property
    def source(self) -> Path:
        return self.composite.sources[1]

    def delete(self) -> None:
        """Take source 1 away from its path in one step (a rename), as a deletion looks."""
        os.rename(self.source, self.source.with_name("gone.zarr"))
        shutil.rmtree(self.source.with_name("gone.zarr"))

    def restore(self) -> None:
        """Put the copy back at the path in one step: copied beside it, then renamed."""
        staged = self.source.with_name("staged.zarr")
        shutil.copytree(self.kept, staged)
        os.rename(staged, self.source)

    def replace(self) -> None:
        """Put other data at source 1's path: source 0's store."""
        staged = self.source.with_name("staged.zarr")
        shutil.copytree(self.composite.sources[0], staged)
        os.rename(staged, self.source)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    composite = make_composite(tmp_path, monkeypatch, chunk_bytes=8 << 20)
    store = cv.open_store(composite.path)
    expected = {key: value_of(store, key) for key in KEYS}
    store.close()
    kept = tmp_path / "kept.zarr"
    shutil.copytree(composite.sources[1], kept)
    return World(composite, kept, expected)


def get(url: str, key: str) -> tuple[int, dict[str, str], bytes]:
    """``GET /KEY`` on its own connection: status, fields (lower-case names), body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("GET", "/" + key)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@dataclass
class Serving:
    """A running ``cytearc-vfs serve`` and what it said on stderr."""

    url: str
    stderr: Path

    def lines(self, start: str) -> list[str]:
        prefix = f"cytearc-vfs serve: {start}"
        return [line for line in self.stderr.read_text().splitlines() if line.startswith(prefix)]


@contextmanager
def running(args: list[str], stderr: Path, *, cwd: Path | None = None) -> Iterator[str]:
    """``cytearc-vfs ARGS`` in a process of its own (its stderr into ``stderr``) and the
    first line it printed within 120 s; stopped when the block ends."""
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            [cli_executable(), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=errors, text=True
        )
    try:
        assert process.stdout is not None
        yield process.stdout.readline() if readable(process.stdout, 120) else ""
    finally:
        stop_process(process)
        assert process.stdout is not None
        process.stdout.close()


@contextmanager
def serve(location: Path, *extra: str) -> Iterator[Serving]:
    """``cytearc-vfs serve LOCATION EXTRA...`` in a process of its own until the block ends."""
    stderr = location.parent / f"serve-{os.getpid()}-{threading.get_ident()}.stderr"
    with running(["serve", str(location), *extra], stderr) as line:
        assert line.startswith("serving http://"), (line, stderr.read_text())
        yield Serving(line.split(" ", 1)[1].strip(), stderr)
    assert "Traceback" not in stderr.read_text()


def assert_refused(status: int, fields: dict[str, str], body: bytes, *words: str) -> None:
    """A clean refusal: ``502``, one line of text naming what is wrong."""
    text = body.decode()
    assert status == 502, (status, text[:300])
    assert fields["content-type"].startswith("text/plain") and text.count("\n") == 1, text
    for word in words:
        assert word in text, (word, text)


# --------------------------------------------------------- serve, a process


def test_a_served_composite_reads_again_once_its_source_is_restored(world: World) -> None:
    key = KEYS[0]
    with serve(world.composite.path) as served:
        status, fields, body = get(served.url, key)
        assert (status, body) == (200, world.expected[key])
        etag = fields["etag"]

        world.delete()
        refused = get(served.url, key)
        assert_refused(*refused, key, "source 's1'", "restore the source", "no restart")
        # the reopen's failure is named without its own remedy: one "restore the source"
        assert refused[2].decode().count("restore the source") == 1
        assert "must be restored at that path" not in refused[2].decode()
        assert len(served.lines("reopening ")) == 1
        # refused again, with no new reopen: nothing changed on disk since
        assert_refused(*get(served.url, key))
        assert len(served.lines("reopening ")) == 1

        world.restore()
        status, fields, body = get(served.url, key)
        assert (status, body) == (200, world.expected[key])
        # the record is the same: so is the tag of its computed chunk
        assert fields["etag"] == etag
        assert len(served.lines("reopening ")) == 2 and len(served.lines("reopened ")) == 1
        assert get(served.url, KEYS[1])[2] == world.expected[KEYS[1]]

        # other data at the source's path: refused, by the reopen's checks too
        shutil.rmtree(world.source)
        world.replace()
        assert_refused(*get(served.url, key), "IdentityMismatchError", "s1")
        assert len(served.lines("reopening ")) == 3
        assert any("fingerprint" in line for line in served.lines(""))

        # and back once more
        shutil.rmtree(world.source)
        world.restore()
        assert get(served.url, key)[2] == world.expected[key]
        assert len(served.lines("reopened ")) == 2


def test_fifty_concurrent_failing_requests_cause_one_reopen(world: World) -> None:
    with serve(world.composite.path) as served:
        assert get(served.url, KEYS[0])[0] == 200
        world.delete()
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda i: get(served.url, KEYS[i % 2]), range(50)))
        for answer in answers:
            assert_refused(*answer)
        assert len(served.lines("reopening ")) == 1

        world.restore()
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda i: get(served.url, KEYS[i % 2]), range(50)))
        for index, (status, _, body) in enumerate(answers):
            assert (status, body) == (200, world.expected[KEYS[index % 2]])
        # the first failure reopened; the others waited for it and read the new store
        assert len(served.lines("reopening ")) == 2 and len(served.lines("reopened ")) == 1


def test_requests_in_flight_during_reopens_get_exact_bytes_or_a_clean_refusal(
    world: World,
) -> None:
    stop = threading.Event()
    answers: list[tuple[str, int, dict[str, str], bytes]] = []

    def reader(url: str, key: str) -> None:
        while not stop.is_set():
            answers.append((key, *get(url, key)))

    with serve(world.composite.path) as served:
        threads = [
            threading.Thread(target=reader, args=(served.url, KEYS[i % 2])) for i in range(6)
        ]
        for thread in threads:
            thread.start()
        try:
            for _ in range(3):
                for change, status in ((world.delete, 502), (world.restore, 200)):
                    seen = len(answers)
                    change()
                    _wait_for_status(answers, seen, status)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        reopened = len(served.lines("reopened "))
    assert reopened == 3
    statuses = {status for _, status, _, _ in answers}
    assert statuses == {200, 502}, statuses
    for key, status, fields, body in answers:
        if status == 200:
            assert body == world.expected[key]
        else:
            assert_refused(status, fields, body, key)


def _wait_for_status(
    answers: list[tuple[str, int, dict[str, str], bytes]], seen: int, status: int
) -> None:
    """Wait (0.1 s steps, a minute at most) until an answer after the first ``seen`` has ``status``."""
    pause = threading.Event()
    for _ in range(600):
        if any(answer[1] == status for answer in answers[seen:]):
            return
        pause.wait(0.1)
    raise AssertionError(f"no answer {status} came")


def test_a_streamed_answer_finishes_on_the_store_it_began_on(world: World) -> None:
    """A composite's own key larger than a piece is streamed; a reopen meanwhile
    does not make the rest of it come from the new store."""
    # a value of the composite's own directory (an analysis's output), larger
    # than the loopback socket buffers: its stream is mid-way when the reopen comes
    name = "RNA/notes.bin"
    value = os.urandom(24 << 20)
    (world.composite.path / name).write_bytes(value)
    served = ServedStore.open(world.composite.path)
    first = served.current
    options = ServeOptions(max_answer_bytes=4 << 20)
    with StoreServer.start(served, options=options) as server:
        parts = urlsplit(server.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        connection.request("GET", "/" + name)
        response = connection.getresponse()
        assert response.status == 200
        start = response.read(options.piece_bytes)
        assert server.stats().piece_reads < 24  # the rest is still to be read
        # meanwhile a chunk read finds the source gone, then restored: a new store
        world.delete()
        assert get(server.url, KEYS[0])[0] == 502
        world.restore()
        assert get(server.url, KEYS[0])[2] == world.expected[KEYS[0]]
        assert served.current is not first and served.recovered == 1
        assert start + response.read() == value
        connection.close()
        stats = server.stats()
        assert stats.streamed == 1 and stats.aborted == 0 and stats.piece_reads == 24
    served.close()


# ------------------------------------------------- the shared reopening logic


def failing_reads(served: ServedStore, count: int) -> list[int]:
    """The reopens counted after each of ``count`` reads of a chunk that fail with ``EIO``."""
    operations = TreeOperations(served)
    handle = operations.open_file("/" + KEYS[0], os.O_RDONLY)
    counted = []
    try:
        for _ in range(count):
            with pytest.raises(OSError) as failed:
                operations.read_file("/" + KEYS[0], 4096, 0, handle)
            assert failed.value.errno == errno.EIO
            counted.append(served.reopens)
    finally:
        operations.release_file("/" + KEYS[0], handle)
    return counted


def test_a_failed_reopen_waits_for_a_change_on_disk_or_the_pause(world: World) -> None:
    served = ServedStore.open(world.composite.path, pause=3600)
    world.delete()
    assert failing_reads(served, 5) == [1] * 5
    # something changes on disk (another directory appears in the source's place)
    world.source.mkdir()
    assert failing_reads(served, 2) == [2, 2]
    world.source.rmdir()
    world.restore()
    operations = TreeOperations(served)
    handle = operations.open_file("/" + KEYS[0], os.O_RDONLY)
    assert operations.read_file("/" + KEYS[0], 4096, 0, handle) == world.expected[KEYS[0]][:4096]
    assert (served.reopens, served.recovered) == (3, 1)
    operations.release_file("/" + KEYS[0], handle)
    served.close()


def test_with_no_pause_every_failing_read_reopens(world: World) -> None:
    served = ServedStore.open(world.composite.path, pause=0)
    world.delete()
    assert failing_reads(served, 3) == [1, 2, 3]
    served.close()


def test_stores_out_of_service_are_closed_once_no_request_reads_them(world: World) -> None:
    """A server that reopens again and again keeps a store per request in flight, not
    one per reopen: a replaced store is closed at once when nothing reads it, else
    when the last request reading it is done (its cache directory goes with it)."""
    served = ServedStore.open(world.composite.path, pause=0)
    first = served.current
    gone = FileNotFoundError("a shard is gone")
    closed: list[int] = []

    def watched(store: Any) -> None:
        real_close = store.close

        def close() -> None:
            closed.append(id(store))
            real_close()

        store.close = close

    watched(first)
    # nothing reads the first store when a reopen replaces it: closed at once
    second = sync(served.recover(first, gone))
    assert second is not None and second is served.current and second is not first
    assert closed == [id(first)] and served.retired == 0
    served.done(second)
    # a request reads the second store while a reopen replaces it: kept open for it
    watched(second)
    reading = served.use()
    assert reading is second
    third = sync(served.recover(second, gone))
    assert third is not None and third is not second
    assert closed == [id(first)] and served.retired == 1
    served.done(third)
    served.done(reading)  # its last request is done: closed now
    assert closed == [id(first), id(second)] and served.retired == 0
    # ten more reopens with no request in flight leave nothing behind
    for _ in range(10):
        current = served.use()
        served.done(current)
        again = sync(served.recover(current, gone))
        assert again is not None
        served.done(again)
    assert served.retired == 0 and served.recovered == 12
    served.close()


def test_on_an_event_loop_a_store_is_closed_on_a_thread(world: World) -> None:
    """``serve`` gives its stores back with ``finished`` on its event loop, and reopens
    there: a store closed then (its cache directory removed) is closed on a thread,
    never holding up the loop's other requests."""
    served = ServedStore.open(world.composite.path, pause=0)
    gone = FileNotFoundError("a shard is gone")
    closed_on: dict[int, int] = {}

    def watched(store: Any) -> None:
        real_close = store.close

        def close() -> None:
            closed_on[id(store)] = threading.get_ident()
            real_close()

        store.close = close

    first = served.current
    watched(first)

    async def requests() -> tuple[int, Any]:
        reading = served.use()  # a request reads the first store
        second = await served.recover(first, gone)
        assert second is not None and closed_on == {}  # still read: kept open
        watched(second)
        await served.finished([reading, second])  # the first store's last request
        assert list(closed_on) == [id(first)]
        # the second store, which no request reads, replaced: closed by the reopen
        third = await served.recover(second, gone)
        assert third is not None and list(closed_on) == [id(first), id(second)]
        await served.finished([third])
        return threading.get_ident(), third

    loop_thread, third = sync(requests())
    assert served.current is third and served.retired == 0
    assert all(thread != loop_thread for thread in closed_on.values()), closed_on
    served.close()


def test_a_reopen_that_ends_after_close_closes_its_store(world: World) -> None:
    """A server stopped while a reopen runs: the store it opened is closed, never
    put in service (decided under the lock ``close`` takes)."""
    store = cv.open_store(world.composite.path, mode="r")
    started, release = threading.Event(), threading.Event()
    opened: list[Any] = []
    closed: list[int] = []

    def reopen() -> Any:
        started.set()
        assert release.wait(60)
        again = cv.open_store(world.composite.path, mode="r")
        real_close = again.close

        def close() -> None:
            closed.append(id(again))
            real_close()

        again.close = close  # type: ignore[method-assign]
        opened.append(again)
        return again

    served = ServedStore(store, reopen, where="the composite", location=world.composite.path)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(sync, served.recover(store, FileNotFoundError("a shard is gone")))
        assert started.wait(60)
        served.close()  # the server stops while the reopen runs
        release.set()
        assert pending.result(timeout=120) is None
    assert served.current is store and served.reopens == 1 and served.recovered == 0
    assert closed == [id(opened[0])]


def test_a_request_answered_after_the_server_closed_closes_nothing_again(world: World) -> None:
    """``close()`` closes every store still read; the requests that end afterwards
    (answered as the server stops) give theirs back without a second close."""
    served = ServedStore.open(world.composite.path, pause=0)
    reading = served.use()
    closed: list[int] = []
    real_close = reading.close

    def close() -> None:
        closed.append(id(reading))
        real_close()

    reading.close = close  # type: ignore[method-assign]
    replaced = sync(served.recover(reading, FileNotFoundError("a shard is gone")))
    assert replaced is not None and served.retired == 1 and closed == []
    served.close()
    assert closed == [id(reading)]
    served.done(reading)
    served.done(replaced)
    assert closed == [id(reading)] and served.retired == 0


def test_ordinary_stores_are_never_reopened(tmp_path: Path) -> None:
    from conftest import realistic_counts

    cv.write_counts(tmp_path / "a.zarr", realistic_counts(50, 20, seed=1))
    served = ServedStore.open(tmp_path / "a.zarr")
    assert not served.reopenable
    gone = FileNotFoundError("a shard is gone")
    assert sync(served.recover(served.current, gone)) is None
    assert served.reopens == 0 and served.explain(gone) == ""
    # nor a store handed over open, whatever it is
    composite = ServedStore.fixed(cv.open_store(tmp_path / "a.zarr"))
    assert not composite.reopenable
    served.close()
    composite.close()


def test_only_a_source_gone_or_changed_reopens(world: World) -> None:
    served = ServedStore.open(world.composite.path)
    assert served.reopenable
    for other in (TimeoutError("slow"), PermissionError("no"), ValueError("bad key")):
        assert sync(served.recover(served.current, other)) is None
    assert served.reopens == 0
    served.close()


def test_a_bad_reopen_pause_is_refused(world: World) -> None:
    for value in ("-1", "soon", "nan", "inf"):
        run = run_main("serve", str(world.composite.path), "--reopen-pause", value)
        assert run.returncode == 2, run.stderr
        assert f"--reopen-pause {value} is not a number of seconds" in run.stderr


# ----------------------------------------------------------- mount-fs, FUSE


def test_a_mounted_composite_reads_again_once_its_source_is_restored(
    fuse_works: None, world: World
) -> None:
    key = KEYS[0]
    with mount_fs(world.composite.path, world.composite.path.parent / "mp", "--json") as mounted:
        path = mounted.mountpoint / key
        assert path.read_bytes() == world.expected[key]
        world.delete()
        with pytest.raises(OSError) as failed:
            path.read_bytes()
        assert failed.value.errno == errno.EIO

        def read(_: int) -> int:
            try:
                path.read_bytes()
            except OSError as exc:
                return exc.errno or 0
            return 0

        with ThreadPoolExecutor(50) as pool:
            assert set(pool.map(read, range(50))) == {errno.EIO}
        said = mounted.stderr.read_text()
        assert said.count("cytearc-vfs mount-fs: reopening ") == 1, said
        assert "restore the source" in said

        world.restore()
        assert path.read_bytes() == world.expected[key]
        assert (mounted.mountpoint / KEYS[1]).read_bytes() == world.expected[KEYS[1]]

        shutil.rmtree(world.source)
        world.replace()
        with pytest.raises(OSError) as replaced:
            path.read_bytes()
        assert replaced.value.errno == errno.EIO
        code, out, err = mounted.stop()
    assert code == 0, err
    report = json.loads(out)
    assert (report["reopens"], report["recovered"]) == (3, 1), err


def test_a_composite_mounted_by_a_relative_path_reads_again_once_its_source_is_restored(
    fuse_works: None, world: World
) -> None:
    """libfuse moves the mount-fs process to '/' once it has mounted, so a location
    typed relative to the shell's directory was reopened from '/' ("FileNotFoundError:
    /atlas.zarr does not exist") and a restored source stayed EIO until a restart."""
    key = KEYS[0]
    parent = world.composite.path.parent
    (parent / "mp").mkdir()
    stderr = parent / "relative.stderr"
    args = ["mount-fs", world.composite.path.name, "mp"]
    with running(args, stderr, cwd=parent) as line:
        if not line.startswith("mounted "):
            pytest.skip(f"FUSE does not work here: {stderr.read_text()}")
        path = parent / "mp" / key
        assert path.read_bytes() == world.expected[key]
        world.delete()
        with pytest.raises(OSError) as failed:
            path.read_bytes()
        assert failed.value.errno == errno.EIO
        world.restore()
        assert path.read_bytes() == world.expected[key], stderr.read_text()
    said = stderr.read_text()
    assert f"cytearc-vfs mount-fs: reopened {world.composite.path}:" in said, said
    assert "Traceback" not in said, said


# ---------------------------------------------------------------- S3 source


@pytest.mark.remote
def test_a_replaced_s3_source_put_back_reads_again(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore
    from obstore.store import from_url
    from test_serve import _remote_sources

    monkeypatch.setenv(CACHE_ENV, "0")  # every read goes to S3 (the child inherits it)
    monkeypatch.setenv(TIMEOUT_ENV, "10")
    bucket, _ = _remote_sources(s3_server)
    proxy = LoopbackProxy(s3_server.endpoint)
    options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
    location = tmp_path / "remote.zarr"
    with mock.patch.object(composite_create, "VIRTUAL_CHUNK_BYTES", 30_000):
        cv.create_composite(
            location, {"s": f"s3://{bucket}/s.zarr"}, source_storage_options={"s": options}
        ).close()
    opened = cv.open_store(location, source_storage_options={"s": options})
    keys = ["RNA/counts/c/0/0", "RNA/counts/c/1/0", "RNA/countsT/c/0/0"]
    expected = {key: value_of(opened, key) for key in keys}
    opened.close()
    bucket_store = from_url(f"s3://{bucket}", **s3_server.storage_options())
    originals = {
        item["path"]: bytes(obstore.get(bucket_store, item["path"]).bytes())
        for item in obstore.list(bucket_store, prefix="s.zarr/RNA/").collect()
        if "/c/" in item["path"]
    }
    credentials = tmp_path / "creds.json"
    credentials.write_text(json.dumps({"s": options}))
    try:
        with serve(
            location, "--source-storage-options", f"@{credentials}", "--reopen-pause", "0"
        ) as served:
            assert get(served.url, keys[0])[2] == expected[keys[0]]
            assert replace_source(s3_server, bucket) > 0
            for key in keys:
                assert_refused(*get(served.url, key), "IdentityMismatchError")
            # with no pause, each refusal reopened (the open's checks, which compare
            # documents and listings, pass; the read on the new store refuses the
            # replaced shards again)
            assert len(served.lines("reopening ")) == len(keys)
            # put back: the same bytes, written again
            for path, data in originals.items():
                obstore.put(bucket_store, path, data)
            for key in keys:
                status, _, body = get(served.url, key)
                assert (status, body) == (200, expected[key])
            # one more reopen, by the first read after the objects were put back
            assert len(served.lines("reopening ")) == len(keys) + 1
    finally:
        proxy.close()


@pytest.mark.remote
def test_a_mount_of_an_s3_source_replaced_and_put_back_reads_again(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore
    from conftest import realistic_counts
    from obstore.store import from_url

    monkeypatch.setenv(CACHE_ENV, "0")
    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/s.zarr"
    cv.write_counts(url, realistic_counts(300, 40, seed=4), storage_options=options)
    source = cv.open_store(url, mode="r+", storage_options=options)
    provenance = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}
    with cv.publish_artifact(source, "RNA/artifacts", "pca", provenance=provenance) as artifact:
        artifact.write_array("data", np.arange(600, dtype=np.float64).reshape(300, 2))
    source.close()
    cv.mount_datastore(url, tmp_path / "m.zarr", source_storage_options=options).close()
    mount = cv.open_store(tmp_path / "m.zarr", source_storage_options=options)
    assert isinstance(mount, cv.MountStore)
    (key,) = [k for k in sync(_keys(mount)) if "/artifacts/pca/" in k and "/c/" in k]
    assert sync(mount.owner_of(key))[1]  # read from the source
    expected = value_of(mount, key)
    mount.close()
    bucket_store = from_url(f"s3://{bucket}", **options)
    original = bytes(obstore.get(bucket_store, f"s.zarr/{key}").bytes())
    credentials = tmp_path / "creds.json"
    credentials.write_text(json.dumps(options))
    with serve(
        tmp_path / "m.zarr", "--source-storage-options", f"@{credentials}", "--reopen-pause", "0"
    ) as served:
        assert get(served.url, key)[:3:2] == (200, expected)
        # now pinned: the version it pinned is its tag
        status, fields, body = get(served.url, key)
        assert (status, body) == (200, expected)
        first_tag = fields["etag"]
        # an artifact of the source is no part of the mount's record (only the
        # counts' fingerprints are): replaced, the pinned read refuses it, and the
        # reopen, like a restart, pins and answers what the source holds now
        other = original[::-1]
        obstore.put(bucket_store, f"s.zarr/{key}", other)
        status, _, body = get(served.url, key)
        assert (status, body) == (200, other)
        assert get(served.url, key)[1]["etag"] != first_tag
        assert len(served.lines("reopening ")) == 1
        # put back: the pin of the replaced object refuses it, and a reopen reads it again
        obstore.put(bucket_store, f"s.zarr/{key}", original)
        assert get(served.url, key)[:3:2] == (200, expected)
        assert get(served.url, key)[1]["etag"] == first_tag  # the same object as at first
        assert len(served.lines("reopening ")) == 2 and len(served.lines("reopened ")) == 2


async def _keys(store: Any) -> list[str]:
    return [key async for key in store.list()]
