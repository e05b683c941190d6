"""Stopping what a writer started before its exception reaches the caller.

zarr runs store operations as tasks on its own event-loop thread
(``zarr.core.sync``): the caller's thread submits a coroutine and waits for
it. An exception in the caller's thread (``KeyboardInterrupt`` from SIGINT,
a notebook's "interrupt kernel", the command line's ``Interrupted``, any
error) ends the wait, not the coroutine: it and the tasks it started (the
write-behind's writes) go on, and their writes land after the exception
reached the caller, even after a cleanup removed the destination.

The mechanism, shared by every writer:

- **Work is tagged.** :func:`stops_on_exception` (a decorator of every
  public writer) and :func:`owned_work` give the call a :class:`Work` in a
  context variable. asyncio gives each task a copy of the context it was
  created in, and zarr's ``sync`` creates its task in a copy of the caller's
  (``loop.call_soon_threadsafe`` copies it), so every task that a writer's
  call starts on zarr's loop, directly or through a task of its own, carries
  the call's :class:`Work`. Threads of a writer that call zarr carry it too
  when started with :func:`in_this_work`.
- **An exception stops it.** Before an exception leaves the block,
  :func:`stop_work` cancels the work's tasks and waits until every one has
  ended, tasks started while they unwind included.
- **A write already sent is finished, not abandoned.** Cancelling a task
  that awaits a store write does not stop the write: a ``LocalStore`` write
  goes on in its thread, and an S3 PUT whose request is on the wire can be
  stored after the client gave up on it. Writers therefore send their store
  writes through :func:`finish_sent`, which keeps the cancelled task waiting
  until the write has ended: it lands (or fails) before :func:`stop_work`
  returns, never after.

So when the exception reaches the caller nothing the writer started is
still running, and the cleanup that follows (a writer settles its
destination, the command line removes it) is the last thing to touch it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from zarr.core.buffer import Buffer

from ..format.key_checked import KeyCheckedWrapperStore

__all__ = [
    "FinishingStore",
    "Work",
    "finish_sent",
    "in_this_work",
    "owned_work",
    "stop_work",
    "stops_on_exception",
]


class Work:
    """One writer call's work: the tasks created in its context carry it."""

    __slots__ = ("parent",)

    def __init__(self, parent: Work | None) -> None:
        self.parent = parent

    def includes(self, other: Work | None) -> bool:
        """Whether ``other`` is this work or was started inside it (a nested writer)."""
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False


_WORK: contextvars.ContextVar[Work | None] = contextvars.ContextVar("cytearc_work", default=None)
#: Tasks running a store write that must end on its own (see finish_sent).
_FINISHING: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()


@contextmanager
def owned_work() -> Iterator[Work]:
    """Tag the zarr work started in the block; stop it before an exception leaves the block."""
    work = Work(_WORK.get())
    token = _WORK.set(work)
    try:
        yield work
    except BaseException:
        stop_work(work)
        raise
    finally:
        _WORK.reset(token)


def stops_on_exception[**P, T](function: Callable[P, T]) -> Callable[P, T]:
    """Run ``function`` in :func:`owned_work`: a public writer's decorator."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with owned_work():
            return function(*args, **kwargs)

    return run


def in_this_work[**P, T](function: Callable[P, T]) -> Callable[P, T]:
    """``function`` to run in another thread as part of the current work.

    A thread pool does not pass context variables on; zarr calls made from
    its threads would start tasks that :func:`stop_work` does not know.
    """
    context = contextvars.copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.run(function, *args, **kwargs)

    return run


async def finish_sent[T](operation: Awaitable[T]) -> T:
    """Await a store write to its end, also when the awaiting task is cancelled.

    A cancelled caller still waits until the write has ended (stored or
    failed) and is then cancelled: the write lands before the stop that
    cancelled it returns, never after.
    """
    sent = asyncio.ensure_future(operation)
    _FINISHING.add(sent)
    try:
        return await asyncio.shield(sent)
    except asyncio.CancelledError:
        while not sent.done():
            try:
                await asyncio.wait([sent])
            except asyncio.CancelledError:
                continue  # cancelled again: the write is still on its way
        if not sent.cancelled():
            sent.exception()  # its outcome is the store's; retrieved, so asyncio keeps quiet
        raise


async def _stop(work: Work | None) -> None:
    """Cancel the tasks of ``work`` (every task for ``None``) and wait until none is left."""
    current = asyncio.current_task()
    while True:
        tasks = [
            task
            for task in asyncio.all_tasks()
            if task is not current
            and (work is None or work.includes(task.get_context().get(_WORK)))
        ]
        if not tasks:
            return
        for task in tasks:
            if task not in _FINISHING:  # a sent write ends by itself
                task.cancel()
        await asyncio.wait(tasks)


def stop_work(
    work: Work | None = None, *, everything: bool = False, timeout: float | None = None
) -> None:
    """Cancel and wait for the zarr tasks of ``work`` (by default the current one).

    ``everything=True`` stops every task on zarr's loop (the command line,
    which ends anyway). Outside any work, and before zarr ran anything, it
    does nothing. ``timeout`` bounds the wait (a store that never answers);
    ``None`` waits, and a second interrupt of the caller gives up waiting.
    """
    if not everything:
        work = work if work is not None else _WORK.get()
        if work is None:
            return
    zarr_sync = sys.modules.get("zarr.core.sync")
    if zarr_sync is None:
        # zarr was never (or only partly) imported: nothing runs, and importing
        # it now could meet a module an interrupt left half-initialised
        return
    loop = zarr_sync.loop[0]
    if loop is None or loop.is_closed():
        return
    try:
        if asyncio.get_running_loop() is loop:
            return  # on zarr's own thread: it cannot wait for itself
    except RuntimeError:
        pass
    stopping = asyncio.run_coroutine_threadsafe(_stop(None if everything else work), loop)
    try:
        stopping.result(timeout)
    except TimeoutError:
        stopping.cancel()
        raise


class FinishingStore(KeyCheckedWrapperStore):
    """``store`` whose writes and deletes go through :func:`finish_sent`.

    For a writer that writes a store through zarr directly (the AnnData
    export, an artifact group) rather than through a
    :class:`~cytearc_vfs.write.write_behind.WriteBehindStore`. Every key and
    prefix is checked first, as by every store of the package.
    """

    async def set(self, key: str, value: Buffer) -> None:
        await finish_sent(super().set(key, value))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await finish_sent(super().set_if_not_exists(key, value))

    async def delete(self, key: str) -> None:
        await finish_sent(super().delete(key))

    async def delete_dir(self, prefix: str) -> None:
        await finish_sent(super().delete_dir(prefix))

    def __repr__(self) -> str:
        return f"FinishingStore({self._store!r})"

    def __str__(self) -> str:
        return str(self._store)
