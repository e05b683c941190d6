"""Where an assay's groups and arrays live in a CyteArc store.

Two layouts exist. In the root layout everything of an assay sits under
``{assay}/``. In the workspace layout the cell table and assay group live
under ``{workspace}/`` while the counts sit under the store-wide
``matrices/{assay}/``, so a name is one matrix in every workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .store_keys import METADATA_DOCUMENTS

__all__ = ["AssayPaths", "check_name", "join"]

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
#: Longest name: a name is one directory of a local store, and common file
#: systems refuse longer ones (ENAMETOOLONG) only once a writer has begun.
MAX_NAME_LENGTH = 255
RESERVED_TOP_LEVEL = frozenset(
    {"cellData", "matrices", "artifacts", "pipeline", "agent_results", "_composite"}
)


def check_name(value: str, *, what: str) -> str:
    """Return ``value`` if it is a safe single path segment (assay or workspace name).

    Zarr's own metadata keys (``zarr.json``; the v2 ``.zarray`` and the like
    already fail the pattern) are refused in any letter case: a node of that
    name would replace its parent's metadata document, on a case-insensitive
    file system too. A name longer than :data:`MAX_NAME_LENGTH` is refused
    before anything is written, rather than by the file system mid-write.

    >>> check_name("Zarr.JSON", what="artifact kind")
    Traceback (most recent call last):
    ...
    ValueError: artifact kind 'Zarr.JSON' is reserved: Zarr keeps a group's metadata under that key, so a node of that name would replace it; choose another name
    """
    if not isinstance(value, str) or not _NAME.match(value) or value in {".", ".."}:
        raise ValueError(
            f"{what} {value!r} is not a valid name; use letters, digits, '_', '-' and '.', "
            "not starting with '.' or '-'"
        )
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(
            f"{what} {value[:40]!r}... is {len(value)} characters long; a name holds at most "
            f"{MAX_NAME_LENGTH}, the longest file name of common file systems, so that the store "
            "can live in a folder; choose a shorter name"
        )
    if value.lower() in METADATA_DOCUMENTS:
        raise ValueError(
            f"{what} {value!r} is reserved: Zarr keeps a group's metadata under that key, so a "
            "node of that name would replace it; choose another name"
        )
    return value


def join(*parts: str) -> str:
    """Join key segments, skipping empty ones.

    >>> join("", "RNA", "counts")
    'RNA/counts'
    """
    # each part stripped once: an open of many sources joins a few hundred keys a source
    return "/".join([kept for kept in [part.strip("/") for part in parts if part] if kept])


@dataclass(frozen=True, slots=True)
class AssayPaths:
    """Every key prefix of one assay, for the root or a workspace layout."""

    assay: str
    """Assay name."""
    workspace: str | None = None
    """Workspace name, or ``None`` for the root layout."""

    def __post_init__(self) -> None:
        check_name(self.assay, what="assay")
        if self.assay in RESERVED_TOP_LEVEL:
            raise ValueError(f"assay name {self.assay!r} is reserved by the store layout")
        if self.workspace is not None:
            check_name(self.workspace, what="workspace")
            if self.workspace in RESERVED_TOP_LEVEL:
                raise ValueError(f"workspace name {self.workspace!r} is reserved")

    @property
    def root(self) -> str:
        """The group holding ``assayTypes``, ``defaultAssay`` and ``cellData``."""
        return self.workspace or ""

    @property
    def cell_data(self) -> str:
        """Cell table group."""
        return join(self.root, "cellData")

    @property
    def assay_group(self) -> str:
        """The group with ``is_assay``, holding ``featureData``."""
        return join(self.root, self.assay)

    @property
    def feature_data(self) -> str:
        """Feature table group."""
        return join(self.assay_group, "featureData")

    @property
    def matrix_group(self) -> str:
        """The group holding counts, countsT and countSummaries."""
        return join("matrices", self.assay) if self.workspace else self.assay

    @property
    def counts(self) -> str:
        """Cell-major counts array."""
        return join(self.matrix_group, "counts")

    @property
    def counts_t(self) -> str:
        """Feature-major countsT array."""
        return join(self.matrix_group, "countsT")

    @property
    def summaries(self) -> str:
        """countSummaries group."""
        return join(self.matrix_group, "countSummaries")
