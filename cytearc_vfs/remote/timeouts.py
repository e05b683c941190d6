"""How long a request to remote storage may take: ``CYTEARC_SOURCE_TIMEOUT``.

Object-store clients retry for minutes by default (obstore for up to three),
so a server that accepts a connection and never answers would hold a read
for that long, silently. Every remote store opened through the backend
registry gets a total time per request (``CYTEARC_SOURCE_TIMEOUT`` seconds,
30 when unset) and a connect time of at most 5 seconds, with retries stopped
once the total has passed; explicit backend options win over both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "TIMEOUT_ENV", "Timeouts", "timeouts"]

TIMEOUT_ENV = "CYTEARC_SOURCE_TIMEOUT"
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 5.0


class Timeouts(NamedTuple):
    """Seconds a remote request may take."""

    total: float
    """The whole request, from connecting to the last byte (retries included)."""
    connect: float
    """Establishing the connection."""


def timeouts(environ: Mapping[str, str] | None = None) -> Timeouts:
    """The timeouts ``CYTEARC_SOURCE_TIMEOUT`` sets (30 s total, 5 s connect by default).

    >>> timeouts({})
    Timeouts(total=30.0, connect=5.0)
    >>> timeouts({"CYTEARC_SOURCE_TIMEOUT": "2"})
    Timeouts(total=2.0, connect=2.0)
    """
    text = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "").strip()
    if not text:
        return Timeouts(DEFAULT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT)
    try:
        total = float(text)
    except ValueError:
        total = -1.0
    if not total > 0 or total == float("inf"):
        raise ValueError(
            f"{TIMEOUT_ENV}={text!r} is not a number of seconds; give a positive number such as "
            f"30 (the default), or unset it"
        )
    return Timeouts(total, min(total, DEFAULT_CONNECT_TIMEOUT))
