"""What a table group records about the DataFrame it was written from.

A table is one array per column (:mod:`.tables`), which keeps neither the
name of the DataFrame's index nor the order of its columns. Both are kept as
attributes of the table group, so the AnnData outputs give back the frame
that was written (``docs/anndata-out.md``), as anndata's own files do:

- ``cytearc:indexName``: ``frame.index.name``, when it is text that can name
  an array (the AnnData view keeps the index under it);
- ``cytearc:columnOrder``: the frame's own column names, in its order.

Both are absent where there is nothing to record, and in stores written
before they existed; readers then give an unnamed index and columns in name
order. Neither is part of any fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .column_names import column_name_problem

__all__ = [
    "COLUMN_ORDER_ATTR",
    "INDEX_NAME_ATTR",
    "kept_index_name",
    "ordered_names",
    "recorded_column_order",
    "recorded_index_name",
    "table_attributes",
]

#: Table group attribute: the name of the DataFrame index the ids came from.
INDEX_NAME_ATTR = "cytearc:indexName"
#: Table group attribute: the DataFrame's own column names, in its order.
COLUMN_ORDER_ATTR = "cytearc:columnOrder"


def kept_index_name(name: object) -> str | None:
    """The index name a table keeps: text that can name an array; anything else
    (``None``, a number, ``"a/b"``) is not kept, as anndata writes no index name
    that is not text either.

    >>> kept_index_name("cell_id"), kept_index_name(None), kept_index_name("a/b")
    ('cell_id', None, None)
    """
    return name if isinstance(name, str) and column_name_problem(name) is None else None


def table_attributes(index_name: str | None, column_order: Sequence[str]) -> dict[str, Any]:
    """The attributes of a table group written from a frame.

    >>> table_attributes("cell_id", ["b", "a"])
    {'cytearc:indexName': 'cell_id', 'cytearc:columnOrder': ['b', 'a']}
    >>> table_attributes(None, [])
    {}
    """
    attributes: dict[str, Any] = {}
    if index_name is not None:
        attributes[INDEX_NAME_ATTR] = index_name
    if column_order:
        attributes[COLUMN_ORDER_ATTR] = list(column_order)
    return attributes


def recorded_index_name(attrs: Mapping[str, Any]) -> str | None:
    """The index name a table group's ``attrs`` record, or ``None`` (a value no
    writer records is taken as none).

    >>> recorded_index_name({INDEX_NAME_ATTR: "cell_id"}), recorded_index_name({})
    ('cell_id', None)
    """
    return kept_index_name(attrs.get(INDEX_NAME_ATTR))


def recorded_column_order(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    """The column order a table group's ``attrs`` record; ``()`` when none (or not a
    list of names, which no writer records).

    >>> recorded_column_order({COLUMN_ORDER_ATTR: ["b", "a"]}), recorded_column_order({})
    (('b', 'a'), ())
    """
    order = attrs.get(COLUMN_ORDER_ATTR)
    if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        return ()
    return tuple(order)


def ordered_names(names: Sequence[str], order: Sequence[str]) -> list[str]:
    """``names`` in the recorded ``order``; names it does not list (added later, or
    by the writer, such as a membership column) follow, in name order.

    >>> ordered_names(["a", "b", "c", "z"], ["c", "a", "gone"])
    ['c', 'a', 'b', 'z']
    """
    position = {name: index for index, name in enumerate(order)}
    return sorted(names, key=lambda name: (position.get(name, len(position)), name))
