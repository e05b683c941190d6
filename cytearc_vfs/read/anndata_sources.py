"""AnnData Zarr stores as composite sources: binding and identity.

A composite reads the counts of an AnnData store (``X``, a layer or the raw
counts ``raw/X``, encoded ``csr_matrix``, ``csc_matrix`` or a dense
``array``; Zarr v2 or v3) where they are, through :class:`AnnDataCounts`,
whose reads
(:mod:`.anndata_reads`) are:

* **CSR** (cell-major): a read of cells fetches the ``indptr`` entries of the
  selected rows and their successors (only the chunks holding them; decoded
  ``indptr`` chunks are kept), then the ``indices`` and ``data`` of those
  rows, in batches, decoding only the chunks holding them, each once;
* **CSC** (feature-major): the same along features;
* **dense**: the chunks the selected rows x columns touch, each once.

Each AnnData source has one orientation, so the reader's orientation choice
for it is its encoding's: a CSR source is cheap for cells, a CSC source for
features, a dense one by its chunks.

**Identity.** The record binds each source by a dataset and a counts
fingerprint. For an AnnData source they are digests of the stored bytes of
the objects that define the counts (every object under the matrix element)
and the ids (every object of the ``obs`` index column and of the index of the
dataframe naming the features: ``var``, or ``raw/var`` for ``raw/X``). Creation
also records, per object, its size and version (the ETag on object storage,
the modification and change times of a local file), and the metadata
documents the element was opened from; a composite keeps them in
``_composite/anndataSources``, with a local source's directory versions. An
open lists the objects on object storage (one listing), or stats a local
source's directories, documents and a bounded sample of its files
(:func:`.anndata_identity.unchanged_locally`; no walk, whatever its number
of files), and compares: unchanged, the
recorded fingerprints stand and the arrays open from the recorded
documents; changed, the digest of every group whose objects changed (element,
``obs`` index, ``var`` index) is computed again from the bytes and must
equal the record, or the open fails closed (:class:`IdentityMismatchError`).
A store that reports no versions (an in-memory Store) is digested at every
open. Versions and digests are computed by :mod:`.anndata_identity`.

**Counts dtype.** Integer counts are read in their dtype, booleans as
``uint8``. Float counts are
accepted when every stored value is a finite non-negative whole number
(scanned at creation, streamed in blocks: :mod:`.anndata_count_dtype`), and are read as the narrowest
unsigned dtype that holds the largest; any other float value is refused
with the remedy (a raw-counts layer, or the store's ``raw/X``, through
``source_layers``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import StorePath

from ..errors import (
    IdentityMismatchError,
    RecordShapeError,
    SourceGoneError,
    UnsupportedSourceError,
)
from ..format.fingerprints import dataset_fingerprint_of
from ..format.option_names import Placeholder, source_option_given
from ..format.paths import join
from ..remote.locations import Location
from .anndata_count_dtype import scan_count_dtype
from .anndata_elements import (
    DAMAGED_ANNDATA_REMEDY,
    RAW_COUNTS,
    Documents,
    IndexElement,
    MatrixElement,
    MissingElementError,
    anndata_format,
    damaged_metadata,
    document_keys,
    features_frame,
    holds_node,
    layer_names,
    matrix_element,
    obs_var_index,
    open_element_array,
    read_index,
)
from .anndata_identity import (
    GROUPS,
    fingerprints_of,
    listed_versions,
    pin_element,
    unchanged_locally,
    watched_directories,
)
from .anndata_reads import ElementReads
from .direct_chunks import DirectChunks, direct_chunks_for
from .local_chunk_files import RecordedFiles
from .prefetch import PrefetchedStore
from .sparse_chunk_presence import check_stored_chunks

__all__ = [
    "AnnDataCounts",
    "AnnDataSpec",
    "bind_anndata",
    "is_anndata_root",
]

Indices = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class AnnDataSpec:
    """How to bind an AnnData source: its element, and what creation recorded of it."""

    element: str = "X"
    """``X``, ``layers/{name}`` or ``raw/X``."""
    recorded: Mapping[str, Any] | None = None
    """The source's entry of ``_composite/anndataSources`` (at open), or ``None`` (creation)."""
    scan_bytes: int | None = None
    """Bytes a block of float counts scanned at creation may take (:func:`~.anndata_count_dtype.scan_rows`);
    ``None``: :data:`~.anndata_count_dtype.SCAN_BLOCK` values."""


