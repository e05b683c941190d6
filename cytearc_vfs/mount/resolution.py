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

__all__ = [
    "KeyPlace",
    "artifact_roots",
    "count_places",
    "counts_place",
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


def count_places(assays: Iterable[AssayPaths]) -> tuple[str, ...]:
    """Where a mount reads its source's counts: no target node may stand there.

    >>> count_places([AssayPaths("RNA")])
    ('RNA/counts', 'RNA/countsT', 'RNA/countSummaries')
    >>> count_places([AssayPaths("RNA", "ws")])
    ('matrices/RNA',)
    """
    places: list[str] = []
    for paths in assays:
        if paths.matrix_group != paths.assay_group:
            places.append(paths.matrix_group)  # workspace layout: the whole group
        else:
            places.extend((paths.counts, paths.counts_t, paths.summaries))
    return tuple(places)


def counts_place(key: str, places: tuple[str, ...]) -> str | None:
    """The place of ``places`` that holds ``key``, if any.

    >>> counts_place("RNA/countSummaries/rowSums/zarr.json", count_places([AssayPaths("RNA")]))
    'RNA/countSummaries'
    >>> counts_place("RNA/countsX/zarr.json", ("RNA/counts",)) is None
    True
    """
    return next((p for p in places if key == p or key.startswith(p + "/")), None)
