"""One writer per destination: a writer's claim on the destination it fills.

Two writers replacing one destination with ``overwrite=True`` at once could
both report success, the result holding both writers' keys. Two defences,
one per kind of destination (docs/writing.md, "One writer per destination"):

- **Local destinations are locked.** :func:`lock_local_destination` takes an
  exclusive ``flock`` on the destination directory itself before anything is
  deleted or created in it, and the writer holds it until its last write
  (replacement empties the directory and never removes it, so the lock is
  on the directory every writer opens). A second writer fails at once,
  naming the process that writes, and has touched nothing.
- **Every destination is claimed.** The root document a writer writes first
  carries 64 random bits of trailing whitespace (JSON ignores it), and so
  does each root rewrite before its commit: the root holds exactly one of
  this writer's documents while the destination is its own. :class:`Claim`
  reads the root back before the commit and, at most every
  :data:`CHECK_INTERVAL` seconds, before further writes; a root that is not
  one of this writer's means another writer replaced the destination, and
  the writer stops with :class:`~cytearc_vfs.errors.DestinationBusyError`,
  sending nothing more and cleaning nothing up (the destination is the
  other writer's now). Object stores cannot be locked, so this check is all
  they get: writes this writer had sent before it noticed still land. The
  commit of an obstore destination is compared and swapped
  (:meth:`Claim.commit`); elsewhere it follows its check by a round trip.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import ObjectStore

from ..errors import DestinationBusyError
from ..format.object_keys import object_key
from .stopping import finish_sent

if sys.platform != "win32":
    import fcntl

__all__ = [
    "CHECK_INTERVAL",
    "STALE_AFTER",
    "Claim",
    "LocalLock",
    "create_root",
    "lock_local_destination",
    "marker_document",
    "nonce",
    "replace_root",
]

#: Seconds between two checks of the root while a writer writes (and one more
#: before its commit): nothing locally, about two GETs a second to an object store.
CHECK_INTERVAL = 0.5
#: Seconds without a check after which the next write waits for one: a writer
#: that was busy reading or computing sends nothing before it knows the root.
STALE_AFTER = 4 * CHECK_INTERVAL
ROOT_DOCUMENT = "zarr.json"


def nonce() -> bytes:
    """64 random bits as spaces and tabs: ``document + nonce`` is the same JSON."""
    bits = secrets.randbits(64)
    return "".join(" \t"[(bits >> place) & 1] for place in range(64)).encode()


@dataclass
class Claim:
    """The root documents one writer wrote to ``store``; see the module docstring."""

    store: Store
    where: str
    mark: bytes = field(default_factory=nonce)
    """This writer's whitespace, ending each root document it writes before its commit."""
    owned: set[bytes] = field(default_factory=set)
    """Every root document this writer wrote (any may be the one stored while
    writes are in flight)."""
    lock: LocalLock | None = None
    """The local destination's lock, released by :meth:`release`."""
    checked_at: float = field(default_factory=time.monotonic)
    lost: bool = False
    checks: int = 0
    """Reads of the root made (counted by tests)."""
    reading: asyncio.Task[None] | None = None
    """The read of the root going on behind the writes, if any."""
    waited: bool = False
    """Whether the writes wait for :attr:`reading` (it started after a long pause)."""

    def stamp(self, document: bytes) -> bytes:
        """``document`` ending with this writer's mark, remembered as this writer's."""
        stamped = document if document.endswith(self.mark) else document + b"\n" + self.mark
        self.owned.add(stamped)
        return stamped

    async def check(self, *, now: bool = False) -> None:
        """Raise :class:`DestinationBusyError` if the root is known not to be this writer's.

        ``now`` (before the commit): read the root and wait for the answer.
        Otherwise a read starts behind the writes when :data:`CHECK_INTERVAL`
        seconds passed since the last, and its answer stops the next write:
        the writer waits for no round trip of its own (a check in line would
        add one to the writes' rounds each interval). After a pause of
        :data:`STALE_AFTER` seconds without a check, though, the writes wait
        for the read: a burst after a long computation would otherwise go out
        whole into a destination replaced during it.
        """
        if not self.lost and now:
            await self._read(raising=True)
        elif not self.lost and self._due():
            self.waited = time.monotonic() - self.checked_at >= STALE_AFTER
            self.checked_at = time.monotonic()
            self.reading = asyncio.ensure_future(self._read(raising=False))
        if self.waited and self.reading is not None and not self.reading.done():
            await asyncio.wait([self.reading])  # a waiter cancelled leaves the read alone
        if self.lost:
            raise self.error()

    async def commit(self, key: str, document: bytes) -> None:
        """Store the commit ``document`` at ``key`` if the root is still this writer's.

        An obstore destination (S3, GCS, Azure) compares and swaps: the root
        read before is written over only while its ETag is unchanged
        (``If-Match``), so no other writer's replacement can come between the
        check and the commit. Other stores check, then write (one round trip
        between them).
        Another writer's commit may be this one byte for byte (it carries no
        mark): it counts as this writer's only once checked and sent.
        """
        client = self.store.store if isinstance(self.store, ObjectStore) else None
        if client is not None and not self.lost:
            import obstore
            from obstore.exceptions import BaseError, PreconditionError

            self.checks += 1
            where = object_key(self.store, key)  # a client shared by a bucket's stores
            try:
                found = await obstore.get_async(client, where)
                data, tag = bytes(await found.bytes_async()), found.meta.get("e_tag")
            except FileNotFoundError:  # obstore's NotFoundError is one
                data, tag = None, None
            if data is None or data not in self.owned:
                self.lost = True
                raise self.error()
            if tag is not None:
                self.owned.add(document)
                try:
                    swap = obstore.put_async(client, where, document, mode={"e_tag": tag})
                    await finish_sent(swap)
                    return
                except PreconditionError:
                    self.lost = True
                    raise self.error() from None
                except (BaseError, OSError):
                    # a backend or server without conditional writes (or a failure of
                    # this one write): checked again and written as elsewhere
                    await self.check(now=True)
        else:
            await self.check(now=True)
        self.owned.add(document)
        buffer = default_buffer_prototype().buffer.from_bytes(document)
        await finish_sent(self.store.set(key, buffer))

    def _due(self) -> bool:
        idle = self.reading is None or self.reading.done()
        return idle and time.monotonic() - self.checked_at >= CHECK_INTERVAL

    async def _read(self, *, raising: bool) -> None:
        self.checks += 1
        try:
            found = await self.store.get(ROOT_DOCUMENT, default_buffer_prototype())
        except Exception:
            if raising:
                raise
            return  # a read behind that failed tells nothing; the writes' own failures stop
        if found is None or found.to_bytes() not in self.owned:
            self.lost = True

    def error(self) -> DestinationBusyError:
        """The error of a writer whose destination another writer replaced."""
        return DestinationBusyError(
            f"destination {self.where} was replaced by another writer while this one wrote "
            "it; nothing more of this write was stored and nothing was cleaned up: the "
            "destination now belongs to the other writer. Write one destination with one "
            "writer at a time: wait for the other writer to finish, or choose another "
            "destination"
        )

    def release(self) -> None:
        """Release the local lock (the writer's last write is done, or it failed)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


@dataclass
class LocalLock:
    """An exclusive ``flock`` held on a destination directory (its open descriptor)."""

    descriptor: int | None

    def release(self) -> None:
        """Unlock and close; a second call does nothing."""
        if self.descriptor is not None:
            os.close(self.descriptor)  # closing the only descriptor releases the flock
            self.descriptor = None

    def __del__(self) -> None:
        self.release()


#: What flock answers on a file system that cannot lock.
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})


def lock_local_destination(path: Path, where: str) -> LocalLock:
    """Lock the destination directory ``path`` (created if absent) for one writer.

    Raises :class:`DestinationBusyError`, naming the process that holds the
    lock when ``/proc/locks`` tells it, if another writer holds it.
    """
    path.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":  # pragma: no cover - no flock: the claim alone, as on S3
        return LocalLock(None)
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            # a file system without flock (some network and FUSE ones): the claim
            # alone guards the destination, as on an object store
            os.close(descriptor)
            return LocalLock(None)
        holder = _lock_holder(descriptor)
        os.close(descriptor)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        who = "another process" if holder is None else f"process {holder}"
        raise DestinationBusyError(
            f"destination {where} is being written by {who} (it holds the destination's "
            "lock); nothing was written or deleted. Wait until that writer has finished "
            "(then write again, with overwrite=True to replace what it wrote), or choose "
            "another destination"
        ) from None
    return LocalLock(descriptor)


def _lock_holder(descriptor: int) -> int | None:
    """The pid that ``/proc/locks`` gives for a flock on the file of ``descriptor``."""
    status = os.fstat(descriptor)
    device = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None  # not Linux: the message says "another process"
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == device:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def create_root(store: Store, document: bytes, where: str) -> None:
    """Write the root ``document`` of a destination found empty, as zarr's mode ``"w-"`` does.

    The spec's rule: a destination without keys is created with mode
    ``"w-"``, which refuses keys that appear after the check. A root written
    by another writer since :func:`~cytearc_vfs.write.destination_checks.check_destination` is refused, not
    overwritten: the write is ``set_if_not_exists`` (a check and a write where
    the backend has no conditional write) and the root read back must be this
    one (backends answer an existing key silently).
    """

    appeared = DestinationBusyError(
        f"destination {where}: a store appeared there after it was checked (another "
        "writer?); nothing was written. Choose another destination, or retry once "
        "the other writer is done (with overwrite=True to replace what it wrote)"
    )

    async def create() -> None:
        buffer = default_buffer_prototype().buffer.from_bytes(document)
        try:
            await finish_sent(store.set_if_not_exists(ROOT_DOCUMENT, buffer))
        except NotImplementedError:
            # a backend without conditional writes (obstore's HTTPStore): zarr's own
            # "w-", a check and then the write
            if await store.exists(ROOT_DOCUMENT):
                raise appeared from None
            await finish_sent(store.set(ROOT_DOCUMENT, buffer))
        found = await store.get(ROOT_DOCUMENT, default_buffer_prototype())
        if found is None or found.to_bytes() != document:
            raise appeared

    sync(create())


def marker_document(marker: dict[str, Any], claim: Claim) -> bytes:
    """The root's first ``document``: the marker, and the claim's mark (see below)."""
    # Two writers of one destination write the same marker, and backends answer a
    # set_if_not_exists of an existing key silently: _create_root tells its own root
    # from another's by the claim's 64 random bits of trailing whitespace, which JSON
    # ignores (readers and the layout see nothing). The writer's last root write
    # replaces it.
    document = {"zarr_format": 3, "node_type": "group", "attributes": marker}
    return claim.stamp(json.dumps(document).encode())


def replace_root(claim: Claim, document: bytes) -> None:
    """Empty ``store`` down to the root ``document`` (which carries the marker).

    The root document is replaced first and deleted never: a crash while the
    old keys go leaves a root that is refused as unfinished, never the old
    store with some of its chunks gone (which zarr would read as zeros). The
    top-level members are deleted concurrently; the destination itself stays
    (a local directory keeps the lock its writer holds on it). Then the root
    is read back: a writer that replaced the destination at the same moment
    has the last root, and this one stops before it writes anything.
    """
    store = claim.store

    async def remove(name: str) -> None:
        if await store.exists(name):  # a file at the root (a partial write)
            await finish_sent(store.delete(name))
        else:
            await finish_sent(store.delete_dir(name))

    async def replace() -> None:
        buffer = default_buffer_prototype().buffer.from_bytes(document)
        await finish_sent(store.set(ROOT_DOCUMENT, buffer))
        names = [name async for name in store.list_dir("") if name != ROOT_DOCUMENT]
        await asyncio.gather(*(remove(name) for name in names))
        await claim.check(now=True)

    sync(replace())
