"""Artifact groups: publication with one metadata write, listing and reuse.

Implements the spec's "Artifact publication". A producer creates its group at
``{root}/{kind}/{artifact_id}``, where ``artifact_id`` is a random 256-bit
token, so the path belongs to that producer alone and no lock is needed. The
group starts with ``complete=False``; the arrays are written (those that must
hold finite values are checked row band by row band as they are written), and
one metadata write of the whole attribute record sets ``complete=True``. A
failure before that write deletes the group. Once the write is issued the
group stays, complete or not, because a write that reports an error may still
have persisted.

The attribute record of an artifact group holds exactly ``artifact_id``,
``kind``, ``provenance``, ``execution_options``, ``created_at_ns``,
``cytearc_version`` and ``complete``. It is written by :class:`ArtifactWriter`
and parsed strictly, in one place, by :class:`ArtifactRecord` in
:mod:`cytearc_vfs.artifact_records`, which also holds :func:`canonical_json`
and :func:`check_provenance`; they are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import zarr
from zarr.abc.store import Store

from .artifact_records import (
    ARTIFACT_ID_PATTERN,
    ArtifactRecord,
    canonical_json,
    check_execution_options,
    check_provenance,
)
from .artifact_writer import ArrayWriter, ArtifactWriter
from .errors import IncompleteStoreError
from .locations import Location, describe_location, open_location
from .paths import check_name, join
from .store_io import get_json, list_dir

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ArrayWriter",
    "ArtifactRecord",
    "ArtifactWriter",
    "canonical_json",
    "check_provenance",
    "find_artifact",
    "list_artifacts",
    "publish_artifact",
    "read_artifact",
]

logger = logging.getLogger(__name__)

#: Where an artifact group can be: a location (path, URL or Store) or an open group,
#: whose path then prefixes every artifact path.
ArtifactStore = Location | zarr.Group

# ---------------------------------------------------------------- store access


def _resolve(store: ArtifactStore, *, read_only: bool) -> tuple[Store, str, str]:
    """(backend store, key prefix, description) of ``store``."""
    if isinstance(store, zarr.Group):
        return store.store, store.path, join(str(store.store), store.path)
    return open_location(store, read_only=read_only), "", describe_location(store)


def _check_root(root: str) -> str:
    if not isinstance(root, str) or not root.strip("/"):
        raise ValueError(
            f"artifact root must be a non-empty path such as 'artifacts', not {root!r}"
        )
    normalized = root.strip("/")
    for segment in normalized.split("/"):
        check_name(segment, what=f"segment of artifact root {root!r}")
    return normalized


def _read_group_record(store: Store, key_prefix: str, path: str, where: str) -> ArtifactRecord:
    full = join(key_prefix, path)
    location = f"{where.rstrip('/')}/{path}"
    document = get_json(store, join(full, "zarr.json"), where=location)
    if document is None:
        raise FileNotFoundError(
            f"no artifact group at {location!r} (no zarr.json); it was never published or was "
            "removed; recompute it"
        )
    return ArtifactRecord.from_group_document(document, path=path, where=location)


def publish_artifact(
    store: ArtifactStore,
    root: str,
    kind: str,
    *,
    provenance: Mapping[str, Any],
    execution_options: Mapping[str, Any] | None = None,
) -> ArtifactWriter:
    """Create an artifact group and publish it when the ``with`` block ends.

    Parameters
    ----------
    store
        Path, URL or zarr Store (opened writable), or a zarr Group whose
        path prefixes the artifact's.
    root
        Artifact root inside ``store``: ``artifacts``, ``{assay}/artifacts``,
        ``{workspace}/artifacts`` or ``{workspace}/{assay}/artifacts``.
    kind
        Artifact kind, one path segment (``normalized``, ``reduction``...).
    provenance
        ``operation``, ``parameters``, ``inputs`` and, from revision 2,
        ``revision``; see :func:`check_provenance`. It is the artifact's
        identity for reuse.
    execution_options
        How the producer runs (workers, budgets): recorded for diagnostics,
        never part of the identity. JSON values.

    Returns
    -------
    ArtifactWriter
        A context manager. Entering creates ``{root}/{kind}/{artifact_id}``
        with ``complete=False``; arrays are written with
        :meth:`ArtifactWriter.write_array` or
        :meth:`ArtifactWriter.create_array`. A normal exit writes the whole
        attribute record once, with ``complete=True``. An exception (or a
        failed or unfinished array write) before that deletes the group and
        propagates; if the publishing write itself fails, the group stays.

    Raises
    ------
    ValueError, TypeError
        Invalid provenance, execution options, root or kind, before anything
        is written.

    Examples
    --------
    >>> with publish_artifact(
    ...     store, "RNA/artifacts", "normalized",
    ...     provenance={"operation": "normalize", "parameters": {}, "inputs": {}},
    ... ) as art:  # doctest: +SKIP
    ...     art.write_array("data", values)
    >>> art.path  # doctest: +SKIP
    'RNA/artifacts/normalized/4f0c...'
    """
    normalized_root = _check_root(root)
    check_name(kind, what="artifact kind")
    canonical = check_provenance(provenance)
    options = check_execution_options(execution_options)
    backend, key_prefix, where = _resolve(store, read_only=False)
    return ArtifactWriter(backend, key_prefix, where, normalized_root, kind, canonical, options)


# ---------------------------------------------------------------- reading


def read_artifact(store: ArtifactStore, path: str) -> ArtifactRecord:
    """Read the record of the complete artifact at ``path``.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    path
        ``{root}/{kind}/{artifact_id}``, as in :attr:`ArtifactRecord.path`.

    Raises
    ------
    FileNotFoundError
        No group at ``path``.
    RecordShapeError
        The attribute record has a missing, unknown or mistyped field.
    IncompleteStoreError
        The artifact is not complete.
    """
    segments = path.strip("/").split("/") if isinstance(path, str) else []
    if len(segments) < 3:
        raise ValueError(f"artifact path {path!r} must be '{{root}}/{{kind}}/{{artifact_id}}'")
    normalized = "/".join(segments)
    backend, key_prefix, where = _resolve(store, read_only=True)
    return _read_group_record(backend, key_prefix, normalized, where)


def list_artifacts(
    store: ArtifactStore, root: str, kind: str | None = None
) -> list[ArtifactRecord]:
    """The complete artifacts under ``root``, optionally of one ``kind``.

    Incomplete groups are skipped. A group whose record cannot be read is
    skipped with a logged warning naming it, so one broken child never hides
    the others; :func:`read_artifact` on its path raises the error.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    root
        Artifact root inside ``store``.
    kind
        Only this kind; every kind by default.

    Returns
    -------
    list of ArtifactRecord
        Sorted by kind, then creation time, then id.
    """
    normalized_root = _check_root(root)
    if kind is not None:
        check_name(kind, what="artifact kind")
    backend, key_prefix, where = _resolve(store, read_only=True)
    if not backend.supports_listing:
        raise ValueError(f"{where} cannot list its keys, so its artifacts cannot be listed")
    base = join(key_prefix, normalized_root)
    kinds = [kind] if kind is not None else list_dir(backend, base)
    found: list[ArtifactRecord] = []
    for kind_name in kinds:
        if kind_name == "zarr.json":
            continue
        for child in list_dir(backend, join(base, kind_name)):
            if child == "zarr.json":
                continue
            path = join(normalized_root, kind_name, child)
            try:
                found.append(_read_group_record(backend, key_prefix, path, where))
            except (IncompleteStoreError, FileNotFoundError) as exc:
                # Being written, failed, or being deleted: not an artifact yet.
                logger.debug("skipping artifact %s in %s: %s", path, where, exc)
            except (ValueError, OSError) as exc:
                # RecordShapeError is a ValueError; OSError covers a stray file child.
                logger.warning("skipping unreadable artifact %s in %s: %s", path, where, exc)
    found.sort(key=lambda record: (record.kind, record.created_at_ns, record.artifact_id))
    return found


def find_artifact(
    store: ArtifactStore, root: str, kind: str, provenance: Mapping[str, Any]
) -> ArtifactRecord | None:
    """The complete, current artifact of ``kind`` whose provenance equals ``provenance``.

    Provenance is compared whole and exactly, as canonical JSON (see
    :func:`canonical_json`); ``execution_options``, ``created_at_ns`` and
    ``cytearc_version`` never matter. Artifacts that record revision 1 or a
    non-integer revision are never returned.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    root
        Artifact root inside ``store``.
    kind
        Artifact kind.
    provenance
        Validated as by :func:`publish_artifact` (so ``revision=1`` raises).

    Returns
    -------
    ArtifactRecord or None
        The earliest created match, or ``None``.
    """
    wanted = canonical_json(check_provenance(provenance))
    for record in list_artifacts(store, root, kind):
        if record.is_current and canonical_json(record.provenance) == wanted:
            return record
    return None
