"""Binding a source store for reading: open, verify, and check its identity.

Composites (and, later, mounts) read counts from other stores. A bound
source is opened read-only through a :class:`CountingStore`, verified like
any ordinary store, and compared with the identities recorded when the
composite was created, so a changed source fails closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.array_spec import ArrayConfig
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.core.sync import sync
from zarr.storage import LocalStore

from ..errors import (
    IdentityMismatchError,
    RecordShapeError,
    UnsupportedSourceError,
)
from ..format.option_names import source_label, source_option_given
from ..format.paths import AssayPaths, join
from ..format.records import ASSAY_TYPE_PRESETS, ArrayGeometry, CountLayout
from ..format.source_store import AssayInfo, StoreContents, read_contents, verify_assay
from ..format.store_io import get_json
from ..remote.cached_store import cached_source
from ..remote.locations import Location, describe_location, local_path, open_location
from ..remote.pinned_store import pin_arrays, pinned_store_of
from ..remote.source_cache import SourceCache
from .anndata_sources import AnnDataCounts, AnnDataSpec, bind_anndata, is_anndata_root
from .cell_plan import CellPlan
from .feature_plan import FeaturePlan
from .gather import OrientationChoice, choose_orientation
from .opened_files import OpenedSource, opened_source
from .prefetch import (
    MAX_IN_FLIGHT,
    LocalReaders,
    PrefetchedStore,
    Seal,
    assay_documents,
    fetch_documents,
    read_local,
)
from .read_stats import CountingStore, ReadCounters
from .shard_reader import ShardedReader
from .source_arrays import CountArrays, array_config
from .source_failures import named_failures, refuse_replaced, replaced_sources
from .unlisted_sources import pin_unlisted, tables_need_listing

__all__ = [
    "BoundSource",
    "SourceSpec",
    "bind_source",
    "bind_sources",
    "bound_from_verified",
    "rebind",
    "refuse_unsupported",
]


@dataclass(frozen=True, slots=True)
class BoundSource:
    """A verified source assay, ready to read."""

    name: str
    """Source name."""
    location: str
    """Where it is (for messages)."""
    store: CountingStore
    """The counting, read-only store it is read through."""
    info: AssayInfo
    """Its verified records."""
    arrays: CountArrays | None = None
    """Its count arrays, from the metadata its verification parsed (built on first use);
    ``None`` for an AnnData source."""
    view: PrefetchedStore | None = None
    """The documents (and listing) it was verified from, when it was bound by
    :func:`bind_sources`: creation seals them and reads the tables through it."""
    anndata: AnnDataCounts | None = None
    """The matrix element of an AnnData source (then ``counts`` is one of its
    arrays and ``info`` describes it: see :mod:`.anndata_sources`)."""
    opened: OpenedSource | None = None
    """What the open found of a local source's count arrays: its reads refuse a
    source replaced since (:mod:`.opened_files`); ``None`` for other sources."""

    @property
    def counts(self) -> AsyncArray[Any]:
        """Cell-major counts."""
        if self.arrays is None:
            assert self.anndata is not None
            return next(iter(self.anndata.arrays.values()))
        return self.arrays.array(self.info.paths.counts)

    @property
    def counts_t(self) -> AsyncArray[Any] | None:
        """Feature-major countsT, when the assay has one."""
        if self.arrays is None or not self.info.has_counts_t:
            return None
        return self.arrays.array(self.info.paths.counts_t)

    @property
    def counts_fast(self) -> ShardedReader | None:
        """Direct shard reader of counts, when its codecs allow one."""
        return None if self.arrays is None else self.arrays.fast(self.info.paths.counts)

    @property
    def counts_t_fast(self) -> ShardedReader | None:
        """Direct shard reader of countsT, when its codecs allow one."""
        if self.arrays is None or not self.info.has_counts_t:
            return None
        return self.arrays.fast(self.info.paths.counts_t)

    def orientation(self, cells: CellPlan, plan: FeaturePlan) -> OrientationChoice:
        """The orientation (``counts`` or ``countsT``) that decodes fewer bytes for
        this source's share of a read, with the chunk counts its plans keep."""
        return choose_orientation(
            cells.rows,
            plan.cols,
            self.info.layout,
            self.info.dtype.itemsize,
            count_rows=cells.touched.count,
            count_cols=plan.touched.count,
        )


