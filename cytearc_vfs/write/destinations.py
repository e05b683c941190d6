"""Writer destinations: what a writer may create or replace (spec, "Writer destinations").

A destination without keys is created with mode ``"w-"``. With
``overwrite=True`` a destination that holds keys is replaced (mode ``"w"``)
only when it is a store this layer could have written and nobody depends on:
a root group with no prepared assay and no ``matrixSource``, whose top-level
members are all groups CyteArc writes and whose keys are all Zarr metadata or
array chunks. Everything else is refused with ``FileExistsError`` before a
byte changes.

Crash safety: :func:`create_destination` writes the root's first document
with ``cytearc:pending_store`` naming the writer, and the writer's last root
write (:func:`finish_destination`) removes it; every open refuses a root that
still carries it. Such an unfinished destination is always replaceable with
``overwrite=True``, whatever it holds from its writer (a half-written mount,
composite, or prepared tables copied from a source), because nothing can
depend on a store that never opened.

Round trips: the root group :func:`create_destination` returns writes
through a :class:`~cytearc_vfs.write.write_behind.WriteBehindStore` that
knows the tree it creates (no existence checks of zarr's node API) and
sends documents and chunks concurrently; its root document is a barrier, so
the root's last write, which clears the marker, follows every other write.
Writers that fail call :func:`settle_destination` so nothing of theirs
lands in the destination after they return.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.sync import sync

from ..errors import RecordShapeError
from ..format.chunk_keys import ChunkKeys
from ..format.option_names import switched_on
from ..format.paths import join
from ..format.records import PENDING_ASSAY_ATTR, PENDING_STORE_ATTR
from ..format.store_io import get_json
from ..format.store_keys import METADATA_DOCUMENTS
from ..remote.locations import Location, describe_location, local_path, open_location
from .claims import (
    Claim,
    LocalLock,
    create_root,
    lock_local_destination,
    marker_document,
    replace_root,
)
from .destination_contents import (
    intended_key,
    no_root_group,
    refuse_below_remote_zarr_node,
    refuse_below_zarr_node,
    refuse_foreign_folder,
)
from .stopping import stop_work
from .writable import require_writable_destination
from .write_behind import MAX_HELD_BYTES, ROOT_DOCUMENT, WriteBehindStore

__all__ = [
    "check_destination",
    "composites_replaceable",
    "clears_pending_marker",
    "create_destination",
    "destination_is_prepared",
    "finish_destination",
    "flush_destination",
    "settle_destination",
    "settled_on_failure",
]

logger = logging.getLogger(__name__)

#: Whether destinations write behind (see the module docstring). ``False``
#: restores zarr's own node by node writes: kept only so that
#: ``benchmarks/bench_remote_writes.py`` compares both in one run.
WRITE_BEHIND = True

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
    location: Location, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> Literal["w", "w-"]:
    """Check ``location`` may be written; returns the mode to create it with.

    Raises ``ValueError`` for a destination below a Zarr node or whose root is
    an assay, ``FileExistsError`` for keys that may not be replaced, and
    :class:`~cytearc_vfs.write.writable.UnwritableDestinationError` for a local
    destination that cannot be created or written where it is asked.
    """
    where = describe_location(location)
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
    _check_replaceable(where, store, keys, root)
    if not overwrite:
        raise FileExistsError(
            f"destination {where} already holds {len(keys)} key(s) of a store this layer may "
            f"replace; pass {switched_on('overwrite')} to replace it, or "
            "choose an empty destination"
        )
    return "w"


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


def create_destination(
    location: Location,
    *,
    overwrite: bool,
    writer: str,
    storage_options: Mapping[str, Any] | None = None,
    held_bytes: int = MAX_HELD_BYTES,
    attributes: Mapping[str, Any] | None = None,
    checked: Literal["w", "w-"] | None = None,
) -> zarr.Group:
    """Check and create the destination; returns its writable root group.

    Parameters
    ----------
    location
        Path, URL or Store of the destination.
    overwrite
        Replace a destination that :func:`check_destination` accepts.
    writer
        The writer's name (``write_counts``, ``repack``...). The root's first
        document records it as ``cytearc:pending_store``, which the writer's
        last root write removes (:func:`finish_destination`); until then
        every open refuses the store, naming the writer.
    storage_options
        Backend options of a URL destination.
    held_bytes
        Bound of the values the destination's write-behind store holds for
        writes not yet stored (:func:`~cytearc_vfs.write.budget.held_bytes`
        of the writer's memory budget: taken out of it, not added to it).
    attributes
        Further attributes of the root's first document, stored with the
        marker before anything else (a composite's record with
        ``complete: false``, so that any reader finds a failed creation
        incomplete).
    checked
        The mode an earlier :func:`check_destination` of this destination
        returned: a writer checks its destination before it reads its input
        (a refusal then costs nothing), and creates it only after. ``"w-"``
        is not checked again (one listing, not two): the creation refuses a
        root that appeared since. ``"w"`` is checked again, so a replacement
        never removes what appeared since.
    """
    where = describe_location(location)
    path = local_path(location)
    # a local destination is locked before it is checked again and emptied: a second
    # writer fails here, having deleted nothing (claims.py)
    lock = lock_local_destination(path, where) if path is not None and path.is_dir() else None
    try:
        mode = (
            checked
            if checked == "w-"
            else check_destination(location, overwrite=overwrite, storage_options=storage_options)
        )
        if path is not None and lock is None:
            lock = lock_local_destination(path, where)  # created by the lock
        store = open_location(location, read_only=False, storage_options=storage_options)
        return _create(store, mode, where, lock, writer, held_bytes, attributes)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _create(
    store: Store,
    mode: Literal["w", "w-"],
    where: str,
    lock: LocalLock | None,
    writer: str,
    held_bytes: int,
    attributes: Mapping[str, Any] | None,
) -> zarr.Group:
    """Create the checked destination ``store`` (see :func:`create_destination`)."""
    marker: dict[str, Any] = {**(attributes or {}), PENDING_STORE_ATTR: writer}
    claim = Claim(store, where, lock=lock)
    document = marker_document(marker, claim)
    if not WRITE_BEHIND:  # benchmarks only: no claim, no lock kept
        claim.release()
        if mode == "w":
            replace_root(claim, document)
            return zarr.open_group(store, mode="r+", zarr_format=3)
        return zarr.open_group(store, mode="w-", zarr_format=3, attributes=marker)
    # check_destination listed the destination: empty, or replaceable and
    # emptied here, so the writer's tree is all it will hold
    if mode == "w":
        replace_root(claim, document)
    else:
        create_root(store, document, where)
    behind = WriteBehindStore(
        store,
        absent_unless_written=True,
        documents={ROOT_DOCUMENT: document},
        commits=clears_pending_marker,
        max_bytes=held_bytes,
        where=where,
        claim=claim,
    )
    return zarr.open_group(behind, mode="r+", zarr_format=3)


def clears_pending_marker(key: str, value: Buffer) -> bool:
    """Whether a write is a destination's commit: a root document without the marker.

    Root writes that keep ``cytearc:pending_store`` (a composite's record
    with ``complete=false``, the assay types) go out behind like any other.

    >>> from zarr.core.buffer import cpu
    >>> clears_pending_marker("zarr.json", cpu.Buffer.from_bytes(b'{"attributes": {}}'))
    True
    >>> pending = b'{"attributes": {"cytearc:pending_store": "repack"}}'
    >>> clears_pending_marker("zarr.json", cpu.Buffer.from_bytes(pending))
    False
    """
    if key != ROOT_DOCUMENT:
        return False
    try:
        attributes = json.loads(value.to_bytes()).get("attributes", {})
    except (ValueError, AttributeError):
        return True  # not a document this layer writes: ordered like a commit
    return not (isinstance(attributes, dict) and PENDING_STORE_ATTR in attributes)


def finish_destination(root: zarr.Group, attributes: Mapping[str, Any] | None = None) -> None:
    """The writer's last root write: add ``attributes`` and remove the in-progress marker.

    Everything else the writer writes must already be stored: this one
    document write is what makes the store open.
    """
    attrs = root.attrs.asdict()
    attrs.pop(PENDING_STORE_ATTR, None)
    attrs.update(attributes or {})
    # through a WriteBehindStore, this root write first waits for every other
    root.attrs.put(attrs)
    _release(root)


def _release(root: zarr.Group) -> None:
    """Release the writer's hold on a local destination (it wrote its last write)."""
    if isinstance(root.store, WriteBehindStore) and root.store.claim is not None:
        root.store.claim.release()


def flush_destination(root: zarr.Group) -> None:
    """Wait until everything written through ``root`` is stored (raising a failed write).

    For a writer that reads its destination back through another store
    (repack verifies the copy) before its last root write.
    """
    if isinstance(root.store, WriteBehindStore):
        sync(root.store.flush())


@contextmanager
def settled_on_failure(root: zarr.Group) -> Iterator[zarr.Group]:
    """Run a writer's writes into ``root``; if they raise, :func:`settle_destination` first."""
    try:
        yield root
    except BaseException:
        settle_destination(root)
        raise


def settle_destination(root: zarr.Group) -> None:
    """Stop the writer's work and wait until no write through ``root`` is in flight.

    A writer that fails calls it before the error leaves it: a rerun (with
    ``overwrite=True``) must not meet writes of the failed run still landing.
    First every task the writer started on zarr's loop is cancelled and
    awaited (:func:`~cytearc_vfs.write.stopping.stop_work`; writes already
    sent end first), so none issues a write after this returns. A root whose
    commit was stored all the same (the failure came while it was in
    flight) gets its unfinished first document back: a writer that raised
    never leaves a store that opens. Failures of the writes are not raised.
    """
    stop_work()
    if isinstance(root.store, WriteBehindStore):
        sync(root.store.settle())
        try:
            sync(root.store.revert_commit())
        except Exception as exc:  # the writer's own error is the one to raise
            logger.warning("putting the unfinished root of %s back failed: %r", root.store, exc)
        _release(root)
