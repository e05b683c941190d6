"""The versions of the objects one open store has read, and the ones it proved absent.

Shared by a :class:`~.pinned_store.PinnedSourceStore` and the views derived from
it (``with_read_only``), for the life of one open store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["ObjectPins"]


class ObjectPins:
    """The version of each object an open store has read, and the chunk objects its open
    proved absent (thread-safe)."""

    def __init__(self, absent: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._pins: dict[str, str] = {}
        self.refused = False
        """Whether a read found a pinned object replaced or deleted: the source is
        no longer the one the open verified (set once, never cleared)."""
        self._absent = frozenset(absent)

    def mark_absent(self, keys: Iterable[str]) -> None:
        """Hold ``keys`` as chunk objects the open proved absent (a source that may not
        be listed answers ``403`` for them: see :mod:`..read.unlisted_sources`); a read
        of one then answers ``None`` (zeros) without a request."""
        with self._lock:
            self._absent = self._absent | frozenset(keys)

    def absent(self, key: str) -> bool:
        """Whether ``key`` was proved absent at the open (:meth:`mark_absent`)."""
        return key in self._absent

    @property
    def proved_absent(self) -> frozenset[str]:
        """Every key :meth:`mark_absent` holds."""
        return self._absent

    def get(self, key: str) -> str | None:
        """The pinned version token of ``key``, or ``None``."""
        with self._lock:
            return self._pins.get(key)

    def pin(self, key: str, token: str) -> str:
        """Pin ``key`` to ``token`` unless it is pinned already; returns the pinned token."""
        with self._lock:
            return self._pins.setdefault(key, token)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pins)
