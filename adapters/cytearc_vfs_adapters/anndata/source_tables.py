"""An AnnData store's ``obs``, ``var`` (or ``raw/var``) and declared membership, for composites.

Registered as the ``anndata`` entry of the core's
``cytearc_vfs.anndata_tables`` group (see
:mod:`cytearc_vfs.composite.anndata_columns`): a composite over an AnnData
source carries its cell and feature columns, read here by the element layer
in every encoding it knows (legacy 0.7 layouts included). A column it
cannot read is left out and reported, not a reason to refuse the source.
"""

from __future__ import annotations

from zarr.abc.store import Store

from cytearc_vfs.composite.anndata_columns import AnnDataTables

from .container import AnnDataContainer
from .counts import membership_of
from .dataframes import SkippedColumn

__all__ = ["source_tables"]


def source_tables(store: Store, features: str = "var") -> AnnDataTables:
    """The ``obs`` dataframe of the AnnData store ``store`` (read only), its
    ``features`` dataframe (``var``, or ``raw/var`` for a source read from
    ``raw/X``) and its ``uns["cytearc"]["assayMembership"]``."""
    skipped: list[SkippedColumn] = []
    with AnnDataContainer.open(store) as container:
        obs = container.obs(skipped=skipped)
        var = container.dataframe(features, skipped=skipped)
        return AnnDataTables(
            obs, var, membership_of(container), tuple((s.path, s.reason) for s in skipped)
        )
