"""What a writer may replace (spec, "Writer destinations"): the checks before a byte changes.

A destination without keys is created with mode ``"w-"``. With
``overwrite=True`` a destination that holds keys is replaced (mode ``"w"``)
only when it is a store this layer could have written and nobody depends on:
a root group with no prepared assay and no ``matrixSource``, whose top-level
members are all groups CyteArc writes and whose keys are all Zarr metadata or
array chunks. Everything else is refused with ``FileExistsError``. An
unfinished destination (its root still carries ``cytearc:pending_store``) is
always replaceable, whatever it holds from its writer, because nothing can
depend on a store that never opened. :mod:`.destinations` creates what these
checks accept.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import RecordShapeError
from ..format.chunk_keys import ChunkKeys
from ..format.option_names import switched_on
from ..format.paths import join
from ..format.records import PENDING_ASSAY_ATTR, PENDING_STORE_ATTR
from ..format.store_io import get_json
from ..format.store_keys import METADATA_DOCUMENTS
from ..remote.locations import Location, given_location, local_path, open_location
from .claims import lock_local_destination
from .destination_contents import (
    intended_key,
    no_root_group,
    refuse_below_remote_zarr_node,
    refuse_below_zarr_node,
    refuse_foreign_folder,
)
from .writable import require_writable_destination

__all__ = [
    "WRITER_GROUPS",
    "check_destination",
    "composites_replaceable",
    "destination_is_prepared",
]

WRITER_GROUPS = frozenset({"cellData", "matrices", "artifacts", "pipeline", "agent_results"})
_V3_CHUNK = re.compile(r"(?:^|/)c(?:/(?:0|[1-9][0-9]*))+$")


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


def destination_is_prepared(
    attrs: dict[str, object], cell_columns: Iterable[str], assay: str
) -> bool:
    """Whether ``assay`` has been prepared by a DataStore (its QC columns exist)."""
    return f"{assay}_nCounts" in set(cell_columns)


def _documents(store: Store, keys: list[str]) -> dict[str, dict[str, object] | None]:
    """The documents at ``keys``, fetched concurrently; ``None`` for one that is not
    a JSON object (not ours, so the member checks refuse it)."""
    gate = asyncio.Semaphore(64)

    async def one(key: str) -> dict[str, object] | None:
        async with gate:
            buffer = await store.get(key, prototype=default_buffer_prototype())
        try:
            value = json.loads(buffer.to_bytes()) if buffer is not None else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    async def fetch() -> list[dict[str, object] | None]:
        return list(await asyncio.gather(*(one(key) for key in keys)))

    return dict(zip(keys, sync(fetch()), strict=True))


def _nodes(store: Store, keys: list[str]) -> dict[str, dict[str, object]]:
    nodes: dict[str, dict[str, object]] = {}
    wanted = [key for key in keys if key.rsplit("/", 1)[-1] in ("zarr.json", ".zgroup", ".zarray")]
    documents = _documents(store, wanted)
    for key in wanted:
        name = key.rsplit("/", 1)[-1]
        document = documents[key] or {}
        node = key[: -len(name)].rstrip("/")
        kind = document.get("node_type") or ("array" if name == ".zarray" else "group")
        nodes[node] = {"kind": kind, "attrs": document.get("attributes", {}), "doc": document}
    return nodes


def _zarr_shaped(key: str) -> bool:
    """Whether ``key`` is named as Zarr names documents and (default v3) chunk keys."""
    intended = intended_key(key)
    return intended.rsplit("/", 1)[-1] in METADATA_DOCUMENTS or bool(_V3_CHUNK.search(intended))


def _chunk_of(node: dict[str, object], rest: str, where: str) -> bool:
    """Whether ``rest`` (a key relative to an array) is a chunk key of that array.

    Exactly as the array's metadata names its chunks (its chunk key encoding,
    separator and number of dimensions; ASCII digits without leading zeros):
    a file a person put in the chunk directory (``c/notes.txt``) is not one.
    """
    document = node["doc"]
    assert isinstance(document, dict)
    shape = document.get("shape")
    if not isinstance(shape, list):
        return False
    try:
        encoding = ChunkKeys.of_array(document, where=where)
    except RecordShapeError:
        return False  # an encoding no writer of this layer uses: nothing under it is ours
    return encoding.decode(rest, len(shape)) is not None


def _check_keys(
    where: str, keys: list[str], nodes: dict[str, dict[str, object]], *, unfinished: bool
) -> None:
    """Refuse any key that is neither Zarr metadata of a node nor a chunk of an array."""
    arrays = sorted((path for path, node in nodes.items() if node["kind"] == "array"), key=len)
    for found in keys:
        key = intended_key(found)
        name = key.rsplit("/", 1)[-1]
        owner = next((a for a in arrays if key.startswith(a + "/")), None)
        rest = key[len(owner) + 1 :] if owner is not None else None
        if name in METADATA_DOCUMENTS and (rest is None or "/" not in rest):
            continue  # a node's document (inside an array, only the array's own)
        if rest is not None and owner is not None and _chunk_of(nodes[owner], rest, where):
            continue
        if unfinished and owner is None and _V3_CHUNK.search(key):
            continue  # a chunk whose array document the writer had not written yet
        raise FileExistsError(
            f"destination {where} holds {found!r}, which is neither Zarr metadata nor a chunk "
            "of an array, so this layer did not write it and no writer replaces the destination "
            f"({switched_on('overwrite')} neither; nothing was deleted). Move or delete that key "
            "yourself, or choose another destination"
        )


#: Whether ``overwrite=True`` replaces a composite (:func:`composites_replaceable`).
_COMPOSITES_REPLACEABLE: ContextVar[bool] = ContextVar("composites_replaceable", default=False)


@contextmanager
def composites_replaceable() -> Iterator[None]:
    """Let ``overwrite=True`` replace a composite destination within this block.

    The command line's ``--overwrite`` replaces a composite (it holds no
    counts, only its record and its sources' names); the library's
    ``overwrite=True`` does not. The command passes its flag to the writer
    inside this block, so the old destination is removed by the writer after
    it has checked its inputs, never before.
    """
    token = _COMPOSITES_REPLACEABLE.set(True)
    try:
        yield
    finally:
        _COMPOSITES_REPLACEABLE.reset(token)


def check_destination(
    location: Location,
    *,
    overwrite: bool,
    storage_options: Mapping[str, Any] | None = None,
    locked: bool = False,
) -> Literal["w", "w-"]:
    """Check ``location`` may be written; returns the mode to create it with.

    Raises ``ValueError`` for a destination below a Zarr node or whose root is
    an assay, ``FileExistsError`` for keys that may not be replaced, and
    :class:`~cytearc_vfs.write.writable.UnwritableDestinationError` for a local
    destination that cannot be created or written where it is asked.

    A writer checks before it reads its input, without the destination's lock
    (``locked=False``): a local destination that another writer holds is
    :class:`~cytearc_vfs.errors.DestinationBusyError`, also when its keys,
    half-written by that writer, would otherwise be refused as foreign.
    """
    where = given_location(location)
    if isinstance(location, Store) and location.read_only:
        raise ValueError(
            f"destination {where} is a read-only Store, which no writer can write; open it "
            "with read_only=False, or pass its path or URL"
        )
    path = local_path(location)
    if path is not None:
        if storage_options:
            # refused (by the opener, which says why) before anything is made: the
            # writer's lock creates a missing folder, which its failure then removed
            open_location(location, read_only=True, storage_options=storage_options)
        refuse_below_zarr_node(path)
        if path.is_symlink() and not path.exists():
            raise FileExistsError(
                f"destination {where} is a symbolic link to {os.readlink(path)!r}, which does "
                "not exist; create the folder it points to, or give a path that is not a "
                "broken link"
            )
        if path.exists() and not path.is_dir():
            raise FileExistsError(
                f"destination {where} is a file, not a directory; choose another path"
            )
        # a folder that is a file, /proc, a read-only file system: said now, not
        # by the operating system when the writer makes its first directory
        require_writable_destination(location)
        if not path.exists():
            return "w-"
        refuse_foreign_folder(path, where)
        if not locked:
            _refuse_held(path, where)
    elif not isinstance(location, Store):
        refuse_below_remote_zarr_node(os.fspath(location), storage_options)
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
    # What overwrite=True would refuse is refused with its own reason, with or
    # without overwrite: suggesting overwrite=True for it would only lead to
    # a second refusal.
    try:
        _check_replaceable(where, store, keys, root)
    except FileExistsError:
        if path is not None and not locked:
            # keys read while a writer that locked it since the probe above replaced
            # them (the old root, then members it had deleted) are no refusal of ours
            _refuse_held(path, where)
        raise
    if not overwrite:
        raise FileExistsError(
            f"destination {where} already holds {len(keys)} key(s) of a store this layer may "
            f"replace; pass {switched_on('overwrite')} to replace it, or "
            "choose an empty destination"
        )
    return "w"


def _refuse_held(path: Path, where: str) -> None:
    """Raise ``DestinationBusyError`` if another writer holds the local destination's lock."""
    lock_local_destination(path, where).release()