def is_anndata_root(root_document: bytes | None) -> bool:
    """Whether a root ``zarr.json`` may be an AnnData store's: absent (maybe v2), a
    group without attributes (maybe the legacy layout; binding decides from its
    members), or any node that declares an AnnData ``encoding-type`` (no CyteArc
    store does: binding refuses all but a readable ``anndata`` root by name)."""
    if root_document is None:
        return True
    try:
        attrs = json.loads(root_document).get("attributes", {})
    except (ValueError, AttributeError):
        return False
    return isinstance(attrs, dict) and (not attrs or "encoding-type" in attrs)


class _DocumentReader:
    """Fetches documents once, keeps their bytes (``None``: absent) for the record."""

    def __init__(
        self,
        store: Store,
        held: Mapping[str, bytes | None] | None = None,
        *,
        source: str = "the source",
    ) -> None:
        self._store = store
        self.fetched: dict[str, bytes | None] = dict(held or {})
        self.source = source
        """How messages name the source (``source 'b' at s3://bkt/b.zarr``)."""

    async def fetch(self, keys: list[str]) -> None:
        missing = [key for key in keys if key not in self.fetched]
        buffers = await asyncio.gather(
            *(self._store.get(key, default_buffer_prototype()) for key in missing)
        )
        for key, buffer in zip(missing, buffers, strict=True):
            self.fetched[key] = None if buffer is None else buffer.to_bytes()

    async def __call__(self, key: str) -> Any:
        await self.fetch([key])
        data = self.fetched[key]
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:  # cut short or garbled: the parser's words alone name nothing
            what = f"the metadata document {key!r}"
            raise damaged_metadata(
                RecordShapeError, self.source, what, exc, remedy=_DAMAGED_SOURCE
            ) from None


#: The end of a refusal of a damaged AnnData source: the composite is made again after.
_DAMAGED_SOURCE = f"the source is damaged; {DAMAGED_ANNDATA_REMEDY}, and create the composite again"


# ------------------------------------------------------------------ binding


@dataclass(frozen=True)
class _Layout:
    """Where an AnnData source's counts and ids are, and what defines each group."""

    zarr_format: int
    element: MatrixElement
    obs_index: IndexElement
    var_index: IndexElement
    """The index of the features' dataframe: ``var``, or ``raw/var`` for ``raw/X``."""

    def documents(self) -> list[str]:
        """The documents opening the element and the indexes reads."""
        fmt = self.zarr_format
        features = features_frame(self.element.path)
        keys = [*document_keys("", fmt), *document_keys("obs", fmt)]
        # the group holding the element (layers, raw) and raw/var are watched as
        # layers and var are: a changed document sends the open to the digests
        group = self.element.path.rpartition("/")[0]
        if group:
            keys += document_keys(group, fmt)
        keys += document_keys(features, fmt)
        keys += document_keys(self.element.path, fmt, array=self.element.encoding == "array")
        for array in self.element.arrays:
            keys += document_keys(array, fmt, array=True)
        for index in (self.obs_index, self.var_index):
            if index.nullable:
                keys += document_keys(index.path, fmt)
                keys += document_keys(join(index.path, "mask"), fmt, array=True)
            keys += document_keys(index.values_path, fmt, array=True)
        return list(dict.fromkeys(keys))

    def prefixes(self) -> dict[str, list[str]]:
        """The object prefixes each fingerprint covers."""
        return {
            "counts": [self.element.path],
            "cells": [self.obs_index.path],
            "features": [self.var_index.path],
        }

    def watched(self) -> tuple[list[str], list[str]]:
        """(prefixes, documents) whose versions the open compares."""
        prefixes = [p for group in self.prefixes().values() for p in group]
        return prefixes, self.documents()


async def _held_counts(backend: Store, documents: Documents) -> tuple[bool, bool, list[str]]:
    """What a store holds that a source can read, for messages: ``(X, raw/X, its
    layers' names)``."""
    x, raw = await asyncio.gather(holds_node(documents, "X"), holds_node(documents, RAW_COUNTS))
    return x, raw, list(await layer_names(backend))


async def _layout(documents: Documents, element: str, *, where: str) -> _Layout | None:
    fmt = await anndata_format(documents, where=where)
    if fmt is None:
        return None
    parsed = await asyncio.gather(
        matrix_element(documents, element, fmt, where=where),
        obs_var_index(documents, "obs", fmt, where=where),
        obs_var_index(documents, features_frame(element), fmt, where=where),
        return_exceptions=True,
    )
    for result in parsed:
        # the element's refusal first: a store without raw lacks raw/var too, and the
        # missing raw/X is what names the remedy
        if isinstance(result, BaseException):
            raise result
    matrix, obs, var = parsed
    assert isinstance(matrix, MatrixElement)
    assert isinstance(obs, IndexElement) and isinstance(var, IndexElement)
    return _Layout(fmt, matrix, obs, var)


