"""Open-time identity checks of a mount target against its source assays.

Runs the pure checks of :mod:`cytearc_vfs.format.identity_checks` on the
target's copied cell and feature ids, its declarations and its own arrays
(no node may stand where the source's counts are read). The composite's
counterpart is :mod:`cytearc_vfs.composite.open_checks`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import zarr
from zarr.abc.store import Store

from ..errors import IncompleteStoreError, RecordShapeError
from ..format.identity_checks import (
    check_declared_assays,
    check_ids,
    refuse_target_counts,
)
from ..format.option_names import callers_form
from ..format.records import parse_assay_types, requires_transpose
from ..format.source_store import read_contents

if TYPE_CHECKING:
    from ..format.source_store import AssayInfo
    from .records import MountRecord

__all__ = ["type_change_refusal", "verify_mount_tables"]


def verify_mount_tables(
    target: Store, record: MountRecord, infos: Mapping[str, AssayInfo], *, where: str
) -> None:
    """What a mount target must agree on with its (verified) source assays.

    The copied cell and feature ids must be the source's (whose identity the
    mount record pins), each mounted assay must be a published assay group of
    the target, the declarations must name only those, each assay that opens
    as RNA must have the source's countsT (and the record must say so), and
    the target must hold no node where the source's counts are read.
    """
    workspace = record.workspace
    remedy = (
        "the target was edited after mounting; undo the edit, or mount the source again into "
        "a new destination (a complete mount is never replaced: its artifacts are its own)"
    )
    contents = read_contents(target, where=where)
    present = [paths.assay for paths in contents.assays if paths.workspace == workspace]
    missing = sorted(set(infos) - set(present))
    if missing:
        raise IncompleteStoreError(
            f"mount at {where}: mounted assay(s) {missing} have no group with is_assay: true in "
            f"the target; {remedy}"
        )
    root = zarr.open_group(target, mode="r", zarr_format=3)
    container = root if workspace is None else root[workspace]
    check_declared_assays(
        dict(container.attrs),
        present,
        container=workspace or "",
        where=f"mount at {where}",
        remedy=remedy,
    )
    check_opening_types(dict(container.attrs), record, infos, where=where)
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


def check_opening_types(
    container_attrs: Mapping[str, Any],
    record: MountRecord,
    infos: Mapping[str, AssayInfo],
    *,
    where: str,
) -> None:
    """Each mounted assay opens as the target's ``assayTypes`` entry, else as the
    source declares it; the source's countsT is required for exactly the assays
    that open as RNA (spec, "Assay types"), and ``requiresTranspose`` must say so.
    """
    label = record.workspace or "/"
    declared = parse_assay_types(container_attrs.get("assayTypes", {}), where=label)
    for name, info in infos.items():
        opens_as = declared.get(name) or info.assay_type
        how = (
            f"the target's assayTypes declares {opens_as!r}"
            if name in declared
            else f"the source declares {opens_as!r}"
        )
        needs = requires_transpose(opens_as)
        if needs and not info.has_counts_t:
            raise IncompleteStoreError(
                f"mount at {where}: assay {name!r} opens as {opens_as} ({how}) and needs the "
                f"source's countsT, which {record.location} lacks (the source declares it "
                f"{info.assay_type!r}); set the target's assayTypes[{name!r}] back to "
                f"{info.assay_type!r}, or re-import the source with an RNA-typed assay "
                f"({callers_form('cv.write_counts', 'cytearc-vfs write')}) and mount it into a "
                "new destination"
            )
        recorded = record.assays[name].requires_transpose
        if recorded != needs:
            raise RecordShapeError(
                f"mount at {where}: matrixSource records requiresTranspose: "
                f"{str(recorded).lower()} for assay {name!r}, but it opens as {opens_as} "
                f"({how}), which {'requires' if needs else 'does not require'} the source's "
                "countsT; the record or the declaration was edited after mounting. Restore the "
                "declaration, or mount the source again into a new destination (assay_types= chooses "
                "the type)"
            )


def type_change_refusal(
    key: str, document: bytes, record: MountRecord, infos: Mapping[str, AssayInfo], where: str
) -> str | None:
    """Why writing ``document`` as the mount's container document (the root's, or the
    workspace's: where ``assayTypes`` lives) is refused through the mount, or ``None``.

    Only the mounted assays' types are checked, as every open checks them: a type
    whose countsT need differs from what the record says would make every later
    open refuse the target. The declarations of the target's own assays (a pending
    assay's type may be recorded before its group exists) are left to the open.
    """
    try:
        parsed = json.loads(document)
    except ValueError:
        return None  # not a document of ours to judge: zarr reports it where it is read
    attributes = parsed.get("attributes") if isinstance(parsed, dict) else None
    try:
        check_opening_types(
            attributes if isinstance(attributes, dict) else {}, record, infos, where=where
        )
    except (IncompleteStoreError, RecordShapeError, ValueError) as exc:
        return (
            f"cannot write {key!r} through the mount: every later open would refuse the "
            f"target ({exc}); nothing was written"
        )
    return None
