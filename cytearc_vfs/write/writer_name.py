"""The writer a destination's pending marker names: a public writer running another one.

``repack(data_only=True)`` writes its destination through ``write_counts``.
A destination left unfinished is refused naming the writer recorded in its
``cytearc:pending_store`` marker, and that message is what a user who ran
``repack --data-only`` reads after a crash: it must name ``repack``, the
command to run again with ``--overwrite``, not the writer inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_writer", "writing_for"]

_NAME: ContextVar[str | None] = ContextVar("writer_name", default=None)


@contextmanager
def writing_for(name: str) -> Iterator[None]:
    """Writers called in the block record ``name`` as the writer of their destination.

    >>> with writing_for("repack"):
    ...     current_writer("write_counts")
    'repack'
    >>> current_writer("write_counts")
    'write_counts'
    """
    token = _NAME.set(name)
    try:
        yield
    finally:
        _NAME.reset(token)


def current_writer(own: str) -> str:
    """The name to record: the enclosing :func:`writing_for`'s, else the writer's ``own``."""
    outer = _NAME.get()
    return own if outer is None else outer