def refuse_unsupported(
    store: Any, *, where: str, name: str, unlisted: AssayPaths | None = None
) -> StoreContents:
    """Refuse composites, mounts and stores with a pending assay as sources; what the
    store declares otherwise. With ``unlisted`` (the assay read), a store whose
    listing is refused is read by path (:func:`~..format.store_contents.declared_contents`)."""
    contents = read_contents(store, where=where, unlisted=unlisted)
    attrs = contents.root_attrs
    if "composite" in attrs:
        raise UnsupportedSourceError(
            f"source {name!r} at {where} is itself a composite; composites do not nest. "
            "Use its own sources instead, or materialize it into an ordinary store first"
        )
    if "matrixSource" in attrs:
        raise UnsupportedSourceError(
            f"source {name!r} at {where} is a mounted target whose counts live in another "
            "store; use that source store, or repack the mount into an ordinary store first"
        )
    if contents.pending:
        pending = ", ".join(p.assay_group for p in contents.pending)
        raise UnsupportedSourceError(
            f"source {name!r} at {where} holds a pending derived assay ({pending}); finish or "
            "discard it before using the store as a source"
        )
    return contents


# a backend, what it holds (an assay's documents or an AnnData element) and, for
# a local CyteArc source, what its open found of its files
Fetched = (
    tuple[Store, PrefetchedStore | AnnDataCounts]
    | tuple[Store, PrefetchedStore, OpenedSource | None]
)


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """What binding one source needs (see :func:`bind_sources`)."""

    name: str
    """Source name, for messages and the cache's keys."""
    location: Location
    """Where the source is."""
    assay: str
    """The assay read."""
    workspace: str | None = None
    """Workspace of the assay, or ``None`` for the root layout."""
    storage_options: Mapping[str, Any] | None = None
    """Backend options (credentials)."""
    expected_dataset: str | None = None
    """Dataset fingerprint recorded at creation, compared when given."""
    expected_counts: str | None = None
    """Counts fingerprint recorded at creation, compared when given."""
    seal: Seal | None = None
    """Documents verified at creation, with their versions (:mod:`.prefetch`)."""
    anndata: AnnDataSpec | None = None
    """May be (at creation) or is (at open) an AnnData store: its element and record."""
    tables: bool = False
    """Whether the cell and feature tables are read next (a creation): a local
    source's table listings and column documents are read with the rest."""


def bind_source(
    name: str,
    location: Location,
    assay: str,
    *,
    workspace: str | None,
    counters: ReadCounters,
    storage_options: Mapping[str, Any] | None = None,
    expected_dataset: str | None = None,
    expected_counts: str | None = None,
    cache: SourceCache | None = None,
) -> BoundSource:
    """Open and verify ``assay`` of the source at ``location`` (one source of
    :func:`bind_sources`)."""
    spec = SourceSpec(
        name, location, assay, workspace, storage_options, expected_dataset, expected_counts
    )
    return bind_sources([spec], counters=counters, cache=cache)[0]