def _check_replaceable(
    where: str, store: Store, keys: list[str], root: dict[str, object] | None
) -> None:
    """Raise ``FileExistsError`` naming why ``overwrite=True`` may not replace the destination."""
    if root is None and all(
        key != "zarr.json" and intended_key(key) == "zarr.json" for key in keys
    ):
        # A writer died writing its very first document: only the temporary
        # file of that write is there. A zarr.json that is not a JSON object
        # was never written by a writer (document writes replace whole
        # files), so it is a key without a root group and is refused below.
        return
    if root is None or root.get("node_type") != "group":
        raise FileExistsError(no_root_group(where, sorted(keys)[0]))
    root_attrs = root.get("attributes", {})
    if not isinstance(root_attrs, dict):
        root_attrs = {}
    unfinished = PENDING_STORE_ATTR in root_attrs
    if "matrixSource" in root_attrs and not unfinished:
        raise FileExistsError(
            f"destination {where} is a mounted target (matrixSource); its analyses depend on "
            f"it, so no writer replaces it ({switched_on('overwrite')} neither). Choose another "
            "destination, or delete it yourself if you mean to replace it"
        )
    if "composite" in root_attrs and not unfinished:
        if _COMPOSITES_REPLACEABLE.get():
            return  # holds no counts of its own: the command line's --overwrite replaces it
        raise FileExistsError(
            f"destination {where} is a composite; no writer replaces it (overwrite=True "
            "neither). Choose another destination, or delete it yourself (the command "
            "line's --overwrite replaces a composite)"
        )
    nodes = _nodes(store, keys)
    _check_members(where, nodes, keys, unfinished=unfinished)
    _check_keys(where, keys, nodes, unfinished=unfinished)


