"""``AnswerBudget``: a server-wide bound on the answer bytes held in memory.

Every answer body a :class:`~.server.StoreServer` reads from the store is
held in memory from the read until the socket has taken its last byte; a
client that reads slowly (or not at all) keeps it there. The budget makes
the sum of those bodies a number the operator chose: a connection asks for
the bytes it is about to read (:meth:`AnswerBudget.acquire`), holds them
as a :class:`Lease` while it sends, and gives them back when the kernel
has taken them.

Fairness is first come, first served: a connection that cannot have its
bytes waits in line, and nobody behind it passes, however small its ask
(so a large ask is never starved by a stream of small ones). A streamed
value asks again for each piece, at the back of the line, so a slow client
never keeps its place between pieces: a waiting connection waits at most
until the holders in front of it have sent one piece each, and a holder
whose client stops reading is dropped by the server's write timeout. An
ask larger than the whole budget is granted the whole budget (a value
larger than the budget is still served, in pieces, or alone).

The budget lives on the server's event loop; its counters are read from
other threads (plain integer reads).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["AnswerBudget", "Lease"]


class Lease:
    """Bytes of an :class:`AnswerBudget` held by one answer until :meth:`release`."""

    __slots__ = ("_budget", "nbytes")

    def __init__(self, budget: AnswerBudget, nbytes: int) -> None:
        self._budget: AnswerBudget | None = budget
        self.nbytes = nbytes
        """Bytes held now."""

    def shrink(self, nbytes: int) -> None:
        """Hold only ``nbytes`` (fewer than now): the rest goes back at once."""
        if self._budget is not None and nbytes < self.nbytes:
            self._budget._give_back(self.nbytes - nbytes)
            self.nbytes = nbytes

    def release(self) -> None:
        """Give every byte back; later calls do nothing."""
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._give_back(self.nbytes)
        self.nbytes = 0


class AnswerBudget:
    """At most ``limit`` bytes held by all leases together; asks wait in line (see the module).

    Examples
    --------
    >>> budget = AnswerBudget(100)
    >>> lease = budget.try_acquire(60)
    >>> budget.try_acquire(60) is None, budget.held
    (True, 60)
    >>> lease.release(); budget.held, budget.peak
    (0, 60)
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an answer budget of {limit} bytes holds nothing; give at least 1")
        self.limit = limit
        """Bytes all leases may hold together."""
        self.held = 0
        """Bytes held now."""
        self.peak = 0
        """Most bytes held at once so far."""
        self.waits = 0
        """Asks that had to wait in line."""
        self._line: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _grant(self, nbytes: int) -> Lease:
        self.held += nbytes
        self.peak = max(self.peak, self.held)
        return Lease(self, nbytes)

    def _fits(self, nbytes: int) -> bool:
        return self.held + nbytes <= self.limit

    def try_acquire(self, nbytes: int) -> Lease | None:
        """A lease of ``nbytes`` (at most the limit) if nobody waits and they are free now."""
        nbytes = min(nbytes, self.limit)
        if self._line or not self._fits(nbytes):
            return None
        return self._grant(nbytes)

    async def acquire(self, nbytes: int, timeout: float) -> Lease:
        """A lease of ``nbytes`` (at most the limit), after those in line before it.

        Raises
        ------
        TimeoutError
            The bytes were not free within ``timeout`` seconds; nothing is held.
        """
        lease = self.try_acquire(nbytes)
        if lease is not None:
            return lease
        nbytes = min(nbytes, self.limit)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        place = (nbytes, turn)
        self._line.append(place)
        self.waits += 1
        try:
            async with asyncio.timeout(timeout):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._give_back(nbytes)  # granted just as the wait ended
            else:
                turn.cancel()
                if place in self._line:  # _admit may have dropped it already
                    self._line.remove(place)
                self._admit()  # the next in line may fit now that this ask left
            raise
        return Lease(self, nbytes)

    def _give_back(self, nbytes: int) -> None:
        self.held -= nbytes
        self._admit()

    def _admit(self) -> None:
        """Grant the asks at the head of the line while they fit, in order."""
        while self._line and self._fits(self._line[0][0]):
            nbytes, turn = self._line.popleft()
            if turn.done():
                continue  # its waiter was cancelled and has not yet left the line
            self.held += nbytes
            self.peak = max(self.peak, self.held)
            turn.set_result(None)
