"""``open_store`` and the fingerprint accessors: one entry point for every store kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from zarr.abc.store import Store

from .locations import Location, describe_location, open_location
from .paths import AssayPaths
from .source_store import (
    AssayInfo,
    read_contents,
    refuse_pending_assays,
    verify_assay,
    verify_store,
)

__all__ = ["counts_fingerprint", "dataset_fingerprint", "open_store", "verified_assay"]

Mode = Literal["r", "r+", "a"]


def open_store(
    location: Location,
    *,
    mode: Mode = "r",
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Store:
    """Open a CyteArc store after verifying it.

    Returns the plain backend store for an ordinary store. Verification
    reads metadata only; a read-only open writes nothing. A store whose
    writer never finished (its root or one of its assays still carries a
    pending marker) raises :class:`~cytearc_vfs.IncompleteStoreError`.
    """
    if mode not in ("r", "r+", "a"):
        raise ValueError(f"mode must be 'r', 'r+' or 'a', not {mode!r}")
    where = describe_location(location)
    store = open_location(location, read_only=mode == "r", storage_options=storage_options)
    # refuses a store whose writer never finished (root marker)
    contents = read_contents(store, where=where)
    refuse_pending_assays(store, contents, where=where)
    if "composite" in contents.root_attrs:
        from .composite_store import CompositeStore

        return CompositeStore._verified(store, where, source_storage_options)
    if "matrixSource" in contents.root_attrs:
        from .mount_store import MountStore

        if source_storage_options is not None and not isinstance(source_storage_options, Mapping):
            raise TypeError("source_storage_options of a mount is one mapping of backend options")
        return MountStore._verified(store, where, source_storage_options)
    if source_storage_options:
        raise ValueError(
            f"{where} is an ordinary store; source_storage_options apply to composites and "
            "mounts only (use storage_options for the store itself)"
        )
    verify_store(store, where=where)
    return store


def verified_assay(store: Location, assay: str = "RNA", workspace: str | None = None) -> AssayInfo:
    """Verify one assay of an ordinary store and return what it records."""
    where = describe_location(store)
    backend = open_location(store, read_only=True)
    return verify_assay(backend, AssayPaths(assay, workspace), where=where)


def dataset_fingerprint(store: Location, assay: str = "RNA", workspace: str | None = None) -> str:
    """Identity of an assay's counts with its ordered cell and feature ids."""
    return verified_assay(store, assay, workspace).dataset_fingerprint


def counts_fingerprint(store: Location, assay: str = "RNA", workspace: str | None = None) -> str:
    """Identity of an assay's stored count values."""
    return verified_assay(store, assay, workspace).counts_fingerprint