def _check_members(
    where: str, nodes: dict[str, dict[str, object]], keys: list[str], *, unfinished: bool
) -> None:
    """Refuse top-level members CyteArc does not write.

    An ``unfinished`` store (its root still names its writer) may also hold
    what a composite writes (``_composite``) and assays whose copied tables
    look prepared: it never opened, so no analysis depends on it.
    """
    top_level = sorted({key.split("/", 1)[0] for key in keys if "/" in key})
    loose = [key for key in keys if "/" not in key and intended_key(key) not in METADATA_DOCUMENTS]
    if loose:
        raise FileExistsError(
            f"destination {where} holds {loose[0]!r} at its root, which CyteArc does not write, "
            f"so no writer replaces the destination ({switched_on('overwrite')} neither). Move "
            "that file or choose another destination"
        )

    def cell_columns(container: str) -> list[str]:
        """The columns of the cell table of ``container`` (the root, or a workspace)."""
        table = join(container, "cellData") + "/"
        return [p.rsplit("/", 1)[-1] for p in nodes if p.startswith(table)]

    def allowed(member: str, nested: bool) -> bool:
        node = nodes.get(member)
        if node is None and unfinished:
            # The writer died before the member's document: repack writes
            # documents after the values they describe.
            return all(_zarr_shaped(key) for key in keys if key.startswith(member + "/"))
        if node is None or node["kind"] != "group":
            return False
        attrs = node["attrs"]
        assert isinstance(attrs, dict)
        name = member.rsplit("/", 1)[-1]
        if name in WRITER_GROUPS and not (nested and name == "matrices"):
            return True
        if unfinished and not nested and name == "_composite":
            return True
        if attrs.get("is_assay"):
            # an assay's QC columns sit in the cell table beside it: the
            # workspace's for an assay of a workspace, the root's otherwise
            container = member.rsplit("/", 1)[0] if nested else ""
            if not unfinished and destination_is_prepared(attrs, cell_columns(container), name):
                raise FileExistsError(
                    f"destination {where} holds the prepared assay {member!r}; replacing it "
                    f"would discard its analyses, so no writer does ({switched_on('overwrite')} "
                    "neither). Choose another destination, or delete the store yourself if you "
                    "mean it"
                )
            return True
        if PENDING_ASSAY_ATTR in attrs:
            return True
        if nested:
            return False
        children = {p.split("/")[1] for p in nodes if p.startswith(member + "/")}
        # a workspace: its own cell table (an unfinished one's may not be written yet) and
        # only writer members; the writes before the commit land in any order
        return (unfinished or "cellData" in children) and all(
            allowed(f"{member}/{child}", True) for child in children
        )

    for member in top_level:
        if not allowed(member, False):
            raise FileExistsError(
                f"destination {where} holds {member!r}, which is not a group CyteArc writes "
                "(cellData, matrices, artifacts, pipeline, agent_results, an assay or a "
                "workspace of them), so no writer replaces the destination "
                f"({switched_on('overwrite')} neither). Move it or choose another destination"
            )
