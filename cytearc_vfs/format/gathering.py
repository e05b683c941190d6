"""Running requests concurrently so that a failure ends them all: :func:`gather_all`.

``asyncio.gather`` raises the first failure and leaves the other awaitables
running. Against a failing server those go on retrying unseen, fail again
later, and at interpreter exit each is destroyed mid-request, printing an
"Exception ignored in: <coroutine ...>" traceback (hundreds, for a read of
many shards) after the one error the caller already reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["gather_all"]


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
