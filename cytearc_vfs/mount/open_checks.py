"""Open-time identity checks of a mount target against its source assays.

Runs the pure checks of :mod:`cytearc_vfs.format.identity_checks` on the
target's copied cell and feature ids, its declarations and its own arrays
(no node may stand where the source's counts are read). The composite's
counterpart is :mod:`cytearc_vfs.composite.open_checks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import zarr
from zarr.abc.store import Store

from ..errors import IncompleteStoreError
from ..format.identity_checks import (
    check_declared_assays,
    check_ids,
    refuse_target_counts,
)
from ..format.source_store import read_contents

if TYPE_CHECKING:
    from ..format.source_store import AssayInfo

__all__ = ["verify_mount_tables"]


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
    root = zarr.open_group(target, mode="r", zarr_format=3)
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
