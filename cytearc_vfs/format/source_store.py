"""Opening and verifying ordinary (source) CyteArc stores.

Verification reads only metadata and small attributes (never the counts),
so it is cheap enough for every open: record shapes, the agreement of the
three layout records with each other and with the live arrays, completeness
markers, and the binding of ``countSummaries`` to the counts it describes.

Completeness markers are checked on everything, not only on what looks
published: a root that still names its writer (``cytearc:pending_store``)
is refused by :func:`read_contents`, which every open, verify and source
binding goes through, and a pending assay (``cytearc:pending_assay``) by
:func:`verify_store`. Stores written before the root marker existed simply
lack it and open as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import StorePath

from ..errors import (
    IdentityMismatchError,
    IncompleteStoreError,
    RecordShapeError,
    UnsupportedSourceError,
    warn_at_caller,
)
from .count_dtype import summary_dtype
from .fingerprints import dataset_fingerprint_of, ids_fingerprint
from .identity_checks import check_declared_assays, check_fill_value
from .missing_assay import missing_assay_error
from .paths import AssayPaths, join
from .records import (
    ASSAY_TYPE_PRESETS,
    COUNT_LAYOUT_ATTR,
    PENDING_ASSAY_ATTR,
    ArrayGeometry,
    CountLayout,
    parse_assay_types,
    parse_fingerprint,
    requires_transpose,
)
from .shard_tables import REWRITE_REMEDY, ShardTable, check_stored_shards, read_shard_table
from .store_contents import (
    DAMAGED_DOCUMENT_REMEDY,
    StoreContents,
    contents_documents,
    list_root_once,
    node_attrs,
    read_contents,
    unfinished_message,
)
from .store_contents import json_object as _get_json
from .store_io import list_dir

# What a store declares moved to .store_contents; it is still named here for the
# many callers that open and verify in one import.
__all__ = [
    "AssayInfo",
    "StoreContents",
    "check_assay_shards",
    "contents_documents",
    "list_root_once",
    "missing_assay_error",
    "node_attrs",
    "read_contents",
    "refuse_pending_assays",
    "unfinished_message",
    "verify_assay",
    "verify_store",
]

#: The remedy of every store that fails its check (one wording with the shard tables').
REPAIR = REWRITE_REMEDY


@dataclass(frozen=True, slots=True)
class AssayInfo:
    """A verified assay of an ordinary store."""

    paths: AssayPaths
    """Where its groups and arrays are."""
    assay_type: str
    """Its preset."""
    layout: CountLayout
    """The agreed layout record."""
    content_fingerprint: str
    """Identity of the stored values."""
    cells_fingerprint: str
    """Identity of the ordered cell ids."""
    features_fingerprint: str
    """Identity of the ordered feature ids."""
    shard_tables: Mapping[str, ShardTable] = field(default_factory=dict, compare=False)
    """The recorded shard tables of ``counts`` and ``countsT`` (absent in older stores)."""
    array_metadata: Mapping[str, ArrayV3Metadata] = field(default_factory=dict, compare=False)
    """The verified metadata of ``counts`` and ``countsT`` by path: readers open the
    arrays from it instead of reading and parsing their documents again."""

    @property
    def counts_fingerprint(self) -> str:
        """Identity of the counts."""
        return self.content_fingerprint

    @property
    def dataset_fingerprint(self) -> str:
        """Identity of the counts with both ordered axes."""
        return dataset_fingerprint_of(
            self.content_fingerprint, self.cells_fingerprint, self.features_fingerprint
        )

    @property
    def shape(self) -> tuple[int, int]:
        """(cells, features)."""
        return self.layout.shape

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype."""
        return np.dtype(self.layout.dtype)

    @property
    def has_counts_t(self) -> bool:
        """Whether a verified ``countsT`` exists."""
        return self.layout.counts_t is not None


def _layout_of(attrs: Mapping[str, Any], *, where: str) -> CountLayout:
    if COUNT_LAYOUT_ATTR not in attrs:
        raise RecordShapeError(
            f"{where} has no {COUNT_LAYOUT_ATTR} record; layouts are never inferred or "
            f"upgraded on open. {REPAIR}"
        )
    return CountLayout.from_json(attrs[COUNT_LAYOUT_ATTR], where=where)


