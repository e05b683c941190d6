"""``open_store`` and the fingerprint accessors: one entry point for every store kind.

An ordinary store is verified here. A composite or a mount is opened by the
package that defines it, found through the ``cytearc_vfs.count_mappings``
registry of :mod:`cytearc_vfs.read.mapping_providers`, so this module needs
no import of the layers above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, cast, runtime_checkable

from zarr.abc.store import Store

from ..format.option_names import option_name
from ..format.paths import AssayPaths
from ..format.source_store import (
    AssayInfo,
    check_assay_shards,
    read_contents,
    refuse_pending_assays,
    verify_assay,
    verify_store,
)
from ..remote.failures import named_backend_failures, names_backend_failures
from ..remote.locations import Location, describe_location, open_location
from .mapping_providers import mapping_provider_for
from .prefetch import assay_documents, prefetched
from .remembered_reads import RememberedReads

__all__ = [
    "counts_fingerprint",
    "dataset_fingerprint",
    "open_store",
    "opened_store",
    "verified_assay",
]

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
    reads metadata, and for an ordinary store the shard files of its count
    arrays against the tables their writer recorded (a listing and each
    shard's size; on a local store also its last four bytes, which the gather
    reader compares on other stores as it reads), so a deleted, swapped or
    replaced shard is an :class:`~cytearc_vfs.IdentityMismatchError`, never
    zeros or other values.
    A read-only open writes nothing. A store whose
    writer never finished (its root or one of its assays still carries a
    pending marker) raises :class:`~cytearc_vfs.IncompleteStoreError`.
    """
    if mode not in ("r", "r+", "a"):
        raise ValueError(f"mode must be 'r', 'r+' or 'a', not {mode!r}")
    where = describe_location(location)
    store = open_location(location, read_only=mode == "r", storage_options=storage_options)
    return opened_store(store, where=where, source_storage_options=source_storage_options)


def opened_store(
    store: Store,
    *,
    where: str,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Store:
    """The backend ``store`` of the location ``where`` verified and opened as
    :func:`open_store` opens it: ``store`` itself for an ordinary store, or the
    composite or mount its root records, reading through ``store``.

    A command gives the view it already read the location through (its
    :class:`~.remembered_reads.RememberedReads`), so what its check read is not
    read again; ``where`` names the store in every message, as ``open_store``
    names it.
    """
    # an unreachable server or refused credentials name the store and the remedy,
    # not only the backend's own words
    with named_backend_failures(where, options="storage_options"):
        return _opened_verified(store, where, source_storage_options)


def _opened_verified(
    store: Store, where: str, source_storage_options: Mapping[str, Mapping[str, Any]] | None
) -> Store:
    """``store`` at ``where`` verified: the store itself, or the composite or mount
    its root records."""
    # each document and listing read once for the whole open (the composite's or
    # mount's verification below reads the top of the store again)
    reads = RememberedReads(store)
    # refuses a store whose writer never finished (root marker)
    contents = read_contents(reads, where=where)
    if contents.root_attrs.get("encoding-type") == "anndata":
        # else named a damaged store ("holds no assay ... repack") or a v2 store to repack
        raise ValueError(
            f"{where} is an AnnData Zarr store, not a CyteArc store: read it with "
            "anndata.read_zarr, use it as a source of cv.create_composite (read where it is, "
            "no conversion), or import it with cv.write_counts(DEST, PATH)"
        )
    refuse_pending_assays(store, contents, where=where)
    # composites and mounts sit above this layer: found through their registry
    opener = mapping_provider_for(contents.root_attrs)
    if opener is not None:
        return cast("Store", opener(store, where, source_storage_options, documents=reads))
    if source_storage_options:
        # named as the caller gives them: keywords in Python, flags at a shell
        raise ValueError(
            f"{where} is an ordinary store; {option_name('source_storage_options')} apply to "
            f"composites and mounts only (use {option_name('storage_options')} for the store "
            "itself)"
        )
    # the documents verification reads, in one concurrent round (on an object
    # store, one round trip instead of one per document)
    documents = prefetched(store, [key for p in contents.assays for key in assay_documents(p)])
    # the shards' sizes from the store itself (an object store's listing carries them;
    # a command's view of it would ask for each shard's size apart)
    backend = store.wrapped if isinstance(store, RememberedReads) else store
    for info in verify_store(documents, where=where)[1]:
        # plain zarr reads a deleted shard as zeros and a swapped one as its
        # values: only this check stands between them and the caller
        check_assay_shards(backend, info, where=where)
    return store


def verified_assay(store: Location, assay: str = "RNA", workspace: str | None = None) -> AssayInfo:
    """Verify one assay of an ordinary store and return what it records."""
    where = describe_location(store)
    backend = open_location(store, read_only=True)
    return verify_assay(backend, AssayPaths(assay, workspace), where=where)


@names_backend_failures("store")
def _fingerprints(store: Location, assay: str, workspace: str | None) -> tuple[str, str]:
    """``(dataset, counts)`` fingerprints of ``assay`` of any store kind.

    An ordinary store's are verified from its records. A composite or a mount
    is opened verified, and answers itself (``assay_fingerprints``): a
    mount's are its source's, recorded in ``matrixSource`` and checked by the
    open; a composite has none of its own and says where its sources' are.
    """
    if isinstance(store, ProvidesFingerprints):  # an open composite or mount
        return store.assay_fingerprints(assay, workspace)
    where = describe_location(store)
    backend = open_location(store, read_only=True)
    opener = mapping_provider_for(read_contents(backend, where=where).root_attrs)
    if opener is None:
        info = verify_assay(backend, AssayPaths(assay, workspace), where=where)
        return info.dataset_fingerprint, info.counts_fingerprint
    opened = cast("ProvidesFingerprints", opener(backend, where, None))
    try:
        return opened.assay_fingerprints(assay, workspace)
    finally:
        opened.close()


def dataset_fingerprint(store: Location, assay: str = "RNA", workspace: str | None = None) -> str:
    """Identity of an assay's counts with its ordered cell and feature ids.

    A mount's is its source's (recorded in ``matrixSource``, checked as it
    opens); a composite has none of its own (``UnsupportedSourceError`` names
    where each source's is recorded).
    """
    return _fingerprints(store, assay, workspace)[0]


def counts_fingerprint(store: Location, assay: str = "RNA", workspace: str | None = None) -> str:
    """Identity of an assay's stored count values (a mount's: its source's; see
    :func:`dataset_fingerprint`)."""
    return _fingerprints(store, assay, workspace)[1]


@runtime_checkable
class ProvidesFingerprints(Protocol):
    """A store that answers for its own fingerprints (composites and mounts)."""

    def assay_fingerprints(self, assay: str, workspace: str | None) -> tuple[str, str]:
        """``(dataset, counts)`` fingerprints of ``assay``."""
        ...

    def close(self) -> None:
        """Release what the open holds."""
        ...
