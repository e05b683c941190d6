"""What ``create_composite`` holds against its ``mem_budget``, estimated before it writes.

Creation goes through phases, each holding more than the last or as much:
binding scans an AnnData source's float counts, a block at a time; the
sources' cell and feature tables are read and held to the end; the plan
(cell maps, feature columns, output ids) is made, its ids sorted and checked
unique as Python objects; the output tables are prepared beside it; the
count summaries (and the sources' own) are held while partial sources and
AnnData sources are read in bands sized from what remains of the budget;
each text column is written as objects and encoded. :class:`CreationCost`
is the largest of these. The destination's write-behind share is taken out
of the budget as the other writers' is
(:func:`~cytearc_vfs.write.budget.budget_for`). All of it is known once the
tables are read and the plan made, from the sizes of arrays already held and
of the sources' array metadata: no further read. A budget that cannot hold
it is refused before the destination exists, naming the smallest that works
(docs/writing.md, "Memory budget"). Estimates are upper bounds measured
against ``tracemalloc`` (tests/test_composite_budget.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.core.array import AsyncArray

from ..format.option_names import option_name
from ..format.sizes import format_size
from ..read.anndata_count_dtype import scan_cost, scan_rows
from ..read.sources import BoundSource
from ..write.budget import budget_for, held_bytes
from .columns import SourceTables
from .maps import CompositePlan
from .summaries import source_parts

__all__ = ["CreationCost", "creation_cost", "read_bytes", "require_budget", "usable_bytes"]

# A column whose sources disagree in kind becomes text (str of each value):
# bytes a value is counted at, 32 characters of numpy's 4-byte unicode.
_MIXED_TEXT_BYTES = 128
# Bytes per summary entry: a source's stored summaries (a value and two
# counts a cell, a count a feature) and the composite's.
_SUMMARY_ENTRY_BYTES = 8
# Bytes of an id as a Python object beside its characters: the str header,
# a pointer to it and its slot in a hash table (pandas' index, a set), as
# the plan checks ids unique and the tables are prepared and encoded.
_ID_OBJECT_BYTES = 96


@dataclass(frozen=True, slots=True)
class CreationCost:
    """Bytes of one creation, by what holds them (estimates made before any write)."""

    n_cells: int
    """Output cells."""
    n_features: int
    """Output features."""
    sources: int
    """The sources' tables as read, held for the whole creation."""
    plan: int
    """The plan's arrays: cell maps, feature columns, output ids and names."""
    ids: int
    """The output ids (cells and features) as Python objects, while they are
    checked, prepared and written (as wide as the widest text column: each is
    written as such objects too)."""
    tables: int
    """The output tables' prepared columns."""
    summaries: int
    """The composite's count summaries and the sources' stored summaries."""
    read: int
    """Bytes of the smallest band a read source needs, with its edges (0: none is read)."""
    scan: int
    """Bytes of scanning the AnnData sources' float counts a chunk at a time, at binding."""
    widest_text: str = ""
    """The widest carried text column (``"cell column 'note' of source 'a' (20000
    characters)"``), named
    in a refusal when its rows dominate the cost; empty when no column does."""

    @property
    def held(self) -> int:
        """Bytes held while the partial sources are read: all but the bands."""
        return self.sources + self.plan + self.tables + self.summaries

    @property
    def peak(self) -> int:
        """The creation's estimated peak at its smallest bands."""
        return max(
            self.scan,  # binding: float counts scanned a block at a time
            2 * self.sources,  # reading the tables: each column decoded beside those held
            self.sources + 2 * self.plan + self.ids,  # planning: ids sorted, checked unique
            self.sources + self.plan + self.tables + self.ids,  # preparing the tables
            self.held + self.read,  # reading partial sources
            self.held + self.ids,  # writing: a text column as objects and encoded
        )


def _column_bytes(tables: Sequence[SourceTables], axis: str, length: int) -> int:
    """Bytes of the carried columns of ``axis`` (``cells``/``features``) over ``length`` rows."""
    widths: dict[str, list[np.dtype]] = {}
    for table in tables:
        for name, column in getattr(table, axis).items():
            if name != "ids":
                widths.setdefault(name, []).append(column.values.dtype)
    total = 0
    for dtypes in widths.values():
        kinds = {"text" if dtype.kind in "USO" else "other" for dtype in dtypes}
        width = max(max(dtype.itemsize, 8) for dtype in dtypes)
        total += length * (max(width, _MIXED_TEXT_BYTES) if len(kinds) > 1 else width)
    return total


