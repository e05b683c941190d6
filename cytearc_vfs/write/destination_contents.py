"""What a destination already holds, read before a writer replaces it.

The keys an interrupted ``LocalStore`` write leaves (:func:`intended_key`), and
a local folder that is not a store at all (:func:`refuse_foreign_folder`), and
one inside another store (:func:`refuse_below_zarr_node`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..format.option_names import switched_on

__all__ = [
    "intended_key",
    "no_root_group",
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


def refuse_below_zarr_node(path: Path) -> None:
    """Refuse a local destination below a Zarr node: it would nest a store inside another."""
    # Both where the data lands (links followed: a link into a store nests one in
    # it) and as written with ``..`` taken (a link inside a store shows up in it).
    given = Path(os.path.abspath(path))
    landing = path.resolve()
    for candidate in dict.fromkeys((given, landing)):
        for parent in candidate.parents:
            for marker in (".zgroup", ".zarray", "zarr.json"):
                if (parent / marker).is_file():
                    resolved = f" (which resolves to {str(landing)!r})" if landing != given else ""
                    raise ValueError(
                        f"destination {str(path)!r}{resolved} is below the Zarr node "
                        f"{str(parent)!r} (it holds {marker}); writing there would nest a store "
                        "inside another. Choose a destination outside any Zarr store"
                    )
