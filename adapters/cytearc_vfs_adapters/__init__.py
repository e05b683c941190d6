"""Adapters from cytearc_vfs to the outside: storage backends and AnnData.

The core finds them through entry points, never by importing this package:
``backends`` registers the storage backends (``cytearc_vfs.backends``) and
``anndata_input`` reads an AnnData as counts (``cytearc_vfs.count_sources``).
``atomic_create`` claims a key atomically on the backends that can
(:func:`create_if_absent`, :func:`supports_atomic_create`).
"""

from __future__ import annotations

from .atomic_create import (
    AtomicCreateUnsupportedError,
    create_if_absent,
    create_if_absent_async,
    supports_atomic_create,
)
from .backends import register_all

__all__ = [
    "AtomicCreateUnsupportedError",
    "create_if_absent",
    "create_if_absent_async",
    "register_all",
    "supports_atomic_create",
]