def _text_bytes(count: int, arrays: Sequence[npt.NDArray[Any]]) -> int:
    """Bytes of ``count`` values as Python objects, as wide as the widest text of ``arrays``.

    The ids, and each text column as it is written, are such objects.
    """
    width = max((values.itemsize for values in arrays if values.dtype.kind == "U"), default=4)
    return count * (_ID_OBJECT_BYTES + width // 4)


def _widest_text(tables: Sequence[SourceTables], lengths: Mapping[str, int], peak: int) -> str:
    """The widest carried text column, when its rows make a quarter of ``peak`` or more.

    Text is held fixed-width: one long value (a note in one cell) makes every
    row that wide, and raising the budget is then a poor remedy beside
    shortening that value.
    """
    width, axis, name, source = max(
        (
            (column.values.itemsize // 4, axis, name, table.name)
            for table in tables
            for axis in ("cells", "features")
            for name, column in getattr(table, axis).items()
            if column.values.dtype.kind == "U"
        ),
        default=(0, "cells", "", ""),
    )
    if 4 * width * lengths[axis] < peak // 4:  # its output rows, 4 bytes a character
        return ""
    kind = "cell" if axis == "cells" else "feature"
    return f"{kind} column {name!r} of source {source!r} ({width} characters)"


def _columns(tables: Sequence[SourceTables], axis: str) -> list[npt.NDArray[Any]]:
    return [column.values for table in tables for column in getattr(table, axis).values()]


def creation_cost(
    tables: Sequence[SourceTables], plan: CompositePlan, sources: list[BoundSource]
) -> CreationCost:
    """What creating the composite of ``plan`` holds, from sizes already known."""
    n_cells, n_features = len(plan.row_sources), len(plan.feature_ids)
    held_tables = sum(
        column.values.nbytes
        for table in tables
        for columns in (table.cells, table.features)
        for column in columns.values()
    ) + sum(  # an AnnData source's ids, as bound, beside its tables
        ids.nbytes
        for source in sources
        if source.anndata is not None
        for ids in (source.anndata.cell_ids, source.anndata.feature_ids)
        if ids is not None
    )
    arrays: list[npt.NDArray[Any]] = [
        plan.row_sources,
        plan.source_rows,
        plan.feature_columns,
        plan.cell_ids,
        plan.cell_sources,
        plan.feature_ids,
        plan.feature_names,
    ]
    if plan.source_cell_ids is not plan.cell_ids:  # one array when the ids need no prefix
        arrays.append(plan.source_cell_ids)
    # ids, names, I and (cells) source and sourceId, beside the carried columns
    output = (
        n_cells * (2 * plan.cell_ids.itemsize + 1)
        + plan.cell_sources.nbytes
        + plan.source_cell_ids.nbytes
        + n_features * (plan.feature_ids.itemsize + plan.feature_names.itemsize + 1)
        + _column_bytes(tables, "cells", n_cells)
        + _column_bytes(tables, "features", n_features)
    )
    source_cells = sum(source.info.shape[0] for source in sources)
    source_features = sum(source.info.shape[1] for source in sources)
    summaries = _SUMMARY_ENTRY_BYTES * (
        3 * (n_cells + source_cells) + 2 * n_features + source_features
    )
    read = max((part.smallest for part in source_parts(plan, sources) if part.read), default=0)
    # the sources are bound concurrently: every AnnData source's scan at once
    scan = sum(
        _smallest_scan(source.anndata.arrays) for source in sources if source.anndata is not None
    )
    cost = CreationCost(
        n_cells,
        n_features,
        held_tables,
        sum(values.nbytes for values in arrays),
        _text_bytes(n_cells, [plan.cell_ids, *_columns(tables, "cells")])
        + _text_bytes(n_features, [plan.feature_ids, *_columns(tables, "features")]),
        output,
        summaries,
        read,
        scan,
    )
    lengths = {"cells": n_cells, "features": n_features}
    return replace(cost, widest_text=_widest_text(tables, lengths, cost.peak))


def _smallest_scan(arrays: Mapping[str, AsyncArray[Any]]) -> int:
    """Bytes of scanning one chunk of an AnnData source's values (0: not scanned)."""
    values = arrays["data"] if "data" in arrays else next(iter(arrays.values()))
    return scan_cost(values, scan_rows(values, 0))


def usable_bytes(budget: int) -> int:
    """Bytes of ``budget`` left beside the destination's write-behind share.

    >>> usable_bytes(64 << 20) == 56 << 20
    True
    """
    return budget - held_bytes(budget)


def require_budget(cost: CreationCost, budget: int) -> None:
    """Refuse ``budget`` if the creation of ``cost`` cannot keep to it, naming the smallest."""
    if cost.peak <= usable_bytes(budget):
        return
    least = budget_for(cost.peak)
    # the "needs" figure is the whole: what creation holds and the write-behind
    # share a budget that holds it reserves, so it equals the budget named
    share = least - cost.peak
    raise ValueError(
        f"creating this composite ({cost.n_cells} cells x {cost.n_features} features) needs "
        f"about {format_size(least)}: {format_size(cost.peak)} for its tables, cell maps, "
        f"summaries and reads, and {format_size(share)} for the destination's buffered writes "
        f"(a share of the budget), over {option_name('mem_budget')} {format_size(budget)}; "
        f"raise {option_name('mem_budget')} to at least {format_size(least)} ({least} bytes)"
        + (
            f", or shorten the longest value of the {cost.widest_text}: text is held as wide "
            "as its longest value in every row"
            if cost.widest_text
            else ""
        )
        + ". Nothing was written"
    )


def read_bytes(cost: CreationCost, budget: int) -> int:
    """Bytes a band read may take: what remains of ``budget`` beside what creation holds."""
    return max(cost.read, usable_bytes(budget) - cost.held)
