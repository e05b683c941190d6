"""Binding a source store for reading: open, verify, and check its identity.

Composites (and, later, mounts) read counts from other stores. A bound
source is opened read-only through a :class:`CountingStore`, verified like
any ordinary store, and compared with the identities recorded when the
composite was created, so a changed source fails closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.core.sync import sync
from zarr.storage import StorePath

from ..errors import (
    IdentityMismatchError,
    SourceGoneError,
    SourceUnavailableError,
    UnsupportedSourceError,
    VfsError,
)
from ..format.option_names import on_command_line, source_label, source_options_example
from ..format.paths import AssayPaths, join
from ..format.records import ASSAY_TYPE_PRESETS, ArrayGeometry, CountLayout
from ..format.source_store import AssayInfo, read_contents, verify_assay
from ..format.store_contents import NoZarrGroupError
from ..format.store_io import get_json
from ..remote.cached_store import cached_source
from ..remote.failures import failure_remedy, first_line, is_http_location, source_failure
from ..remote.locations import Location, describe_location, local_path, open_location
from ..remote.pinned_store import pin_arrays, pinned_store_of
from ..remote.source_cache import SourceCache
from .anndata_sources import AnnDataCounts, AnnDataSpec, bind_anndata, is_anndata_root
from .cell_plan import CellPlan
from .feature_plan import FeaturePlan
from .gather import OrientationChoice, choose_orientation
from .opened_files import OpenedSource, opened_source
from .prefetch import MAX_IN_FLIGHT, PrefetchedStore, Seal, assay_documents, fetch_documents
from .read_stats import CountingStore, ReadCounters
from .shard_reader import ShardedReader, fast_reader_for

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
    counts: AsyncArray[Any]
    """Cell-major counts."""
    counts_t: AsyncArray[Any] | None
    """Feature-major countsT, when the assay has one."""
    counts_fast: ShardedReader | None = None
    """Direct shard reader of counts, when its codecs allow one."""
    counts_t_fast: ShardedReader | None = None
    """Direct shard reader of countsT, when its codecs allow one."""
    view: PrefetchedStore | None = None
    """The documents (and listing) it was verified from, when it was bound by
    :func:`bind_sources`: creation seals them and reads the tables through it."""
    anndata: AnnDataCounts | None = None
    """The matrix element of an AnnData source (then ``counts`` is one of its
    arrays and ``info`` describes it: see :mod:`.anndata_sources`)."""
    opened: OpenedSource | None = None
    """What the open found of a local source's count arrays: its reads refuse a
    source replaced since (:mod:`.opened_files`); ``None`` for other sources."""

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


def refuse_unsupported(store: Any, *, where: str, name: str) -> None:
    """Refuse composites, mounts and stores with a pending assay as sources."""
    contents = read_contents(store, where=where)
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

        async def fetch(spec: SourceSpec) -> Fetched:
            with _named_failures(spec):
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
                # one hand-off to a worker for both: the stat is taken before the
                # documents are read, so a replacement after it is seen by the
                # reads, one before it by the verification
                backend, opened = await asyncio.to_thread(_open_and_stat, spec, paths, cache)
                view = await fetch_documents(
                    backend,
                    assay_documents(paths),
                    seal=spec.seal,
                    # a retired state group is rare: asked for only if listed
                    deferred=[join(paths.assay_group, "state", "zarr.json")],
                    limit=gate,
                    # what verification lists (read_contents, the state check)
                    directories=["", paths.root, paths.assay_group],
                    groups=[paths.cell_data, paths.feature_data] if spec.tables else [],
                )
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
    for spec, fetched in zip(specs, sync(fetch_all()), strict=True):
        if isinstance(fetched, BaseException):
            _refuse_replaced(spec, fetched)
            raise fetched  # the first failing source, in the order given
        with _named_failures(spec), _replaced_sources(spec):
            backend, found, *opened = fetched
            if isinstance(found, AnnDataCounts):
                bound.append(_anndata_bound(spec, backend, found, counters))
                continue
            # from memory: the documents (and listing) were all fetched above
            bound.append(_verify_bound(spec, backend, found, counters, *opened))
    return bound


def _anndata_bound(
    spec: SourceSpec, backend: Store, counts: AnnDataCounts, counters: ReadCounters
) -> BoundSource:
    """A bound AnnData source, its identity compared with the record's."""
    where = describe_location(spec.location)
    if spec.workspace is not None:
        leave = (
            f"leave out --workspace {spec.name}={spec.workspace}"
            if on_command_line()
            else "leave source_workspaces out for it"
        )
        raise UnsupportedSourceError(
            f"source {spec.name!r} at {where} is an AnnData store, which has no workspaces; {leave}"
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
    return BoundSource(
        name=name,
        location=where,
        store=counting,
        info=info,
        counts=next(iter(element.arrays.values())),
        counts_t=None,
        anndata=element,
    )


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
    opened: OpenedSource | None = None,
) -> BoundSource:
    where = describe_location(spec.location)
    refuse_unsupported(view, where=where, name=spec.name)
    info = verify_assay(view, AssayPaths(spec.assay, spec.workspace), where=where)
    # a remote source's shards are pinned as they are now; every later read of
    # one is checked against its pin
    arrays = [info.paths.counts, info.paths.counts_t][: 1 + info.has_counts_t]
    pinned = pinned_store_of(backend)
    if view.listing is not None and pinned is not None:
        pinned.pin_listed(view.listing, arrays)  # from the open's listing: no request
    else:
        pin_arrays(backend, arrays)
    _check_expected(spec, info, where=where)
    return bound_from_verified(spec.name, where, view, info, counters, opened=opened)


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


