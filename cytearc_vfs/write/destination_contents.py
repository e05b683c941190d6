"""What a destination already holds, read before a writer replaces it.

The keys an interrupted ``LocalStore`` write leaves (:func:`intended_key`), and
a local folder that is not a store at all (:func:`refuse_foreign_folder`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..format.option_names import switched_on

__all__ = ["intended_key", "no_root_group", "refuse_foreign_folder"]

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
