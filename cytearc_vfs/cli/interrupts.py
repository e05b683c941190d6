"""Stopping cleanly on SIGINT, SIGTERM and SIGHUP.

A command that writes a destination runs inside :func:`interruptible`: both
signals raise :class:`Interrupted` in the main thread (as Ctrl-C raises
``KeyboardInterrupt``). The writer stops everything it started before the
interrupt leaves it (:mod:`cytearc_vfs.write.stopping`: its tasks on zarr's
loop are cancelled and awaited, store writes already sent end first); before
the command reports, :func:`stop_background_io` stops whatever else still
runs there, so nothing is written after the cleanup; then :class:`DestinationGuard` removes a destination that this
command created. A destination that existed before (``--overwrite``) is left
for ``info`` to name and a rerun with ``--overwrite`` to replace.
"""

from __future__ import annotations

import _thread
import asyncio
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from .process_end import end_process

if TYPE_CHECKING:
    from ..remote.locations import Location

__all__ = [
    "DestinationGuard",
    "also_interrupted_by",
    "Interrupted",
    "begin_cleanup",
    "end_interrupted_process",
    "interruptible",
    "stop_background_io",
]

#: SIGHUP is the terminal closing (an SSH session dropped): left to its default it
#: ended a write at once, its destination left unfinished for a rerun with
#: --overwrite, so it stops a command as SIGTERM does.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while a command ran.

    A ``BaseException`` like ``KeyboardInterrupt``, so library code that
    catches ``Exception`` does not swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Delivery:
    """Whether an interrupt has been taken: cleanup must not be cut short by another."""

    cleaning = False
    #: inside the hook that delivers a swallowed interrupt again
    redelivering = False
    #: the signal whose Interrupted was raised in this command, if any
    raised: int | None = None


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    if _Delivery.cleaning:
        return  # one interrupt is enough: a second would cut the cleanup short
    if _Delivery.redelivering:
        # inside the hook below: raised here it would be swallowed again
        _redeliver_later(signum)
        return
    _Delivery.raised = signum
    raise Interrupted(signum)


def interrupt_behind(exc: BaseException) -> Interrupted | None:
    """The interrupt that ``exc`` stands for, or ``None``.

    An :class:`Interrupted` raised inside a C extension's import (pandas' parser
    importing pandas, at the moment Ctrl-C lands) comes out as that module's
    ``ImportError``, its cause dropped: an error of the command while an
    interrupt was raised in it is that interrupt, not a bug to report.
    """
    if isinstance(exc, Interrupted):
        return exc
    if _Delivery.raised is None:
        return None
    return Interrupted(_Delivery.raised)


def _redeliver_later(signum: int) -> None:
    # From another thread, a moment later: the main thread takes the signal at
    # its next bytecode outside the hook (interrupt_main called on the main
    # thread itself would run the handler inside the hook, at once).
    timer = threading.Timer(0.01, _thread.interrupt_main, args=(signal.Signals(signum),))
    timer.daemon = True
    timer.start()


def _redeliver_swallowed(unraisable: Any) -> None:
    # A signal handler runs between any two bytecodes, also inside a weakref
    # callback or __del__, where Python prints the exception as "Exception
    # ignored" and goes on. Deliver the interrupt again to the main thread,
    # where it stops the command as it should.
    exc = unraisable.exc_value
    if isinstance(exc, Interrupted):
        if not _Delivery.cleaning:
            _Delivery.redelivering = True
            try:
                _redeliver_later(exc.signum)
            finally:
                _Delivery.redelivering = False
        return
    _previous_hook(unraisable)


_previous_hook = sys.unraisablehook


