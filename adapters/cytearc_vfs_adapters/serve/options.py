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
