"""One assay of any CyteArc store (ordinary, composite, mount), opened for export.

Every AnnData output starts here: the store is opened verified
(:func:`cytearc_vfs.open_store`), a gather reader is bound to the assay, and
the paths of its cell and feature tables are resolved. ``counts_path`` names
the store's own cell-major counts array when the opened store serves it (an
ordinary store's, or a composite's computed one); a mount serves its counts
only through the reader, so views compute its chunks instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from cytearc_vfs.composite.store import CompositeStore
from cytearc_vfs.format.paths import AssayPaths, join
from cytearc_vfs.read.opening import ProvidesFingerprints, open_store, opened_store
from cytearc_vfs.read.reader import VirtualArrayReader
from cytearc_vfs.read.remembered_reads import RememberedReads
from cytearc_vfs.remote.locations import Location, describe_location, open_location

__all__ = ["OpenOptions", "OpenedAssay", "open_assay"]


class OpenOptions(TypedDict, total=False):
    """How to open a location: the keywords every AnnData output passes on."""

    workspace: str | None
    """Workspace of an ordinary store's assay (workspace layout)."""
    storage_options: Mapping[str, Any] | None
    """Backend options of a URL location."""
    source_storage_options: Mapping[str, Mapping[str, Any]] | None
    """Per-source backend options of a composite's or mount's sources; never written."""


@dataclass(frozen=True, slots=True)
class OpenedAssay:
    """An assay of a verified store, with what AnnData outputs need of it."""

    store: Store
    """The opened store (backend store, ``CompositeStore`` or ``MountStore``)."""
    assay: str
    """The exported assay."""
    paths: AssayPaths
    """Where the assay's tables live in ``store``."""
    reader: VirtualArrayReader
    """A gather reader of the assay's counts."""
    where: str
    """The location, for messages."""
    counts_path: str | None
    """Key of the cell-major counts array that ``store`` serves, or ``None``."""

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features)."""
        return self.reader.shape

    def shard_cells(self) -> int | None:
        """Cells of one shard of the store's own cell-major ``counts`` (an ordinary
        store's), or ``None`` (a composite or a mount: their sources' shards are
        read through their cache).

        Bands of cells that end on a shard boundary read each shard in one band;
        a band ending inside a shard left the next band to fetch that shard's index
        and some of its chunks again.
        """
        if self.counts_path is None or isinstance(self.store, ProvidesFingerprints):
            return None
        # the document the open verified (a one-go view remembers it: no request)
        counts = zarr.open_array(self.store, path=self.counts_path, mode="r", zarr_format=3)
        return int((counts.shards or counts.chunks)[0])

    @property
    def source_names(self) -> tuple[str, ...] | None:
        """A composite's source names in order (its ``source`` column's categories);
        ``None`` for any other store."""
        if isinstance(self.store, CompositeStore):
            return tuple(binding.name for binding in self.store.record.sources)
        return None


def open_assay(
    location: Location | Store,
    assay: str = "RNA",
    *,
    workspace: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    once: bool = False,
) -> OpenedAssay:
    """Open ``location`` verified and bind a reader to ``assay``.

    ``once``: the store (a location's) is read through a view that reads each
    metadata document and listing once
    (:class:`~cytearc_vfs.read.remembered_reads.RememberedReads`), for a caller
    that reads it in one go and closes it (an export): the open's checks, the
    reader and the tables then share those reads, where on object storage each
    was a request again. A store kept open (a lazy view) reads them anew.

    Raises
    ------
    ValueError
        The store has no assay of that name.
    """
    where = describe_location(location)
    given: object = location
    if (
        isinstance(given, Store)
        and isinstance(given, ProvidesFingerprints)
        and not (storage_options or source_storage_options)
    ):
        # an open composite or mount (verified, holding its sources' options; a
        # pickled view's in a worker): opening it again would rebind its sources
        # without those options, and a remote source could not be read
        store: Store = given
    elif once and not isinstance(given, Store):
        view = RememberedReads(
            open_location(location, read_only=True, storage_options=storage_options)
        )
        wanted = AssayPaths(assay, workspace)
        # a composite's and a mount's open read their ids whole (their fingerprints)
        # and the tables read them next: handed on, each chunk is fetched once
        with view.holding([join(wanted.cell_data, "ids"), join(wanted.feature_data, "ids")]):
            # named as open_store names it: by the location, not by the view
            store = opened_store(view, where=where, source_storage_options=source_storage_options)
    else:
        store = open_store(
            location,
            storage_options=storage_options,
            source_storage_options=source_storage_options,
        )
    paths = AssayPaths(assay, workspace)
    try:
        # an unknown assay is refused here, naming the store's assays
        reader = VirtualArrayReader(store, assay, workspace=workspace)
        counts = paths.counts
        served = sync(store.exists(join(counts, "zarr.json")))
    except BaseException:
        if store is not given:
            store.close()  # opened here: nothing else will close it
        raise
    return OpenedAssay(store, assay, paths, reader, where, counts if served else None)