def bind_sources(
    specs: Sequence[SourceSpec], *, counters: ReadCounters, cache: SourceCache | None = None
) -> list[BoundSource]:
    """Open and verify every source of ``specs``, their metadata fetched all at once.

    Every source's documents (and, on object stores, its listing) are fetched
    in one concurrent batch, at most :data:`~.prefetch.MAX_IN_FLIGHT` requests
    in flight over all sources; verification then reads them from memory. So
    an open costs the round trips of one source, not of all of them in turn.

    With ``expected_*`` fingerprints, a source whose identity changed raises
    :class:`IdentityMismatchError` naming the source, location, expected and
    found values. A remote source is read through ``cache`` when one is given.
    """

    async def fetch_all() -> list[Fetched | BaseException]:
        gate = asyncio.Semaphore(MAX_IN_FLIGHT)
        local = LocalReaders(MAX_IN_FLIGHT)

        async def fetch(spec: SourceSpec) -> Fetched:
            with named_failures(spec):
                # On a worker thread: a backend's opener may block or call
                # zarr's sync API, which the event loop's own thread must not;
                # the sources before it wait for answers meanwhile.
                where = describe_location(spec.location)
                if spec.anndata is not None and spec.anndata.recorded is not None:
                    backend = await asyncio.to_thread(_open_backend, spec, cache)
                    counts = await bind_anndata(
                        spec.name, spec.location, backend, spec.anndata, where=where
                    )
                    assert counts is not None
                    return backend, counts
                paths = AssayPaths(spec.assay, spec.workspace)
                asked = _asked(spec, paths)
                # one hand-off to a worker for all: the stat is taken before the
                # documents are read, so a replacement after it is seen by the
                # reads, one before it by the verification; a local source's
                # documents are read there too, one source at a time while
                # its reads do not wait (LocalReaders)
                if local_path(spec.location) is not None:
                    backend, opened, view = await local.run(
                        _open_stat_and_read, spec, paths, cache, asked, gate
                    )
                else:
                    backend, opened = await asyncio.to_thread(_open_and_stat, spec, paths, cache)
                    view = None
                if view is None:
                    view = await fetch_documents(backend, **asked, seal=spec.seal, limit=gate)
                if spec.anndata is not None and is_anndata_root(view.held("zarr.json")[1]):
                    # a creation's source without a CyteArc root: maybe an AnnData store
                    counts = await bind_anndata(
                        spec.name, spec.location, backend, spec.anndata, where=where
                    )
                    if counts is not None:
                        return backend, counts
                return backend, view, opened

        tasks = []
        for spec in specs:
            tasks.append(asyncio.ensure_future(fetch(spec)))
            await asyncio.sleep(0)  # its first requests leave before the next client is built
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    bound: list[BoundSource] = []
    config = array_config()  # zarr's configuration, read once for every source
    for spec, fetched in zip(specs, sync(fetch_all()), strict=True):
        if isinstance(fetched, BaseException):
            refuse_replaced(spec, fetched)
            raise fetched  # the first failing source, in the order given
        backend, found, *opened = fetched
        if spec.tables and isinstance(found, PrefetchedStore) and found.listing_refused:
            # a creation copies the tables, which only a listing finds: refused before
            # its shards are pinned (a request each without the listing)
            raise tables_need_listing(
                spec.name, describe_location(spec.location), found.listing_refused
            )
        with named_failures(spec), replaced_sources(spec):
            if isinstance(found, AnnDataCounts):
                bound.append(_anndata_bound(spec, backend, found, counters))
                continue
            # from memory: the documents (and listing) were all fetched above
            bound.append(_verify_bound(spec, backend, found, counters, config, *opened))
    return bound


def _anndata_bound(
    spec: SourceSpec, backend: Store, counts: AnnDataCounts, counters: ReadCounters
) -> BoundSource:
    """A bound AnnData source, its identity compared with the record's."""
    where = describe_location(spec.location)
    if spec.workspace is not None:
        leave = source_option_given("source_workspaces", spec.name, spec.workspace)
        raise UnsupportedSourceError(
            f"source {spec.name!r} at {where} is an AnnData store, which has no workspaces; "
            f"leave out {leave}"
        )
    fingerprints = counts.fingerprints
    # an AnnData store declares no assay type: it takes the assay's name
    # when that is a preset (a composite of CyteArc sources decides otherwise)
    assay_type = spec.assay if spec.assay in ASSAY_TYPE_PRESETS else "Assay"
    # the layout describes shape and dtype; its geometry is not read (an
    # AnnData element is read by its own encoding, not through shards)
    geometry = ArrayGeometry((1, 1), (1, 1))
    info = AssayInfo(
        paths=AssayPaths(spec.assay, None),
        assay_type=assay_type,
        layout=CountLayout(0, 0, counts.shape, counts.dtype.name, geometry, None),
        content_fingerprint=fingerprints["counts"],
        cells_fingerprint=fingerprints["cells"],
        features_fingerprint=fingerprints["features"],
    )
    _check_expected(spec, info, where=where)
    return _anndata_on(spec.name, where, backend, info, counts, counters)


