"""The cell and feature tables a write takes: given, from an AnnData, or generated.

A table's index holds the ids. :func:`input_table` picks the table (the one
given, else the AnnData's own ``obs``/``var``, else generated ids) and checks
its length; with ``make_unique`` it renames repeated ids as anndata's
``var_names_make_unique`` does (:func:`unique_ids`), for inputs that cannot be
edited where they are, such as an AnnData given by its path at a shell.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..format.table_names import CELL_DATA, FEATURE_DATA, TableName
from .anndata_ids_column import carry_ids_column
from .count_source import CountInput

__all__ = ["input_table", "refuse_a_reader_without_tables", "unique_ids"]

logger = logging.getLogger(__name__)


def unique_ids(index: pd.Index) -> tuple[pd.Index, int]:
    """``index`` with each repeat of an id renamed ``id-1``, ``id-2``, ...; and how many.

    The first occurrence keeps its id. A name already taken (an id ``"A-1"``
    beside repeated ``"A"``) is skipped, so the result is unique; this gives
    the names anndata's ``var_names_make_unique`` gives.

    >>> found, renamed = unique_ids(pd.Index(["A", "B", "A", "A-1", "A"]))
    >>> found.tolist(), renamed
    (['A', 'B', 'A-2', 'A-1', 'A-3'], 2)
    """
    if index.is_unique:
        return index, 0
    values = [str(value) for value in index]
    taken = set(values)
    suffix: dict[str, int] = {}
    seen: set[str] = set()
    renamed = 0
    for position, value in enumerate(values):
        if value not in seen:
            seen.add(value)
            continue
        while True:
            suffix[value] = suffix.get(value, 0) + 1
            candidate = f"{value}-{suffix[value]}"
            if candidate not in taken:
                break
        taken.add(candidate)
        values[position] = candidate
        renamed += 1
    return pd.Index(values, dtype=object, name=index.name), renamed


def input_table(
    found: CountInput,
    given: pd.DataFrame | Sequence[str] | None,
    shape: tuple[int, int],
    what: str,
    *,
    make_unique: bool = False,
) -> tuple[pd.DataFrame, TableName]:
    """The ``what`` (``"cells"`` or ``"features"``) table of a write of counts of
    ``shape``, and how its refusals name it.

    ``given`` (a table or a sequence of ids) wins over the input's own (``found``: an
    AnnData's, whose ``ids`` column is carried as ``orig_ids``); neither gives
    generated ids. Raises ``ValueError`` for a table of another length. A table
    given is named as it is stored (``cellData``), the AnnData's own as anndata
    names it (``obs``, ``var``, ``raw/var``): the caller typed the one or the other.
    """
    cells = what == "cells"
    n = shape[0] if cells else shape[1]
    frame = found.cells if cells else found.features
    named = found.cell_table if cells else found.feature_table
    if given is not None:
        named = CELL_DATA if cells else FEATURE_DATA
    if isinstance(given, (str, bytes)):
        raise ValueError(
            f"{what}= is one string ({given[:40]!r}); pass a DataFrame indexed by the ids or a "
            "sequence of ids, one per row of the matrix. Nothing was written"
        )
    if given is not None:
        frame = (
            given
            if isinstance(given, pd.DataFrame)
            # object dtype keeps each id as given (pandas would turn None into NaN)
            else pd.DataFrame(index=pd.Index(list(given), dtype=object))
        )
    elif frame is not None:
        # an AnnData's own obs/var: its 'ids' column is carried as a composite carries it
        frame = carry_ids_column(frame, table=named)
    if frame is None:
        prefix = "cell" if cells else "feature"
        frame = pd.DataFrame(index=pd.Index([f"{prefix}_{i}" for i in range(n)]))
    if len(frame) != n:
        raise ValueError(
            f"{what} has {len(frame)} rows but the counts have {n} {what}; pass a table whose "
            "index holds one id per row of the matrix"
        )
    if make_unique:
        index, renamed = unique_ids(frame.index)
        if renamed:
            logger.warning(
                "%d repeated %s id(s) renamed as anndata's make_unique does (id-1, id-2, ...)",
                renamed,
                what[:-1],
            )
            frame = frame.set_axis(index, axis=0)
    return frame, named


def refuse_a_reader_without_tables(counts: Any, cells: Any, features: Any) -> None:
    """Refuse a :class:`~cytearc_vfs.VirtualArrayReader` given as counts without both tables.

    It reads as any array would, so its values were copied under generated
    ids (``cell_0`` ...) and without its tables (a composite's ``source``
    column among them): a copy that no longer says which cells it holds.
    """
    if not (hasattr(counts, "cell_ids") and hasattr(counts, "feature_ids")):
        return
    if cells is not None and features is not None:
        return  # the caller's own tables name the rows and columns
    raise TypeError(
        f"counts are a {type(counts).__name__}, whose cell and feature tables write_counts "
        "does not read: they would be written under generated ids (cell_0 ...). Pass "
        "cv.to_anndata(LOCATION) to copy the counts with their ids and tables, or give "
        "cells= and features= (pd.DataFrame(index=reader.cell_ids) and "
        "pd.DataFrame(index=reader.feature_ids) keep the ids). Nothing was written"
    )
