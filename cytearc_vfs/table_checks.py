"""Open-time identity checks of composites and mounts: the tables they read.

Runs the pure checks of :mod:`cytearc_vfs.identity_checks` on what a
composite or mount depends on (its cell and feature ids, its declarations,
its virtual array documents, and for a mount the target's own arrays),
reading the store's contents through :mod:`cytearc_vfs.source_store`. Kept
apart from the pure checks, which the source-store verification uses too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import zarr
from zarr.abc.store import Store

from .errors import IncompleteStoreError, RecordShapeError
from .identity_checks import (
    check_declared_assays,
    check_ids,
    check_virtual_arrays,
    refuse_target_counts,
)
from .paths import join
from .records import parse_assay_types
from .source_store import read_contents

if TYPE_CHECKING:
    from .composite_records import CompositeRecord
    from .source_store import AssayInfo

__all__ = ["verify_composite_tables", "verify_mount_tables"]


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
    root = zarr.open_group(backing, mode="r")
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


def verify_mount_tables(
    target: Store, workspace: str | None, infos: Mapping[str, AssayInfo], *, where: str
) -> None:
    """What a mount target must agree on with its (verified) source assays.

    The copied cell and feature ids must be the source's (whose identity the
    mount record pins), each mounted assay must be a published assay group of
    the target, the declarations must name only those, and the target must hold
    no node where the source's counts are read.
    """
    remedy = "the target was edited after mounting; mount the source again"
    contents = read_contents(target, where=where)
    present = [paths.assay for paths in contents.assays if paths.workspace == workspace]
    missing = sorted(set(infos) - set(present))
    if missing:
        raise IncompleteStoreError(
            f"mount at {where}: mounted assay(s) {missing} have no group with is_assay: true in "
            f"the target; {remedy}"
        )
    root = zarr.open_group(target, mode="r")
    container = root if workspace is None else root[workspace]
    check_declared_assays(
        dict(container.attrs),
        present,
        container=workspace or "",
        where=f"mount at {where}",
        remedy=remedy,
    )
    for name, info in infos.items():
        refuse_target_counts(target, info.paths, where=where)
        check_ids(
            root,
            info.paths.feature_data,
            info.shape[1],
            expected=info.features_fingerprint,
            recorded_in=f"the mounted source's assay {name!r}",
            where=f"mount at {where}",
            remedy=remedy,
        )
    first = next(iter(infos.values()))
    check_ids(
        root,
        first.paths.cell_data,
        first.shape[0],
        expected=first.cells_fingerprint,
        recorded_in="the mounted source",
        where=f"mount at {where}",
        remedy=remedy,
    )
