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

if TYPE_CHECKING:
    from .records import CompositeRecord

__all__ = ["verify_composite_tables"]


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
    composed assay must be a published assay group, the declarations must name
    it, and the ids must be the ones fingerprinted at creation.
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
    check_declared_assays(
        root_attrs, present, container="", where=f"composite at {where}", remedy=remedy
    )
    assay_type = parse_assay_types(root_attrs.get("assayTypes", {}), where="/").get(record.assay)
    check_virtual_arrays(
        record.arrays, record.assay, assay_type, (n_cells, n_features), where=where
    )
    root = zarr.open_group(backing, mode="r", zarr_format=3)
    expected = record.ids
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
            recorded_in="the composite record",
            where=f"composite at {where}",
            remedy=remedy,
        )
