"""AnnData as input to ``write_counts`` (kept for imports; the adapter lives in
:mod:`cytearc_vfs_adapters.anndata.counts`)."""

from __future__ import annotations

from .anndata.counts import count_input

__all__ = ["count_input"]
