"""``MountStore``: a writable target that sees a read-only source's artifacts.

Resolution (spec, "Mounted targets"): keys outside the artifact roots are the
target's alone; a key inside an artifact group ``{root}/{kind}/{id}`` is read
from the target when the target holds the group's ``zarr.json``, else from the
source when the source holds it; listings of an artifact root and of its kind
directories are the union of both stores, and a directory document the
target lacks is read from the source. Every write goes to the target;
writing or deleting inside a source group raises ``PermissionError``, so the
source is never modified. Keys that try to escape a store are refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from ..errors import SourceGoneError
from ..format.chunk_keys import is_chunk_key
from ..format.key_checked import KeyCheckedStore
from ..format.missing_assay import missing_assay_error
from ..format.nodes import array_at
from ..format.option_names import MOUNT_SOURCE
from ..format.paths import AssayPaths, join
from ..format.source_store import AssayInfo
from ..format.store_io import document_attribute
from ..read.count_mapping import CountMapping, IdentityMapping
from ..read.opened_files import OpenedSource
from ..read.prefetch import PrefetchedStore, assay_documents, prefetched
from ..read.read_stats import ReadCounters
from ..read.remembered_reads import RememberedReads
from ..read.sources import bound_from_verified
from ..read.unlisted_sources import pin_unlisted
from ..remote.cached_store import cached_source, source_cache_of
from ..remote.failures import is_http_location
from ..remote.locations import Location, describe_location, open_location
from ..remote.pinned_store import pin_arrays, pinned_store_of
from ..remote.source_cache import CacheInfo, SourceCache
from .open_checks import type_change_refusal, verify_mount_tables
from .owners import GroupOwners
from .records import MATRIX_SOURCE_ATTR, MountRecord
from .resolution import artifact_roots, listing_is_union, pinned_places, pinned_refusal, place_of
from .source_checks import source_listing_refused, verify_mount_source

__all__ = ["MountStore"]


class MountStore(KeyCheckedStore):
    """A mounted target: its own keys, plus the source's artifacts read through.

    Use :meth:`from_location` (or ``cv.open_store``) rather than the constructor.
    """

    supports_consolidated_metadata = False

    def __init__(
        self,
        target: Store,
        source: Store,
        record: MountRecord,
        infos: Mapping[str, AssayInfo],
        *,
        source_storage_options: Mapping[str, Any] | None = None,
        read_only: bool | None = None,
        documents: PrefetchedStore | None = None,
        opened: OpenedSource | None = None,
    ) -> None:
        if read_only is not None and read_only != target.read_only:
            target = target.with_read_only(read_only)
        super().__init__(read_only=target.read_only)
        self._target = target
        source = source if source.read_only else source.with_read_only(True)
        # a remote source reads through a bounded cache (shared by the stores
        # with_read_only derives, made anew where the store is unpickled)
        self._cache = source_cache_of(source) or SourceCache()
        self._source = cached_source(source, self._cache, MOUNT_SOURCE, where=record.location)
        self._record = record
        self._infos = dict(infos)
        self._roots = artifact_roots(record.workspace, record.assays)
        # the counts' places and the ids: what every open checks (open_checks.py)
        self._pinned = pinned_places(info.paths for info in self._infos.values())
        self._container_document = join(record.workspace or "", "zarr.json")
        self._source_options = dict(source_storage_options or {})
        # the source's documents as verified: readers open its arrays from them
        self._documents = documents
        # what the open found of a local source's count arrays: reads refuse a
        # source replaced since (read/opened_files.py)
        self._opened = opened
        # which store holds each artifact group seen so far (owners.py)
        self._owners = GroupOwners(self._target, self._source, self._roots)

    # ------------------------------------------------------------- opening

    @classmethod
    def from_location(
        cls,
        location: Location,
        *,
        mode: str = "r",
        storage_options: Mapping[str, Any] | None = None,
        source_storage_options: Mapping[str, Any] | None = None,
    ) -> MountStore:
        """Open and verify the mounted target at ``location``."""
        where = describe_location(location)
        target = open_location(location, read_only=mode == "r", storage_options=storage_options)
        return cls._verified(target, where, source_storage_options)

    @classmethod
    def _verified(
        cls,
        target: Store,
        where: str,
        source_storage_options: Mapping[str, Any] | None,
        *,
        remembered: Store | None = None,
    ) -> MountStore:
        # the checks read each document of the target once (with the open's reads so
        # far, when given); the mount itself reads and writes through ``target``
        reads = RememberedReads(target) if remembered is None else remembered
        checked = verify_mount_source(reads, where, source_storage_options)
        record, infos, documents = checked.record, checked.infos, checked.documents
        # the target's documents the checks read, in one concurrent round
        target_documents = prefetched(
            reads,
            [
                *(key for info in infos.values() for key in assay_documents(info.paths)),
                join(record.workspace or "", "artifacts", "zarr.json"),
            ],
        )
        verify_mount_tables(target_documents, record, infos, where=where)
        mount = cls(
            target,
            checked.source,
            record,
            infos,
            source_storage_options=source_storage_options,
            documents=documents,
            opened=checked.opened,
        )
        # the source's shards are pinned as they are now (see pinned_store),
        # from the open's listing where there is one (no request)
        arrays = [
            path for info in infos.values() for path in (info.paths.counts, info.paths.counts_t)
        ]
        pinned = pinned_store_of(mount._source)
        if documents.listing is not None and pinned is not None:
            pinned.pin_listed(documents.listing, arrays)
        elif pinned is not None and pinned.listing_refused is not None:
            for info in infos.values():  # a HEAD per shard, as the listing would have pinned
                pin_unlisted(pinned, info, documents)
        else:
            pin_arrays(mount._source, arrays)
        return mount

    def __reduce__(self) -> tuple[Any, ...]:
        # for dask workers and process pools: target, record and in-memory source
        # options travel; the unpickling process verifies again (unpickling.py)
        from .unpickling import restore

        # the groups found to be the source's travel too: a zarr array pickled with
        # its metadata reads chunks without its documents, and a chunk of a source
        # group gone since must be refused there as here (never read as zeros)
        return (
            restore,
            (
                self._target,
                self._record,
                self._source_options,
                self._target.read_only,
                self._owners.source_groups(),
            ),
        )

    # ------------------------------------------------------------ identity

    def cache_info(self) -> CacheInfo:
        """The remote source cache of this open mount (a local source never fills it)."""
        return self._cache.info()

    def close(self) -> None:
        """Close the store; the remote source cache's directory is removed."""
        self._cache.close()
        super().close()

    @property
    def record(self) -> MountRecord:
        """The verified ``matrixSource`` record."""
        return self._record

    @property
    def target(self) -> Store:
        """The target's own store."""
        return self._target

    @property
    def source(self) -> Store:
        """The (read-only) source store."""
        return self._source

    @property
    def verified_source(self) -> Store:
        """The source as the open verified it: the documents and listing the open
        read, served without a request; everything else read from :attr:`source`."""
        return self._documents if self._documents is not None else self._source

    def with_read_only(self, read_only: bool = False) -> MountStore:
        """The same mount over a read-only (or writable) target; no I/O."""
        clone = self._derive(self._target.with_read_only(read_only))
        clone._owners = GroupOwners(clone._target, clone._source, clone._roots, self._owners.known)
        return clone

    def _derive(self, target: Store) -> MountStore:
        """This verified mount over ``target`` (in another mode, or unpickled): the
        source, cache, pins, documents and file identities are shared; no I/O."""
        return type(self)(
            target,
            self._source,
            self._record,
            self._infos,
            source_storage_options=self._source_options,
            documents=self._documents,
            opened=self._opened,
        )

    def _source_unchanged(self) -> bool:
        """Whether the source is still, as far as is known without a request, the
        one the open verified: a local source's count array documents are the
        files the open found (a few ``stat`` calls); no read of a remote source
        found a pinned object replaced or deleted (its pins check every read)."""
        if self._opened is not None:
            return self._opened.unchanged()
        pinned = pinned_store_of(self._source)
        return pinned is None or not pinned.pins.refused

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, MountStore)
            and self._target == value._target
            and self._source == value._source
            and self._record == value._record
        )

    def __hash__(self) -> int:
        return hash((type(self), str(self._target)))

    def __str__(self) -> str:
        return f"mount+{self._target}"

    def __repr__(self) -> str:
        return f"MountStore(target={self._target!r}, source={self._record.location!r})"

    # ------------------------------------------------------------ counts

    def count_mapping(
        self, assay: str, counters: ReadCounters, *, workspace: str | None = None
    ) -> CountMapping:
        """The source's counts of ``assay``, verified at open.

        ``workspace`` is the mount's (``None`` stands for it too); another
        workspace, or an assay not mounted, is refused as an ordinary store
        refuses it.
        """
        info = self._infos.get(assay)
        if info is None or workspace not in (None, self._record.workspace):
            raise self._not_mounted(assay, workspace)
        # the verified documents serve the arrays' metadata: a reader costs no
        # request before its first read
        view = self._documents if self._documents is not None else self._source
        bound = bound_from_verified(
            MOUNT_SOURCE, self._record.location, view, info, counters, opened=self._opened
        )
        root = zarr.open_group(view, mode="r", zarr_format=3)
        return IdentityMapping(
            bound,
            array_at(root, join(info.paths.cell_data, "ids")),
            array_at(root, join(info.paths.feature_data, "ids")),
        )

    def assay_fingerprints(self, assay: str, workspace: str | None = None) -> tuple[str, str]:
        """``(dataset, counts)`` fingerprints of a mounted assay: its source's, as
        ``matrixSource`` records them (the open checked the source against them)."""
        mounted = self._record.assays.get(assay)
        if mounted is None or workspace not in (None, self._record.workspace):
            raise self._not_mounted(assay, workspace)
        return mounted.dataset_fingerprint, mounted.counts_fingerprint

    def _not_mounted(self, assay: str, workspace: str | None) -> ValueError:
        held, where = [i.paths for i in self._infos.values()], describe_location(self._target)
        return missing_assay_error(where, AssayPaths(assay, workspace), held)

    def reader(self, assay: str = "RNA") -> Any:
        """A :class:`VirtualArrayReader` of a mounted assay's (source) counts."""
        from ..read.reader import VirtualArrayReader

        return VirtualArrayReader(self, assay)

    # ---------------------------------------------------------- resolution

    async def owner_of(self, key: str) -> tuple[Store, bool]:
        """The store that serves ``key`` now, and whether it is the source.

        The source is the store as it is read (through its pins and cache).
        Costs what a ``getsize`` costs: whether an artifact group is the
        target's or the source's is asked once per group, then remembered.
        """
        store = await self._owners.store_for(self._check_key(key, "get"))
        return store, store is self._source

    # -------------------------------------------------------------- reading

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        place = place_of(self._check_key(key, "get"), self._roots)
        if (
            place.kind == "group"
            and place.group is not None
            and place.group not in self._owners.known
            and key == join(place.group, "zarr.json")
        ):
            # Reading a group's own document settles its owner in one or two
            # reads instead of two existence checks and a read.
            value = await self._target.get(key, prototype, byte_range)
            if value is not None:
                self._owners.settle(place.group, "target")
                return value
            value = await self._source.get(key, prototype, byte_range)
            if value is not None:
                self._owners.settle(place.group, "source")
            return value
        store = await self._owners.store_for(key)
        value = await store.get(key, prototype, byte_range)
        if value is None and store is self._source:
            await self._refuse_gone_source_group(key)
        return value

    async def getsize(self, key: str) -> int:
        """Size of the value at ``key``, asked of the store that owns it (nothing is read)."""
        store = await self._owners.store_for(self._check_key(key, "getsize"))
        try:
            return await store.getsize(key)
        except FileNotFoundError:
            if store is self._source:
                await self._refuse_gone_source_group(key)
            raise

    async def _refuse_gone_source_group(self, key: str) -> None:
        """Raise ``SourceGoneError`` when ``key``, a chunk of a source artifact group that
        the source does not hold, is missing because the group is gone (the source
        moved or deleted): zarr would read it as the fill value, zeros, and a server
        answer "not found", which its clients read as zeros too."""
        group = place_of(key, self._roots).group
        if group is None or not is_chunk_key(key):
            return
        if await self._owners.source_group_present(group):
            return  # an all-fill chunk, never written: the fill value is its value
        raise SourceGoneError(
            f"the source of the mount at {describe_location(self._target)}, "
            f"{self._record.location}, no longer holds the artifact {group!r} that the mount "
            f"reads from it: {key!r} is not there, and neither is the artifact's zarr.json "
            "(the source was moved or deleted, or the artifact removed from it), so its "
            f"values cannot be read (never as zeros). Restore the source at "
            f"{self._record.location}"
        )

    async def exists(self, key: str) -> bool:
        store = await self._owners.store_for(self._check_key(key, "exists"))
        if store is self._source:
            group = place_of(key, self._roots).group
            if group is not None and key == join(group, "zarr.json"):
                # the question a chunk's miss asks (an Artifact's reads ask it again
                # after the mount's own check): one shared answer, trusted a while
                return await self._owners.source_group_present(group)
        found = await store.exists(key)
        if not found and store is self._source:
            await self._refuse_gone_source_group(key)
        return found

    # -------------------------------------------------------------- writing

    @property
    def supports_writes(self) -> bool:
        return self._target.supports_writes

    @property
    def supports_deletes(self) -> bool:
        return self._target.supports_deletes

    @property
    def supports_listing(self) -> bool:
        return self._target.supports_listing and self._source.supports_listing

    def _refuse_pinned(self, key: str, action: str, value: Buffer | None = None) -> None:
        # only a pinned document's bytes are read (no copy of every chunk written)
        document = value.to_bytes() if value is not None and key in self._pinned else b""
        refusal = pinned_refusal(key, action, self._pinned, self._record.location, document)
        if refusal is None and value is not None and key == self._container_document:
            # where assayTypes lives: a mounted assay's type is checked by every open
            where = describe_location(self._target)
            refusal = type_change_refusal(key, value.to_bytes(), self._record, self._infos, where)
        if refusal is not None:
            raise PermissionError(refusal)

    async def _check_target_key(self, key: str, action: str) -> None:
        place = place_of(key, self._roots)
        if place.kind == "group":
            assert place.group is not None
            if await self._owners.is_source(place.group):
                raise PermissionError(
                    f"cannot {action} {key!r}: the artifact group {place.group!r} belongs to the "
                    f"mounted source {self._record.location}, which a mount never modifies. "
                    "Publish a new artifact in the target instead"
                )

    async def _check_deletable(self, key: str) -> None:
        """Refuse deleting a pinned key, or a key the source holds too (it would still show)."""
        self._refuse_pinned(key, "delete")
        await self._check_target_key(key, "delete")
        documents = place_of(key, self._roots).kind in ("root_doc", "kind_doc")
        if documents and await self._source.exists(key):
            raise PermissionError(
                f"cannot delete {key.removesuffix('/zarr.json')!r}: the mounted source "
                f"{self._record.location} "
                "holds it too, and a mount never modifies its source, so it would still "
                "show through the mount. Delete the target's own artifacts inside it instead"
            )

    async def _root_holds_record(self) -> bool:
        document = await self._target.get("zarr.json", prototype=default_buffer_prototype())
        return (
            document is not None
            and document_attribute(document.to_bytes(), MATRIX_SOURCE_ATTR) is not None
        )

    async def set(self, key: str, value: Buffer) -> None:
        self._check_key(key, "set")
        self._check_writable()
        self._refuse_pinned(key, "write", value)
        await self._check_target_key(key, "write")
        if (
            key == "zarr.json"
            and await self._root_holds_record()
            and document_attribute(value.to_bytes(), MATRIX_SOURCE_ATTR) != self._record.to_json()
        ):
            raise PermissionError(
                f"cannot change or remove the matrixSource record of {self._target}: it binds "
                "the target to its source. Mount again to bind another source"
            )
        place = place_of(key, self._roots)
        if place.kind == "group" and place.group is not None:
            await self._owners.hold_parent_documents(place.group)
        await self._target.set(key, value)
        if (
            place.kind == "group"
            and place.group is not None
            and key == join(place.group, "zarr.json")
        ):
            self._owners.settle(place.group, "target")

    async def conditional_target(self, key: str) -> Store:
        """The store that an atomic create of ``key`` (a pipeline label claim) goes to.

        Every write goes to the target, so a conditional create is the
        target's own, once ``key`` passes the checks of :meth:`set`: inside
        an artifact group of the source, or the root document that holds
        ``matrixSource``, it raises ``PermissionError``.
        """
        self._check_key(key, "create_if_absent")
        self._check_writable()
        self._refuse_pinned(key, "create")
        await self._check_target_key(key, "create")
        if key == "zarr.json":
            raise PermissionError(
                f"cannot create the root document of the mounted target {self._target}: "
                "it holds the matrixSource record"
            )
        place = place_of(key, self._roots)
        if place.kind == "group" and place.group is not None:
            await self._owners.hold_parent_documents(place.group)
        return self._target

    async def delete(self, key: str) -> None:
        self._check_key(key, "delete")
        self._check_writable()
        await self._check_deletable(key)
        if key == "zarr.json" and await self._root_holds_record():
            raise PermissionError(f"cannot delete the root of the mounted target {self._target}")
        await self._target.delete(key)
        place = place_of(key, self._roots)
        if (
            place.kind == "group"
            and place.group is not None
            and key == join(place.group, "zarr.json")
        ):
            self._owners.settle(place.group, None)
        # a backend may delete a whole directory named by the key
        self._owners.forget(key)

    async def delete_dir(self, prefix: str) -> None:
        self._check_prefix(prefix, "delete_dir")
        self._check_writable()
        directory = prefix.removesuffix("/")
        # Every key is checked before anything is deleted (the default would stop
        # half-way at a source group); a source group is named first, then a document.
        keys = [key async for key in self.list_prefix(directory + "/")]
        for key in keys:
            await self._check_target_key(key, "delete")
        for key in keys:
            await self._check_deletable(key)
        await self._target.delete_dir(prefix)
        self._owners.forget(directory)

    # -------------------------------------------------------------- listing

    async def list(self) -> AsyncIterator[str]:
        async for key in self.list_prefix(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self._check_prefix(prefix, "list_prefix")
        async for key in self._target.list_prefix(prefix):
            place = place_of(key, self._roots)  # a source group's keys are the source's
            if place.group is None or not await self._owners.is_source(place.group):
                yield key
        for root in self._roots:
            directory = prefix.rstrip("/")
            if directory and not (
                root.startswith(directory + "/")
                or root == directory
                or directory.startswith(root + "/")
            ):
                continue
            scan = directory if directory.startswith(root + "/") or directory == root else root
            async for key in self._source_listing(self._source.list_prefix(scan), scan):
                # the prefix names a directory, as for a local target; memory://
                # matches strings and would give a sibling's keys (pca2/ for pca)
                outside = directory and not key.startswith(directory + "/")
                if not outside and await self._owners.source_visible(key):
                    yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        directory = self._check_prefix(prefix, "list_dir").removesuffix("/")
        if listing_is_union(directory, self._roots):
            seen: set[str] = set()
            async for name in self._target.list_dir(directory):
                seen.add(name)
                yield name
            async for name in self._source_listing(self._source.list_dir(directory), directory):
                if name not in seen:
                    seen.add(name)
                    yield name
            return
        place = place_of(join(directory, "x"), self._roots)
        store = self._target
        if (
            place.kind == "group"
            and place.group is not None
            and await self._owners.is_source(place.group)
        ):
            async for name in self._source_listing(self._source.list_dir(directory), directory):
                yield name
            return
        async for name in store.list_dir(directory):
            yield name

    async def _source_listing(self, names: AsyncIterator[str], prefix: str) -> AsyncIterator[str]:
        """``names`` (a listing of the source), a refusal said as the mount's: the
        source may be read but not listed (S3 without ``s3:ListBucket``)."""
        try:
            async for name in names:
                yield name
        except PermissionError as exc:
            if is_http_location(self._record.location):
                raise  # a web server's refusal has its own remedy (a server that lists)
            raise source_listing_refused(self._record.location, prefix) from exc


def open_verified(
    store: Store,
    where: str,
    source_storage_options: Mapping[str, Any] | None = None,
    *,
    documents: Store | None = None,
) -> MountStore:
    """Open ``store`` as a verified MountStore (its ``cytearc_vfs.count_mappings`` entry point).

    ``source_storage_options`` is one mapping of backend options for the source;
    ``documents`` is a view of ``store`` the checks read through (the
    open's reads so far, remembered), which the mount does not keep.
    """
    if source_storage_options is not None and not isinstance(source_storage_options, Mapping):
        raise TypeError("source_storage_options of a mount is one mapping of backend options")
    return MountStore._verified(store, where, source_storage_options, remembered=documents)
