"""What a :class:`~.server.StoreServer` allows, and what it reports having done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["ServeOptions", "ServeStats"]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How a :class:`StoreServer` protects itself and what it allows."""

    header_timeout: float = 30.0
    """Seconds to receive a whole request head; also how long a kept-alive
    connection may stay idle. Slow or silent clients are closed after it."""
    write_timeout: float = 60.0
    """Seconds a client may take to accept each slice of an answer before it is dropped."""
    max_connections: int = 512
    """Open connections at most; one more is answered ``503`` and closed."""
    max_reads: int = 32
    """Store reads running at once (a composite chunk is computed in memory)."""
    max_head_bytes: int = 64 * 1024
    """Largest request head; a larger one is answered ``431``."""
    allow_origin: str | None = None
    """The browser origin (``https://viewer.example``, or ``*``) allowed to read
    through CORS; ``None`` sends no CORS fields and refuses preflights."""
    max_answer_bytes: int = 256 * 1024**2
    """Bytes of values held in memory by all answers together, from the store read
    until the socket has taken them; an answer that cannot have its bytes waits
    in line (up to ``answer_wait_timeout``). See ``docs/serve.md``."""
    answer_wait_timeout: float = 120.0
    """Seconds an answer, or a piece of a streamed one, may wait in line for answer
    memory: past it, ``503`` with ``Retry-After`` before the head, or the connection
    is closed mid-body. Longer than ``write_timeout``, within which every holder
    whose client stops reading is dropped, so a healthy client's wait ends first."""
    piece_bytes: int = 1024**2
    """A stored value larger than this is read and sent in pieces of this size,
    each read when the previous one has been taken; a smaller one is read
    whole, in one read. Must be smaller than ``max_answer_bytes``."""

    def __post_init__(self) -> None:
        for name in ("max_answer_bytes", "piece_bytes", "max_reads", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServeOptions.{name} must be a positive number, got {value!r}")
        if self.piece_bytes >= self.max_answer_bytes:
            raise ValueError(
                f"ServeOptions.piece_bytes ({self.piece_bytes}) must be smaller than "
                f"max_answer_bytes ({self.max_answer_bytes}): every streamed answer holds "
                "one piece; raise max_answer_bytes or lower piece_bytes"
            )


class ServeStats(NamedTuple):
    """What a :class:`StoreServer` has done so far."""

    connections: int
    """Connections accepted."""
    open_connections: int
    """Connections open now."""
    requests: int
    """Request heads parsed (each answered once)."""
    statuses: dict[int, int]
    """Answers by status code (requests, and refusals of unparsable heads)."""
    timed_out: int
    """Connections closed because no complete request head came within ``header_timeout``."""
    dropped: int
    """Connections dropped mid-answer: the client went away or stopped reading."""
    aborted: int = 0
    """Answers cut off mid-body by the server: the value changed size or vanished
    while it was streamed, a store read failed, or no answer memory came in time."""
    held_bytes: int = 0
    """Answer bytes held in memory now (leases of the answer budget)."""
    peak_held_bytes: int = 0
    """Most answer bytes held in memory at once so far; at most ``max_answer_bytes``."""
    budget_waits: int = 0
    """Answers (or pieces) that waited in line for answer memory."""
    streamed: int = 0
    """Answers sent in pieces (values or ranges larger than ``piece_bytes``)."""
    piece_reads: int = 0
    """Store reads of the pieces of streamed answers (their first pieces included)."""
