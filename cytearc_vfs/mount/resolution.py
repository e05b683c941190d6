"""Key arithmetic of a mount: which store a key belongs to (spec, "Mounted targets").

Pure functions over key strings. The artifact roots of a mount are
``[workspace/]artifacts`` and ``[workspace/]{assay}/artifacts`` of each
mounted assay. Below a root, ``{root}/{kind}/{id}/...`` is inside an artifact
group; ``{root}/zarr.json`` and ``{root}/{kind}/zarr.json`` are directory
documents. Every other key belongs to the target alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..format.paths import AssayPaths, join
from ..format.store_io import document_attribute

__all__ = [
    "KeyPlace",
    "artifact_roots",
    "pinned_places",
    "pinned_refusal",
    "listing_is_union",
    "place_of",
]


def artifact_roots(workspace: str | None, assays: Iterable[str]) -> tuple[str, ...]:
    """The artifact roots of a mount.

    >>> artifact_roots(None, ["RNA"])
    ('artifacts', 'RNA/artifacts')
    >>> artifact_roots("ws", ["ADT", "RNA"])
    ('ws/artifacts', 'ws/ADT/artifacts', 'ws/RNA/artifacts')
    """
    base = workspace or ""
    return (join(base, "artifacts"), *(join(base, assay, "artifacts") for assay in sorted(assays)))


@dataclass(frozen=True, slots=True)
class KeyPlace:
    """Where a key sits relative to the artifact roots."""

    kind: Literal["target", "root_doc", "kind_doc", "group"]
    """``target``: outside the roots; ``root_doc``/``kind_doc``: a directory
    document of a root or kind; ``group``: inside an artifact group."""
    group: str | None = None
    """``{root}/{kind}/{id}`` for keys inside a group."""


def place_of(key: str, roots: tuple[str, ...]) -> KeyPlace:
    """Classify ``key`` against ``roots``.

    >>> roots = ("artifacts", "RNA/artifacts")
    >>> place_of("cellData/ids/zarr.json", roots).kind
    'target'
    >>> place_of("RNA/artifacts/zarr.json", roots).kind
    'root_doc'
    >>> place_of("RNA/artifacts/pca/zarr.json", roots).kind
    'kind_doc'
    >>> place_of("RNA/artifacts/pca/ab12/data/c/0", roots)
    KeyPlace(kind='group', group='RNA/artifacts/pca/ab12')
    """
    for root in roots:
        if not key.startswith(root + "/"):
            continue
        rest = key[len(root) + 1 :].split("/")
        if rest == ["zarr.json"]:
            return KeyPlace("root_doc")
        if len(rest) == 2 and rest[1] == "zarr.json":
            return KeyPlace("kind_doc")
        if len(rest) >= 2:
            return KeyPlace("group", join(root, rest[0], rest[1]))
        return KeyPlace("target")
    return KeyPlace("target")


def listing_is_union(prefix: str, roots: tuple[str, ...]) -> bool:
    """Whether ``list_dir(prefix)`` unions both stores: an artifact root or a kind directory.

    >>> listing_is_union("RNA/artifacts", ("RNA/artifacts",))
    True
    >>> listing_is_union("RNA/artifacts/pca", ("RNA/artifacts",))
    True
    >>> listing_is_union("RNA/artifacts/pca/ab12", ("RNA/artifacts",))
    False
    """
    directory = prefix.strip("/")
    for root in roots:
        if directory == root:
            return True
        if directory.startswith(root + "/") and "/" not in directory[len(root) + 1 :]:
            return True
    return False


def pinned_places(assays: Iterable[AssayPaths]) -> dict[str, str]:
    """What no write through a mount may change, by place: ``counts`` where the
    source's counts are read (every open refuses a target node there), ``ids``
    for the target's cell and feature ids (the record pins them), ``assay`` for
    a mounted assay's group document (it must keep ``is_assay``).

    >>> pinned_places([AssayPaths("RNA")])  # doctest: +NORMALIZE_WHITESPACE
    {'RNA/counts': 'counts', 'RNA/countsT': 'counts', 'RNA/countSummaries': 'counts',
     'RNA/featureData/ids': 'ids', 'cellData/ids': 'ids', 'RNA/zarr.json': 'assay'}
    >>> pinned_places([AssayPaths("RNA", "ws")])["matrices/RNA"]
    'counts'
    """
    places: dict[str, str] = {}
    for paths in assays:
        if paths.matrix_group != paths.assay_group:
            places[paths.matrix_group] = "counts"  # workspace layout: the whole group
        else:
            places.update(dict.fromkeys((paths.counts, paths.counts_t, paths.summaries), "counts"))
        places[join(paths.feature_data, "ids")] = "ids"
        places[join(paths.cell_data, "ids")] = "ids"
        places[join(paths.assay_group, "zarr.json")] = "assay"
    return places


def pinned_refusal(
    key: str, action: str, places: dict[str, str], location: str, document: bytes = b""
) -> str | None:
    """Why ``action`` of ``key`` (writing ``document``) is refused, or ``None``.

    >>> pinned_refusal("RNA/countsX/zarr.json", "write", {"RNA/counts": "counts"}, "/s") is None
    True
    >>> places = {"RNA/zarr.json": "assay"}
    >>> pinned_refusal("RNA/zarr.json", "write", places, "/s", b'{"attributes": {"is_assay": true}}')
    """
    place = next((p for p in places if key == p or key.startswith(p + "/")), None)
    if place is None:
        return None
    if places[place] == "assay":
        if action == "create" or document_attribute(document, "is_assay") is True:
            return None
        return (
            f"cannot {action} {key!r} without is_assay: true: it is the group of an assay "
            f"mounted from {location}, and every open would refuse the target without it"
        )
    if places[place] == "ids":
        return (
            f"cannot {action} {key!r}: the ids at {place!r} are pinned by the mount record's "
            f"dataset fingerprint (the source {location}); changed, every open would refuse "
            "the target. Keep them as they are; mount the source again into a new destination "
            "for other ids"
        )
    return (
        f"cannot {action} {key!r}: the counts at {place!r} are the mounted source's "
        f"({location}); plain zarr would read a target node there instead, so every open "
        "refuses one. Write derived values elsewhere or as an artifact"
    )
