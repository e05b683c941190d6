"""A table's own ``I`` column: the live selection, boolean without missing values.

``I`` is reserved in every CyteArc table (docs/layout.md): an import takes a
table's ``I`` column as the live selection (an export of a narrowed selection
writes one) and refuses any other; a composite carries an AnnData source's
boolean ``I`` as the source's selection and refuses any other for the same
reason. Both name the column as the caller knows it (:mod:`.table_names`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from .table_names import TableName

__all__ = ["live_selection", "live_selection_problem"]


def live_selection_problem(series: pd.Series) -> str | None:
    """Why a table's own ``I`` column cannot be the live selection (``None``: it can):
    what follows the column's name in a refusal (``is the live selection, ...``).

    ``I`` is reserved (the live selection, boolean without missing values); an
    import takes a table's ``I`` as the selection and refuses any other, and a
    composite refuses an AnnData source's other ``I`` for the same reason
    (docs/layout.md).
    """
    if pd.api.types.is_bool_dtype(series.dtype) and not series.isna().any():
        return None
    missing = " with missing values" if pd.api.types.is_bool_dtype(series.dtype) else ""
    return (
        f"is the live selection, which must be boolean without missing "
        f"values (it is {series.dtype}{missing})"
    )


def live_selection(series: pd.Series, *, table: TableName) -> npt.NDArray[np.bool_]:
    """A table's own ``I`` column as the live selection: booleans, none missing;
    anything else is refused naming the column as ``table``'s caller knows it.

    >>> from cytearc_vfs.format.table_names import OBS
    >>> live_selection(pd.Series([1, 0], name="I"), table=OBS)
    Traceback (most recent call last):
    ValueError: obs column 'I' (stored as cellData/I) is the live selection, ...
    """
    problem = live_selection_problem(series)
    if problem is None:
        return series.to_numpy(dtype=bool)
    raise ValueError(
        f"{table.column('I', stored=True)} {problem}; rename the column to keep it as an "
        "ordinary one. Nothing was written"
    )
