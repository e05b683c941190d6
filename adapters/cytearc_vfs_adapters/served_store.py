"""``ServedStore``: the store a long-running server reads, reopened when a source is restored.

``cytearc-vfs serve`` and ``mount-fs`` open their location once and answer
from that open store for days. A composite's or mount's open compares every
source with the record (fingerprints, seals, pinned versions); afterwards a
source that is deleted or replaced is refused (``IdentityMismatchError`` or
``FileNotFoundError``), never read as other bytes. Only an open compares
again, so a source put back as it was (restored from a copy) stayed refused
until the server was restarted. :class:`ServedStore` makes that open itself:

* a read that fails with one of those errors asks :meth:`ServedStore.recover`,
  which reopens the location with the very ``open_store`` call the server
  started with (nothing weaker). If that open succeeds, the new store takes
  the place of the old one and the failed request is read again, once, on
  it; if it fails, the request is refused as before, with what the reopen
  found (:meth:`ServedStore.explain`);
* one reopen at a time: concurrent failing requests wait for the one
  running and take its outcome (decided under a lock on zarr's event loop,
  where serve and mount-fs both run their store calls; the open itself runs
  on a thread, shielded from a request that goes away meanwhile);
* after a reopen, the next one waits until something changed on disk (the
  stat of the location's or a local source's directory or root ``zarr.json``:
  a deleted, restored or replaced source changes it) or
  :data:`REOPEN_PAUSE_SECONDS` (an option of both commands) have passed,
  which is how a remote source's return is noticed;
* a store that reads no other store (an ordinary store) is never reopened,
  nor is one handed over already open (:meth:`ServedStore.fixed`).

The caller reads one request entirely from one store object, which it
takes with :meth:`ServedStore.use` and gives back with
:meth:`ServedStore.done` (:meth:`ServedStore.finished` on an event loop)
when the answer is sent (:meth:`ServedStore.recover` hands over the new
store taken the same way). A store taken out of service
stays open while a request still reads it, so a streamed answer that began
on it finishes on it or fails, and never continues from another store; it is
closed (its remote cache directory removed) when its last request is done,
so a server that reopens again and again keeps one store per request in
flight, not one per reopen. On an event loop that close runs on a thread,
so the removal of a large cache directory holds up no other request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zarr.abc.store import Store

from cytearc_vfs.errors import IdentityMismatchError
from cytearc_vfs.inspection.read_sources import stores_read_by
from cytearc_vfs.remote.locations import (
    Location,
    absolute_path,
    describe_location,
    local_path,
)

__all__ = ["REOPEN_PAUSE_SECONDS", "ServedStore", "may_be_restored"]

log = logging.getLogger(__name__)

#: Seconds after a reopen before the next one, when nothing changed on disk.
REOPEN_PAUSE_SECONDS = 60.0

#: One stat: (device, inode, size, mtime in ns), or ``None`` when the path is absent.
_Stat = tuple[int, int, int, int] | None


def may_be_restored(error: BaseException) -> bool:
    """Whether ``error`` says a source is gone or not as recorded: a reopen may cure it.

    ``IdentityMismatchError`` (a source changed or replaced) and
    ``FileNotFoundError`` (a source or one of its files deleted). Other
    failures (a timeout, a refused credential) are not about what a source
    holds, and a reopen would not tell more.
    """
    return isinstance(error, IdentityMismatchError | FileNotFoundError)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One reopen: when it began, what the disk looked like then, and how it ended."""

    began: float
    """``time.monotonic()`` when it began."""
    disk: tuple[_Stat, ...]
    """The stats of the watched paths before it began (see :meth:`ServedStore._disk`)."""
    failure: str | None
    """Why the open failed (its error's type and message); ``None`` when it succeeded."""


