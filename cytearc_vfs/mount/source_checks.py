"""A mount's source, opened and compared with the record the target keeps.

The first half of a mount's open (spec, "Mounted targets"): the target's
``matrixSource`` record names the source and the fingerprints of each mounted
assay; the source is opened read-only (a remote one through the bounded
cache), its documents are read in one concurrent round, and every recorded
fingerprint must match. A source that cannot be read, is itself a mount, or
changed since it was mounted is refused here, naming the remedy. The
target's own checks are :mod:`.open_checks`; :class:`.store.MountStore` puts
the two together.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarr.abc.store import Store
from zarr.core.sync import sync

from ..errors import (
    IdentityMismatchError,
    IncompleteStoreError,
    SourceGoneError,
    SourceUnavailableError,
    UnsupportedSourceError,
)
from ..format.option_names import (
    MOUNT_SOURCE,
    callers_form,
    option_name,
    source_options_example,
)
from ..format.paths import AssayPaths, join
from ..format.source_store import AssayInfo, read_contents, verify_assay
from ..format.store_contents import NoZarrGroupError
from ..format.store_io import get_json
from ..read.opened_files import OpenedSource, opened_source
from ..read.prefetch import PrefetchedStore, assay_documents, fetch_documents
from ..remote.cached_store import cached_source
from ..remote.failures import first_line, source_failure
from ..remote.locations import local_path, open_location
from ..remote.source_cache import SourceCache
from .records import MATRIX_SOURCE_ATTR, MountRecord

__all__ = ["VerifiedSource", "source_listing_refused", "verify_mount_source"]


@dataclass(frozen=True, slots=True)
class VerifiedSource:
    """A mount's source as its open found it, every recorded fingerprint matched."""

    record: MountRecord
    """The target's ``matrixSource`` record."""
    source: Store
    """The source, read-only (through the bounded cache when remote)."""
    infos: Mapping[str, AssayInfo]
    """Each mounted assay of the source, verified."""
    documents: PrefetchedStore
    """The source's documents the checks read (readers open its arrays from them)."""
    opened: OpenedSource | None
    """What the open found of a local source's count arrays; ``None`` when remote."""


