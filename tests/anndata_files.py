"""AnnData Zarr stores written by anndata itself, in the Zarr format asked for."""

from __future__ import annotations

import warnings
from pathlib import Path

import anndata as ad


def write_anndata_zarr(data: ad.AnnData, path: Path, zarr_format: int) -> Path:
    """Write ``data`` with ``AnnData.write_zarr`` as Zarr ``zarr_format``; returns ``path``."""
    with warnings.catch_warnings():
        # anndata 0.13 deprecates the format setting (v3 becomes its only default)
        warnings.simplefilter("ignore")
        previous = ad.settings.zarr_write_format
        ad.settings.zarr_write_format = zarr_format
        try:
            data.write_zarr(path)
        finally:
            ad.settings.zarr_write_format = previous
    return path
