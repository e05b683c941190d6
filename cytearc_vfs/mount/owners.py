"""Which store of a mount serves a key, asked of the stores once and remembered.

:mod:`.resolution` places a key by its name alone (outside the artifact
roots, a directory document, or inside an artifact group). Whether an
artifact group is the target's or the source's takes a request: the target
holds the group when it holds the group's ``zarr.json``, else the source
does when it holds it. :class:`GroupOwners` asks that once per group and
remembers the answer (positive answers only: a group no store holds may be
created later), and gives the target its own documents of the directories
above a group written through the mount.

A source group's chunk that the source does not hold reads as the fill
value, as zarr stores an all-fill chunk: but once the source is moved or
deleted, every chunk of it is missing, and its artifacts would read as
zeros. :meth:`GroupOwners.source_group_present` is asked on such a miss
(one ``exists`` of the group's document; a group found there is trusted
for :data:`RECHECK_SECONDS`, so the absent chunks of a mostly-empty array
cost one check a second, not one each, and the misses of one read share
one check). The mount's ``exists`` of a source group's document gives the
same answer, so an ``Artifact``'s own check of a miss asks nothing more.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from ..format.paths import join
from .documents import unconsolidated
from .resolution import place_of

__all__ = ["RECHECK_SECONDS", "GroupOwners", "Owner"]

Owner = Literal["target", "source"]

#: How long a source group found present is trusted by the next misses of its chunks.
RECHECK_SECONDS = 1.0


class GroupOwners:
    """The owners of a mount's artifact groups, and the directory documents the target holds.

    ``known`` may be shared by the views of one mount over the same target
    (a read-only and a writable one): an owner found by one holds for both.
    """

    def __init__(
        self,
        target: Store,
        source: Store,
        roots: tuple[str, ...],
        known: dict[str, Owner] | None = None,
    ) -> None:
        self._target = target
        self._source = source
        self._roots = roots
        self.known: dict[str, Owner] = {} if known is None else known
        # artifact roots and kind directories whose document the target holds
        self._held_documents: set[str] = set()
        # source groups found present: the time.monotonic() until which that holds
        self._present_until: dict[str, float] = {}
        # the check that the misses of one read share (they come all at once)
        self._checking: dict[str, asyncio.Task[bool]] = {}

    async def owner(self, group: str) -> Owner | None:
        """The store that holds the artifact group ``group``, or ``None`` when neither does."""
        owner = self.known.get(group)
        if owner is not None:
            return owner
        document = join(group, "zarr.json")
        if await self._target.exists(document):
            owner = "target"
        elif await self._source.exists(document):
            owner = "source"
        else:
            return None
        self.known[group] = owner
        return owner

    async def is_source(self, group: str) -> bool:
        """Whether the artifact group ``group`` is the source's."""
        return await self.owner(group) == "source"

    def settle(self, group: str, owner: Owner | None) -> None:
        """Record what a read or write found of ``group`` (``None``: it is gone)."""
        if owner is None:
            self.known.pop(group, None)
        else:
            self.known[group] = owner

    def source_groups(self) -> tuple[str, ...]:
        """The groups found to be the source's, sorted (for a pickled mount)."""
        return tuple(sorted(group for group, owner in self.known.items() if owner == "source"))

    def remember_sources(self, groups: tuple[str, ...]) -> None:
        """Take ``groups`` as the source's, as another view of the mount found them:
        a chunk of one that the source lacks is then checked against its document,
        so one gone since is refused instead of read from the target as the fill value."""
        for group in groups:
            self.known.setdefault(group, "source")

    def forget(self, directory: str) -> None:
        """Drop what is known of groups and documents at or under a deleted ``directory``
        (a document's key names its directory's document)."""
        directory = directory.removesuffix("/zarr.json")

        def under(name: str) -> bool:
            return name == directory or name.startswith(directory + "/")

        for group in [group for group in self.known if under(group)]:
            self.known.pop(group, None)
        self._held_documents = {held for held in self._held_documents if not under(held)}

    async def source_group_present(self, group: str) -> bool:
        """Whether the source still holds the artifact group ``group`` (asked when the
        source does not hold one of its chunks; see the module)."""
        if time.monotonic() < self._present_until.get(group, 0.0):
            return True
        checking = self._checking.get(group)
        if (
            checking is None
            or checking.done()
            or checking.get_loop() is not asyncio.get_running_loop()
        ):
            checking = asyncio.ensure_future(self._source.exists(join(group, "zarr.json")))
            self._checking[group] = checking
        present = await asyncio.shield(checking)
        if present:
            self._present_until[group] = time.monotonic() + RECHECK_SECONDS
        return present

    async def store_for(self, key: str) -> Store:
        """The store that serves ``key`` (a checked key)."""
        place = place_of(key, self._roots)
        if place.kind == "target":
            return self._target
        if place.kind in ("root_doc", "kind_doc"):
            return self._target if await self._target.exists(key) else self._source
        assert place.group is not None
        return self._source if await self.is_source(place.group) else self._target

    async def source_visible(self, key: str) -> bool:
        """Whether a key of the source shows through the mount."""
        place = place_of(key, self._roots)
        if place.kind == "target":
            return False
        if place.kind in ("root_doc", "kind_doc"):
            return not await self._target.exists(key)
        assert place.group is not None
        return await self.is_source(place.group)

    async def hold_parent_documents(self, group: str) -> None:
        """Give the target its own documents of the root and kind holding ``group``.

        zarr creates a group's parents only where none shows, and through the
        mount a kind the source already has shows the source's document: the
        target would hold the new group under a directory with no document of
        its own, and opened directly it would show none of its artifacts of
        that kind. The source's document is copied first (before the group's
        keys, so a crash leaves at most an empty kind), without its
        consolidated metadata: that lists the source's members, and zarr
        opening the target directly would show them instead of the target's.
        """
        kind = group.rsplit("/", 1)[0]
        for directory in (kind.rsplit("/", 1)[0], kind):
            if directory in self._held_documents:
                continue
            key = join(directory, "zarr.json")
            if not await self._target.exists(key):
                document = await self._source.get(key, prototype=default_buffer_prototype())
                if document is not None:
                    await self._target.set(key, unconsolidated(document))
            self._held_documents.add(directory)
