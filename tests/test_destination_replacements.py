"""Two writers replacing one destination at once: one writes it, the other stops.

A review ran ``cv.write_counts(d, np.full((300 + i, 50), i), overwrite=True)`` for
i = 1, 2 in two processes at once: both returned success, and the store was
sometimes damaged ("cellData/ids has 302 entries but the counts have 301"), or
(equal shapes) held both writers' chunks. Now (write/claims.py): a local
destination is locked for its writer, so the second fails before it deletes
anything; every writer reads the root back after it emptied the destination,
before its commit and every ``CHECK_INTERVAL`` behind its writes, and stops
with ``DestinationBusyError`` when another writer's root is there, leaving
the destination to that writer.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.write import claims, destinations
from cytearc_vfs.write.claims import CHECK_INTERVAL, STALE_AFTER
from cytearc_vfs.write.destinations import (
    create_destination,
    finish_destination,
    flush_destination,
    settle_destination,
)
from cytearc_vfs.write.write_behind import WriteBehindStore


def _counts(value: int, rows: int = 300) -> np.ndarray:
    return np.full((rows + value, 50), value, dtype=np.uint8)


#: Rows of the racing writes: long enough (~0.1 s locally) that two writers released
#: together overlap, whatever the skew of their release.
RACE_ROWS = 20_000


def _replace(args: tuple[str, int, dict[str, Any] | None, Any]) -> tuple[str, float, float]:
    """One racing writer: its outcome and when (``time.time()``) it held the destination.

    A local destination is held from its lock to the lock's release (recorded
    here): a loaded machine can delay a writer's lock well after its call
    began, so the call's own times would show two writers that took turns as
    overlapping. An object store has no lock: the call's times stand in.
    """
    location, value, options, barrier = args
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"warm-{os.getpid()}.zarr"
    cv.write_counts(scratch, _counts(value), overwrite=True)  # imports done before the race
    shutil.rmtree(scratch)
    held: dict[str, float] = {}
    lock_destination = destinations.lock_local_destination
    release = claims.LocalLock.release

    def locked(path: Path, where: str) -> claims.LocalLock:
        lock = lock_destination(path, where)
        held["from"] = time.time()
        return lock

    def released(lock: claims.LocalLock) -> None:
        if lock.descriptor is not None and "from" in held:
            held.setdefault("until", time.time())
        release(lock)

    destinations.lock_local_destination = locked  # type: ignore[assignment]
    claims.LocalLock.release = released  # type: ignore[method-assign]
    counts = _counts(value, RACE_ROWS)
    barrier.wait()
    began = time.time()
    try:
        cv.write_counts(location, counts, overwrite=True, storage_options=options)
    except cv.DestinationBusyError as exc:
        said = str(exc)
        named = "another" in said and location.rsplit("/", 1)[-1] in said
        return ("busy" if named else f"unclear: {said}", began, time.time())
    ended = time.time()
    return ("written", held.get("from", began), held.get("until", ended))


def _race(location: str, options: dict[str, Any] | None) -> list[tuple[str, float, float]]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(2)
        with context.Pool(2) as pool:
            return pool.map(_replace, [(location, v, options, barrier) for v in (1, 2)])


def _winner(
    runs: list[tuple[str, float, float]], location: str, options: dict[str, Any] | None = None
) -> None:
    """Of two writers that overlapped, exactly one wrote; the store is its, whole.

    Released together, they overlap unless the machine held one back for a whole
    write: then both write, one after the other (their times, from ``_replace``,
    never overlap), and the store is the later's."""
    outcomes = [outcome for outcome, _, _ in runs]
    if outcomes == ["written", "written"]:
        (_, began_1, ended_1), (_, began_2, ended_2) = runs
        assert ended_1 < began_2 or ended_2 < began_1, runs  # never both, overlapping
        winner = 1 if began_1 > began_2 else 2
    else:
        assert sorted(outcomes) == ["busy", "written"], runs
        winner = 1 + outcomes.index("written")
    np.testing.assert_array_equal(_verified(location, options), _counts(winner, RACE_ROWS))


def _verified(location: str, options: dict[str, Any] | None = None) -> np.ndarray:
    store = open_location(location, read_only=True, storage_options=options)
    reports = deep_verify(store, where=location)
    assert reports and all(report.ok for report in reports), [r.problems for r in reports]
    return np.asarray(cv.VirtualArrayReader(location, storage_options=options).read())


def test_two_processes_replacing_one_local_destination(tmp_path: Path) -> None:
    location = str(tmp_path / "d.zarr")
    cv.write_counts(location, _counts(0))
    _winner(_race(location, None), location)
    assert not [p for p in Path(location).iterdir() if p.name.startswith(".")]  # no lock file


