"""What a location holds, in words a person can act on.

Every command of the command line first asks what it was given: a CyteArc
store of the kind it needs, or something else (a missing path, an h5ad file,
a plain directory, an AnnData Zarr store, a Zarr group with no assay). The
answer names what was found so the refusal can say what to run instead.
Classification reads only root metadata and one listing; it verifies
nothing (``open_store`` does that).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import RecordShapeError
from ..format.records import PENDING_STORE_ATTR
from ..remote.locations import Location, given_location, local_path, open_location

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["KIND_WORDS", "StoreKind", "classify_location"]

Kind = Literal[
    "missing",
    "h5ad",
    "file",
    "empty",
    "directory",
    "zarr-array",
    "anndata",
    "zarr-group",
    "ordinary",
    "composite",
    "mount",
]

#: How each kind is named in messages ("... is {words}").
KIND_WORDS: dict[str, str] = {
    "missing": "a path that does not exist",
    "h5ad": "an h5ad file (AnnData in HDF5), not a CyteArc store",
    "file": "a file, not a Zarr store",
    "empty": "an empty directory, not a CyteArc store",
    "directory": "a directory without Zarr metadata (no zarr.json), not a CyteArc store",
    "zarr-array": "a Zarr array, not a CyteArc store",
    "anndata": "an AnnData Zarr store, not a CyteArc store",
    "zarr-group": "a Zarr group with no CyteArc assay",
    "ordinary": "an ordinary CyteArc store",
    "composite": "a CyteArc composite",
    "mount": "a CyteArc mounted target",
}

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class StoreKind:
    """What a location was found to hold."""

    kind: Kind
    """One of the names of :data:`KIND_WORDS`."""
    where: str
    """The location as printed in messages."""
    zarr_format: int | None = None
    """2 or 3 for Zarr nodes; ``None`` otherwise."""

    @property
    def words(self) -> str:
        """``"{where} is {what was found}"``, for messages."""
        if self.kind == "missing":
            return f"{self.where} does not exist"
        words = KIND_WORDS[self.kind]
        if self.kind in ("anndata", "zarr-group") and self.zarr_format is not None:
            words = words.replace("Zarr", f"Zarr v{self.zarr_format}", 1)
        return f"{self.where} is {words}"

    @property
    def is_cytearc(self) -> bool:
        """Whether the location is a CyteArc store of any kind."""
        return self.kind in ("ordinary", "composite", "mount")


def _document(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _classify_local_file(location: Location) -> StoreKind | None:
    path = local_path(location)
    if path is None:
        return None
    where = given_location(location)
    if not path.exists():
        return StoreKind("missing", where)
    if path.is_file():
        with path.open("rb") as handle:
            magic = handle.read(len(_HDF5_MAGIC))
        is_h5ad = path.suffix.lower() == ".h5ad" or magic == _HDF5_MAGIC
        return StoreKind("h5ad" if is_h5ad else "file", where)
    if not any(path.iterdir()):
        return StoreKind("empty", where)
    return None


def classify_location(
    location: Location,
    *,
    storage_options: Mapping[str, Any] | None = None,
    through: Callable[[Store], Store] | None = None,
) -> StoreKind:
    """Classify ``location`` without verifying it.

    Local paths are checked on disk first (missing, file, empty directory);
    everything else is read through its backend: the root document, and for
    a CyteArc-looking group one listing of its children.

    Parameters
    ----------
    location
        A path, URL or zarr Store.
    storage_options
        Backend options for a URL.
    through
        Called with the store ``location`` opens to; classification reads
        through the store it returns (a command's view that remembers what
        was read, so that the command reads none of it again).
    """
    found = _classify_local_file(location)
    if found is not None:
        return found
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from ..format.source_store import list_root_once, read_contents
    from ..format.store_contents import DAMAGED_DOCUMENT_REMEDY, json_object

    where = given_location(location)
    store = open_location(location, read_only=True, storage_options=storage_options)
    if through is not None:
        store = through(store)

    def raw(key: str) -> bytes | None:
        buffer = sync(store.get(key, prototype=default_buffer_prototype()))
        return None if buffer is None else buffer.to_bytes()

    held = raw("zarr.json")
    root = _document(held)
    if held is not None and root is None:
        # there, but not a JSON object: damaged, not "a directory without Zarr metadata"
        json_object(store, "zarr.json", where=where)
        raise RecordShapeError(
            f"{where}: 'zarr.json' is not a JSON object; {DAMAGED_DOCUMENT_REMEDY}"
        )
    if root is None:
        v2_group = _document(raw(".zgroup"))
        if v2_group is None:
            kind: Kind = "zarr-array" if _document(raw(".zarray")) is not None else "directory"
            # a missing bucket is said so, not "a directory"; a path under which an
            # object store holds nothing does not exist
            if kind == "directory" and list_root_once(store) is False:
                return StoreKind("missing", where)
            return StoreKind(kind, where, 2 if kind == "zarr-array" else None)
        attrs = _document(raw(".zattrs")) or {}
        if attrs.get("encoding-type") == "anndata":
            return StoreKind("anndata", where, 2)
        contents = read_contents(store, where=where)
        if contents.assays:
            return StoreKind("ordinary", where, 2)
        return StoreKind("anndata" if _legacy_anndata(raw, 2) else "zarr-group", where, 2)
    if root.get("node_type") == "array":
        return StoreKind("zarr-array", where, 3)
    attrs = root.get("attributes") or {}
    if not isinstance(attrs, dict):
        attrs = {}
    if attrs.get("encoding-type") == "anndata":
        return StoreKind("anndata", where, 3)
    if "composite" in attrs:
        return StoreKind("composite", where, 3)
    if "matrixSource" in attrs:
        return StoreKind("mount", where, 3)
    if PENDING_STORE_ATTR in attrs:
        # an unfinished store of any writer: opening it names the writer and
        # the remedy, and --overwrite may replace it
        return StoreKind("ordinary", where, 3)
    contents = read_contents(store, where=where)
    if contents.assays or contents.pending:
        return StoreKind("ordinary", where, 3)
    return StoreKind("anndata" if _legacy_anndata(raw, 3) else "zarr-group", where, 3)


def _legacy_anndata(raw: Callable[[str], bytes | None], zarr_format: int) -> bool:
    """Whether a group without attributes is laid out as an AnnData: anndata 0.7
    wrote no encoding attributes (seed 001: such files "are classified
    structurally"), but always ``obs`` and ``var`` beside ``X``: groups, or
    before 0.7 record arrays (the commands that take an AnnData store then
    say what they read of it)."""

    def node(path: str) -> str | None:
        if zarr_format == 2:
            if _document(raw(f"{path}/.zgroup")) is not None:
                return "group"
            return "array" if _document(raw(f"{path}/.zarray")) is not None else None
        document = _document(raw(f"{path}/zarr.json"))
        kind = None if document is None else document.get("node_type")
        return kind if kind in ("group", "array") else None

    frames = {node("obs"), node("var")}
    return (frames == {"group"} or frames == {"array"}) and node("X") is not None
