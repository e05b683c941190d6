"""The threads that read and decode count chunks, and what each keeps.

Decoding runs on a process-wide pool with as many threads as there are
cores. Each thread keeps its own zstd decompression context and scratch
buffers (reused: they stay in the core's cache, and fresh memory costs page
faults). Jobs handed over in one turn of the event loop start together and
wake the loop once (:func:`hand_over`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import numpy as np
import numpy.typing as npt
import zstandard

__all__ = [
    "decoder_pool",
    "decoder_threads",
    "hand_over",
    "thread_decompressor",
    "thread_scratch",
]

# Decoding runs on as many threads as there are cores, no more: the GIL-bound
# parts of more threads would only queue for each other. One pool per process:
# a forked child must not inherit a pool whose threads stayed in the parent.
_DECODERS: tuple[int, ThreadPoolExecutor] | None = None


@functools.cache
def decoder_threads() -> int:
    """Threads of the decoding pool: one per core."""
    # asked for by every source's plan of every read: os.cpu_count() reads /proc
    # (about 12 us here, a few a read); the machine's cores do not change under it
    return os.cpu_count() or 1


def decoder_pool() -> ThreadPoolExecutor:
    global _DECODERS
    if _DECODERS is None or _DECODERS[0] != os.getpid():
        pool = ThreadPoolExecutor(
            max_workers=decoder_threads(), thread_name_prefix="cytearc-decode"
        )
        _DECODERS = (os.getpid(), pool)
    return _DECODERS[1]


_THREAD = threading.local()


def thread_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (one context, reused: they are not thread-safe)."""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_THREAD, "zstd", None)
    if decompressor is None:
        decompressor = _THREAD.zstd = zstandard.ZstdDecompressor()
    return decompressor


def thread_scratch(nbytes: int, name: str = "chunk") -> npt.NDArray[np.uint8]:
    """This thread's decode buffer ``name``, at least ``nbytes`` long (reused:
    it stays in the core's cache, and fresh memory costs page faults, which
    threads of one process take in turn)."""
    buffers: dict[str, npt.NDArray[np.uint8]] = _THREAD.__dict__.setdefault("scratch", {})
    buffer = buffers.get(name)
    if buffer is None or len(buffer) < nbytes:
        buffer = buffers[name] = np.empty(max(nbytes, 256 << 10), dtype=np.uint8)
    return buffer[:nbytes]


# Jobs handed over during one turn of the event loop, per loop, not yet started.
_PENDING: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop,
    list[tuple[Callable[..., None], tuple[Any, ...], asyncio.Future[None]]],
] = weakref.WeakKeyDictionary()


def hand_over(function: Callable[..., None], *args: Any) -> asyncio.Future[None]:
    """Run ``function(*args)`` on the decoding pool; the returned future ends with it.

    Jobs handed over in the same turn of the event loop start together, at
    the end of that turn, and wake the loop once, when the last of them has
    ended (each wake-up from a thread costs the loop a self-pipe round).
    Started one by one, the first job's thread would take the GIL between
    its many short GIL-free calls (pread, zstd) while the event loop still
    plans the other shards: the loop then waits for the interpreter's 5 ms
    switch interval before each next hand-over.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    batch = _PENDING.get(loop)
    if batch is None:
        batch = _PENDING[loop] = []
        loop.call_soon(_start_pending, loop)
    batch.append((function, args, waiter))
    return waiter


def _start_pending(loop: asyncio.AbstractEventLoop) -> None:
    jobs = [job for job in _PENDING.pop(loop, []) if not job[2].cancelled()]
    errors: list[BaseException | None] = [None] * len(jobs)
    remaining = [len(jobs)]
    lock = threading.Lock()

    def wake_waiters() -> None:  # on the loop
        for (_, _, waiter), error in zip(jobs, errors, strict=True):
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def ended() -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            with suppress(RuntimeError):  # the loop was closed meanwhile
                loop.call_soon_threadsafe(wake_waiters)

    def run(position: int, function: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            function(*args)
        except BaseException as exc:
            errors[position] = exc
        finally:
            ended()

    for position, (function, args, _) in enumerate(jobs):
        try:
            decoder_pool().submit(run, position, function, args)
        except Exception as exc:  # e.g. the pool was shut down at exit
            # the read gets the error: a job that never starts must not
            # leave its read waiting forever
            errors[position] = exc
            ended()
