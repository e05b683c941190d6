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
:mod:`cytearc_vfs.artifacts.records`, which also holds :func:`canonical_json`
and :func:`check_provenance`; they are re-exported here. Reading returns
:class:`~cytearc_vfs.artifacts.arrays.Artifact`: the record, plus the arrays
opened lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import IncompleteStoreError
from ..format.option_names import on_command_line
from ..format.paths import check_name, join
from ..format.store_io import document_attribute, get_json, list_dir
from ..read.opening import open_store
from ..remote.failures import names_backend_failures
from ..remote.locations import Location, describe_location, open_location
from .arrays import Artifact, ArtifactArrays
from .holders import held_by, shadows_source
from .records import (
    ARTIFACT_ID_PATTERN,
    ArtifactRecord,
    canonical_json,
    check_execution_options,
    check_provenance,
)
from .roots import artifact_roots, check_root, check_root_in_store, roots_listed
from .writers import ArrayWriter, ArtifactWriter

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ArrayWriter",
    "Artifact",
    "ArtifactArrays",
    "ArtifactRecord",
    "ArtifactWriter",
    "canonical_json",
    "check_provenance",
    "describe_artifacts",
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


def resolve_store(store: ArtifactStore, *, read_only: bool) -> tuple[Store, str, str]:
    """(backend store, key prefix, description) of ``store``."""
    if isinstance(store, zarr.Group):
        backend = store.store
        if read_only and not backend.read_only:
            backend = backend.with_read_only(True)
        return backend, store.path, join(str(store.store), store.path)
    return open_location(store, read_only=read_only), "", describe_location(store)


def _store_roots(store: ArtifactStore) -> str:
    """The artifact roots of ``store`` for a refusal of a root, or ``""`` if it cannot be read."""
    try:
        backend, _, where = resolve_store(store, read_only=True)
    except Exception:  # the refusal stands without the hint
        return ""
    return roots_listed(backend, where)


def _check_writable(backend: Store, given: ArtifactStore, where: str, root: str, kind: str) -> None:
    """Refuse a store that cannot take the artifact, before anything is written."""
    what = f"cannot publish an artifact of kind {kind!r} under {root!r} in {where}"
    if backend.read_only:
        if isinstance(given, zarr.Group):
            remedy = (
                "open the group writable: zarr.open_group(cv.open_store(location, mode='r+'), "
                f"path={given.path!r}, mode='r+')"
            )
        else:
            remedy = (
                "reopen it with cv.open_store(location, mode='r+') (open_store is read-only "
                "by default), or pass the path or URL itself"
            )
        raise PermissionError(f"{what}: the store is opened read-only; {remedy}")
    if not backend.supports_writes:
        raise PermissionError(
            f"{what}: a {type(backend).__name__} cannot write; publish into a writable "
            "location (a local path, or an object store URL with write credentials)"
        )


def _mount_hint(given: ArtifactStore, backend: Store) -> str:
    """Why a path may miss a mount's source artifacts, when ``given`` is a mount's path."""
    if isinstance(given, (Store, zarr.Group)):
        return ""
    root = sync(backend.get("zarr.json", prototype=default_buffer_prototype()))
    if root is None or document_attribute(root.to_bytes(), "matrixSource") is None:
        return ""
    return (
        f"; {describe_location(given)} is a mount, and a path opens its target alone: open it "
        "with cv.open_store(location) to read the source's artifacts through it"
    )


def _check_exists(backend: Store, key_prefix: str, where: str) -> None:
    """Refuse a location that holds no group at all: a mistyped path, not a missing artifact."""
    if not sync(backend.exists(join(key_prefix, "zarr.json"))):
        raise FileNotFoundError(
            f"{where} holds no Zarr group (no zarr.json at its root), so it has no artifacts; "
            "check the location"
        )


def _read_artifact(
    given: ArtifactStore, store: Store, key_prefix: str, path: str, where: str
) -> Artifact:
    full = join(key_prefix, path)
    location = f"{where.rstrip('/')}/{path}"
    document = get_json(store, join(full, "zarr.json"), where=location)
    if document is None:
        _check_exists(store, key_prefix, where)
        raise FileNotFoundError(
            f"no artifact group at {location!r} (no zarr.json); it was never published or was "
            f"removed; recompute it{_mount_hint(given, store)}"
        )
    record = ArtifactRecord.from_group_document(document, path=path, where=location)
    # through a mount, the holder is known from reading the document: no request
    return Artifact(record, store, full, where, held_by=held_by(store, full))


