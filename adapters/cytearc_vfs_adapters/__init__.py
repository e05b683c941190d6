"""Adapters from cytearc_vfs to the outside: storage backends and AnnData.

The core finds them through entry points, never by importing this package:
``backends`` registers the storage backends (``cytearc_vfs.backends``) and
``anndata_input`` reads an AnnData as counts (``cytearc_vfs.count_sources``).
"""

from __future__ import annotations

from .backends import register_all

__all__ = ["register_all"]