@dataclass
class AnnDataCounts(ElementReads):
    """A bound AnnData matrix element, read into composite reads (its reads:
    :class:`~.anndata_reads.ElementReads`)."""

    element: MatrixElement
    """The element read."""
    source: str
    """How messages name the source: ``source 'b' at s3://bkt/b.zarr``."""
    dtype: np.dtype
    """The integer dtype values are read as."""
    arrays: dict[str, AsyncArray[Any]]
    """``indptr``/``indices``/``data``, or ``dense``."""
    index_arrays: tuple[zarr.Array[Any], zarr.Array[Any]]
    """The obs and var index values (for readers that look ids up)."""
    entry: dict[str, Any]
    """What the composite records of this source (``_composite/anndataSources``)."""
    cell_ids: npt.NDArray[Any] | None = None
    """The obs index, when read (at creation)."""
    feature_ids: npt.NDArray[Any] | None = None
    """The var index, when read (at creation)."""
    fingerprints: dict[str, str] = field(default_factory=dict)
    """``counts``, ``cells`` and ``features`` fingerprints."""
    pointers: dict[int, Indices] = field(default_factory=dict, repr=False)
    """Decoded ``indptr`` chunks, by chunk, kept for the element's lifetime (shared
    by its counting views: the source's identity was checked at open)."""
    recorded_files: RecordedFiles | None = field(default=None, repr=False)
    """The recorded sizes and versions of a local source's files, which its reads
    check the chunk files they open against (``None``: not recorded)."""
    direct: dict[str, DirectChunks | None] = field(init=False, repr=False)
    """Direct chunk decoders of the arrays (``None``: read through zarr's pipeline)."""

    def __post_init__(self) -> None:
        self.direct = {
            name: direct_chunks_for(array, self.recorded_files)
            for name, array in self.arrays.items()
        }

    def on(self, store: Store) -> AnnDataCounts:
        """The same element read through ``store`` (a counting view); no I/O."""
        arrays = {
            name: AsyncArray(
                metadata=array.metadata, store_path=StorePath(store, array.store_path.path)
            )
            for name, array in self.arrays.items()
        }
        return replace(self, arrays=arrays)