def _anndata_on(
    name: str,
    where: str,
    backend: Store,
    info: AssayInfo,
    counts: AnnDataCounts,
    counters: ReadCounters,
) -> BoundSource:
    counting = CountingStore(backend, counters)
    element = counts.on(counting)
    return BoundSource(name=name, location=where, store=counting, info=info, anndata=element)


def _open_backend(spec: SourceSpec, cache: SourceCache | None) -> Store:
    return cached_source(
        open_location(spec.location, read_only=True, storage_options=spec.storage_options),
        cache,
        spec.name,
        where=describe_location(spec.location),
    )


def _open_and_stat(
    spec: SourceSpec, paths: AssayPaths, cache: SourceCache | None
) -> tuple[Store, OpenedSource | None]:
    """The source's backend and what its open finds of a local source's files."""
    return _open_backend(spec, cache), _opened(spec, paths)


def _asked(spec: SourceSpec, paths: AssayPaths) -> dict[str, Any]:
    """What to fetch of a source before verifying it (see :func:`~.prefetch.fetch_documents`)."""
    return {
        "keys": assay_documents(paths),
        # a retired state group is rare: asked for only if listed
        "deferred": [join(paths.assay_group, "state", "zarr.json")],
        # what verification lists (read_contents, the state check)
        "directories": ["", paths.root, paths.assay_group],
        "groups": [paths.cell_data, paths.feature_data] if spec.tables else [],
        # what the listing would have told absent, where it is refused
        "probes": [join(paths.assay_group, "state", ".zgroup")],
    }


def _open_stat_and_read(
    spec: SourceSpec,
    paths: AssayPaths,
    cache: SourceCache | None,
    asked: dict[str, Any],
    gate: asyncio.Semaphore,
) -> tuple[Store, OpenedSource | None, PrefetchedStore | None]:
    """:func:`_open_and_stat`, then a local store's documents read on the same thread
    (``None`` for a backend that is not zarr's plain ``LocalStore``)."""
    backend, opened = _open_and_stat(spec, paths, cache)
    if type(backend) is not LocalStore:  # exactly zarr's: a subclass may read otherwise
        return backend, opened, None
    return backend, opened, read_local(backend, **asked, limit=gate)


def _opened(spec: SourceSpec, paths: AssayPaths) -> OpenedSource | None:
    """What the open of a local source finds (see :mod:`.opened_files`)."""
    root = local_path(spec.location)
    if root is None:
        return None
    # an open with the recorded fingerprints is a composite's: its open compares them
    reopen = (
        "reopen the composite, whose open compares the source with the fingerprints it recorded"
        if spec.expected_dataset is not None
        else "open the store again"
    )
    return opened_source(
        str(root),
        [paths.counts, paths.counts_t],
        label=f"{source_label(spec.name)} at {describe_location(spec.location)}",
        reopen=reopen,
    )