@names_backend_failures("store")
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
        Path or URL (opened writable), a zarr Store opened writable (such as
        ``cv.open_store(location, mode="r+")``), or a writable zarr Group
        whose path prefixes the artifact's.
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
        is written. A root is refused unless it has one of the forms above
        and names an assay and workspace ``store`` holds; the message names
        the roots it has. A kind named ``zarr.json`` is refused.
    PermissionError
        ``store`` is opened read-only or cannot write, before anything is
        written.

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
    try:
        normalized_root = check_root(root)
    except ValueError as exc:
        # a typo (RNA/artifact) is fixed fastest from the roots the store has
        raise ValueError(f"{exc}{_store_roots(store)}") from None
    check_name(kind, what="artifact kind")
    canonical = check_provenance(provenance)
    options = check_execution_options(execution_options)
    backend, key_prefix, where = resolve_store(store, read_only=False)
    _check_writable(backend, store, where, join(key_prefix, normalized_root), kind)
    check_root_in_store(backend, key_prefix, normalized_root, where)
    return ArtifactWriter(backend, key_prefix, where, normalized_root, kind, canonical, options)


# ---------------------------------------------------------------- reading


def check_artifact_path(path: object) -> str:
    """``path`` without surrounding slashes, if it is ``{root}/{kind}/{artifact_id}``.

    Its text alone is checked: ``..`` would let a local store read outside the
    root (or the store), and a kind group or an array is not an artifact.
    """
    listing = (
        # at a shell, the one command that takes a path lists the paths it takes
        "cytearc-vfs artifacts LOCATION --incomplete lists the unpublished groups' paths"
        if on_command_line()
        else "list_artifacts gives the paths"
    )
    form = (
        f"artifact path {path!r} must be '{{root}}/{{kind}}/{{artifact_id}}', such as "
        f"'RNA/artifacts/pca/<64 hex digits>'; {listing}"
    )
    segments = path.strip("/").split("/") if isinstance(path, str) else []
    if len(segments) < 3:
        raise ValueError(form)
    *root, kind, artifact_id = segments
    try:
        if not ARTIFACT_ID_PATTERN.match(artifact_id):
            raise ValueError(f"its last segment {artifact_id!r} is not 64 lowercase hex digits")
        check_root("/".join(root))
        check_name(kind, what="artifact kind")
    except ValueError as exc:
        raise ValueError(f"{form} ({exc})") from None
    return "/".join(segments)


@names_backend_failures("store")
def read_artifact(store: ArtifactStore, path: str) -> Artifact:
    """Read the complete artifact at ``path``: its record now, its arrays when asked.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only). A mount's path
        opens its target alone; pass ``cv.open_store(location)`` to read the
        source's artifacts through the mount.
    path
        ``{root}/{kind}/{artifact_id}``, as in :attr:`Artifact.path`.

    Returns
    -------
    Artifact
        The record's fields (``path``, ``kind``, ``provenance``...) and the
        arrays by name (``artifact["data"]``, ``artifact.load("data")``),
        each opened on first access. Only the group's ``zarr.json`` has been
        read.

    Raises
    ------
    ValueError
        ``path`` is not ``{root}/{kind}/{artifact_id}``: a root of no root
        form, a segment that is not a plain name (``..``), an id that is not
        64 lowercase hex digits. Nothing is read.
    FileNotFoundError
        No group at ``path``, or no Zarr group at all in ``store``.
    RecordShapeError
        The attribute record has a missing, unknown or mistyped field.
    IncompleteStoreError
        The artifact is not complete.
    """
    normalized = check_artifact_path(path)
    backend, key_prefix, where = resolve_store(store, read_only=True)
    return _read_artifact(store, backend, key_prefix, normalized, where)


def group_paths(backend: Store, key_prefix: str, root: str, kind: str | None) -> Iterator[str]:
    """The paths ``{root}/{kind}/{child}`` of every group under ``root`` (one kind, or
    every kind), published or not; listed, not read."""
    base = join(key_prefix, root)
    kinds = [kind] if kind is not None else list_dir(backend, base)
    for kind_name in kinds:
        if kind_name == "zarr.json":
            continue
        for child in list_dir(backend, join(base, kind_name)):
            if child != "zarr.json":
                yield join(root, kind_name, child)


def _list_in(
    given: ArtifactStore, backend: Store, key_prefix: str, where: str, root: str, kind: str | None
) -> list[Artifact]:
    if not backend.supports_listing:
        raise ValueError(
            f"{where} cannot list its keys, so its artifacts cannot be listed; read one whose "
            "path you know with read_artifact"
        )
    found: list[Artifact] = []
    for path in group_paths(backend, key_prefix, root, kind):
        try:
            found.append(_read_artifact(given, backend, key_prefix, path, where))
        except (IncompleteStoreError, FileNotFoundError) as exc:
            # Being written, failed, or being deleted: not an artifact yet.
            logger.debug("skipping artifact %s in %s: %s", path, where, exc)
        except (ValueError, OSError) as exc:
            # RecordShapeError is a ValueError; OSError covers a stray file child.
            logger.warning("skipping unreadable artifact %s in %s: %s", path, where, exc)
    if not found:
        # Only now, so a listing that finds artifacts costs no extra read.
        _check_exists(backend, key_prefix, where)
    found.sort(key=lambda art: (art.kind, art.created_at_ns, art.artifact_id))
    return found


