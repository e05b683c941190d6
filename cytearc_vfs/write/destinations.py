"""Writer destinations: creating, finishing and settling them (spec, "Writer destinations").

What a writer may replace is checked by :mod:`.destination_checks` before a
byte changes; :func:`create_destination` then creates the destination with
the mode it returned (``"w-"`` for an empty one, ``"w"`` to replace).

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

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import Buffer
from zarr.core.sync import sync

from ..format.records import PENDING_STORE_ATTR
from ..remote.locations import Location, given_location, local_path, open_location
from .claims import (
    Claim,
    LocalLock,
    create_root,
    lock_local_destination,
    marker_document,
    replace_root,
)
from .destination_checks import check_destination
from .stopping import stop_work
from .write_behind import MAX_HELD_BYTES, ROOT_DOCUMENT, WriteBehindStore

__all__ = [
    "clears_pending_marker",
    "create_destination",
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
    where = given_location(location)
    path = local_path(location)
    # a local destination is locked before it is checked again and emptied: a second
    # writer fails here, having deleted nothing (claims.py)
    lock = lock_local_destination(path, where) if path is not None and path.is_dir() else None
    try:
        mode = (
            checked
            if checked == "w-"
            else check_destination(
                location,
                overwrite=overwrite,
                storage_options=storage_options,
                locked=lock is not None,
            )
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
