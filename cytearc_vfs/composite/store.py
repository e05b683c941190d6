"""``CompositeStore``: a zarr Store that serves a composite's virtual counts.

Keys of the virtual count arrays (``{assay}/counts``, and ``{assay}/countsT``
when the assay type needs it) are computed: their ``zarr.json`` comes from the
composite record and each chunk is gathered from the sources through a
:class:`VirtualArrayReader`. Every other key is the composite's own backing
store, where analyses write as usual. Mappings, count metadata and the
composite record are immutable (``PermissionError``). Opening verifies the
record shape, completeness, every mapping fingerprint and every source's
identity, and fails closed (``verification.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from ..errors import UnsupportedSourceError
from ..format.chunk_keys import ChunkKeys
from ..format.key_checked import KeyCheckedStore
from ..format.missing_assay import missing_assay_error
from ..format.nodes import array_at
from ..format.paths import AssayPaths, join
from ..format.store_io import document_attribute
from ..format.store_keys import protected_by
from ..read.cell_runs import CellRuns
from ..read.count_mapping import ArrayMapping, CountMapping, FeatureMap
from ..read.read_stats import ReadCounters, ReaderStats
from ..read.remembered_reads import RememberedReads
from ..read.sources import BoundSource, rebind
from ..remote.locations import Location, describe_location, open_location
from ..remote.source_cache import CacheInfo, SourceCache
from .records import COMPOSITE_ATTR, MAPS_GROUP, CompositeRecord
from .verification import verify_composite

__all__ = ["CompositeStore"]


def _apply_range(data: bytes | memoryview, byte_range: ByteRequest | None) -> bytes | memoryview:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[len(data) - byte_range.suffix :]
    raise TypeError(f"unsupported byte range {byte_range!r}")


class CompositeStore(KeyCheckedStore):
    """A composite's store: computed count arrays over the sources, the rest local.

    Use :meth:`from_location` (or ``cv.open_store``) rather than the constructor.
    """

    supports_consolidated_metadata = False

    def __init__(
        self,
        backing: Store,
        record: CompositeRecord,
        sources: list[BoundSource],
        *,
        source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
        cell_runs: CellRuns | None = None,
        cache: SourceCache | None = None,
        documents: Store | None = None,
        feature_columns: Any = None,
    ) -> None:
        super().__init__(read_only=backing.read_only)
        # the verified documents of the backing store: readers open the
        # mappings and ids from them instead of reading them again
        self._documents = backing if documents is None else documents
        self._cache = SourceCache() if cache is None else cache
        self._cell_runs = cell_runs
        # as the open verified it, when it kept it: the first read maps features from it
        self._feature_map = FeatureMap(feature_columns)
        self._backing = backing
        self._record = record
        self._sources = sources
        self._source_options = dict(source_storage_options or {})
        self._virtual = {path: json.dumps(doc).encode() for path, doc in record.arrays.items()}
        # Built now, in sync context: computed chunks are served from inside
        # zarr's event loop, where opening arrays (a sync call) is not allowed.
        from ..read.reader import VirtualArrayReader

        self._chunk_counters = ReadCounters()
        self._chunk_reader = VirtualArrayReader.from_mapping(
            self.count_mapping(record.assay, self._chunk_counters),
            self._chunk_counters,
            str(self),
            record.assay,
        )

    # ------------------------------------------------------------- opening

    @classmethod
    def from_location(
        cls,
        location: Location,
        *,
        mode: str = "r",
        storage_options: Mapping[str, Any] | None = None,
        source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> CompositeStore:
        """Open and verify the composite at ``location``."""
        where = describe_location(location)
        backing = open_location(location, read_only=mode == "r", storage_options=storage_options)
        return cls._verified(backing, where, source_storage_options)

    @classmethod
    def _created(
        cls,
        location: Location,
        sources: Sequence[BoundSource],
        cache: SourceCache,
        *,
        storage_options: Mapping[str, Any] | None = None,
        source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> CompositeStore:
        """The composite ``create_composite`` just wrote, opened and verified.

        Everything the composite's own store holds is read back and verified
        as any open does; ``sources`` were verified (and pinned) by the same
        creation moments before, so they are compared with the record
        instead of being fetched and verified a second time.
        """
        where = describe_location(location)
        backing = open_location(location, read_only=True, storage_options=storage_options)
        return cls._verified(backing, where, source_storage_options, created=(sources, cache))

    @classmethod
    def _verified(
        cls,
        backing: Store,
        where: str,
        source_storage_options: Mapping[str, Mapping[str, Any]] | None,
        *,
        created: tuple[Sequence[BoundSource], SourceCache] | None = None,
        remembered: Store | None = None,
    ) -> CompositeStore:
        """Open ``backing`` as a composite after :func:`verify_composite` checked it
        (``created``: the sources and cache its creation just bound; ``remembered``:
        a view of ``backing`` for the checks' reads)."""
        if isinstance(backing, CompositeStore):
            # an open composite given as the location: verified again from its
            # own store, never through the virtual arrays it serves
            backing, remembered = backing.backing, None
        verified = verify_composite(
            # each document of its own store read once (with the open's reads so far)
            RememberedReads(backing) if remembered is None else remembered,
            where,
            source_storage_options,
            created=created,
        )
        return cls(
            backing,
            verified.record,
            verified.sources,
            source_storage_options=source_storage_options,
            cell_runs=verified.cell_runs,
            cache=verified.cache,
            documents=verified.documents,
            feature_columns=verified.feature_columns,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled for dask workers: the backing store and the in-memory source
        # options travel; nothing is written anywhere. The worker re-verifies.
        return (_restore, (self._backing, self._source_options))

    # ------------------------------------------------------------ identity

    @property
    def record(self) -> CompositeRecord:
        """The verified composite record."""
        return self._record

    @property
    def sources(self) -> tuple[BoundSource, ...]:
        """The verified sources, in output-cell order."""
        return tuple(self._sources)

    @property
    def backing(self) -> Store:
        """The composite's own store (no counts in it)."""
        return self._backing

    def with_read_only(self, read_only: bool = False) -> CompositeStore:
        """The same composite over a read-only (or writable) backing store.

        zarr calls this from inside its event loop (opening a writable store
        with ``mode="r"``), so it does no I/O: the verified record, sources
        and chunk reader are shared; only the backing store changes.
        """
        return self._derive(self._backing.with_read_only(read_only))

    def __copy__(self) -> CompositeStore:
        return self._derive(self._backing)

    def _derive(self, backing: Store) -> CompositeStore:
        clone = object.__new__(type(self))
        Store.__init__(clone, read_only=backing.read_only)
        clone._backing = backing
        clone._record = self._record
        clone._sources = self._sources
        clone._source_options = self._source_options
        clone._cell_runs = self._cell_runs
        clone._feature_map = self._feature_map
        clone._virtual = self._virtual
        clone._chunk_counters = self._chunk_counters
        clone._chunk_reader = self._chunk_reader
        clone._cache = self._cache
        clone._documents = self._documents
        return clone

    def cache_info(self) -> CacheInfo:
        """The remote source cache of this open composite (see ``docs/composite.md``)."""
        return self._cache.info()

    def close(self) -> None:
        """Close the store; the remote source cache's directory is removed."""
        self._cache.close()
        super().close()

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, CompositeStore)
            and self._backing == value._backing
            and self._record == value._record
        )

    def __hash__(self) -> int:
        return hash((type(self), str(self._backing)))

    def __str__(self) -> str:
        return f"composite+{self._backing}"

    def __repr__(self) -> str:
        return f"CompositeStore({self._backing!r}, assay={self._record.assay!r}, sources={len(self._sources)})"

    # --------------------------------------------------------- count access

    def count_mapping(
        self, assay: str, counters: ReadCounters, *, workspace: str | None = None
    ) -> CountMapping:
        """The mapping a :class:`VirtualArrayReader` reads through, counted into ``counters``.

        A composite has one assay in its root layout and no workspaces: any other
        ``assay``, and any ``workspace``, is refused as an ordinary store refuses it.
        """
        if assay != self._record.assay or workspace is not None:
            raise missing_assay_error(
                describe_location(self._backing),
                AssayPaths(assay, workspace),
                [AssayPaths(self._record.assay)],
            )
        root = zarr.open_group(self._documents, mode="r", zarr_format=3)
        counts_doc = self._record.arrays[join(assay, "counts")]
        shape = (int(counts_doc["shape"][0]), int(counts_doc["shape"][1]))
        return ArrayMapping(
            shape=shape,
            dtype=np.dtype(counts_doc["data_type"]),
            sources=[rebind(source, counters) for source in self._sources],
            row_sources=array_at(root, join(MAPS_GROUP, "rowSources")).async_array,
            source_rows=array_at(root, join(MAPS_GROUP, "sourceRows")).async_array,
            feature_columns=array_at(root, join(MAPS_GROUP, "featureColumns")).async_array,
            cell_runs=self._cell_runs,
            feature_map=self._feature_map,
            cell_id_array=array_at(root, "cellData/ids"),
            feature_id_array=array_at(root, join(assay, "featureData", "ids")),
        )

    def assay_fingerprints(self, assay: str, workspace: str | None = None) -> tuple[str, str]:
        """Refused: a composite has no dataset or counts fingerprint of its own.

        The spec fingerprints each source (its binding's ``datasetFingerprint``
        and ``countsFingerprint``), not the composite, whose counts are computed
        from them; the error says where those are.
        """
        self.count_mapping(assay, ReadCounters(), workspace=workspace)  # an unknown assay first
        raise UnsupportedSourceError(
            f"{describe_location(self._backing)} is a composite: its counts are computed from "
            f"{len(self._record.sources)} source(s), and it has no dataset or counts fingerprint "
            "of its own. Each source's are recorded in its composite record: "
            "cv.open_store(LOCATION).record.sources[i].dataset_fingerprint and "
            ".counts_fingerprint (`cytearc-vfs info LOCATION --json` lists them), or ask a "
            "source itself with cv.dataset_fingerprint(SOURCE_LOCATION)"
        )

    def reader(self, assay: str | None = None) -> Any:
        """A :class:`VirtualArrayReader` of this composite."""
        from ..read.reader import VirtualArrayReader

        return VirtualArrayReader(self, assay or self._record.assay)

    @property
    def chunk_stats(self) -> ReaderStats:
        """What serving computed chunks has read from the sources."""
        return self._chunk_counters.snapshot()

    # ---------------------------------------------------------- key routing

    def _virtual_array(self, key: str) -> tuple[str, str] | None:
        """(array path, rest of key) when ``key`` is inside a virtual array."""
        for path in self._virtual:
            if key == path or key.startswith(path + "/"):
                return path, key[len(path) + 1 :]
        return None

    def _protections(self) -> dict[str, str]:
        """Protected path -> why it may not be written or deleted."""
        reasons = dict.fromkeys(
            self._virtual, "the virtual count arrays are computed from the sources"
        )
        reasons[MAPS_GROUP] = "the composite's mappings are published and immutable"
        reasons[join(self._record.assay, "countSummaries")] = (
            "the composite's count summaries describe its published counts"
        )
        return reasons

    def _protected(self, key: str, *, deleting: bool) -> str | None:
        """Why ``key`` (a checked key or prefix) may not be written or deleted, or ``None``."""
        reasons = self._protections()
        path = protected_by(key, reasons, deleting=deleting)
        if path is None:
            return None
        bare = key.removesuffix("/")
        if bare == path or bare.startswith(path + "/"):
            return reasons[path]
        return f"it holds {path!r}, and {reasons[path]}"

    async def _compute_chunk(self, path: str, rest: str) -> bytes | memoryview | None:
        document = self._record.arrays[path]
        row_chunk = self._chunk_index(path, rest)
        if row_chunk is None:
            return None
        shape = document["shape"]
        rows, cols = document["chunk_grid"]["configuration"]["chunk_shape"]
        dtype = np.dtype(document["data_type"]).newbyteorder("<")
        start, stop = row_chunk * rows, min(shape[0], (row_chunk + 1) * rows)
        reader = self._chunk_reader
        if path.endswith("/countsT"):
            block = (await reader.read_async(None, slice(start, stop))).T
        else:
            block = await reader.read_async(slice(start, stop), None)
        if block.shape == (rows, cols) and block.dtype == dtype and block.flags.c_contiguous:
            return memoryview(block.reshape(-1).view(np.uint8))
        chunk = np.zeros((rows, cols), dtype=dtype)  # edge chunks are served at full size
        chunk[: block.shape[0], : block.shape[1]] = block
        return memoryview(chunk.reshape(-1).view(np.uint8))

    # -------------------------------------------------------------- reading

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        virtual = self._virtual_array(self._check_key(key, "get"))
        if virtual is None:
            return await self._backing.get(key, prototype, byte_range)
        path, rest = virtual
        if rest == "zarr.json":
            data: bytes | memoryview | None = self._virtual[path]
        else:
            data = await self._compute_chunk(path, rest)
        if data is None:
            return None
        return prototype.buffer.from_bytes(_apply_range(data, byte_range))

    async def getsize(self, key: str) -> int:
        """Size of the value at ``key``; a computed chunk's comes from its array document.

        Computed chunks are served at full chunk size (edges padded) with the
        ``bytes`` codec only, so their size is rows x columns x item size of
        the chunk shape: no chunk is computed to answer (an HTTP ``HEAD``, a
        ranged read's bounds).
        """
        virtual = self._virtual_array(self._check_key(key, "getsize"))
        if virtual is None:
            return await self._backing.getsize(key)
        path, rest = virtual
        if rest == "zarr.json":
            return len(self._virtual[path])
        if self._chunk_index(path, rest) is None:
            raise FileNotFoundError(f"{key!r} is not a key of the composite at {self._backing}")
        return self._chunk_nbytes(path)

    async def exists(self, key: str) -> bool:
        virtual = self._virtual_array(self._check_key(key, "exists"))
        if virtual is None:
            return await self._backing.exists(key)
        path, rest = virtual
        return rest == "zarr.json" or self._chunk_index(path, rest) is not None

    def _n_chunks(self, path: str) -> int:
        document = self._record.arrays[path]
        rows = document["chunk_grid"]["configuration"]["chunk_shape"][0]
        return -(-max(document["shape"][0], 0) // rows) if document["shape"][1] else 0

    def _chunk_nbytes(self, path: str) -> int:
        """Bytes of every computed chunk of ``path`` (see :meth:`_compute_chunk`)."""
        document = self._record.arrays[path]
        rows, cols = document["chunk_grid"]["configuration"]["chunk_shape"]
        return int(rows) * int(cols) * int(np.dtype(document["data_type"]).itemsize)

    def _chunk_index(self, path: str, rest: str) -> int | None:
        """The row-chunk index of chunk key ``rest`` of ``path``, or ``None``: exactly the
        keys :meth:`_chunk_keys` lists (``c/00/0`` or ``c/\u0660/0`` is no key, not chunk 0)."""
        coords = self._chunk_names(path).decode_in(rest, (self._n_chunks(path), 1))
        return None if coords is None else coords[0]

    def _chunk_keys(self, path: str) -> list[str]:
        names = self._chunk_names(path)
        return [names.encode((i, 0)) for i in range(self._n_chunks(path))]

    def _chunk_names(self, path: str) -> ChunkKeys:
        """How ``path``'s served ``zarr.json`` names its chunks (zarr asks for those keys)."""
        return ChunkKeys.from_document(
            self._record.arrays[path], where=f"composite at {self._backing}: {path!r}"
        )

    # -------------------------------------------------------------- writing

    @property
    def supports_writes(self) -> bool:
        return self._backing.supports_writes

    @property
    def supports_deletes(self) -> bool:
        return self._backing.supports_deletes

    @property
    def supports_listing(self) -> bool:
        return self._backing.supports_listing

    def _check_protected(self, key: str, action: str) -> None:
        reason = self._protected(key, deleting=action == "delete")
        if reason is not None:
            raise PermissionError(
                f"cannot {action} {key!r} in the composite at {self._backing}: {reason}. "
                "Write analysis results elsewhere (artifacts, cell or feature columns)"
            )

    async def set(self, key: str, value: Buffer) -> None:
        self._check_key(key, "set")
        self._check_writable()
        self._check_protected(key, "write")
        if (
            key == "zarr.json"
            and document_attribute(value.to_bytes(), COMPOSITE_ATTR) != self._record.to_json()
        ):
            raise PermissionError(
                f"cannot change the composite record of {self._backing}: published mappings "
                "and count metadata are immutable; other root attributes may change"
            )
        await self._backing.set(key, value)

    async def conditional_target(self, key: str) -> Store:
        """The store that an atomic create of ``key`` (a pipeline label claim) goes to:
        the backing store, once ``key`` passes the checks of :meth:`set` (the virtual
        counts and the root document holding the record raise ``PermissionError``)."""
        self._check_key(key, "create_if_absent")
        self._check_writable()
        self._check_protected(key, "create")
        if key == "zarr.json":
            raise PermissionError(
                f"cannot create the root document of the composite at {self._backing}: "
                "it holds the composite record"
            )
        return self._backing

    async def delete(self, key: str) -> None:
        self._check_key(key, "delete")
        self._check_writable()
        self._check_protected(key, "delete")
        if key == "zarr.json":
            raise PermissionError(f"cannot delete the root of the composite at {self._backing}")
        await self._backing.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        # Checked as a whole before anything is deleted: the default (list,
        # then delete key by key) would stop half-way at the first protected key.
        self._check_prefix(prefix, "delete_dir")
        self._check_writable()
        self._check_protected(prefix, "delete")
        await self._backing.delete_dir(prefix)

    # -------------------------------------------------------------- listing

    def _virtual_keys(self) -> list[str]:
        keys = []
        for path in self._virtual:
            keys.append(join(path, "zarr.json"))
            keys.extend(join(path, chunk) for chunk in self._chunk_keys(path))
        return keys

    async def list(self) -> AsyncIterator[str]:
        async for key in self._backing.list():
            yield key
        for key in self._virtual_keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self._check_prefix(prefix, "list_prefix")
        async for key in self._backing.list_prefix(prefix):
            yield key
        directory = prefix.rstrip("/")
        for key in self._virtual_keys():
            if not directory or key == directory or key.startswith(directory + "/"):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        self._check_prefix(prefix, "list_dir")
        seen: set[str] = set()
        async for name in self._backing.list_dir(prefix):
            seen.add(name)
            yield name
        directory = prefix.rstrip("/")
        for key in self._virtual_keys():
            if directory and not key.startswith(directory + "/"):
                continue
            child = (key[len(directory) + 1 :] if directory else key).split("/", 1)[0]
            if child not in seen:
                seen.add(child)
                yield child


def _restore(backing: Store, options: Mapping[str, Mapping[str, Any]]) -> CompositeStore:
    return CompositeStore._verified(backing, str(backing), options)


def open_verified(
    store: Store,
    where: str,
    source_storage_options: Mapping[str, Any] | None = None,
    *,
    documents: Store | None = None,
) -> CompositeStore:
    """Open ``store`` as a verified CompositeStore (its ``cytearc_vfs.count_mappings`` entry point).

    ``source_storage_options`` maps source locations to backend options;
    ``documents`` is a view of ``store`` the checks read through
    (the open's reads so far, remembered); the composite reads and writes
    through ``store``.
    """
    return CompositeStore._verified(store, where, source_storage_options, remembered=documents)
