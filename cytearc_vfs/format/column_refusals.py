"""The refusal of a table for several of its columns at once: one error naming them all.

Every column is checked before a table is refused (a user who fixed the one
named was refused again for the next), so one error says them all: the first
column's refusal with its remedy, then ``Also refused: ...`` for the others.

Its class is the most specific one that every column's refusal is (among the
package's own ``ValueError`` classes, else ``ValueError``): an ``except`` of a
documented class then catches the combined refusal exactly when that class is
true of every column it names, and the command line's exit code is that
class's (three damaged columns exit 3, as one does; one damaged column beside a
missing value is refused input, exit 2, as a plain ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import VfsError

__all__ = ["combined_class", "refuse_columns"]


def refuse_columns(refused: Sequence[tuple[str, ValueError]], *, table: str) -> None:
    """Raise the first column's refusal, naming every other refused column and why.

    ``refused`` holds ``(column name, its refusal)`` in the table's order; the
    combined error is of :func:`combined_class` and chained to the first refusal.
    """
    first = refused[0][1]
    if len(refused) == 1:
        raise first
    reasons = []
    for name, exc in refused[1:]:
        said = str(exc)
        prefix = f"{table} column {name!r} "
        # the reason alone: its remedy is the first column's, or said when it is first
        reasons.append(f"{name!r} {said.removeprefix(prefix).split(';')[0]}")
    message = f"{first}. Also refused: {'; '.join(reasons)}. Nothing was written"
    raise _restated(first, combined_class([exc for _, exc in refused]), message) from first


def combined_class(errors: Sequence[ValueError]) -> type[ValueError]:
    """The most specific class that each of ``errors`` is an instance of, among the
    package's ``ValueError`` classes (:class:`~cytearc_vfs.errors.VfsError` and
    ``ValueError``), or ``ValueError``.

    Another library's subclass (pandas' ``OutOfBoundsDatetime``, ``UnicodeError``) is
    passed over: its constructor and meaning are not the package's to restate.

    >>> from cytearc_vfs.errors import IncompleteStoreError, RecordShapeError
    >>> combined_class([RecordShapeError("a"), RecordShapeError("b")]).__name__
    'RecordShapeError'
    >>> combined_class([RecordShapeError("a"), IncompleteStoreError("b")]).__name__
    'ValueError'
    """
    for kind in type(errors[0]).__mro__:
        ours = kind is ValueError or (issubclass(kind, VfsError) and issubclass(kind, ValueError))
        if ours and all(isinstance(error, kind) for error in errors):
            return kind
    return ValueError  # not reached: every error is a ValueError


def _restated(first: ValueError, kind: type[ValueError], message: str) -> ValueError:
    """``message`` as an error of ``kind`` (a class of ``first``'s), with ``first``'s
    attributes: the message leads with that column.

    Built without calling ``kind``'s constructor, which may take more than a
    message (as the package's errors pickle back, ``errors._restored``).
    """
    if kind is ValueError:
        return ValueError(message)
    error = kind.__new__(kind, message)
    error.args = (message,)
    error.__dict__.update(first.__dict__)
    return error
