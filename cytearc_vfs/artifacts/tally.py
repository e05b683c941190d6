"""How many artifacts each root of a store holds, by kind: what ``cytearc-vfs info`` shows.

A tally lists the groups exactly as the listings do (the store's artifact
roots, then each root's kinds and each kind's groups, as
:func:`~cytearc_vfs.artifacts.catalog.describe_artifacts` and
:func:`~cytearc_vfs.artifacts.incomplete.list_incomplete_artifacts` list
them) and reads each group's ``zarr.json`` once, the least that tells a
published artifact from an unpublished group; no array's metadata and no
chunk is read. The documents are read concurrently: on an object store a
root of a hundred groups costs one round trip of reads, not a hundred.

A group counts as the listings count it: complete when its record parses
(what ``describe_artifacts`` lists), unpublished when it is well formed
with ``complete=False`` (what ``list_incomplete_artifacts`` lists), and
unreadable when its record is malformed (what ``describe_artifacts`` skips
with a warning naming it). A directory without a ``zarr.json`` (a group
being created or removed) is no group to either listing, nor here.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import IncompleteStoreError, RecordShapeError
from ..format.gathering import gather_bounded
from ..format.paths import join
from ..remote.failures import names_backend_failures
from .catalog import group_paths
from .holders import HeldBy, LayeredStore, held_by
from .records import ArtifactRecord
from .roots import artifact_roots

__all__ = ["RootTally", "tally_artifacts"]

logger = logging.getLogger(__name__)

#: Group documents read at once: enough to hide an object store's round trips,
#: few enough that a root of thousands of groups does not open thousands of connections.
_READS_IN_FLIGHT = 64


@dataclass(frozen=True, slots=True)
class RootTally:
    """What one artifact root holds (through a mount: what one of its stores holds there)."""

    root: str
    """The artifact root, such as ``RNA/artifacts``."""
    held_by: HeldBy | None
    """Through a mount, the store these groups are read from (``"target"`` or
    ``"source"``, as ``describe_artifacts`` says per artifact); ``None`` for any
    other store, whose artifacts are its own."""
    complete: Mapping[str, int] = field(default_factory=dict)
    """Published artifacts by kind, kinds in name order; only kinds that have one."""
    incomplete: int = 0
    """Unpublished groups (``complete=False``): being written, or left by a producer that died."""
    unreadable: int = 0
    """Groups whose record is malformed (the listing skips them, naming each in a warning)."""

    def to_json(self) -> dict[str, Any]:
        """The tally as ``cytearc-vfs info --json`` gives it."""
        return {
            "root": self.root,
            "heldBy": self.held_by,
            "complete": dict(self.complete),
            "incomplete": self.incomplete,
            "unreadable": self.unreadable,
        }


@names_backend_failures("store")
def tally_artifacts(
    store: Store, *, where: str, roots: Sequence[str] | None = None
) -> list[RootTally] | None:
    """Count the artifacts of ``store`` by root and kind, and its unpublished groups.

    Parameters
    ----------
    store
        An open store, read as it is: a mount (``cv.open_store`` of its
        target) counts its source's artifacts and its target's apart.
    where
        How messages name the store.
    roots
        The store's artifact roots when its contents were read already
        (:func:`~cytearc_vfs.artifacts.roots.roots_of`); read here otherwise.

    Returns
    -------
    list of RootTally or None
        One per root, in the order of ``roots`` (through a mount two per root,
        the source's first), empty roots included; ``None`` when the store
        cannot list its keys (an HTTP store), so its artifacts cannot be found.
    """
    if not store.supports_listing:
        return None
    if roots is None:
        roots = artifact_roots(store, where)
    holders: tuple[HeldBy | None, ...] = (
        ("source", "target") if isinstance(store, LayeredStore) else (None,)
    )
    paths = {root: list(group_paths(store, "", root, None)) for root in roots}
    documents = sync(_read_documents(store, [path for found in paths.values() for path in found]))
    tallies = []
    for root in roots:
        counted = {holder: _Count() for holder in holders}
        for path in paths[root]:
            document = documents[path]
            if document is None:
                continue
            # through a mount, reading the document found its holder: no request
            counted[held_by(store, path)].add(document, path, where)
        tallies += [counted[holder].tally(root, holder) for holder in holders]
    return tallies


class _Count:
    """The groups of one root (and one store of a mount) counted so far."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.incomplete = 0
        self.unreadable = 0

    def add(self, document: bytes, path: str, where: str) -> None:
        """Count the group at ``path`` by its ``zarr.json``, as the listings judge it."""
        location = f"{where.rstrip('/')}/{path}"
        try:
            parsed = json.loads(document)
            record = ArtifactRecord.from_group_document(parsed, path=path, where=location)
        except IncompleteStoreError:
            self.incomplete += 1
        except (RecordShapeError, ValueError) as exc:  # not JSON, or not UTF-8, or malformed
            logger.debug("not counting the unreadable artifact %s in %s: %s", path, where, exc)
            self.unreadable += 1
        else:
            self.kinds[record.kind] += 1

    def tally(self, root: str, holder: HeldBy | None) -> RootTally:
        """The counts, as the record of ``root``."""
        return RootTally(
            root, holder, dict(sorted(self.kinds.items())), self.incomplete, self.unreadable
        )


async def _read_documents(store: Store, paths: list[str]) -> dict[str, bytes | None]:
    """The ``zarr.json`` of each group at ``paths`` (``None`` where there is none), read
    concurrently, at most :data:`_READS_IN_FLIGHT` at a time."""
    prototype = default_buffer_prototype()

    async def read(path: str) -> bytes | None:
        buffer = await store.get(join(path, "zarr.json"), prototype=prototype)
        return None if buffer is None else buffer.to_bytes()

    found = await gather_bounded(read, paths, _READS_IN_FLIGHT)
    return dict(zip(paths, found, strict=True))
