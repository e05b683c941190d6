"""The refusal of a table for several of its columns at once: one error naming them all.

Every column is checked before a table is refused (a user who fixed the one
named was refused again for the next), so one error says them all: the first
column's refusal with its remedy, then ``Also refused: ...`` for the others,
each by its reason alone, which its refusal carries from where it was raised
(:func:`column_refusal`; cutting it out of the message cut at a ``;`` that a
quoted value held).

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
from .table_names import TableName

__all__ = ["column_refusal", "combined_class", "refuse_columns"]

#: The attribute a column's refusal keeps its reason in (:func:`column_refusal`).
_REASON = "column_reason"


def column_refusal(
    table: TableName,
    name: str,
    reason: str,
    remedy: str,
    *,
    kind: type[ValueError] = ValueError,
    stored: bool = False,
) -> ValueError:
    """The refusal of column ``name`` of ``table``: ``"{table} column {name!r} {reason};
    {remedy}"``, the table named as its caller knows it (``obs`` for an AnnData's;
    with ``stored``, also where the column is stored: :meth:`.TableName.column`),
    carrying ``reason`` for :func:`refuse_columns` to name it by when
    another column is refused first (pickling keeps it, as any attribute of an error).

    >>> from cytearc_vfs.format.table_names import CELL_DATA, OBS
    >>> error = column_refusal(CELL_DATA, "a", "holds 'x;y'", "fix it")
    >>> str(error), _reason(error)
    ("cellData column 'a' holds 'x;y'; fix it", "holds 'x;y'")
    >>> str(column_refusal(OBS, "a", "holds 1j", "convert it"))
    "obs column 'a' holds 1j; convert it"
    """
    error = kind(f"{table.column(name, stored=stored)} {reason}; {remedy}")
    setattr(error, _REASON, reason)
    return error


def _reason(error: ValueError) -> str:
    """What ``error`` refuses its column for: the reason it carries, else its whole
    message (a refusal raised elsewhere, whose form is not known here)."""
    reason = getattr(error, _REASON, None)
    return reason if isinstance(reason, str) else str(error)


def refuse_columns(refused: Sequence[tuple[str, ValueError]], *, table: TableName) -> None:
    """Raise the first column's refusal, naming every other refused column and why.

    ``refused`` holds ``(column name, its refusal)`` in the table's order; the
    combined error is of :func:`combined_class` and chained to the first refusal.
    """
    first = refused[0][1]
    if len(refused) == 1:
        raise first
    # the reason alone: its remedy is the first column's, or said when it is first
    reasons = [f"{name!r} {_reason(exc)}" for name, exc in refused[1:]]
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
    error.__dict__.pop(_REASON, None)  # the first column's reason is not the whole refusal's
    return error
