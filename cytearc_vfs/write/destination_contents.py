"""What a destination already holds, read before a writer replaces it.

The keys an interrupted ``LocalStore`` write leaves (:func:`intended_key`), and
a local folder that is not a store at all (:func:`refuse_foreign_folder`), and
one inside another store (:func:`refuse_below_zarr_node`, and
:func:`refuse_below_remote_zarr_node` for a URL).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zarr.core.sync import sync

from ..format.option_names import switched_on
from ..remote.locations import open_location
from ..remote.password_masking import passwords_masked

__all__ = [
    "intended_key",
    "no_root_group",
    "refuse_below_remote_zarr_node",
    "refuse_below_zarr_node",
    "refuse_foreign_folder",
]

#: What zarr's LocalStore leaves of a write that a crash interrupted: it writes
#: ``name.{uuid4 hex}.partial`` and renames it (``zarr.json`` -> ``zarr.{hex}.partial``).
_PARTIAL_WRITE = re.compile(r"^(?P<stem>.+)\.[0-9a-f]{32}\.partial$")


def intended_key(key: str) -> str:
    """The key an interrupted LocalStore write was writing, or ``key`` itself."""
    head, _, name = key.rpartition("/")
    match = _PARTIAL_WRITE.match(name)
    if match is None:
        return key
    stem = "zarr.json" if match["stem"] == "zarr" else match["stem"]
    return f"{head}/{stem}" if head else stem


def refuse_foreign_folder(path: Path, where: str) -> None:
    """Refuse a folder with files of its own but no root document, from its first level.

    The same refusal the destination check makes from a listing of every key,
    made without it: ``write IN .`` (or ``~``) listed every file below the
    working directory first, minutes for a home directory. A folder holding only
    folders is left to the listing (empty folders hold no keys).
    """
    with os.scandir(path) as entries:
        files = sorted(entry.name for entry in entries if entry.is_file())
    if not files or "zarr.json" in files:
        return
    if all(intended_key(name) == "zarr.json" for name in files):
        return  # a writer died writing its first document: the listing decides
    raise FileExistsError(no_root_group(where, files[0]))


def no_root_group(where: str, first: str) -> str:
    """The refusal of a destination holding keys (``first`` among them) but no root group."""
    return (
        f"destination {where} holds keys but no root group (first: {first!r}); it is not a "
        f"CyteArc store, so no writer replaces it ({switched_on('overwrite')} neither). "
        "Choose another destination, or empty it yourself"
    )


#: The documents that make a folder or prefix a Zarr node: v2 group, v2 array, v3.
_NODE_DOCUMENTS = (".zgroup", ".zarray", "zarr.json")
#: URL schemes whose destinations have no prefixes above them to check.
_NO_PREFIXES = frozenset({"", "file", "memory", "http", "https"})


def refuse_below_zarr_node(path: Path) -> None:
    """Refuse a local destination below a Zarr node: it would nest a store inside another."""
    # Both where the data lands (links followed: a link into a store nests one in
    # it) and as written with ``..`` taken (a link inside a store shows up in it).
    given = Path(os.path.abspath(path))
    landing = path.resolve()
    for candidate in dict.fromkeys((given, landing)):
        for parent in candidate.parents:
            for marker in _NODE_DOCUMENTS:
                if (parent / marker).is_file():
                    resolved = f" (which resolves to {str(landing)!r})" if landing != given else ""
                    # named as the destination was: relative to here when it was given so
                    node = (
                        os.path.relpath(parent)
                        if candidate is given and not path.is_absolute()
                        else str(parent)
                    )
                    raise ValueError(
                        f"destination {str(path)!r}{resolved} is below the Zarr node "
                        f"{node!r} (it holds {marker}); writing there would nest a store "
                        "inside another. Choose a destination outside any Zarr store"
                    )


def refuse_below_remote_zarr_node(
    location: str, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Refuse a URL destination below a Zarr node, as a local one is refused.

    ``s3://bkt/data.zarr/sub.zarr`` would nest a store inside ``data.zarr``,
    whose next replacement then refuses the unknown member. One concurrent
    round of existence checks, three per prefix above the destination (the
    bucket's root included). A check the store cannot answer (credentials
    that reach only the destination's prefix answer ``403`` above it) finds
    no node: the check never stops a write it cannot judge.
    """
    parts = urlsplit(location)
    segments = [segment for segment in parts.path.split("/") if segment]
    if parts.scheme in _NO_PREFIXES or not segments:
        return
    prefixes = ["/".join(segments[:depth]) for depth in range(len(segments))]
    keys = [
        f"{prefix}/{name}" if prefix else name for prefix in prefixes for name in _NODE_DOCUMENTS
    ]

    async def held() -> list[bool | BaseException]:
        store = open_location(
            f"{parts.scheme}://{parts.netloc}", read_only=True, storage_options=storage_options
        )
        return await asyncio.gather(*(store.exists(key) for key in keys), return_exceptions=True)

    try:
        found = sync(held())
    except Exception:  # the bucket's root cannot be opened with these options: not judged
        return
    for key, answer in zip(keys, found, strict=True):
        if answer is True:
            node = f"{parts.scheme}://{parts.netloc}/{key.rpartition('/')[0]}".rstrip("/")
            raise ValueError(
                f"destination {passwords_masked(location)} is below the Zarr node "
                f"{passwords_masked(node)} (it holds "
                f"{key.rpartition('/')[2]}); writing there would nest a store inside another. "
                "Choose a destination outside any Zarr store"
            )