@contextmanager
def _replaced_sources(spec: SourceSpec) -> Iterator[None]:
    """See :func:`_refuse_replaced`."""
    try:
        yield
    except ValueError as exc:
        _refuse_replaced(spec, exc)
        raise


def _refuse_replaced(spec: SourceSpec, exc: BaseException) -> None:
    """A recorded source that is no longer a CyteArc store: say so, naming the source.

    When the record holds the source's fingerprints (an open), a plain
    ``ValueError`` from reading it ("holds no Zarr group", "assay 'RNA' does
    not exist") means something else now sits at the recorded location (an
    AnnData store, an empty directory, a file), and its own remedy (write a
    store there) is not this one. The package's own errors name what they
    checked and pass unchanged.
    """
    if spec.expected_dataset is None or isinstance(exc, VfsError):
        return
    where = describe_location(spec.location)
    local = local_path(spec.location)
    if isinstance(exc, NoZarrGroupError) and (local is None or local.is_dir()):
        # nothing is there (an object store has no directory to find missing first);
        # not marked as pinned_store's failures are: _named_failures passes it as it is
        raise SourceGoneError(
            f"{source_label(spec.name)} at {where} is gone: no Zarr group is there any more "
            "(no zarr.json at its root); a source moved or deleted after the composite was "
            "made must be restored at that location, or the composite recreated"
        ) from exc
    if type(exc) not in (ValueError, NoZarrGroupError):
        return
    raise ValueError(
        f"{source_label(spec.name)} at {where} is not the store the composite recorded "
        f"({first_line(exc)}); the source was replaced or moved after the composite was "
        "created. Restore the source at that path, or recreate the composite"
    ) from exc