async def bind_anndata(
    name: str,
    location: Location,
    backend: Store,
    spec: AnnDataSpec,
    *,
    where: str,
) -> AnnDataCounts | None:
    """Bind the AnnData source at ``backend``: check its identity against
    ``spec.recorded`` (at open) or fingerprint it, read its ids and check its
    dtype (at creation). ``None`` when, at creation, the store is no AnnData store."""
    recorded = spec.recorded
    if recorded is not None:
        held = {k: (None if v is None else v.encode()) for k, v in recorded["documents"].items()}
        prefixes, documents = recorded["prefixes"], list(held)
        if await unchanged_locally(location, recorded):
            # a local source whose watched directories, documents and sampled files
            # are as recorded: no walk of its files, whatever their number
            return await _open(
                backend, held, dict(recorded), dict(recorded["fingerprints"]), name, where=where
            )
        versions = await listed_versions(
            backend, location, prefixes, documents, held, recorded["objects"]
        )
        if (
            versions is not None
            and versions == recorded["objects"]
            and all(entry[1] is not None for entry in versions.values())
        ):
            # unchanged since creation: the recorded fingerprints stand and the
            # element opens from the recorded documents, without reading a file
            pin_element(backend, versions, recorded["element"])
            return await _open(
                backend, held, dict(recorded), dict(recorded["fingerprints"]), name, where=where
            )
    reader = _DocumentReader(backend, source=f"source {name!r} at {where}")
    try:
        layout = await _layout(reader, spec.element, where=where)
    except MissingElementError as exc:
        raise await _missing_element(exc.path, backend, reader, name, where=where) from None
    if layout is None:
        if recorded is None:
            return None
        if all([await reader(key) is None for key in ("zarr.json", ".zgroup", ".zattrs")]):
            # nothing at the root: the source was deleted or moved, not rewritten (gone,
            # as a local source's missing directory is)
            raise SourceGoneError(
                f"source {name!r} at {where} is gone: no Zarr group is there any more; a "
                "source moved or deleted after the composite was made must be restored at "
                "that location, or the composite recreated"
            )
        raise IdentityMismatchError(
            f"source {name!r} at {where} is no longer an AnnData store (its root has no "
            "encoding-type 'anndata'); restore the source, or recreate the composite"
        )
    await reader.fetch(layout.documents())
    prefixes, documents = layout.watched()
    # the directories before the files: a change between the two is seen at the next open
    absent = [key for key in documents if reader.fetched.get(key) is None]
    directories = await watched_directories(location, prefixes, absent)
    objects = None if recorded is None else recorded["objects"]
    versions = await listed_versions(
        backend, location, prefixes, documents, reader.fetched, objects
    )
    if versions is not None:
        pin_element(backend, versions, layout.element.path)
    fingerprints = await fingerprints_of(backend, layout.prefixes(), versions, recorded)
    if recorded is not None:
        changed = [g for g in GROUPS if fingerprints[g] != recorded["fingerprints"][g]]
        if changed or layout.element.path != recorded["element"]:
            # name what changed in AnnData's words, with the digests of those parts only
            parts = {
                "counts": f"the counts ({layout.element.path})",
                "cells": "the obs index (cell ids)",
                "features": f"the {features_frame(layout.element.path)} index (feature ids)",
            }
            what = "; ".join(
                f"{parts[g]}: recorded {recorded['fingerprints'][g]}, now {fingerprints[g]}"
                for g in changed
            ) or (f"the counts element: recorded {recorded['element']}, now {layout.element.path}")
            raise IdentityMismatchError(
                f"source {name!r} at {where}: the AnnData store changed after the composite was "
                f"created ({what}); restore the source, or recreate the composite"
            )
        entry = dict(recorded)
        if versions is not None:
            # rewritten with the same bytes (its digests match): its reads check the
            # files against what they are now, not what they were at creation
            entry["objects"] = versions
        return await _open(backend, reader.fetched, entry, fingerprints, name, where=where)
    entry = {
        "element": layout.element.path,
        "encoding": layout.element.encoding,
        "zarrFormat": layout.zarr_format,
        "shape": list(layout.element.shape),
        "obsIndex": [
            layout.obs_index.path,
            layout.obs_index.values_path,
            layout.obs_index.nullable,
        ],
        "varIndex": [
            layout.var_index.path,
            layout.var_index.values_path,
            layout.var_index.nullable,
        ],
        "prefixes": prefixes,
        "documents": {
            k: (None if v is None else v.decode())
            for k, v in reader.fetched.items()
            if k in documents
        },
        "objects": versions if versions is not None else {},
        "fingerprints": fingerprints,
        "directories": directories if directories and versions is not None else {},
        "dtype": "",
    }
    counts = await _open(backend, reader.fetched, entry, fingerprints, name, where=where)
    if layout.element.encoding != "array":
        # a partial copy reads as zeros where chunks are missing: refused before any value
        # is read, from the listing the versions came from (``None``: listed now)
        csr = layout.element.encoding == "csr_matrix"
        await check_stored_chunks(
            counts.arrays,
            minor=layout.element.shape[1 if csr else 0],
            keys=versions.keys() if versions is not None else None,
            source=counts.source,
            element=layout.element.path,
            direct=counts.direct,
        )
    dtype = await scan_count_dtype(
        counts.arrays,
        counts.element,
        reader,
        backend,
        name=name,
        where=where,
        scan_bytes=spec.scan_bytes,
    )
    entry["dtype"] = dtype.name
    obs = IndexElement(*entry["obsIndex"])
    var = IndexElement(*entry["varIndex"])
    view = PrefetchedStore(backend, reader.fetched)
    cell_ids, feature_ids = await asyncio.gather(
        read_index(view, obs, layout.zarr_format, where=where),
        read_index(view, var, layout.zarr_format, where=where),
    )
    shape = layout.element.shape
    if (len(cell_ids), len(feature_ids)) != shape:
        raise UnsupportedSourceError(
            f"source {name!r} at {where}: {layout.element.path} is {shape[0]} x {shape[1]} but obs "
            f"and var index {len(cell_ids)} and {len(feature_ids)} names; the store is not a "
            "valid AnnData"
        )
    return replace(counts, dtype=dtype, cell_ids=cell_ids, feature_ids=feature_ids)


async def _missing_element(
    path: str, backend: Store, documents: Documents, name: str, *, where: str
) -> MissingElementError:
    """The refusal of an element the store lacks, naming what it does hold
    (``X``, ``raw/X``, its layers), so the remedy can be followed as it is."""
    x, raw, layers = await _held_counts(backend, documents)
    held = [*(["X"] if x and path != "X" else []), *([RAW_COUNTS] if raw else [])]
    held.append(f"the layers {', '.join(map(repr, layers))}" if layers else "no layers")
    holds = ", ".join(held[:-1]) + (" and " if len(held) > 1 else "") + held[-1]
    what = " (the AnnData has no raw counts: no raw/X)" if path == RAW_COUNTS else ""
    layer = source_option_given("source_layers", name, Placeholder("LAYER"))
    also = [
        *(
            [f"{source_option_given('source_layers', name, RAW_COUNTS)} for the raw counts"]
            if raw
            else []
        ),
        *([f"leave out {layer} to read X"] if x and path != "X" else []),
    ]
    return MissingElementError(
        f"source {name!r} at {where} has no {path!r}{what}; it holds {holds}. Name a layer "
        f"with {layer}{''.join(f', or {choice}' for choice in also)}",
        path,
    )


