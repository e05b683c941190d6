"""Any CyteArc store as an AnnData: in memory (lazy), as a Zarr view, or exported.

- :func:`to_anndata` builds an ``anndata.AnnData`` whose ``X`` is a dask
  array over the gather reader (:mod:`.conversion`).
- :func:`anndata_view` is a read-only zarr Store presenting the AnnData
  layout over the store's own arrays (:mod:`.view`).
- :func:`export_anndata` writes a conformant ``.zarr`` or ``.h5ad``, band by
  band (:mod:`.export`).

The rules they share (which table columns become ``obs``/``var`` columns,
the membership declaration) live in :mod:`.columns`; documented in
``docs/anndata-out.md``. anndata is the optional extra
``cytearc-vfs[anndata]``.
"""

from __future__ import annotations

from .conversion import to_anndata
from .export import ExportInfo, export_anndata
from .view import AnnDataViewStore, anndata_view

__all__ = ["AnnDataViewStore", "ExportInfo", "anndata_view", "export_anndata", "to_anndata"]