@contextmanager
def _named_failures(spec: SourceSpec) -> Iterator[None]:
    """Backend errors (missing files, refused credentials, network) become one
    :class:`SourceUnavailableError` (:class:`SourceGoneError` for a source that is not
    there) that names the source and the fix; the package's other errors pass."""
    try:
        yield
    except Exception as exc:
        gone = isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFoundError"
        kind = SourceGoneError if gone else SourceUnavailableError
        if getattr(exc, "cytearc_source", False):
            # pinned_store named the source, the key and the remedy already: said
            # once, not nested in a second naming of the same source
            label, named, detail = first_line(exc).partition(": ")
            if named and label.startswith(f"{source_label(spec.name)} at "):
                raise source_failure(kind(f"{label} cannot be read: {detail}")) from exc
        if isinstance(exc, (VfsError, ValueError, TypeError)):
            raise
        where = describe_location(spec.location)
        # an error pinned_store named already carries the backend's as its cause
        cause = exc.__cause__ if getattr(exc, "cytearc_source", False) else None
        cause = exc if cause is None else cause
        if local_path(spec.location) is not None:
            remedy = (
                "check that it exists (a source moved or deleted after the composite was made "
                "must be restored at that path)"
            )
        else:
            remedy = failure_remedy(
                cause, http=is_http_location(where), options=source_options_example(spec.name)
            )
        said = first_line(exc)
        raise source_failure(
            kind(
                f"{source_label(spec.name)} at {where} cannot be read "
                f"({type(exc).__name__}: {said})"
                + ("" if remedy in said else f"; {remedy}")  # a backend may name it already
            )
        ) from exc


def rebind(source: BoundSource, counters: ReadCounters) -> BoundSource:
    """The same verified source, counted into ``counters`` (no I/O: its arrays'
    metadata is reused)."""
    if source.anndata is not None:
        return _anndata_on(
            source.name,
            source.location,
            source.store.wrapped,
            source.info,
            source.anndata,
            counters,
        )
    counting = CountingStore(source.store.wrapped, counters)
    counts = _array_on(counting, source.counts.metadata, source.counts.store_path.path)
    counts_t = (
        None
        if source.counts_t is None
        else _array_on(counting, source.counts_t.metadata, source.counts_t.store_path.path)
    )
    return _bound(
        source.name,
        source.location,
        counting,
        source.info,
        counts,
        counts_t,
        source.view,
        source.opened,
    )


def bound_from_verified(
    name: str,
    location: str,
    backend: Store,
    info: AssayInfo,
    counters: ReadCounters,
    *,
    opened: OpenedSource | None = None,
) -> BoundSource:
    """A bound source for an assay that was already verified (opens its arrays only).

    When ``backend`` is a :class:`PrefetchedStore`, the arrays are built from the
    documents it already holds, and the source reads the store underneath.
    ``opened`` is what the verifying open found of a local source's files
    (:func:`~.opened_files.opened_source`, taken before it read them).
    """
    documents = backend if isinstance(backend, PrefetchedStore) else None
    counting = CountingStore(documents.wrapped if documents is not None else backend, counters)

    def open_array(path: str) -> zarr.Array[Any]:
        verified = info.array_metadata.get(path)
        if verified is not None:  # parsed by verification: no read, no second parse
            return _array_on(counting, verified, path)
        # served from memory: verification already fetched and checked it
        document = None if documents is None else get_json(documents, join(path, "zarr.json"))
        if isinstance(document, dict):
            return _array_on(counting, ArrayV3Metadata.from_dict(document), path)
        array = zarr.open_array(counting, path=path, mode="r")
        assert isinstance(array, zarr.Array)
        return array

    counts = open_array(info.paths.counts)
    counts_t = open_array(info.paths.counts_t) if info.has_counts_t else None
    return _bound(name, location, counting, info, counts, counts_t, documents, opened)


def _array_on(store: Store, metadata: Any, path: str) -> zarr.Array[Any]:
    return zarr.Array(AsyncArray(metadata=metadata, store_path=StorePath(store, path)))


def _bound(
    name: str,
    location: str,
    counting: CountingStore,
    info: AssayInfo,
    counts: zarr.Array[Any],
    counts_t: zarr.Array[Any] | None,
    view: PrefetchedStore | None = None,
    opened: OpenedSource | None = None,
) -> BoundSource:
    return BoundSource(
        name=name,
        location=location,
        store=counting,
        info=info,
        counts=counts.async_array,
        counts_t=None if counts_t is None else counts_t.async_array,
        counts_fast=fast_reader_for(counts, where=location, opened=opened),
        counts_t_fast=(
            None if counts_t is None else fast_reader_for(counts_t, where=location, opened=opened)
        ),
        view=view,
        opened=opened,
    )