@names_backend_failures("store")
def list_artifacts(store: ArtifactStore, root: str, kind: str | None = None) -> list[Artifact]:
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
    list of Artifact
        Sorted by kind, then creation time, then id; each arrives with its
        record read and its arrays not yet opened. Empty when ``root`` does
        not exist.

    Raises
    ------
    FileNotFoundError
        ``store`` holds no Zarr group at all (a mistyped path).
    """
    normalized_root = check_root(root)
    if kind is not None:
        check_name(kind, what="artifact kind")
    backend, key_prefix, where = resolve_store(store, read_only=True)
    return _list_in(store, backend, key_prefix, where, normalized_root, kind)


def find_artifact(
    store: ArtifactStore, root: str, kind: str, provenance: Mapping[str, Any]
) -> Artifact | None:
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
    Artifact or None
        The earliest created match, or ``None``.
    """
    # None would list every kind (list_artifacts' meaning) and return another kind's artifact
    check_name(kind, what="artifact kind")
    wanted = canonical_json(check_provenance(provenance))
    for artifact in list_artifacts(store, root, kind):
        if artifact.is_current and canonical_json(artifact.provenance) == wanted:
            return artifact
    return None


# ---------------------------------------------------------------- describing


def _describe(artifact: Artifact, root: str, store: Store) -> dict[str, Any]:
    created = datetime.fromtimestamp(artifact.created_at_ns / 1e9, tz=UTC)
    arrays: list[dict[str, Any]] | None
    error: str | None = None
    try:
        arrays = [
            {
                "name": name,
                "shape": list(array.shape),
                "dtype": str(array.dtype),
                "chunks": list(array.chunks),
            }
            for name, array in artifact.arrays.items()
        ]
    except (ValueError, OSError) as exc:
        # One damaged array must not hide the store's other artifacts.
        logger.warning("cannot read the arrays of artifact %s: %s", artifact.path, exc)
        arrays, error = None, str(exc)
    return {
        "path": artifact.path,
        "root": root,
        "kind": artifact.kind,
        "artifact_id": artifact.artifact_id,
        "created_at": created.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "created_at_ns": artifact.created_at_ns,
        "cytearc_version": artifact.cytearc_version,
        "current": artifact.is_current,
        "provenance": dict(artifact.provenance),
        "execution_options": dict(artifact.execution_options),
        "arrays": arrays,
        "error": error,
        "held_by": artifact.held_by,
        "shadows": shadows_source(store, artifact.path),
    }


@names_backend_failures("store")
def describe_artifacts(
    store: Location,
    *,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    where: str | None = None,
) -> list[dict[str, Any]]:
    """Describe every complete artifact of a store, as JSON-able dicts.

    Looks in every artifact root the store's layout has: ``artifacts``,
    ``{workspace}/artifacts`` of each workspace, and ``{assay}/artifacts`` or
    ``{workspace}/{assay}/artifacts`` of each published assay. Reads records
    and array metadata, never array chunks.

    Parameters
    ----------
    store
        A path or URL, opened as :func:`cytearc_vfs.open_store` opens it (so a
        mount shows its source's artifacts too), or an open Store, read as
        it is.
    storage_options, source_storage_options
        Passed to :func:`cytearc_vfs.open_store` for a path or URL.
    where
        How messages name the store (the location an open Store came from);
        its description by default.

    Returns
    -------
    list of dict
        One per artifact, sorted by root, then as :func:`list_artifacts`
        sorts: ``path``, ``root``, ``kind``, ``artifact_id``, ``created_at``
        (ISO 8601, UTC), ``created_at_ns``, ``cytearc_version``, ``current``
        (reuse may consider it), ``provenance``, ``execution_options``,
        ``arrays`` (each ``name``, ``shape``, ``dtype``, ``chunks``; ``None``
        when they cannot be read), ``error`` (why not, else ``None``),
        ``held_by`` (through a mount, ``"target"`` or ``"source"``: the store
        that serves it, found by the mount's resolution now, since no record
        says it; ``None`` for any other store) and ``shadows`` (``True`` for
        a target artifact whose path the source holds too: the target's copy
        is read; costs one ``exists`` of the source per target artifact).

    Examples
    --------
    >>> describe_artifacts("data.zarr")[0]["arrays"]  # doctest: +SKIP
    [{'name': 'data', 'shape': [60, 2], 'dtype': 'float64', 'chunks': [60, 2]}]
    """
    if isinstance(store, Store):
        backend = open_location(store, read_only=True)
    else:
        backend = open_store(
            store,
            storage_options=storage_options,
            source_storage_options=source_storage_options,
        )
    where = where if where is not None else describe_location(store)
    described: list[dict[str, Any]] = []
    for root in artifact_roots(backend, where):
        for artifact in _list_in(backend, backend, "", where, root, None):
            described.append(_describe(artifact, root, backend))
    return described
