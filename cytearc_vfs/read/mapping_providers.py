"""Stores that provide their own count mapping, found by their root attribute.

A composite (root attribute ``composite``) and a mount (``matrixSource``)
map their virtual counts onto source stores. The reader sits below them, so
it cannot import them; instead it asks this registry, which the read layer
defines and the packages above fill through the ``cytearc_vfs.count_mappings``
entry-point group (the same mechanism as the backend registry in
:mod:`cytearc_vfs.remote.locations`). Each entry point is named by the root
attribute it handles and loads a function
``open_verified(store, where, source_storage_options, *, documents=None)``
returning a verified store that provides ``count_mapping`` (``documents``: a
view of ``store`` for the open's reads of metadata, which
:func:`cytearc_vfs.open_store` has already begun; see
:mod:`~cytearc_vfs.read.remembered_reads`). :func:`cytearc_vfs.open_store` opens
composites and mounts the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MAPPING_ENTRY_POINTS", "mapping_provider_for"]

#: Entry-point group of the stores that provide count mappings.
MAPPING_ENTRY_POINTS = "cytearc_vfs.count_mappings"

Opener = Callable[..., Any]
_openers: dict[str, Opener] | None = None
_lock = threading.Lock()


def _load() -> dict[str, Opener]:
    global _openers
    with _lock:
        if _openers is None:
            from importlib.metadata import entry_points

            _openers = {
                entry.name: entry.load() for entry in entry_points(group=MAPPING_ENTRY_POINTS)
            }
        return _openers


def mapping_provider_for(root_attrs: Mapping[str, Any]) -> Opener | None:
    """The opener of the store kind ``root_attrs`` declare, or ``None`` for an ordinary store.

    Raises
    ------
    ValueError
        The root declares a kind no installed package provides (an install
        without its entry points: reinstall cytearc-vfs).
    """
    kinds = [name for name in ("composite", "matrixSource") if name in root_attrs]
    if not kinds:
        return None
    openers = _load()
    opener = openers.get(kinds[0])
    if opener is None:
        raise ValueError(
            f"the store is a {kinds[0]!r} store, but no installed package opens it (the "
            f"{MAPPING_ENTRY_POINTS} entry points are missing); reinstall cytearc-vfs"
        )
    return opener