def begin_cleanup() -> None:
    """From now on further SIGINT/SIGTERM are ignored until the command reports."""
    _Delivery.cleaning = True


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` inside the block.

    A signal ignored when the command started stays ignored, as Python leaves
    it: ``nohup`` ignores SIGHUP so the command outlives its terminal, and a
    shell ignores SIGINT for a job it starts in the background (``cmd &`` in a
    script) so Ctrl-C stops the script, not the job.
    """
    global _previous_hook
    caught = tuple(each for each in _SIGNALS if signal.getsignal(each) is not signal.SIG_IGN)
    previous = {each: signal.getsignal(each) for each in caught}
    _previous_hook = sys.unraisablehook
    _Delivery.cleaning = False
    _Delivery.raised = None
    sys.unraisablehook = _redeliver_swallowed
    for each in caught:
        signal.signal(each, _raise_interrupted)
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
        sys.unraisablehook = _previous_hook
        _Delivery.cleaning = False
        _Delivery.raised = None


@contextmanager
def also_interrupted_by(signum: int) -> Iterator[None]:
    """Inside :func:`interruptible`, ``signum`` raises :class:`Interrupted` too.

    For a command that serves until it is stopped (``mount-fs``, ``serve``):
    SIGHUP, the terminal closing, ends it the same way as SIGINT and SIGTERM.
    """
    previous = signal.getsignal(signum)
    if previous is signal.SIG_IGN:
        # ignored when the command started (nohup): the command is meant to outlive it
        yield
        return
    signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def stop_background_io(timeout: float = 10.0) -> None:
    """Stop every task on zarr's loop and wait for the file operations already in threads.

    The writer that was interrupted has stopped its own work before the
    interrupt reached the command (:mod:`cytearc_vfs.write.stopping`); this
    stops whatever else still runs on zarr's event-loop thread (reads, a
    command's own work) with the same function, so nothing is written after
    the cleanup and nothing prints "Task was destroyed but it is pending!" at
    exit. Shutting the loop's default executor down waits for file reads and
    writes already in a thread. zarr makes a new loop on its next call.
    """
    zarr_sync = sys.modules.get("zarr.core.sync")
    if zarr_sync is None:
        # zarr was never (or only partly) imported: no I/O ran, and importing
        # it now could meet a module the interrupt left half-initialised
        return
    loop = zarr_sync.loop[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return
    from ..write.stopping import stop_work

    with suppress(TimeoutError, asyncio.CancelledError, RuntimeError):
        stop_work(everything=True, timeout=timeout)
    future = asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop)
    with suppress(TimeoutError, asyncio.CancelledError, RuntimeError):
        future.result(timeout)
    # fsspec's clients made on this loop cannot outlive it: close them on it
    with suppress(TimeoutError, asyncio.CancelledError, RuntimeError):
        asyncio.run_coroutine_threadsafe(_close_async_filesystems(), loop).result(timeout)
    # The loop's executor is shut down for good: let zarr start a fresh loop
    # on its next call, so a process that goes on (a test, a notebook) can.
    zarr_sync.cleanup_resources()


async def _close_async_filesystems() -> None:
    """Close and forget fsspec's cached asynchronous filesystems (gcsfs, s3fs, http).

    fsspec caches one instance per set of options, and an instance made with
    ``asynchronous=True`` (as zarr makes them) keeps the HTTP session of the
    loop it first ran on: zarr's, about to close. Left cached, the next store
    opened with the same options would get it and fail with "Event loop is
    closed"; dropped unclosed, its sockets would leak. fsspec has no public
    close for them, so this closes the sessions the three libraries keep
    (``_session``: aiohttp; ``_s3creator``: aiobotocore), as their own
    finalizers do. Synchronous instances run on fsspec's own loop and stay.
    """
    fsspec_asyn = sys.modules.get("fsspec.asyn")
    if fsspec_asyn is None:
        return  # no fsspec filesystem was ever made
    pending = [fsspec_asyn.AsyncFileSystem]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        cache = cls.__dict__.get("_cache")
        if not isinstance(cache, dict):
            continue
        for token, instance in list(cache.items()):
            if not getattr(instance, "asynchronous", False):
                continue
            del cache[token]
            session = getattr(instance, "_session", None)
            creator = getattr(instance, "_s3creator", None)
            # a session another loop made may refuse to close on this one; it
            # is dropped from the cache either way
            with suppress(Exception):
                if session is not None and not getattr(session, "closed", True):
                    await session.close()
                if creator is not None:
                    await creator.__aexit__(None, None, None)


def end_interrupted_process(code: int) -> NoReturn:
    """End the process of an interrupted command, its cleanup done and reported.

    Interpreter shutdown would go on to join or abandon the threads the work
    started (zarr's event-loop thread, decoder and writer pools, HDF5 reads)
    and tear modules down under them; a thread still inside a C extension can
    crash that (seen once under load: SIGSEGV after the report, so exit -11
    instead of 130). What an interrupted command must do is done by now: its
    writes were stopped, its destination removed or named, its line printed.
    So the exit handlers run, the output is flushed, and the process ends
    without the rest, and without waiting for those threads
    (:func:`~cytearc_vfs.cli.process_end.end_process`).
    """
    end_process(code, wait_for_threads=False)


def _has_keys(location: Location, storage_options: Mapping[str, Any] | None) -> bool:
    from ..remote.locations import local_path, open_location

    path = local_path(location)
    if path is not None:
        return path.exists() and (not path.is_dir() or any(path.iterdir()))
    from zarr.core.sync import sync

    store = open_location(location, read_only=True, storage_options=storage_options)

    async def first() -> bool:
        async for _ in store.list():
            return True
        return False

    return sync(first())


class DestinationGuard:
    """Remembers whether a destination existed, to remove it if this command created it.

    Parameters
    ----------
    location
        The destination the command will create.
    storage_options
        Backend options for a URL destination.
    """

    def __init__(
        self, location: Location, *, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        from ..remote.locations import given_location, local_path

        self._location = location
        self._storage_options = storage_options
        self.existed = _has_keys(location, storage_options)
        path = local_path(location)
        # an empty directory is a free destination, but the user's (mkdir out.zarr, a
        # folder with its own permissions): a failure empties it and leaves it
        self._kept_directory = path is not None and not self.existed and path.is_dir()
        self.where = given_location(location)

    def _unfinished(self) -> bool | None:
        """Whether the destination's root now names an unfinished writer (a replacement
        began), or ``None`` when its root cannot be read."""
        import json

        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        from ..format.records import PENDING_STORE_ATTR
        from ..remote.locations import open_location

        try:
            store = open_location(
                self._location, read_only=True, storage_options=self._storage_options
            )
            root = sync(store.get("zarr.json", default_buffer_prototype()))
            document = {} if root is None else json.loads(root.to_bytes())
        except Exception:
            return None
        attributes = document.get("attributes") if isinstance(document, dict) else None
        return isinstance(attributes, dict) and PENDING_STORE_ATTR in attributes

    def discard(self) -> str:
        """Remove the destination if this command created it; returns what was done."""
        from ..remote.locations import local_path, open_location

        if self.existed:
            unfinished = self._unfinished()
            if unfinished is None:
                return (
                    f"{self.where} existed before and was left as it is; if it was being "
                    "replaced, 'cytearc-vfs info' names its state and the same command with "
                    "--overwrite replaces it"
                )
            if unfinished:
                # the replacement marks the root before it deletes anything: what the
                # destination held is gone, and saying "left as it is" hid that
                return (
                    f"{self.where} existed before and was being replaced: what it held is "
                    "gone and it is unfinished now (it does not open; 'cytearc-vfs info' says "
                    "so); the same command with --overwrite writes it again"
                )
            return f"{self.where} existed before and is unchanged (it was not replaced yet)"
        path = local_path(self._location)
        if path is not None and self._kept_directory:
            if not path.is_dir() or not any(path.iterdir()):
                return "nothing was written"
            for entry in list(path.iterdir()):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            if any(path.iterdir()):
                return f"{self.where} could not be emptied completely; empty it yourself"
            return (
                f"removed what was written in the unfinished destination {self.where} (an "
                "empty directory before the command, left empty)"
            )
        if path is not None:
            if not path.exists():
                return "nothing was written"
            shutil.rmtree(path, ignore_errors=True)
            if path.exists():
                return f"{self.where} could not be removed completely; delete it yourself"
            return f"removed the unfinished destination {self.where}"
        from zarr.core.sync import sync

        # one listing on the way out: a command refused before its first write (a
        # column with missing values, an option naming no source) left the object
        # store as it was, and "removed the unfinished destination" said otherwise
        if not _has_keys(self._location, self._storage_options):
            return "nothing was written"
        store = open_location(
            self._location, read_only=False, storage_options=self._storage_options
        )
        sync(store.delete_dir(""))
        return f"removed the unfinished destination {self.where}"
