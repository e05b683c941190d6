"""Artifact groups left unpublished, found and removed on the operator's word.

A producer that dies before its publishing write (killed, out of memory, power
lost), or whose store could not delete after a failure, leaves its group with
``complete=False``. Readers never list it, and nothing reuses its path (the id
is random), so it only holds space. Nothing here removes one by itself: a
group that is still being written looks the same, and the spec never infers
abandonment from elapsed time. :func:`list_incomplete_artifacts` shows each
with its creation time; :func:`remove_incomplete_artifact` removes the one an
operator names, once they know its producer has stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from zarr.abc.store import Store
from zarr.core.sync import sync

from ..errors import IncompleteStoreError, RecordShapeError
from ..format.option_names import callers_form
from ..format.paths import check_name, join
from ..format.store_io import get_json, list_dir
from ..remote.failures import names_backend_failures
from .catalog import ArtifactStore, check_artifact_path, group_paths, resolve_store
from .records import ArtifactRecord
from .roots import artifact_roots, check_root

__all__ = ["IncompleteArtifact", "list_incomplete_artifacts", "remove_incomplete_artifact"]


@dataclass(frozen=True)
class IncompleteArtifact:
    """An artifact group whose record says ``complete=False``."""

    path: str
    """``{root}/{kind}/{artifact_id}``, as :func:`remove_incomplete_artifact` takes it."""
    kind: str
    """The artifact kind."""
    created_at_ns: int
    """When its producer created the group, in ns since the epoch."""
    cytearc_version: str
    """The producer's package version."""

    @property
    def created_at(self) -> str:
        """The creation time in ISO 8601, UTC, to the second."""
        created = datetime.fromtimestamp(self.created_at_ns / 1e9, tz=UTC)
        return created.isoformat(timespec="seconds").replace("+00:00", "Z")


def _incomplete_record(
    store: Store, key_prefix: str, path: str, where: str
) -> IncompleteArtifact | str:
    """The group at ``path`` if its record is well formed and incomplete, else why it
    is not one (no group, a published artifact, a record this package did not write),
    in words for a refusal."""
    location = f"{where.rstrip('/')}/{path}"
    document = get_json(store, join(key_prefix, path, "zarr.json"), where=location)
    if document is None:
        return "no artifact group is there"
    try:
        ArtifactRecord.from_group_document(document, path=path, where=location)
    except IncompleteStoreError:
        assert isinstance(document, dict)  # well formed: from_attributes checked it
        attributes = document["attributes"]
        return IncompleteArtifact(
            path, attributes["kind"], attributes["created_at_ns"], attributes["cytearc_version"]
        )
    except RecordShapeError as exc:
        return f"its record was not written by publish_artifact ({exc})"
    return "it is a published artifact (complete=True), which is never removed here"


@names_backend_failures("store")
def list_incomplete_artifacts(
    store: ArtifactStore, root: str | None = None, kind: str | None = None
) -> list[IncompleteArtifact]:
    """The artifact groups of ``store`` that were never published (``complete=False``).

    Each is a producer's group that is still being written, or that its
    producer left when it died before publishing. Only an operator can tell
    which: nothing is removed here.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only). A mount's path
        opens its target alone, whose groups are the mount's own.
    root
        One artifact root; every root of the store's layout by default.
    kind
        Only this kind; every kind by default.

    Returns
    -------
    list of IncompleteArtifact
        Sorted by creation time, oldest first.
    """
    roots = None if root is None else [check_root(root)]
    if kind is not None:
        check_name(kind, what="artifact kind")
    backend, key_prefix, where = resolve_store(store, read_only=True)
    if roots is None:
        roots = artifact_roots(backend, where) if key_prefix == "" else ["artifacts"]
    found: list[IncompleteArtifact] = []
    for each_root in roots:
        for path in group_paths(backend, key_prefix, each_root, kind):
            record = _incomplete_record(backend, key_prefix, path, where)
            if isinstance(record, IncompleteArtifact):
                found.append(record)
    found.sort(key=lambda record: (record.created_at_ns, record.path))
    return found


@names_backend_failures("store")
def remove_incomplete_artifact(store: ArtifactStore, path: str) -> IncompleteArtifact:
    """Remove the unpublished artifact group at ``path``, once its producer has stopped.

    Call it only when you know the group's producer is no longer running (its
    process ended): a producer still writing would find its group gone, and
    one about to publish would publish into nothing. Its arrays go first and
    its record last, so a removal that is interrupted can be run again.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group, writable.
    path
        ``{root}/{kind}/{artifact_id}``, as :func:`list_incomplete_artifacts`
        gives it.

    Returns
    -------
    IncompleteArtifact
        What was removed.

    Raises
    ------
    ValueError
        ``path`` is not an artifact path, or no unpublished group is there (a
        published artifact is never removed here; nor is a group whose record
        this package did not write). Nothing is removed.
    PermissionError
        The store is read-only. Nothing is removed.
    """
    normalized = check_artifact_path(path)
    backend, key_prefix, where = resolve_store(store, read_only=False)
    record = _incomplete_record(backend, key_prefix, normalized, where)
    if not isinstance(record, IncompleteArtifact):
        raise ValueError(
            f"{where}: no unpublished artifact at {normalized!r}: {record}; nothing "
            "removed. "
            + callers_form(
                "list_incomplete_artifacts", "cytearc-vfs artifacts LOCATION --incomplete"
            )
            + " gives the paths this removes"
        )
    if backend.read_only or not backend.supports_deletes:
        raise PermissionError(
            f"{where} cannot delete keys (opened read-only, or a store without deletes), so "
            f"the unpublished artifact {normalized!r} stays; pass the path or URL itself, or "
            "cv.open_store(location, mode='r+')"
        )
    group = join(key_prefix, normalized)
    for child in list_dir(backend, group):
        if child != "zarr.json":
            sync(backend.delete_dir(join(group, child)))
            sync(backend.delete(join(group, child)))  # a stray file, not a directory
    sync(backend.delete(join(group, "zarr.json")))
    sync(backend.delete_dir(group))  # what is left of the directory itself
    return record