def _check_live(
    array: ArrayV3Metadata,
    geometry: ArrayGeometry,
    shape: tuple[int, int],
    dtype: str,
    *,
    where: str,
) -> None:
    """Refuse an array (its parsed metadata, as zarr's ``Array`` would answer) that does
    not agree with the layout record."""
    if array.zarr_format != 3:
        raise RecordShapeError(
            f"{where} is a Zarr v2 array; RNA assays need sharded Zarr v3 counts. {REPAIR}"
        )
    live = {
        "shape": tuple(array.shape),
        "dtype": str(array.dtype.to_native_dtype()),
        "chunks": tuple(array.chunks),
        "shards": tuple(array.shards) if array.shards is not None else None,
    }
    recorded = {
        "shape": shape,
        "dtype": dtype,
        "chunks": geometry.chunks,
        "shards": geometry.shards,
    }
    wrong = {k: (recorded[k], live[k]) for k in recorded if recorded[k] != live[k]}
    if wrong:
        details = "; ".join(f"{k}: record {r} but array {v}" for k, (r, v) in wrong.items())
        raise RecordShapeError(
            f"{where} does not agree with its {COUNT_LAYOUT_ATTR} record ({details}); the array "
            f"was changed after it was written. {REPAIR}"
        )
    check_fill_value(array.fill_value, where=where, remedy=REPAIR)


def _array_document(store: Store, path: str, *, where: str) -> dict[str, Any] | None:
    """The ``zarr.json`` of the array at ``path``, or ``None`` when no array is there."""
    document = _get_json(store, join(path, "zarr.json"), where=where)
    return document if document is not None and document.get("node_type") == "array" else None


def _metadata_from(document: Mapping[str, Any]) -> ArrayV3Metadata:
    """An array's metadata parsed from its (already read) document: no I/O.

    zarr validates the document as its own open would. Verification parses
    each count array's document once, checks the metadata itself (no zarr
    array is built for it) and hands it on to the readers
    (:attr:`AssayInfo.array_metadata`).
    """
    return ArrayV3Metadata.from_dict(dict(document))


def _array_from(store: Store, path: str, document: Mapping[str, Any]) -> zarr.Array[Any]:
    """The array at ``path`` built from its (already read) document: no I/O."""
    metadata = _metadata_from(document)
    return zarr.Array(AsyncArray(metadata=metadata, store_path=StorePath(store, path)))


def _shape_of(document: Mapping[str, Any]) -> tuple[int, ...]:
    shape = document.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in shape
    ):
        raise RecordShapeError(f"an array document has shape {shape!r}; {REPAIR}")
    return tuple(shape)


def _ids_fp(store: Store, table: str, expected_len: int, *, where: str, label: str) -> str:
    """The ids fingerprint of ``table``; ``where`` names the store, ``label`` the table."""
    path = join(table, "ids")
    document = _array_document(store, path, where=where)
    if document is None:
        raise RecordShapeError(f"{label} has no ids column; {REPAIR}")
    shape = _shape_of(document)
    if shape != (expected_len,):
        raise RecordShapeError(
            f"{label}/ids has {shape[0] if shape else 0} entries but the counts have "
            f"{expected_len}; {REPAIR}"
        )
    attrs = document.get("attributes") or {}
    recorded = attrs.get("fingerprint") if isinstance(attrs, dict) else None
    if recorded is not None:
        return parse_fingerprint(recorded, record="ids fingerprint", where=f"{label}/ids")
    # written before ids carried their fingerprint: the values are read
    return ids_fingerprint(np.asarray(_array_from(store, path, document)[:]))


def _has_state_group(store: Store, paths: AssayPaths, *, where: str) -> bool:
    """Whether the assay holds a retired ``state`` group, of either Zarr format.

    Its v2 document is asked for only when the assay group's listing shows a
    ``state`` child (or the store cannot list): a v3 store is not probed for
    v2 names, and a caller that listed the whole store answers from memory.
    """
    state = join(paths.assay_group, "state")
    if node_attrs(store, state, where=where)[0] is not None:
        return True
    if store.supports_listing and "state" not in list_dir(store, paths.assay_group):
        return False
    return _get_json(store, join(state, ".zgroup"), where=where) is not None


