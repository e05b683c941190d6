"""Opening a composite, verified: everything its store serves is checked first.

Opening verifies the record shape, completeness, every mapping fingerprint
(streamed window by window, the cell mappings summarized as runs on the
way), the tables the virtual counts depend on (``open_checks.py``), and every
source's identity, and fails closed. :class:`~cytearc_vfs.CompositeStore` is
built from what :func:`verify_composite` returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from ..errors import IdentityMismatchError, IncompleteStoreError, RecordShapeError
from ..format.count_dtype import merge_dtype
from ..format.fingerprints import combine
from ..format.nodes import array_at
from ..format.option_names import option_name
from ..format.paths import join
from ..format.store_io import get_json
from ..read.anndata_sources import AnnDataSpec
from ..read.cell_runs import CellRuns, RunCollector, merge_runs
from ..read.count_mapping import FEATURE_MAP_CACHE_BYTES
from ..read.prefetch import fetch_documents
from ..read.read_stats import ReadCounters
from ..read.sources import BoundSource, SourceSpec, bind_sources
from ..remote.locations import local_path
from ..remote.source_cache import SourceCache
from .anndata_records import ANNDATA_SOURCES_PATH, read_anndata_sources
from .open_checks import verify_composite_tables
from .records import COMPOSITE_ATTR, MAP_NAMES, MAPS_GROUP, CompositeRecord
from .source_seals import SEALS_PATH, read_seals

__all__ = ["VerifiedComposite", "check_record_dtype", "verify_composite"]


@dataclass(frozen=True, slots=True)
class VerifiedComposite:
    """What opening a composite verified, for its store to serve from."""

    record: CompositeRecord
    """The composite record."""
    sources: list[BoundSource]
    """Every source, bound and its identity verified, in the record's order."""
    cell_runs: CellRuns | None
    """The cell mappings as runs (``None``: too many runs to keep)."""
    cache: SourceCache
    """The bounded cache remote sources read through."""
    documents: Store
    """The composite's own documents, as verified."""
    feature_columns: npt.NDArray[np.int64] | None = None
    """``featureColumns`` as verified, when small enough for readers to keep
    (:data:`~cytearc_vfs.read.count_mapping.FEATURE_MAP_CACHE_BYTES`): they map
    features from it instead of reading it again."""


def verify_composite(
    backing: Store,
    where: str,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None,
    *,
    created: tuple[Sequence[BoundSource], SourceCache] | None = None,
) -> VerifiedComposite:
    """Read and verify the composite in ``backing`` (described as ``where``).

    ``created`` holds the sources and cache of the creation that just wrote
    it: the sources are compared with the record instead of being bound and
    verified again.

    Raises
    ------
    ValueError
        ``backing`` holds no composite record, or ``source_storage_options``
        names a source the composite does not have.
    IncompleteStoreError
        The composite's creation did not finish, or a mapping is missing.
    IdentityMismatchError
        A mapping or a source is not what the record says.
    """
    # remote sources read through one bounded cache per open composite; a
    # bad CYTEARC_SOURCE_CACHE_BYTES is refused before any mapping is read
    cache = SourceCache() if created is None else created[1]
    root_doc = get_json(backing, "zarr.json", where=where)
    attrs = root_doc.get("attributes", {}) if isinstance(root_doc, dict) else {}
    if COMPOSITE_ATTR not in attrs:
        raise ValueError(f"{where} is not a composite (its root has no composite record)")
    record = CompositeRecord.from_json(attrs[COMPOSITE_ATTR], where=f"{where} composite")
    if not record.complete:
        raise IncompleteStoreError(
            f"composite at {where} is not complete (complete=false): its creation failed or is "
            "still running. Delete it and create the composite again"
        )
    names = [s.name for s in record.sources]
    option = option_name("source_storage_options")
    unknown = sorted(set(source_storage_options or {}) - set(names))
    if unknown:
        raise ValueError(
            f"{option} name unknown source(s) {unknown} of the composite at "
            f"{where}; its sources are {names}: key the options by those names"
        )
    for binding in record.sources:
        if (source_storage_options or {}).get(binding.name) and local_path(
            binding.location
        ) is not None:
            # the local backend's own refusal, met while binding the source, read as
            # "the source was replaced or moved": the wrong remedy for a wrong option
            raise ValueError(
                f"{option} give options for source {binding.name!r} of the composite at "
                f"{where}, which is the local path {binding.location}: a local source takes "
                "none. Give options only for the remote sources"
            )
    # The composite's own documents the checks below read, in one concurrent
    # round (its store may be remote too); the root document was read
    # above: a Zarr v3 group, so no v2 probes.
    own = sync(fetch_documents(backing, _own_documents(record)))
    root = zarr.open_group(own, mode="r", zarr_format=3)
    # the cell mappings are summarized as runs on the way (see cell_runs)
    collectors = {"rowSources": RunCollector(0), "sourceRows": RunCollector(1)}
    # and the feature map kept for the readers, whose first read fetched it again
    feature_blocks: list[np.ndarray] | None = None
    for name in MAP_NAMES:
        expected = record.maps[name]
        if expected.path != join(MAPS_GROUP, name) or expected.path not in root:
            raise IncompleteStoreError(
                f"composite at {where}: mapping {expected.path!r} is missing"
            )
        array = array_at(root, expected.path)
        kept = None
        if name == "featureColumns" and array.nbytes <= FEATURE_MAP_CACHE_BYTES:
            kept = feature_blocks = []
        found = _streamed_fingerprint(array, collectors.get(name), kept)
        if found != expected.fingerprint or tuple(array.shape) != expected.shape:
            raise IdentityMismatchError(
                f"composite at {where}: mapping {name} has fingerprint {found}, but the manifest "
                f"records {expected.fingerprint}; the mapping was changed. Recreate the composite"
            )
    verify_composite_tables(own, record, attrs, where=where)
    seals = read_seals(root, record, where=where)
    anndata = read_anndata_sources(root, record, where=where)
    # Every source is verified from one concurrent batch of requests (with
    # a seal, usually one listing each): see read/sources.bind_sources.
    if created is not None:
        sources = _as_recorded(list(created[0]), record, where=where)
    else:
        sources = bind_sources(
            [
                SourceSpec(
                    binding.name,
                    binding.location,
                    record.assay,
                    workspace=binding.workspace,
                    storage_options=(source_storage_options or {}).get(binding.name),
                    expected_dataset=binding.dataset_fingerprint,
                    expected_counts=binding.counts_fingerprint,
                    seal=seals.get(binding.name),
                    anndata=(
                        AnnDataSpec(anndata[binding.name]["element"], anndata[binding.name])
                        if binding.name in anndata
                        else None
                    ),
                )
                for binding in record.sources
            ],
            counters=ReadCounters(),
            cache=cache,
        )
    check_record_dtype(record, sources, where=where)
    return VerifiedComposite(
        record,
        sources,
        merge_runs(collectors["rowSources"], collectors["sourceRows"]),
        cache,
        own,
        None if not feature_blocks else np.concatenate(feature_blocks).astype(np.int64),
    )


