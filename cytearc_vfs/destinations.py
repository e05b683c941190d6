"""Writer destinations: what a writer may create or replace (spec, "Writer destinations").

A destination without keys is created with mode ``"w-"``. With
``overwrite=True`` a destination that holds keys is replaced (mode ``"w"``)
only when it is a store this layer could have written and nobody depends on:
a root group with no prepared assay and no ``matrixSource``, whose top-level
members are all groups CyteArc writes and whose keys are all Zarr metadata or
array chunks. Everything else is refused with ``FileExistsError`` before a
byte changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from .errors import RecordShapeError
from .locations import Location, describe_location, local_path, open_location
from .records import PENDING_ASSAY_ATTR
from .store_io import get_json

__all__ = ["check_destination", "create_destination", "destination_is_prepared"]

WRITER_GROUPS = frozenset({"cellData", "matrices", "artifacts", "pipeline", "agent_results"})
_METADATA_NAMES = frozenset({"zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"})
_V2_CHUNK = re.compile(r"^\d+(?:[./]\d+)*$")


def _read_json(store: Store, key: str) -> dict[str, object] | None:
    # A document that is not JSON is not ours, so it must not be replaced:
    # read it as "no document", which the member checks then refuse.
    try:
        value = get_json(store, key)
    except RecordShapeError:
        return None
    return value if isinstance(value, dict) else None


def _list(store: Store) -> list[str]:
    async def collect() -> list[str]:
        return [key async for key in store.list()]

    return sync(collect())


def _refuse_below_zarr_node(path: Path) -> None:
    for parent in path.absolute().parents:
        for marker in (".zgroup", ".zarray", "zarr.json"):
            if (parent / marker).is_file():
                raise ValueError(
                    f"destination {str(path)!r} is below the Zarr node {str(parent)!r} "
                    f"(it holds {marker}); writing there would nest a store inside another. "
                    "Choose a destination outside any Zarr store"
                )


def destination_is_prepared(
    attrs: dict[str, object], cell_columns: Iterable[str], assay: str
) -> bool:
    """Whether ``assay`` has been prepared by a DataStore (its QC columns exist)."""
    return f"{assay}_nCounts" in set(cell_columns)


def _nodes(store: Store, keys: list[str]) -> dict[str, dict[str, object]]:
    nodes: dict[str, dict[str, object]] = {}
    for key in keys:
        name = key.rsplit("/", 1)[-1]
        if name in ("zarr.json", ".zgroup", ".zarray"):
            document = _read_json(store, key) or {}
            node = key[: -len(name)].rstrip("/")
            kind = document.get("node_type") or ("array" if name == ".zarray" else "group")
            nodes[node] = {"kind": kind, "attrs": document.get("attributes", {}), "doc": document}
    return nodes


def _check_keys(where: str, keys: list[str], nodes: dict[str, dict[str, object]]) -> None:
    arrays = sorted((path for path, node in nodes.items() if node["kind"] == "array"), key=len)
    for key in keys:
        name = key.rsplit("/", 1)[-1]
        if name in _METADATA_NAMES:
            continue
        owner = next((a for a in arrays if key.startswith(a + "/")), None)
        rest = key[len(owner) + 1 :] if owner is not None else None
        if rest is not None and (rest.startswith("c/") or rest == "c" or _V2_CHUNK.match(rest)):
            continue
        raise FileExistsError(
            f"destination {where} holds {key!r}, which is neither Zarr metadata nor an array "
            "chunk, so this layer did not write it; overwrite replaces only what CyteArc "
            "writes. Move or delete that key yourself, or choose another destination"
        )


def check_destination(
    location: Location, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> Literal["w", "w-"]:
    """Check ``location`` may be written; returns the mode to create it with.

    Raises ``ValueError`` for a destination below a Zarr node or whose root is
    an assay, and ``FileExistsError`` for keys that may not be replaced.
    """
    where = describe_location(location)
    path = local_path(location)
    if path is not None:
        _refuse_below_zarr_node(path)
        if path.exists() and not path.is_dir():
            raise FileExistsError(
                f"destination {where} is a file, not a directory; choose another path"
            )
        if path is not None and not path.exists():
            return "w-"
    store = open_location(location, read_only=True, storage_options=storage_options)
    keys = _list(store)
    if not keys:
        return "w-"
    root = _read_json(store, "zarr.json")
    root_attrs = (root or {}).get("attributes", {})
    if isinstance(root_attrs, dict) and root_attrs.get("is_assay"):
        raise ValueError(
            f"destination {where} is itself an assay group (is_assay); write to the store that "
            "holds it, or choose another destination"
        )
    if not overwrite:
        raise FileExistsError(
            f"destination {where} already holds {len(keys)} key(s); pass overwrite=True "
            "(--overwrite on the command line) to replace a store this layer wrote, or choose "
            "an empty destination"
        )
    if root is None or root.get("node_type") != "group":
        raise FileExistsError(
            f"destination {where} holds keys but no root group (first: {sorted(keys)[0]!r}); "
            "it is not a CyteArc store, so it is not replaced"
        )
    assert isinstance(root_attrs, dict)
    if "matrixSource" in root_attrs:
        raise FileExistsError(
            f"destination {where} is a mounted target (matrixSource); its analyses depend on "
            "it. Delete it yourself if you mean to replace it"
        )
    nodes = _nodes(store, keys)
    _check_members(where, nodes, keys)
    _check_keys(where, keys, nodes)
    return "w"


def _check_members(where: str, nodes: dict[str, dict[str, object]], keys: list[str]) -> None:
    top_level = sorted({key.split("/", 1)[0] for key in keys if "/" in key})
    loose = [key for key in keys if "/" not in key and key not in _METADATA_NAMES]
    if loose:
        raise FileExistsError(
            f"destination {where} holds {loose[0]!r} at its root, which CyteArc does not write; "
            "it is not replaced. Move that file or choose another destination"
        )
    cell_columns = [p.rsplit("/", 1)[-1] for p in nodes if p.startswith("cellData/")]

    def allowed(member: str, nested: bool) -> bool:
        node = nodes.get(member)
        if node is None or node["kind"] != "group":
            return False
        attrs = node["attrs"]
        assert isinstance(attrs, dict)
        name = member.rsplit("/", 1)[-1]
        if name in WRITER_GROUPS and not (nested and name == "matrices"):
            return True
        if attrs.get("is_assay"):
            if destination_is_prepared(attrs, cell_columns, name):
                raise FileExistsError(
                    f"destination {where} holds the prepared assay {member!r}; replacing it "
                    "would discard its analyses. Delete the store yourself if you mean it"
                )
            return True
        if PENDING_ASSAY_ATTR in attrs:
            return True
        if nested:
            return False
        children = {p.split("/")[1] for p in nodes if p.startswith(member + "/")}
        # a workspace is a group with its own cell table and only writer members
        return "cellData" in children and all(
            allowed(f"{member}/{child}", True) for child in children
        )

    for member in top_level:
        if not allowed(member, False):
            raise FileExistsError(
                f"destination {where} holds {member!r}, which is not a group CyteArc writes "
                "(cellData, matrices, artifacts, pipeline, agent_results, an assay or a "
                "workspace of them); it is not replaced. Move it or choose another destination"
            )


def create_destination(
    location: Location, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> zarr.Group:
    """Check and create the destination; returns its writable root group."""
    mode = check_destination(location, overwrite=overwrite, storage_options=storage_options)
    store = open_location(location, read_only=False, storage_options=storage_options)
    return zarr.open_group(store, mode=mode, zarr_format=3)