def _write_while_held(args: tuple[str, int]) -> str:
    location, _ = args
    try:
        cv.write_counts(location, _counts(2), overwrite=True)
    except cv.DestinationBusyError as exc:
        return str(exc)
    return "written"


def test_a_second_local_writer_fails_before_it_deletes_anything(tmp_path: Path) -> None:
    location = str(tmp_path / "d.zarr")
    cv.write_counts(location, _counts(0))
    root = create_destination(location, overwrite=True, writer="write_counts")
    root.create_group("cellData")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        (said,) = pool.map(_write_while_held, [(location, 2)])
    assert f"being written by process {os.getpid()}" in said and "d.zarr" in said, said
    assert "nothing was written or deleted" in said and "Wait until" in said
    finish_destination(root)
    assert sorted(p.name for p in Path(location).iterdir()) == ["cellData", "zarr.json"]
    # released by the writer's last write: the next writer replaces it
    cv.write_counts(location, _counts(3), overwrite=True)
    np.testing.assert_array_equal(_verified(location), _counts(3))


def test_a_failed_local_writer_releases_its_lock(tmp_path: Path) -> None:
    location = str(tmp_path / "d.zarr")
    root = create_destination(location, overwrite=False, writer="write_counts")
    settle_destination(root)
    cv.write_counts(location, _counts(1), overwrite=True)
    np.testing.assert_array_equal(_verified(location), _counts(1))


@pytest.mark.parametrize("code", ["ENOLCK", "EOPNOTSUPP"])
def test_a_file_system_without_flock_is_written_under_the_claim_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    """Some network and FUSE file systems answer flock with ENOLCK or EOPNOTSUPP: every
    write to them failed with that OSError; they get the claim check, as object stores."""
    import errno

    from cytearc_vfs.write import claims

    def refused(descriptor: int, operation: int) -> None:
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(claims.fcntl, "flock", refused)
    location = str(tmp_path / "d.zarr")
    cv.write_counts(location, _counts(1))
    cv.write_counts(location, _counts(2), overwrite=True)
    np.testing.assert_array_equal(_verified(location), _counts(2))


def test_a_writer_that_lost_its_claim_leaves_the_winner_alone(
    s3_server: S3Server,
) -> None:
    """The object-store path (no lock): A's destination is replaced by B while A
    writes; A's commit is refused, its failure path does not touch B's store."""
    options = s3_server.storage_options()
    location = f"s3://{s3_server.new_bucket()}/d.zarr"
    cv.write_counts(location, _counts(0), storage_options=options)
    first = create_destination(
        location, overwrite=True, writer="write_counts", storage_options=options
    )
    first.create_group("cellData")
    cv.write_counts(location, _counts(2), overwrite=True, storage_options=options)
    with pytest.raises(cv.DestinationBusyError, match="replaced by another writer") as raised:
        finish_destination(first)
    said = str(raised.value)
    assert "d.zarr" in said and "nothing more of this write was stored" in said
    assert "belongs to the other writer" in said
    settle_destination(first)  # the failure path: no revert over B's root
    with pytest.raises(cv.DestinationBusyError):  # every later write is refused
        first.create_group("artifacts")
    np.testing.assert_array_equal(_verified(location, options), _counts(2))


def test_the_check_behind_the_writes_stops_the_next_write(s3_server: S3Server) -> None:
    options = s3_server.storage_options()
    location = f"s3://{s3_server.new_bucket()}/d.zarr"
    cv.write_counts(location, _counts(0), storage_options=options)
    first = create_destination(
        location, overwrite=True, writer="write_counts", storage_options=options
    )
    assert isinstance(first.store, WriteBehindStore) and first.store.claim is not None
    claim = first.store.claim
    cv.write_counts(location, _counts(2), overwrite=True, storage_options=options)
    # as if CHECK_INTERVAL (and not STALE_AFTER: the write above may take longer on a
    # loaded machine) had passed since the last check: the next write starts a read
    # of the root and goes out without waiting for it
    claim.checked_at = time.monotonic() - (CHECK_INTERVAL + 0.1)
    first.create_array("a", shape=(4,), dtype="u1")
    assert claim.reading is not None and not claim.waited
    sync(claim.reading)  # the read behind the writes answered
    with pytest.raises(cv.DestinationBusyError, match="replaced by another writer"):
        first.create_array("b", shape=(4,), dtype="u1")
    settle_destination(first)
    np.testing.assert_array_equal(_verified(location, options), _counts(2))


def _write_an_array(root: Any) -> None:
    array = root.create_array("a", shape=(4,), dtype="u1", chunks=(2,))
    array[:] = np.arange(4, dtype="u1")