class ServedStore:
    """The store a server answers from, and how to open it again (see the module).

    Make one with :meth:`open` (a location, reopened when a source is
    restored) or :meth:`fixed` (a store already open, never reopened).

    Parameters
    ----------
    store
        The store opened first.
    reopen
        Opens the location again with the checks of the first open; ``None``:
        never reopened.
    where
        The location as messages name it.
    location
        The location, whose local directories (its own and its sources') are
        watched for changes; ``None`` watches nothing.
    pause
        Seconds after a reopen before the next one when nothing watched changed.
    """

    def __init__(
        self,
        store: Store,
        reopen: Callable[[], Store] | None,
        *,
        where: str,
        location: Location | None = None,
        pause: float = REOPEN_PAUSE_SECONDS,
    ) -> None:
        if not pause >= 0:
            raise ValueError(f"the reopen pause must be 0 seconds or more, got {pause!r}")
        self._current = store
        self._reopen = reopen
        self._where = where
        self._location = location
        self._pause = pause
        self._watched = self._watched_paths(store)
        # the stores that requests read, by id, with how many read each: one out of
        # service (not ``_current``) is closed when the last of its requests is done
        self._uses_lock = threading.Lock()  # FUSE calls come from its threads
        self._readers: dict[int, tuple[Store, int]] = {}
        self._last: _Attempt | None = None
        self._lock: asyncio.Lock | None = None  # made on zarr's event loop, at first use
        self._running: asyncio.Future[Store | None] | None = None  # the reopen under way
        self._closed = False
        self.reopens = 0
        """Reopens attempted so far (a count, for tests and the commands' reports)."""
        self.recovered = 0
        """Reopens that succeeded and put a new store in service."""

    @classmethod
    def open(
        cls,
        location: Location,
        *,
        storage_options: Mapping[str, Any] | None = None,
        source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
        pause: float = REOPEN_PAUSE_SECONDS,
        as_anndata: str | None = None,
    ) -> ServedStore:
        """Open ``location`` read-only with ``cv.open_store``; the same call reopens it.

        ``as_anndata`` names an assay: the store is served as an AnnData
        container presenting that assay (``cv.anndata_view``), opened again the
        same way.
        """
        from cytearc_vfs.read.opening import open_store

        path = local_path(location)
        if path is not None and not isinstance(location, Store):
            # reopened later from whatever directory the process is in then: once
            # mounted, libfuse moves mount-fs to '/', where a relative path named
            # another place (or none), so a restored source was never found
            location = absolute_path(path)

        def opened() -> Store:
            if as_anndata is not None:
                from .anndata_output.view import anndata_view

                return anndata_view(
                    location,
                    as_anndata,
                    storage_options=storage_options,
                    source_storage_options=source_storage_options,
                )
            return open_store(
                location,
                mode="r",
                storage_options=storage_options,
                source_storage_options=source_storage_options,
            )

        where = describe_location(location)
        return cls(opened(), opened, where=where, location=location, pause=pause)

    @classmethod
    def fixed(cls, store: Store) -> ServedStore:
        """``store`` as it is, never reopened (a store opened by the caller)."""
        return cls(store, None, where=str(store))

    # ------------------------------------------------------------- state

    @property
    def current(self) -> Store:
        """The store in service: a request reads all of its answer from this one object."""
        return self._current

    @property
    def reopenable(self) -> bool:
        """Whether a failure may reopen the store: it was opened from a location and reads
        other stores (a composite's sources, a mount's source)."""
        return self._reopen is not None and bool(stores_read_by(self._current))

    @property
    def retired(self) -> int:
        """Stores out of service that a request still reads (a count, for tests)."""
        with self._uses_lock:
            return sum(store is not self._current for store, _ in self._readers.values())

    def use(self) -> Store:
        """The store in service, taken for one request: give it back with :meth:`done`."""
        with self._uses_lock:
            store = self._current
            _, reading = self._readers.get(id(store), (store, 0))
            self._readers[id(store)] = (store, reading + 1)
            return store

    def done(self, store: Store) -> None:
        """A request that took ``store`` (:meth:`use`, :meth:`recover`) is answered.

        A store out of service that no request reads any more is closed, on
        the calling thread. On an event loop, use :meth:`finished`.
        """
        for unread in self._given_back((store,)):
            unread.close()

    async def finished(self, stores: Sequence[Store]) -> None:
        """:meth:`done` for each of ``stores``, from a coroutine on an event loop.

        A store to close is closed on a thread: removing its remote cache
        directory (up to the cache budget's files) does not hold up the loop's
        other requests. The close runs to its end even if the caller is
        cancelled meanwhile.
        """
        unread = self._given_back(stores)
        if unread:
            await asyncio.shield(asyncio.to_thread(_close_each, unread))

    def _given_back(self, stores: Sequence[Store]) -> list[Store]:
        """Count ``stores`` as no longer read by one request each; the ones to close now."""
        unread: list[Store] = []
        with self._uses_lock:
            for store in stores:
                _, reading = self._readers[id(store)]
                if reading > 1:
                    self._readers[id(store)] = (store, reading - 1)
                    continue
                del self._readers[id(store)]
                if store is not self._current and not self._closed:
                    unread.append(store)  # else in service, or closed by close()
        return unread

    def _put_in_service(self, store: Store) -> list[Store]:
        """``store`` takes the place of the current one, unless :meth:`close` came first.

        Returns the stores to close now: the old one when no request reads it
        (else the last one that does closes it), or ``store`` itself when the
        server closed meanwhile (decided under the lock ``close`` takes).
        """
        with self._uses_lock:
            if self._closed:
                return [store]
            old, self._current = self._current, store
            return [] if id(old) in self._readers else [old]

    def close(self) -> None:
        """Close the store in service and every store it replaced that a request reads."""
        with self._uses_lock:
            self._closed = True
            stores = {id(store): store for store, _ in self._readers.values()}
            stores[id(self._current)] = self._current
        for store in stores.values():
            store.close()

    # ----------------------------------------------------------- reopening

    async def recover(self, failed: Store, error: BaseException) -> Store | None:
        """The store to read the failed request again from, or ``None`` to refuse it.

        ``failed`` is the store the request read from, ``error`` what it
        raised. A store returned is taken for the request as by :meth:`use`
        (give it back with :meth:`done`). A store put in service since
        ``failed`` began is returned at once; else, when ``error`` may be cured by a reopen
        (:func:`may_be_restored`), the location is reopened unless the last
        reopen began less than ``pause`` seconds ago and nothing watched
        changed on disk since. Runs on zarr's event loop.
        """
        if not may_be_restored(error) or not self.reopenable:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # held for the decision only, never for the open
            if self._current is not failed:
                return self.use()  # reopened since this request began
            running = self._running
            if running is None or running.done():
                disk = await asyncio.to_thread(self._disk)
                last = self._last
                if (
                    last is not None
                    and disk == last.disk
                    and time.monotonic() - last.began < self._pause
                ):
                    return None
                running = self._running = asyncio.ensure_future(self._reopened(disk))
        # shielded: a request that goes away meanwhile does not stop the reopen,
        # which the others wait for (and a second one would race it)
        reopened = await asyncio.shield(running)
        # the store in service now: the reopened one, or one that passed later
        return None if reopened is None else self.use()

    async def _reopened(self, disk: tuple[_Stat, ...]) -> Store | None:
        assert self._reopen is not None
        began = time.monotonic()
        self.reopens += 1
        log.warning("reopening %s: a read found a source gone or changed", self._where)
        try:
            # open_store drives zarr's loop itself: from a thread, never on the loop
            store = await asyncio.to_thread(self._reopen)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
            self._last = _Attempt(began, disk, failure)
            log.warning(
                "%s still refused; the reopen failed: %s", self._where, _first_line(failure)
            )
            return None
        self._last = _Attempt(began, disk, None)
        unread = self._put_in_service(store)  # closed below, on a thread
        if self._current is not store:  # the server stopped while it opened
            await asyncio.to_thread(_close_each, unread)
            return None
        self._watched = self._watched_paths(store)
        self.recovered += 1
        log.warning(
            "reopened %s: its sources passed the open's checks; the failed read is tried "
            "again on it",
            self._where,
        )
        if unread:
            await asyncio.to_thread(_close_each, unread)
        return store

    def explain(self, error: BaseException) -> str:
        """What a refusal of ``error`` adds: the last reopen's outcome and when the next may come.

        ``""`` when the store is not reopened (an ordinary store, a store
        handed over open) or ``error`` is not about a source.
        """
        if not may_be_restored(error) or not self.reopenable or self._last is None:
            return ""
        last = self._last
        if last.failure is None:
            found = (
                f"{self._where} was reopened (its sources passed the open's checks) and the "
                "read tried again on it, which failed too"
            )
        else:
            # what failed, without its own remedy: the one below is what to do for both
            # (a gone source's answer said "restore ... at that path" three ways)
            found = f"reopening {self._where} failed: {_first_line(last.failure).split('; ')[0]}"
        return (
            f"{found}; restore the source as the composite or mount recorded it (the same "
            "files or objects, from a copy): the server reopens it by itself once the "
            "source's directory or root zarr.json changes, or "
            f"{self._pause:g} s after the last try, with no restart"
        )

    # ------------------------------------------------------------- the disk

    def _watched_paths(self, store: Store) -> tuple[str, ...]:
        """The directories and root documents whose stats show a source coming and going."""
        if self._reopen is None or self._location is None:
            return ()
        paths: list[str] = []
        for location in (self._location, *stores_read_by(store).values()):
            path = local_path(location)
            if path is not None:
                paths += [str(path), str(path / "zarr.json")]
        return tuple(paths)

    def _disk(self) -> tuple[_Stat, ...]:
        return tuple(_stat(path) for path in self._watched)


def _stat(path: str) -> _Stat:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _close_each(stores: Sequence[Store]) -> None:
    for store in stores:
        store.close()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no message"
