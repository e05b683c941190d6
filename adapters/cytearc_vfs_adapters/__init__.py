"""Adapters from cytearc_vfs to the outside: storage backends and AnnData.

The core finds them through entry points, never by importing this package:
``backends`` registers the storage backends (``cytearc_vfs.backends``) and
``anndata_input`` reads an AnnData as counts (``cytearc_vfs.count_sources``).
``atomic_create`` claims a key atomically on the backends that can
(:func:`create_if_absent`, :func:`supports_atomic_create`). ``served_store``
holds the store a long-running ``serve`` or ``mount-fs`` answers from, and
reopens it when a composite's or mount's source is restored.
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