def verify_assay(
    store: Store,
    paths: AssayPaths,
    *,
    where: str,
    assay_types: Mapping[str, str] | None = None,
    contents: StoreContents | None = None,
) -> AssayInfo:
    """Verify one assay; raises the package's errors naming the remedy.

    ``contents`` is what :func:`read_contents` read of the same ``store``: the
    documents it parsed (the root's, the assay group's) are not parsed again.
    """
    try:
        return _verify_assay(store, paths, where=where, assay_types=assay_types, contents=contents)
    except RecordShapeError as exc:
        text = str(exc)
        # a document that is not JSON is named of where by the read itself, with its
        # own remedy (the data-only rewrite cannot read it either)
        if DAMAGED_DOCUMENT_REMEDY in text or REPAIR in text:
            raise
        # record parsers know the field, not the store: add where and the remedy
        raise RecordShapeError(f"{where}: {exc}; {REPAIR}") from exc


def _assays_hint(store: Store) -> list[AssayPaths]:
    """The assays of ``store``, for a refusal of an assay that is not there (best effort)."""
    try:
        return list(read_contents(store, where="").assays)
    except Exception:  # the refusal stands without the hint
        return []


def _verify_assay(
    store: Store,
    paths: AssayPaths,
    *,
    where: str,
    assay_types: Mapping[str, str] | None,
    contents: StoreContents | None,
) -> AssayInfo:
    label = f"{where}: assay {paths.assay!r}" + (
        f" of workspace {paths.workspace!r}" if paths.workspace else ""
    )
    if _has_state_group(store, paths, where=where):
        raise UnsupportedSourceError(
            f"{label} holds a retired {paths.assay}/state group, which this layout no longer "
            f"reads or migrates; {REPAIR} (the rewrite omits it)"
        )
    known = {} if contents is None else contents.groups
    kind, assay_attrs = (
        ("group", known[paths.assay_group])
        if paths.assay_group in known
        else node_attrs(store, paths.assay_group, where=where)
    )
    if kind != "group":
        raise missing_assay_error(where, paths, _assays_hint(store))
    if PENDING_ASSAY_ATTR in assay_attrs:
        raise UnsupportedSourceError(
            f"{label} is pending ({assay_attrs[PENDING_ASSAY_ATTR]!r} never finished); discard "
            "it or finish the write before opening"
        )
    if assay_attrs.get("is_assay") is not True:
        raise ValueError(f"{label}: {paths.assay_group!r} is not an assay group (no is_assay)")
    if assay_types is None:
        container_attrs = (
            contents.root_attrs
            if contents is not None and not paths.root and isinstance(contents.root_attrs, dict)
            else node_attrs(store, paths.root, where=where)[1]
        )
        assay_types = parse_assay_types(
            container_attrs.get("assayTypes", {}), where=paths.root or "/"
        )
    assay_type = assay_types.get(paths.assay) or (
        paths.assay if paths.assay in ASSAY_TYPE_PRESETS else "Assay"
    )
    if paths.assay not in assay_types and paths.assay not in ASSAY_TYPE_PRESETS:
        # spec ("Assay types"): without a recorded type, the preset of its name
        # or "Assay" with a warning (an RNA-like assay would lose its class)
        warn_at_caller(
            f"{label} has no type in the assayTypes of {paths.root or '/'} and its name is "
            "not a preset, so it opens as the generic 'Assay' (no modality-specific "
            "normalization); record its preset by opening the store writable with "
            "assay_types, or re-import it with assay_type="
        )

    # the assay group's zarr.json exists, so the store is Zarr v3: arrays are
    # built from their documents (read once), no v2 probes
    matrix_attrs = (
        assay_attrs
        if paths.matrix_group == paths.assay_group
        else node_attrs(store, paths.matrix_group, where=where)[1]
    )
    layout = _layout_of(matrix_attrs, where=f"{label} matrix group {paths.matrix_group!r}")
    counts_doc = _array_document(store, paths.counts, where=where)
    if counts_doc is None:
        if _get_json(store, join(paths.counts, ".zarray"), where=where) is not None:
            raise RecordShapeError(f"{label}: counts is a Zarr v2 array; {REPAIR}")
        raise IncompleteStoreError(f"{label} has no counts array at {paths.counts!r}; {REPAIR}")
    counts = _metadata_from(counts_doc)
    counts_layout = _layout_of(counts.attributes, where=f"{label} counts")
    if counts_layout != layout:
        raise RecordShapeError(
            f"{label}: the {COUNT_LAYOUT_ATTR} records of the matrix group and counts differ; "
            f"{REPAIR}"
        )
    _check_live(counts, layout.counts, layout.shape, layout.dtype, where=f"{label} counts")
    if "content_fingerprint" not in counts.attributes:
        raise IncompleteStoreError(
            f"{label}: counts carry no content_fingerprint, so their write never finished; {REPAIR}"
        )
    content = parse_fingerprint(
        counts.attributes["content_fingerprint"], record="content_fingerprint", where=paths.counts
    )

    shard_arrays: list[tuple[str, str, ArrayV3Metadata, ArrayGeometry | None]] = [
        ("counts", paths.counts, counts, layout.counts)
    ]
    counts_t_doc = _array_document(store, paths.counts_t, where=where)
    if layout.counts_t is None:
        if requires_transpose(assay_type):
            raise RecordShapeError(
                f"{label} is {assay_type} but its layout records no countsT; {REPAIR}"
            )
        if counts_t_doc is not None:
            # readers that prefer a complete countsT (the DataStore's feature
            # reads) would read an array that nothing here verifies
            raise RecordShapeError(
                f"{label} holds a countsT array at {paths.counts_t!r}, but its "
                f"{COUNT_LAYOUT_ATTR} records none (countsT: null), so nothing binds it to "
                f"the counts; delete the stray countsT, or {REPAIR}"
            )
    else:
        # a recorded countsT is verified whatever the assay type: a reader
        # that finds it complete reads it
        if counts_t_doc is None:
            v2 = _get_json(store, join(paths.counts_t, ".zarray"), where=where) is not None
            raise IncompleteStoreError(
                f"{label} is {assay_type} and needs a complete sharded Zarr v3 countsT (its "
                f"layout records one), but "
                f"{'countsT is a Zarr v2 array' if v2 else 'there is none'} at {paths.counts_t!r}; {REPAIR}"
            )
        counts_t = _metadata_from(counts_t_doc)
        shard_arrays.append(("countsT", paths.counts_t, counts_t, layout.counts_t))
        if counts_t.attributes.get("complete") is not True:
            raise IncompleteStoreError(
                f"{label}: countsT is not complete (its write never finished); {REPAIR}"
            )
        if _layout_of(counts_t.attributes, where=f"{label} countsT") != layout:
            raise RecordShapeError(
                f"{label}: the layout records of countsT and counts differ; {REPAIR}"
            )
        _check_live(
            counts_t,
            layout.counts_t,
            (layout.shape[1], layout.shape[0]),
            layout.dtype,
            where=f"{label} countsT",
        )
        if counts_t.attributes.get("content_fingerprint") != content:
            raise IdentityMismatchError(
                f"{label}: countsT is bound to content {counts_t.attributes.get('content_fingerprint')!r} "
                f"but counts hold {content}; the two orientations are not one matrix. {REPAIR}"
            )
    _check_summaries(
        store, paths, content, layout.shape, np.dtype(layout.dtype), where=where, label=label
    )
    cells_fp = _ids_fp(
        store, paths.cell_data, layout.shape[0], where=where, label=f"{label} {paths.cell_data}"
    )
    features_fp = _ids_fp(
        store,
        paths.feature_data,
        layout.shape[1],
        where=where,
        label=f"{label} {paths.feature_data}",
    )
    tables = {
        name: table
        for name, _, array, geometry in shard_arrays
        if geometry is not None
        and (
            table := read_shard_table(
                array.attributes,
                shards=-(-int(array.shape[0]) // geometry.shards[0]),
                where=f"{label} {name}",
            )
        )
        is not None
    }
    metadata = {path: array for _, path, array, _ in shard_arrays}
    return AssayInfo(paths, assay_type, layout, content, cells_fp, features_fp, tables, metadata)


def check_assay_shards(store: Store, info: AssayInfo, *, where: str) -> None:
    """Refuse an assay whose shard files differ from the tables its writer recorded.

    Reads a listing and each shard's size, and on a local store each shard's
    last four bytes (see :func:`~cytearc_vfs.format.shard_tables.scan_shards`);
    an older assay without tables passes.
    """
    for name, table in info.shard_tables.items():
        path = info.paths.counts if name == "counts" else info.paths.counts_t
        check_stored_shards(store, path, table, where=f"{where}: assay {info.paths.assay!r} {name}")


def _check_summaries(
    store: Store,
    paths: AssayPaths,
    content: str,
    shape: tuple[int, int],
    count_dtype: np.dtype,
    *,
    where: str,
    label: str,
) -> None:
    kind, attrs = node_attrs(store, paths.summaries, where=where)
    if kind != "group":
        raise IncompleteStoreError(
            f"{label} has no countSummaries group at {paths.summaries!r}; preparation reads it "
            f"instead of the matrix. {REPAIR}"
        )
    bound = attrs.get("source_fingerprint")
    if bound != content:
        raise IdentityMismatchError(
            f"{label}: countSummaries describe counts {bound!r}, but the counts are {content}; "
            f"the summaries are bound to other counts. {REPAIR}"
        )
    for name, length, dtype in (
        ("rowSums", shape[0], summary_dtype(count_dtype)),
        ("rowPositive", shape[0], np.dtype(np.int64)),
        ("columnPositive", shape[1], np.dtype(np.int64)),
    ):
        document = _array_document(store, join(paths.summaries, name), where=where)
        if document is None:
            raise RecordShapeError(f"{label}: countSummaries lacks {name}; {REPAIR}")
        found = _shape_of(document)
        if found != (length,):
            raise RecordShapeError(
                f"{label}: countSummaries/{name} has shape {found}, expected ({length},); {REPAIR}"
            )
        found_dtype = document.get("data_type")
        if found_dtype != dtype.name:
            # preparation reads these instead of the counts: a narrower or
            # float type would round or wrap the totals it trusts
            raise RecordShapeError(
                f"{label}: countSummaries/{name} has data type {found_dtype!r}, expected "
                f"{dtype.name!r} for {count_dtype.name} counts; {REPAIR}"
            )


def refuse_pending_assays(store: Store, contents: StoreContents, *, where: str) -> None:
    """Refuse a store that holds a pending assay, naming the writer that never finished it.

    Assay scans skip a pending assay, but its arrays can still be read
    directly, and its counts may hold chunks not yet written (read as zeros).
    """
    for paths in contents.pending:
        writer = node_attrs(store, paths.assay_group, where=where)[1].get(PENDING_ASSAY_ATTR)
        scope = f" of workspace {paths.workspace!r}" if paths.workspace else ""
        raise IncompleteStoreError(
            unfinished_message(where, writer, f"assay {paths.assay!r}{scope}")
            + f" ({paths.assay_group!r} carries {PENDING_ASSAY_ATTR})"
        )


def verify_store(
    store: Store, *, where: str, contents: StoreContents | None = None
) -> tuple[StoreContents, list[AssayInfo]]:
    """Verify every assay of an ordinary store (``contents``: its contents, when the
    caller read them already; read here otherwise)."""
    if contents is None:
        contents = read_contents(store, where=where)
    if contents.zarr_format == 2:
        raise RecordShapeError(
            f"{where} is a Zarr v2 store; RNA assays need sharded Zarr v3 countsT, so it will "
            f"not open. {REPAIR}"
        )
    refuse_pending_assays(store, contents, where=where)
    infos: list[AssayInfo] = []
    types_by_root: dict[str, dict[str, str]] = {}
    # every container that declares or holds assays: the root always (its
    # declarations must not name an assay that lost its group), and each workspace
    for container in dict.fromkeys(["", *(p.root for p in (*contents.assays, *contents.pending))]):
        attrs = (
            contents.root_attrs if container == "" else node_attrs(store, container, where=where)[1]
        )
        check_declared_assays(
            attrs,
            [p.assay for p in contents.assays if p.root == container],
            pending=[p.assay for p in contents.pending if p.root == container],
            container=container,
            where=where,
            remedy=REPAIR,
        )
        types_by_root[container] = parse_assay_types(
            attrs.get("assayTypes", {}), where=container or "/"
        )
    if not contents.assays and not contents.pending:
        raise IncompleteStoreError(
            f"{where} holds no assay (no group carries is_assay: true); it is not a CyteArc "
            f"store, or its assay group lost its is_assay attribute. {REPAIR}"
        )
    for paths in contents.assays:
        infos.append(
            verify_assay(
                store,
                paths,
                where=where,
                assay_types=types_by_root[paths.root],
                contents=contents,
            )
        )
    return contents, infos
