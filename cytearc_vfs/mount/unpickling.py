"""A pickled mount, verified again in the process that unpickles it.

A mount travels to dask workers and process pools pickled: its target, the
``matrixSource`` record it was verified with and the in-memory
``source_storage_options`` (credentials never leave memory). The source may
have been replaced between the pickling and the unpickling, so the process
that unpickles opens the mount again with every check an open makes (the
source's fingerprints against the record, the target's tables) and records
the source's file identities, so that its reads refuse a source replaced
after that (:mod:`cytearc_vfs.read.opened_files`).

dask unpickles a task's arguments once per task, so a full open per unpickle
would read the source's documents and the target's id columns once per
block. A process instead keeps the mounts it verified, by their pickled
identity (target, record, source options), and reuses one when its source
is provably the one verified:

- a local source's count array documents are ``stat``\\ ed (two per assay, no
  read) against the identities its open took; any difference (a replaced or
  rewritten source) drops the kept mount and opens again, so the error is
  the one an open gives (a fingerprint mismatch), and a source written again
  with the same values opens cleanly;
- a remote source's count objects are pinned by the kept open (``If-Match``
  on every read, :mod:`cytearc_vfs.remote.pinned_store`): a replaced object is
  refused on read, as it is in the process that opened the mount, and that
  refusal drops the kept mount, so the next unpickling opens again.

A reused mount shares the kept one's source cache (one per process and
mount) and takes the mode of the pickled one. Nothing is written. It knows
the artifact groups the pickled mount found to be the source's: a zarr
array pickled with its metadata reads their chunks without their documents,
and a chunk of one gone since is refused there too, never read as the fill
value from the target (:mod:`.owners`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from zarr.abc.store import Store

from ..errors import IdentityMismatchError
from ..remote.locations import describe_location
from ..remote.store_keys import store_key
from .records import MountRecord
from .store import MountStore

__all__ = ["restore"]

KEPT_MOUNTS = 16
"""How many verified mounts a process keeps (least recently unpickled go first)."""

_kept: OrderedDict[bytes, MountStore] = OrderedDict()
# guards _kept only: the opens run outside it (two threads unpickling the
# same new mount may both open it; the second's result is kept)
_lock = threading.Lock()


def restore(
    target: Store,
    record: MountRecord,
    options: Mapping[str, Any],
    read_only: bool,
    source_groups: tuple[str, ...] = (),
) -> MountStore:
    """The mount pickled with ``target``, ``record`` and ``options``, verified in
    this process (see the module docstring), in the pickled mode, knowing the
    artifact groups ``source_groups`` as the source's (as the pickled one did)."""
    # not pickle.dumps: an obstore target pickles differently each time
    key = store_key((target, record, dict(options)))
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
    if kept is None or not kept._source_unchanged():
        kept = _verified(target, record, options)
        with _lock:
            _kept[key] = kept
            _kept.move_to_end(key)
            while len(_kept) > KEPT_MOUNTS:
                _kept.popitem(last=False)
    if target.read_only != read_only:
        target = target.with_read_only(read_only)
    mount = kept._derive(target)
    mount._owners.remember_sources(source_groups)
    return mount


def _verified(target: Store, record: MountRecord, options: Mapping[str, Any]) -> MountStore:
    """Open ``target`` as any open does; refuse a target bound to another source
    since the mount was pickled."""
    where = describe_location(target)
    mount = MountStore._verified(target, where, options or None)
    if mount.record != record:
        raise IdentityMismatchError(
            f"mount at {where}: its matrixSource record (source {mount.record.location}) is not "
            f"the one of the mount that was pickled (source {record.location}); the target was "
            "mounted again since. Open the mount again where it was pickled"
        )
    return mount
