"""``mount_datastore``: a writable target bound to a read-only source.

The target holds copies of the source's cell and feature tables (membership
columns with their attributes), its assay declarations, empty artifact roots,
and the root ``matrixSource`` record. The root's first document names the
writer (``cytearc:pending_store``) and one last root write replaces that
marker with the record, so a mount that dies at any instant is refused by
every open (never read as an ordinary store) and ``overwrite=True`` replaces
it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import zarr

from ..errors import UnsupportedSourceError
from ..format.flags import check_flag
from ..format.nodes import group_at
from ..format.option_names import (
    Placeholder,
    option_given,
    option_name,
    source_options_example,
)
from ..format.paths import AssayPaths, check_name
from ..format.records import parse_assay_types, requires_transpose
from ..format.source_store import AssayInfo, StoreContents, read_contents, verify_assay
from ..read.prefetch import assay_documents, prefetched
from ..remote.failures import is_http_location, names_backend_failures
from ..remote.locations import Location, describe_location, open_location, reopenable_location
from ..write.copying import copy_group
from ..write.destinations import (
    create_destination,
    finish_destination,
    settled_on_failure,
)
from ..write.overlaps import check_no_overlap
from ..write.stopping import stops_on_exception
from ..write.writable import require_writable_destination
from .records import MATRIX_SOURCE_ATTR, MountedAssay, MountRecord

__all__ = ["mount_datastore"]


def _refuse(contents: StoreContents, where: str) -> None:
    if MATRIX_SOURCE_ATTR in contents.root_attrs:
        raise UnsupportedSourceError(
            f"{where} is itself a mounted target; mounts do not chain. Mount the store that owns "
            f"the counts ({contents.root_attrs[MATRIX_SOURCE_ATTR].get('location', '?')})"
        )
    if "composite" in contents.root_attrs:
        raise UnsupportedSourceError(
            f"{where} is a composite: its counts are computed from other stores and its mappings "
            "are immutable, so a mount could not bind stable counts. Mount one of its sources, "
            "or materialize the composite into an ordinary store and mount that"
        )
    if contents.pending:
        pending = ", ".join(p.assay_group for p in contents.pending)
        raise UnsupportedSourceError(
            f"{where} holds a pending derived assay ({pending}); finish or discard it before mounting"
        )


def _chosen_assays(assays: object) -> list[str]:
    """``assays=`` as a list of distinct names, refused before anything is written.

    >>> _chosen_assays(("RNA", "ADT"))
    ['RNA', 'ADT']
    >>> _chosen_assays("RNA")
    Traceback (most recent call last):
    ...
    TypeError: assays= is one string ('RNA'); pass a list of assay names, such as assays=['RNA']
    """
    if isinstance(assays, (str, bytes)):
        raise TypeError(
            f"assays= is one string ({assays!r}); pass a list of assay names, such as "
            f"assays=[{assays!r}]"
        )
    if not isinstance(assays, Iterable):
        raise TypeError(
            f"assays= is a list of assay names, not {type(assays).__name__}; pass one such as "
            "assays=['RNA'], or None for every assay"
        )
    chosen = list(assays)
    if not chosen:
        raise ValueError(
            "assays= is empty: a mount holds at least one assay; name the assays to mount, or "
            "pass None (the default) to mount every assay"
        )
    for name in chosen:
        if not isinstance(name, str):
            raise TypeError(
                f"assays= holds {name!r} ({type(name).__name__}); assay names are strings"
            )
    repeated = sorted({name for name in chosen if chosen.count(name) > 1})
    if repeated:
        raise ValueError(
            f"{option_name('assays')} names {', '.join(map(repr, repeated))} more than once; give each assay once"
        )
    return chosen


@names_backend_failures("source", "destination")
@stops_on_exception
def mount_datastore(
    source: Location,
    destination: Location,
    *,
    workspace: str | None = None,
    assays: Sequence[str] | None = None,
    assay_types: Mapping[str, str] | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Any:
    """Create a mounted target of ``source`` at ``destination`` and return it opened.

    Parameters
    ----------
    source
        The store that owns the counts (an ordinary store); never modified.
    destination
        An empty location for the target; created with mode ``"w-"``.
    workspace
        The workspace of the source to mount (root layout by default); the
        target uses the same layout.
    assays
        Assays to mount (all of the workspace by default).
    assay_types
        Per assay, the type the target opens it as (the source's declaration
        by default); an RNA-like type requires the source's countsT.
    source_storage_options
        Backend options of the source (credentials); used, never written.
    storage_options
        Backend options of the destination.
    overwrite
        Replace a destination that a writer left unfinished, or a store the
        writers may replace (spec, "Writer destinations"). A complete mount
        is never replaced: analyses depend on it.

    Returns
    -------
    MountStore
    """
    from .store import MountStore

    where = describe_location(source)
    check_flag(overwrite, "overwrite")
    if workspace is not None:
        check_name(workspace, what="workspace")
    requested = None if assays is None else _chosen_assays(assays)
    check_no_overlap(
        destination,
        {"source": source},
        storage_options=storage_options,
        source_storage_options={"source": source_storage_options},
    )
    # a local destination that cannot be written (/proc, a read-only file system)
    # is refused before the source is read
    require_writable_destination(destination)
    # the record keeps this location: one it cannot keep (a URL carrying a password,
    # a Store object) is refused before the source is asked anything
    recorded_location = reopenable_location(source, what="the source")
    opened = open_location(source, read_only=True, storage_options=source_storage_options)
    try:
        contents = read_contents(opened, where=where)
    except PermissionError as exc:
        if is_http_location(where):
            raise  # a web server's refusal has its own remedy (a server that lists)
        raise _listing_needed(where) from exc
    _refuse(contents, where)
    available = [p.assay for p in contents.assays if p.workspace == workspace]
    if not available:
        # what it does hold, so the remedy can be followed as written
        held = sorted({repr(p.workspace) for p in contents.assays if p.workspace})
        place = f"workspace {workspace!r}" if workspace else "its root layout"
        if workspace and any(not p.workspace for p in contents.assays):
            remedy = "its assays are in its root layout: give no workspace"
        elif held:
            remedy = (
                f"name the workspace that holds them, one of {', '.join(held)}, with "
                f"{option_given('workspace', Placeholder('NAME'))}"
            )
        else:
            remedy = "check the location"
        raise ValueError(f"{where} has no assay in {place}; {remedy}")
    chosen = requested if requested is not None else available
    unknown = sorted(set(chosen) - set(available)) + sorted(set(assay_types or {}) - set(chosen))
    if unknown:
        raise ValueError(
            f"assay(s) {', '.join(map(repr, unknown))} are not in {where} (it holds "
            f"{', '.join(map(repr, available))}); choose among those"
        )
    # every document verification reads, in one concurrent round (not one by one)
    backend = prefetched(
        opened,
        [key for name in chosen for key in assay_documents(AssayPaths(name, workspace))],
    )
    container_attrs = zarr.open_group(
        backend, path=workspace or "", mode="r", zarr_format=3
    ).attrs.asdict()
    declared = parse_assay_types(container_attrs.get("assayTypes", {}), where=workspace or "/")
    types = {name: (assay_types or {}).get(name) or declared.get(name) for name in chosen}
    infos: dict[str, AssayInfo] = {}
    for name in chosen:
        info = verify_assay(backend, AssayPaths(name, workspace), where=where)
        opens_as = types[name] or info.assay_type
        if requires_transpose(opens_as) and not info.has_counts_t:
            raise ValueError(
                f"assay {name!r} of {where} would open as {opens_as} and needs the source's countsT, "
                "which it lacks; re-import the source or mount it with another assay type"
            )
        infos[name] = info
        types[name] = opens_as
    record = MountRecord(
        location=recorded_location,
        workspace=workspace,
        assays={
            name: MountedAssay(
                info.dataset_fingerprint,
                info.counts_fingerprint,
                requires_transpose(types[name] or ""),
            )
            for name, info in infos.items()
        },
    )

    root = create_destination(
        destination,
        overwrite=overwrite,
        writer="mount_datastore",
        storage_options=storage_options,
    )
    with settled_on_failure(root):
        source_root = zarr.open_group(backend, mode="r", zarr_format=3)
        container = root if workspace is None else root.create_group(workspace)
        container.attrs.update(
            {
                "assayTypes": {name: types[name] for name in sorted(chosen)},
                "defaultAssay": container_attrs.get("defaultAssay")
                if container_attrs.get("defaultAssay") in chosen
                else chosen[0],
            }
        )
        first = infos[chosen[0]].paths
        # Cell table with every column and its attributes (membership columns included).
        copy_group(group_at(source_root, first.cell_data), container, "cellData")
        for name in chosen:
            paths = infos[name].paths
            source_assay = group_at(source_root, paths.assay_group)
            assay_group = container.create_group(name, attributes=source_assay.attrs.asdict())
            copy_group(group_at(source_root, paths.feature_data), assay_group, "featureData")
            assay_group.create_group("artifacts")
        container.create_group("artifacts")
        # the record, written last with the marker removed, makes it a mount
        finish_destination(root, {MATRIX_SOURCE_ATTR: record.to_json()})
    return MountStore.from_location(
        destination,
        mode="r+",
        storage_options=storage_options,
        source_storage_options=source_storage_options,
    )


def _listing_needed(where: str) -> PermissionError:
    """A mount's creation refused by a source that may be read but not listed: it copies
    the source's tables and finds its assays, which only listings find."""
    return PermissionError(
        f"the source {where}: its listing was refused; mounting it finds its assays and "
        "copies every column of its cell and feature tables, which only listings of the "
        "source find (credentials that may read but not list, such as S3 without "
        "s3:ListBucket, cannot). Mount it with credentials that may also list it, as "
        f"{source_options_example(None)}: opening the mount afterwards and reading through "
        "it needs read access only, except listing the source's artifacts"
    )