def _streamed_fingerprint(
    array: zarr.Array[Any], runs: RunCollector | None = None, kept: list[Any] | None = None
) -> str:
    """:func:`array_fingerprint` computed window by window (memory stays flat);
    ``runs`` sees every window too, and ``kept`` gets each."""
    digest = hashlib.sha256()
    step = max(1, (16 << 20) // max(1, array.dtype.itemsize * int(np.prod(array.shape[1:]) or 1)))
    for start in range(0, array.shape[0], step):
        block = np.ascontiguousarray(array[start : start + step])
        digest.update(block.view(np.uint8).tobytes())
        if runs is not None:
            runs.observe(start, block)
        if kept is not None:
            kept.append(block)
    return combine(
        "cytearc:map",
        {"dtype": array.dtype.str, "shape": list(array.shape), "values": digest.hexdigest()},
    )


def check_record_dtype(
    record: CompositeRecord, sources: Sequence[BoundSource], *, where: str
) -> None:
    """Refuse virtual documents whose data type is not the sources' common type.

    Creation writes the common type of the sources' dtypes
    (:func:`~cytearc_vfs.format.count_dtype.merge_dtype`); the reader and the
    computed chunks cast every source's values to the recorded type, so a
    record edited to a narrower type would wrap or round them silently
    (``uint16`` 300 read as ``uint8`` 44). The sources' identities are
    verified first, so their dtypes are the ones the composite was made from.
    """
    path = join(record.assay, "counts")
    found = record.arrays[path].get("data_type")
    expected = merge_dtype([source.info.dtype for source in sources])
    try:
        matches = isinstance(found, str) and np.dtype(found) == expected
    except TypeError:
        matches = False
    if not matches:
        stored = sorted({str(source.info.dtype) for source in sources})
        raise RecordShapeError(
            f"composite at {where}: the record gives {path!r} data type {found!r}, but its "
            f"sources store counts as {stored}, whose common type is {expected}; reading them "
            "as another type would wrap or round values. The composite record was edited; "
            "recreate the composite"
        )


def _as_recorded(
    sources: list[BoundSource], record: CompositeRecord, *, where: str
) -> list[BoundSource]:
    """``sources`` bound by the creation that wrote ``record``, checked against it."""
    for binding, source in zip(record.sources, sources, strict=True):
        if (
            binding.name != source.name
            or binding.dataset_fingerprint != source.info.dataset_fingerprint
            or binding.counts_fingerprint != source.info.counts_fingerprint
        ):
            raise IdentityMismatchError(
                f"composite at {where}: source {binding.name!r} as recorded does not match the "
                "source its creation verified; the composite was changed while it was being "
                "created. Recreate the composite"
            )
    return sources


def _own_documents(record: CompositeRecord) -> list[str]:
    """Keys of the composite's own documents that opening it reads."""
    assay = record.assay
    nodes = [
        "",
        assay,
        MAPS_GROUP,
        "cellData",
        join(assay, "featureData"),
        *(record.maps[name].path for name in MAP_NAMES),
        "cellData/ids",
        join(assay, "featureData", "ids"),
        SEALS_PATH,  # absent from composites without seals: fetched in the same round
        ANNDATA_SOURCES_PATH,  # absent from composites without AnnData sources
    ]
    return [join(node, "zarr.json") for node in nodes]