def test_a_write_after_a_pause_waits_for_the_check(s3_server: S3Server) -> None:
    """A writer that computed for a while sends nothing into a destination replaced
    meanwhile: its first write after the pause waits for the root's read (slowed at a
    proxy, so that a chunk sent without waiting would land before the answer)."""
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        location = f"s3://{s3_server.new_bucket()}/d.zarr"
        cv.write_counts(location, _counts(0), storage_options=options)
        first = create_destination(
            location, overwrite=True, writer="write_counts", storage_options=options
        )
        assert isinstance(first.store, WriteBehindStore) and first.store.claim is not None
        cv.write_counts(location, _counts(2), overwrite=True, storage_options=options)
        proxy.delay = 0.3
        first.store.claim.checked_at -= STALE_AFTER
        with pytest.raises(cv.DestinationBusyError, match="replaced by another writer"):
            _write_an_array(first)
        settle_destination(first)
        proxy.delay = 0.0
        store = open_location(location, read_only=True, storage_options=options)
        assert not sync(store.exists("a/c/0"))  # nothing of the first writer landed
        np.testing.assert_array_equal(_verified(location, options), _counts(2))
    finally:
        proxy.close()


@pytest.mark.remote
def test_two_processes_replacing_one_s3_destination(s3_server: S3Server) -> None:
    """Slowed at a proxy (every request 0.1 s), both writers overlap for many round trips."""
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        location = f"s3://{s3_server.new_bucket()}/d.zarr"
        cv.write_counts(location, _counts(0), storage_options=options)
        proxy.delay = 0.1
        outcomes = _race(location, options)
        proxy.delay = 0.0
        _winner(outcomes, location, options)
    finally:
        proxy.close()


def test_the_command_line_leaves_another_writers_destination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command whose destination was empty when it began removes it when it fails,
    but not when another writer holds it: that destination is the other writer's."""
    from cytearc_vfs.cli import main
    from cytearc_vfs.write.claims import lock_local_destination

    source, destination = tmp_path / "a.zarr", tmp_path / "d.zarr"
    cv.write_counts(source, _counts(1))
    lock = lock_local_destination(destination, str(destination))  # as a writer starting
    try:
        assert main(["repack", str(source), str(destination)]) != 0
        assert "being written by process" in capsys.readouterr().err
        assert destination.is_dir()  # not removed under the other writer
    finally:
        lock.release()


def test_a_replacement_between_the_check_and_the_commit_is_caught(
    s3_server: S3Server,
) -> None:
    """On S3 the commit is compared and swapped (``If-Match`` the root read just
    before): another writer that replaces the destination after that read, while
    the commit is on its way, is not overwritten by it."""
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        direct = s3_server.storage_options()
        location = f"s3://{s3_server.new_bucket()}/d.zarr"
        cv.write_counts(location, _counts(0), storage_options=direct)
        first = create_destination(
            location,
            overwrite=True,
            writer="write_counts",
            storage_options={**direct, "endpoint": proxy.endpoint},
        )
        first.create_group("cellData")
        flush_destination(first)
        proxy.take()
        # when the commit arrives at the proxy (its check has read the root), another
        # writer replaces the destination, before the commit is forwarded
        proxy.on(
            1,
            lambda: cv.write_counts(location, _counts(2), overwrite=True, storage_options=direct),
            methods="PUT",
        )
        with pytest.raises(cv.DestinationBusyError, match="replaced by another writer"):
            finish_destination(first)
        assert [s.if_match is not None for s in proxy.take() if s.method == "PUT"] == [True]
        settle_destination(first)
        np.testing.assert_array_equal(_verified(location, direct), _counts(2))
    finally:
        proxy.close()


def test_a_writer_checking_a_destination_another_writes_is_told_it_is_busy(
    tmp_path: Path,
) -> None:
    """write_counts checks its destination before it reads its input, without the
    lock. Racing a writer that was replacing the destination, that check read the
    old root, then members the other writer had deleted, and said the destination
    "holds 'RNA', which is not a group CyteArc writes ... Move it or choose another
    destination" (a clean-clone CI run of the two-writer race met it). While
    another writer holds the destination, the check says it is busy."""
    location = tmp_path / "d.zarr"
    cv.write_counts(location, _counts(0))
    root = create_destination(location, overwrite=True, writer="write_counts")
    # keys the check refuses, as it may read them in the middle of a replacement
    root.create_group("RNA").create_array("counts", shape=(4, 2), dtype="uint8")
    flush_destination(root)
    with pytest.raises(cv.DestinationBusyError, match="being written by process"):
        cv.write_counts(location, _counts(2), overwrite=True)
    settle_destination(root)
    with pytest.raises(FileExistsError, match="holds 'RNA'"):  # not held: refused as it is
        cv.write_counts(location, _counts(2), overwrite=True)
