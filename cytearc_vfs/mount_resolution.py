"""Key arithmetic of a mount: which store a key belongs to (spec, "Mounted targets").

Pure functions over key strings. The artifact roots of a mount are
``[workspace/]artifacts`` and ``[workspace/]{assay}/artifacts`` of each
mounted assay. Below a root, ``{root}/{kind}/{id}/...`` is inside an artifact
group; ``{root}/zarr.json`` and ``{root}/{kind}/zarr.json`` are directory
documents. Every other key belongs to the target alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from .paths import join

__all__ = ["KeyPlace", "artifact_roots", "check_key", "place_of"]

_SEGMENT = re.compile(r"^[^/\\\x00]+$")


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative store key, else raise ``ValueError``.

    Refused: absolute keys, empty segments, ``.`` and ``..`` (also
    percent-encoded, in any case), backslashes and NUL bytes, so no key
    can reach a file outside either store.

    >>> check_key("RNA/artifacts/pca/x/zarr.json")
    'RNA/artifacts/pca/x/zarr.json'
    >>> check_key("RNA/../../etc")
    Traceback (most recent call last):
    ...
    ValueError: key 'RNA/../../etc' has the segment '..'; keys are relative paths without '.', '..', empty segments or backslashes
    """
    if key == "":
        return key
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise ValueError(
            f"key {key!r} is absolute or holds a backslash or NUL; keys are relative paths"
        )
    for segment in key.split("/"):
        decoded = unquote(unquote(segment))
        if not segment or decoded in (".", "..") or not _SEGMENT.match(decoded):
            raise ValueError(
                f"key {key!r} has the segment {segment!r}; keys are relative paths without '.', "
                "'..', empty segments or backslashes"
            )
    return key


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
