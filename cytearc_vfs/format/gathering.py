"""Running requests concurrently so that a failure ends them all: :func:`gather_all`,
and :func:`gather_bounded` for one job per item of many, a few items at a time.

``asyncio.gather`` raises the first failure and leaves the other awaitables
running. Against a failing server those go on retrying unseen, fail again
later, and at interpreter exit each is destroyed mid-request, printing an
"Exception ignored in: <coroutine ...>" traceback (hundreds, for a read of
many shards) after the one error the caller already reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["first_failure", "gather_all", "gather_bounded"]


async def gather_all(*awaitables: Awaitable[Any]) -> list[Any]:
    """The results of ``awaitables`` run concurrently, in order, as ``asyncio.gather``;
    but on the first failure (or a cancellation) every other one is cancelled and
    awaited before the failure is raised, so none outlives the call.

    >>> async def fail() -> None:
    ...     raise OSError("no")
    >>> async def main() -> str:
    ...     slow = asyncio.ensure_future(asyncio.sleep(60))
    ...     try:
    ...         await gather_all(slow, fail())
    ...     except OSError:
    ...         return "cancelled" if slow.cancelled() else "running"
    ...     return "?"
    >>> asyncio.run(main())
    'cancelled'
    """
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        # their own failures (or cancellations) are not news: the first is raised
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def gather_bounded[T, R](
    job: Callable[[T], Awaitable[R]], items: Sequence[T], limit: int
) -> list[R]:
    """``[await job(item) for item in items]``, at most ``limit`` jobs running at once,
    results in the order of ``items``; the first failure cancels the rest (as
    :func:`gather_all`).

    A job per item of hundreds (a creation's sources, each reading a few
    arrays) all started at once queue their requests behind the same limits
    (the open's shared request gate, zarr's own): asyncio's waiter queues
    then cost in proportion to the jobs waiting, at every acquisition. A few
    jobs at a time keep the same requests in flight with short queues.

    >>> async def double(x: int) -> int:
    ...     await asyncio.sleep(0)
    ...     return 2 * x
    >>> asyncio.run(gather_bounded(double, [1, 2, 3], 2))
    [2, 4, 6]
    """
    results: list[Any] = [None] * len(items)
    todo = iter(enumerate(items))

    async def worker() -> None:
        for index, item in todo:  # one iterator shared: each item is taken once
            results[index] = await job(item)

    await gather_all(*(worker() for _ in range(min(limit, len(items)))))
    return results


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first failure of ``group`` that is not a cancellation (one level of nested
    groups after another), or ``group`` itself when there is none: one error to name."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_failure(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group