def _verify_bound(
    spec: SourceSpec,
    backend: Store,
    view: PrefetchedStore,
    counters: ReadCounters,
    config: ArrayConfig,
    opened: OpenedSource | None = None,
) -> BoundSource:
    where = describe_location(spec.location)
    paths = AssayPaths(spec.assay, spec.workspace)
    contents = refuse_unsupported(view, where=where, name=spec.name, unlisted=paths)
    # each document is parsed once: the verification reuses what the contents parsed
    info = verify_assay(view, paths, where=where, contents=contents)
    # a remote source's shards are pinned as they are now; every later read of
    # one is checked against its pin
    arrays = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    pinned = pinned_store_of(backend)
    if view.listing is not None and pinned is not None:
        pinned.pin_listed(view.listing, arrays)  # from the open's listing: no request
    elif pinned is not None and pinned.listing_refused is not None:
        pin_unlisted(pinned, info, view)  # a HEAD per shard, as the listing would have pinned
    else:
        pin_arrays(backend, arrays)
    _check_expected(spec, info, where=where)
    return bound_from_verified(spec.name, where, view, info, counters, opened=opened, config=config)


def _check_expected(spec: SourceSpec, info: AssayInfo, *, where: str) -> None:
    for what, expected, found in (
        ("dataset", spec.expected_dataset, info.dataset_fingerprint),
        ("counts", spec.expected_counts, info.counts_fingerprint),
    ):
        if expected is not None and expected != found:
            raise IdentityMismatchError(
                f"source {spec.name!r} at {where}: {what} fingerprint {found} does not match the "
                f"composite record {expected}; the source changed after the composite was "
                "created. Restore the source, or recreate the composite"
            )


def rebind(source: BoundSource, counters: ReadCounters) -> BoundSource:
    """The same verified source, counted into ``counters`` (no I/O, nothing parsed
    again: its arrays are built from the same metadata when first used)."""
    if source.anndata is not None:
        return _anndata_on(
            source.name,
            source.location,
            source.store.wrapped,
            source.info,
            source.anndata,
            counters,
        )
    assert source.arrays is not None
    counting = CountingStore(source.store.wrapped, counters)
    return BoundSource(
        name=source.name,
        location=source.location,
        store=counting,
        info=source.info,
        arrays=source.arrays.on(counting),
        view=source.view,
        opened=source.opened,
    )


def bound_from_verified(
    name: str,
    location: str,
    backend: Store,
    info: AssayInfo,
    counters: ReadCounters,
    *,
    opened: OpenedSource | None = None,
    config: ArrayConfig | None = None,
) -> BoundSource:
    """A bound source for an assay that was already verified (no I/O: its arrays are
    built from the metadata the verification parsed, when first used).

    When ``backend`` is a :class:`PrefetchedStore`, the source reads the store
    underneath. ``opened`` is what the verifying open found of a local source's
    files (:func:`~.opened_files.opened_source`, taken before it read them).
    ``config`` is zarr's array configuration read once for many sources
    (:func:`~.source_arrays.array_config`; read here when not given).
    """
    documents = backend if isinstance(backend, PrefetchedStore) else None
    counting = CountingStore(documents.wrapped if documents is not None else backend, counters)
    paths = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    names = {info.paths.counts: "counts", info.paths.counts_t: "countsT"}
    arrays = CountArrays(
        counting,
        {path: _verified_metadata(backend, info, path) for path in paths},
        {path: info.shard_tables.get(names[path]) for path in paths},
        location,
        opened,
        array_config() if config is None else config,
    )
    return BoundSource(
        name=name,
        location=location,
        store=counting,
        info=info,
        arrays=arrays,
        view=documents,
        opened=opened,
    )


def _verified_metadata(backend: Store, info: AssayInfo, path: str) -> ArrayV3Metadata:
    """The metadata of the count array at ``path`` as its verification parsed it (read
    and parsed again only for an ``info`` that does not hold it)."""
    verified = info.array_metadata.get(path)
    if verified is not None:
        return verified
    document = get_json(backend, join(path, "zarr.json"))
    if not isinstance(document, dict):
        raise RecordShapeError(f"{path}: no Zarr v3 array document (zarr.json) to read it from")
    return ArrayV3Metadata.from_dict(document)
