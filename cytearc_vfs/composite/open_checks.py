"""Open-time identity checks of a composite: the tables its virtual counts depend on.

Runs the pure checks of :mod:`cytearc_vfs.format.identity_checks` on a
composite's cell and feature ids, its declarations and its virtual array
documents, reading the store's contents through
:mod:`cytearc_vfs.format.source_store`. The mount's counterpart is
:mod:`cytearc_vfs.mount.open_checks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import zarr
from zarr.abc.store import Store

from ..errors import IncompleteStoreError, RecordShapeError
from ..format.identity_checks import (
    check_declared_assays,
    check_ids,
    check_virtual_arrays,
)
from ..format.paths import join
from ..format.records import parse_assay_types
from ..format.source_store import read_contents
from ..format.store_io import get_json, list_dir
from .records import IDS_ATTR, MAPS_GROUP, AxisIds

if TYPE_CHECKING:
    from .records import CompositeRecord

__all__ = ["recorded_ids", "refuse_stored_virtual_arrays", "verify_composite_tables"]


def verify_composite_tables(
    backing: Store,
    record: CompositeRecord,
    root_attrs: Mapping[str, Any],
    *,
    where: str,
) -> None:
    """What a composite's virtual counts depend on besides its mappings and sources.

    Run after the mapping fingerprints are verified, so the record's map shapes
    are the arrays' shapes: the virtual documents must agree with them, the
    composed assay must be a published assay group holding no stored node
    where a virtual array is served, the declarations must name it, and the
    ids must be the ones fingerprinted at creation.
    """
    remedy = "the composite was edited after creation; recreate the composite"
    (n_cells,) = record.maps["rowSources"].shape or (None,)
    columns = record.maps["featureColumns"].shape
    if (
        n_cells is None
        or record.maps["sourceRows"].shape != (n_cells,)
        or len(columns) != 2
        or columns[0] != len(record.sources)
    ):
        raise RecordShapeError(
            f"composite at {where}: mappings rowSources {record.maps['rowSources'].shape}, "
            f"sourceRows {record.maps['sourceRows'].shape} and featureColumns {columns} do not "
            f"fit {len(record.sources)} source(s); {remedy}"
        )
    n_features = columns[1]
    contents = read_contents(backing, where=where)
    present = [paths.assay for paths in contents.assays if paths.workspace is None]
    if record.assay not in present:
        raise IncompleteStoreError(
            f"composite at {where}: the composed assay {record.assay!r} has no group with "
            f"is_assay: true; {remedy}"
        )
    refuse_stored_virtual_arrays(backing, record, where=where)
    check_declared_assays(
        root_attrs, present, container="", where=f"composite at {where}", remedy=remedy
    )
    assay_type = parse_assay_types(root_attrs.get("assayTypes", {}), where="/").get(record.assay)
    check_virtual_arrays(
        record.arrays, record.assay, assay_type, (n_cells, n_features), where=where
    )
    root = zarr.open_group(backing, mode="r", zarr_format=3)
    expected = recorded_ids(root, record, where=where)
    for table, length, fingerprint in (
        ("cellData", n_cells, None if expected is None else expected.cells),
        (
            join(record.assay, "featureData"),
            n_features,
            None if expected is None else expected.features,
        ),
    ):
        check_ids(
            root,
            table,
            length,
            expected=fingerprint,
            recorded_in="the composite's ids record",
            where=f"composite at {where}",
            remedy=remedy,
        )


def refuse_stored_virtual_arrays(backing: Store, record: CompositeRecord, *, where: str) -> None:
    """Refuse a composite whose own store holds a node where a virtual array is served.

    The spec keeps ``{assay}/counts`` (and ``countsT``) out of the composite's
    store so that bare Zarr cannot read anything there; a node stored at
    that path (any Zarr format) would be what plain ``zarr.open_array``
    reads, while this package serves the counts gathered from the sources.
    One listing of the assay group covers every virtual array. A node whose
    ``zarr.json`` is exactly the record's virtual document is the composite
    itself as ``cytearc-vfs serve`` or ``mount-fs`` present it (their chunks
    are computed from the sources), and is accepted; only then is a document
    read.
    """
    children = set(list_dir(backing, record.assay))
    held = sorted(
        path
        for path, document in record.arrays.items()
        if path.rpartition("/")[0] == record.assay
        and path.rpartition("/")[2] in children
        and get_json(backing, join(path, "zarr.json")) != document
    )
    if held:
        raise RecordShapeError(
            f"composite at {where}: its own store holds {held}, where the composite's virtual "
            "counts are served; plain zarr would read that stored node while this package "
            "gathers the counts from the sources, so they could disagree. Remove those nodes "
            "from the composite's directory, or recreate the composite"
        )


def recorded_ids(root: zarr.Group, record: CompositeRecord, *, where: str) -> AxisIds | None:
    """The ids fingerprints recorded at creation: the ``_composite`` group's
    ``cytearc:ids`` attribute, or the record's ``ids`` field in composites
    written before it moved (``None`` in composites older than both)."""
    maps = root.get(MAPS_GROUP)
    attrs = dict(maps.attrs) if isinstance(maps, zarr.Group) else {}
    stored = (
        AxisIds.from_json(attrs[IDS_ATTR], where=f"{where} {MAPS_GROUP} {IDS_ATTR}")
        if IDS_ATTR in attrs
        else None
    )
    if stored is not None and record.ids is not None and stored != record.ids:
        raise RecordShapeError(
            f"composite at {where}: its record's ids and {MAPS_GROUP} {IDS_ATTR} differ; "
            "the composite was edited after creation; recreate the composite"
        )
    return stored if stored is not None else record.ids
