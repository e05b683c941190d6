"""An AnnData's ``obs``/``var`` column named ``ids``, imported as ``orig_ids``.

A CyteArc table keeps its ids under the name ``ids`` (taken from the
index), so a column of that name cannot be stored as itself. A table the
caller passes (``cells=``, ``features=``) is refused with the remedy to
rename it; an AnnData's own ``obs`` or ``var`` (in memory, an AnnData Zarr
store or an ``.h5ad`` given by its path, or ``cytearc-vfs write``) cannot
be edited by the caller on the way in, so its column is carried as
``orig_ids`` (prefixed again while the name is taken), with a warning, as a
composite over the same AnnData carries it
(:func:`cytearc_vfs.composite.anndata_columns.frame_columns`): the store
and the composite hold the same tables.
"""

from __future__ import annotations

import logging

import pandas as pd

from ..format.column_names import free_column_name
from ..format.table_names import TableName

__all__ = ["carry_ids_column"]

logger = logging.getLogger(__name__)


def carry_ids_column(frame: pd.DataFrame, *, table: TableName) -> pd.DataFrame:
    """``frame`` (the AnnData's ``table``) with a column named ``ids`` renamed
    ``orig_ids`` (warned), else itself.

    >>> from cytearc_vfs.format.table_names import OBS
    >>> frame = pd.DataFrame({"ids": ["x"], "orig_ids": ["y"]}, index=["c0"])
    >>> list(carry_ids_column(frame, table=OBS).columns)
    ['orig_orig_ids', 'orig_ids']
    """
    if "ids" not in frame.columns:
        return frame
    taken = {str(name) for name in frame.columns}
    name = free_column_name("ids", taken)
    logger.warning(
        "%s is stored as %r: a CyteArc table keeps its ids (the index) under the name 'ids'",
        table.column("ids"),
        name,
    )
    return frame.rename(columns={"ids": name})