def verify_mount_source(
    target: Store, where: str, source_storage_options: Mapping[str, Any] | None
) -> VerifiedSource:
    """Open the source the mount target at ``where`` records, and verify it.

    Raises ``ValueError`` when ``target`` is not a mount, ``OSError`` naming
    the source and the remedy when it cannot be read,
    :class:`~cytearc_vfs.errors.IdentityMismatchError` when it changed since
    it was mounted, and :class:`~cytearc_vfs.errors.UnsupportedSourceError`
    when it is itself a mount.
    """
    document = get_json(target, "zarr.json", where=where)
    attrs = document.get("attributes", {}) if isinstance(document, dict) else {}
    if MATRIX_SOURCE_ATTR not in attrs:
        raise ValueError(f"{where} is not a mounted target (no matrixSource record)")
    record = MountRecord.from_json(attrs[MATRIX_SOURCE_ATTR], where=f"{where} matrixSource")
    source_where = record.location
    if source_storage_options and local_path(record.location) is not None:
        raise ValueError(
            f"{option_name('source_storage_options')} are the backend options of a mount's "
            f"source, and the source of the mount at {where} is the local path "
            f"{record.location}, which takes none: leave them out"
        )
    paths = [AssayPaths(name, record.workspace) for name in record.assays]
    try:
        location_store = open_location(
            record.location, read_only=True, storage_options=source_storage_options
        )
        source = cached_source(location_store, SourceCache(), MOUNT_SOURCE, where=record.location)
        files = _opened(record, paths)  # before the documents are read
        # every document the checks below read, and on an object store one
        # listing of the source (pins, absent keys), in one concurrent round
        documents = sync(
            fetch_documents(
                source,
                [key for p in paths for key in assay_documents(p)],
                deferred=[join(p.assay_group, "state", "zarr.json") for p in paths],
                # what the listing would have told absent, where it is refused
                probes=[join(p.assay_group, "state", ".zgroup") for p in paths],
            )
        )
        # a source that may be read but not listed is read by path (its root's record)
        contents = read_contents(documents, where=source_where, unlisted=paths[0])
    except NoZarrGroupError as exc:
        # nothing is there (an object store has no directory to find missing first)
        raise source_failure(
            SourceGoneError(
                f"the source of the mount at {where}, {record.location}, is gone: no Zarr "
                "group is there any more (no zarr.json at its root); restore it at that "
                "location, or mount another source at a new destination"
            )
        ) from exc
    except (ValueError, TypeError):
        raise
    except Exception as exc:
        gone = isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFoundError"
        kind = SourceGoneError if gone else SourceUnavailableError
        if getattr(exc, "cytearc_source", False):
            # the pinned store named the source, the key and the remedy: said once
            detail = first_line(exc).partition(": ")[2]
            raise source_failure(
                kind(
                    f"the source of the mount at {where}, {record.location}, cannot be "
                    f"read: {detail}"
                )
            ) from exc
        raise kind(
            f"the source of the mount at {where}, {record.location}, cannot be read "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); "
            + (
                # a new mount, not --overwrite: replacing this one would drop its artifacts
                "restore it at that path (move it back, or link the path to where it went: "
                f"ln -s NEW_LOCATION {shlex.quote(record.location)}), or mount its new location at a new "
                "destination (this target's own artifacts stay here, and do not move to a "
                "new mount; "
                + callers_form(
                    "cv.list_artifacts with this target's path reads them",
                    f"cytearc-vfs artifacts {shlex.quote(where)} lists them",
                )
                + " without the source)"
                if local_path(record.location) is not None
                else "restore it, or pass its credentials as " + source_options_example(None)
            )
        ) from exc
    if MATRIX_SOURCE_ATTR in contents.root_attrs:
        raise UnsupportedSourceError(
            f"the source of the mount at {where}, {record.location}, is itself a mount; "
            "mounts do not chain. Mount the store that owns the counts"
        )
    infos: dict[str, AssayInfo] = {}
    for name, expected in record.assays.items():
        info = verify_assay(documents, AssayPaths(name, record.workspace), where=source_where)
        for what, wanted, found in (
            ("dataset", expected.dataset_fingerprint, info.dataset_fingerprint),
            ("counts", expected.counts_fingerprint, info.counts_fingerprint),
        ):
            if wanted != found:
                raise IdentityMismatchError(
                    f"mount at {where}: assay {name!r} of source {record.location} has {what} "
                    f"fingerprint {found}, but the mount records {wanted}; the source changed "
                    "after it was mounted. Restore the source; or mount the changed source at "
                    "a new destination (this mount is never replaced: its analyses were made "
                    "on the counts it records, and stay here, readable once the source is "
                    "restored)"
                )
        if expected.requires_transpose and not info.has_counts_t:
            raise IncompleteStoreError(
                f"mount at {where}: assay {name!r} opens as RNA and needs the source's countsT, "
                f"which {record.location} lacks; re-import the source"
            )
        infos[name] = info
    return VerifiedSource(record, source, infos, documents, files)


def _opened(record: MountRecord, paths: list[AssayPaths]) -> OpenedSource | None:
    """What the open of a local source finds of its count arrays (see
    :mod:`cytearc_vfs.read.opened_files`); ``None`` for a remote source."""
    root = local_path(record.location)
    if root is None:
        return None
    return opened_source(
        str(root),
        [array for p in paths for array in (p.counts, p.counts_t)],
        label=f"the mount's source at {record.location}",
        reopen="reopen the mount, whose open compares its source with the fingerprints it recorded",
    )


def source_listing_refused(location: str, prefix: str) -> PermissionError:
    """A mount's listing that must list its source too, refused by a source that may be
    read but not listed: what needs the listing, the remedy, and what still works."""
    return PermissionError(
        f"mount of {location}: listing {prefix!r} lists the source's artifacts too, and the "
        "source's listing was refused (credentials that may read but not list, such as S3 "
        "without s3:ListBucket); pass credentials that may list it, as "
        f"{source_options_example(None)}. Without them, the mount reads by path: its "
        "counts, its tables, and a source artifact's arrays at their paths"
    )