async def _open(
    backend: Store,
    documents: Mapping[str, bytes | None],
    entry: dict[str, Any],
    fingerprints: dict[str, str],
    name: str,
    *,
    where: str,
) -> AnnDataCounts:
    """The element's arrays, opened from ``documents`` (no document is read again),
    of the source called ``name``."""
    fmt = int(entry["zarrFormat"])
    shape = (int(entry["shape"][0]), int(entry["shape"][1]))
    element = MatrixElement(entry["element"], entry["encoding"], shape, fmt)
    view = PrefetchedStore(backend, documents)
    names = ["dense"] if element.encoding == "array" else ["indptr", "indices", "data"]
    source = f"source {name!r} at {where}"

    async def open_member(path: str) -> Any:
        try:
            return await open_element_array(view, path, fmt)
        except (ValueError, TypeError, zarr.errors.BaseZarrError) as exc:
            # a member array missing, or a document zarr cannot parse: zarr's words
            # ("No array found in store ...", a JSON parser's) name no element
            if not isinstance(exc, zarr.errors.NodeNotFoundError):
                what = f"the metadata of the array {path!r}"
                raise damaged_metadata(
                    RecordShapeError, source, what, exc, remedy=_DAMAGED_SOURCE
                ) from None
            raise RecordShapeError(
                f"{source}: the array {path!r} of the AnnData element {element.path!r} is "
                f"missing: {_DAMAGED_SOURCE}"
            ) from None

    opened = await asyncio.gather(
        *(open_member(path) for path in element.arrays),
        open_member(entry["obsIndex"][1]),
        open_member(entry["varIndex"][1]),
    )
    arrays = dict(zip(names, opened[: len(names)], strict=True))
    # read through the store underneath: the documents are done with
    arrays = {
        name: AsyncArray(
            metadata=array.metadata, store_path=StorePath(backend, array.store_path.path)
        )
        for name, array in arrays.items()
    }
    if element.encoding == "array" and tuple(arrays["dense"].shape) != shape:
        raise UnsupportedSourceError(
            f"{element.path} of {where} changed shape; recreate the composite"
        )
    if element.encoding != "array":
        _check_sparse_shapes(element, arrays, f"source {name!r} at {where}")
    dtype = np.dtype(entry["dtype"]) if entry.get("dtype") else np.dtype(np.int64)
    cells, features = (zarr.Array(array) for array in opened[len(names) :])
    objects = entry.get("objects")
    return AnnDataCounts(
        element,
        source,
        dtype,
        arrays,
        (cells, features),
        entry,
        fingerprints=fingerprints,
        recorded_files=RecordedFiles(objects, source) if objects else None,
    )


def _check_sparse_shapes(
    element: MatrixElement, arrays: Mapping[str, AsyncArray[Any]], source: str
) -> None:
    """Refuse a sparse element whose arrays' lengths disagree with its shape (from
    their documents: no value is read). The values of ``indptr`` are checked
    where they are read (:meth:`~.anndata_reads.ElementReads._check_ranges`)."""
    major = element.shape[0] if element.encoding == "csr_matrix" else element.shape[1]
    indptr, indices, data = (tuple(arrays[n].shape) for n in ("indptr", "indices", "data"))
    faults = []
    if indptr != (major + 1,):
        faults.append(f"indptr of shape {indptr}, not ({major + 1},)")
    if len(indices) != 1 or indices != data:
        faults.append(f"indices of shape {indices} and data {data}, not one length")
    if faults:
        raise RecordShapeError(
            f"{source}: the AnnData element {element.path!r} ({element.encoding}, shape "
            f"{element.shape}) has {' and '.join(faults)}: the source is damaged. Write it "
            "again with anndata, or restore it, then recreate the composite"
        )


def dataset_fingerprint(fingerprints: Mapping[str, str]) -> str:
    """The dataset fingerprint an AnnData source is recorded with."""
    return dataset_fingerprint_of(
        fingerprints["counts"], fingerprints["cells"], fingerprints["features"]
    )
