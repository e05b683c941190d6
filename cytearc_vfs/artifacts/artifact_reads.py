"""The store an artifact's arrays are read through: a removed artifact fails, never reads zeros.

zarr reads a chunk that a store does not hold as the array's fill value:
that is how an all-zero chunk is stored (``write_empty_chunks=False``). An
artifact found, then removed (by an outside edit, or from a mount's source)
before its arrays are read, would so read as zeros, with its record still
in hand. A chunk read that finds nothing therefore asks whether the
artifact's group document is still there (one ``exists``, only on a miss:
a present chunk costs nothing; a group found there is trusted for
:data:`RECHECK_SECONDS`, so the absent chunks of a mostly-zero array cost
one check a second, not one each), and a group that is gone raises
:class:`~cytearc_vfs.errors.MissingChunkError` naming the artifact and the
remedy (a mount's own check of its source, which raises ``SourceGoneError``
for such a chunk, is told the same way). A backend's own failure of any read is a
:class:`~cytearc_vfs.errors.StoreAccessError` naming the store, also when
zarr reads (a slice of ``art[name]``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterable
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.sync import sync

from ..errors import MissingChunkError, SourceGoneError
from ..format.chunk_keys import is_chunk_key
from ..format.key_checked import KeyCheckedWrapperStore
from ..format.paths import join
from ..remote.failures import named_backend_failures

__all__ = ["RECHECK_SECONDS", "ArtifactReads"]

#: How long a group found present is trusted by the next misses.
RECHECK_SECONDS = 1.0


class ArtifactReads(KeyCheckedWrapperStore):
    """``store`` read for the artifact at ``group_key``: a chunk it does not hold reads
    as the fill value only while the artifact's group is there (see the module)."""

    def __init__(
        self, store: Store, group_key: str, path: str, where: str, held_by: str | None = None
    ) -> None:
        super().__init__(store)
        self._group_key = group_key
        self._path = path
        self._where = where
        # "source" when a mount read the artifact from its source: a removal then
        # most likely means the source moved or went, which the error says
        self._held_by = held_by
        self._present_until = 0.0  # time.monotonic() before which the group was found
        # the check the misses of one read share (they come all at once)
        self._checking: asyncio.Task[bool] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # a check in flight is this process's: a copy starts without one
        return (
            type(self),
            (self._store, self._group_key, self._path, self._where, self._held_by),
        )

    def _with_store(self, store: Store) -> ArtifactReads:
        return type(self)(store, self._group_key, self._path, self._where, self._held_by)

    def __repr__(self) -> str:
        return f"ArtifactReads({self._store!r}, {self._group_key!r})"

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with named_backend_failures(self._where, options="storage_options"):
            # a slice of art[name] is zarr's read: a backend's own failure (obstore's
            # 403 dump) is named here, as Artifact.load names it
            try:
                found = await super().get(key, prototype, byte_range)
            except SourceGoneError as exc:
                # a mount's own check of its source's group: named as this artifact
                if not is_chunk_key(key):
                    raise
                raise self.removed(key) from exc
            if found is None and is_chunk_key(key):
                await self._check_present(key)
        return found

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        with named_backend_failures(self._where, options="storage_options"):
            try:
                found = super().get_sync(key, prototype=prototype, byte_range=byte_range)
            except SourceGoneError as exc:
                if not is_chunk_key(key):
                    raise
                raise self.removed(key) from exc
            if found is None and is_chunk_key(key):
                sync(self._check_present(key))
        return found

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def _check_present(self, key: str) -> None:
        if time.monotonic() < self._present_until:
            return
        checking = self._checking
        if (
            checking is None
            or checking.done()
            or checking.get_loop() is not asyncio.get_running_loop()
        ):
            checking = asyncio.ensure_future(self._store.exists(join(self._group_key, "zarr.json")))
            self._checking = checking
        if await asyncio.shield(checking):
            self._present_until = time.monotonic() + RECHECK_SECONDS
            return
        raise self.removed(
            key,
            "(a chunk the artifact does not hold is read as the fill value only while the "
            "artifact is there)",
        )

    def group_is_gone(self) -> bool:
        """Whether the artifact's group document is no longer there (one ``exists``).

        Asked when an array's document is not found: the array may be one the
        artifact never had, or the whole artifact may have been removed.
        """
        with named_backend_failures(self._where, options="storage_options"):
            return not sync(self._store.exists(join(self._group_key, "zarr.json")))

    def removed(self, key: str, why: str = "") -> MissingChunkError:
        """The error for an artifact whose group is gone, ``key`` having been looked for."""
        found = (
            f"artifact {self._path!r} in {self._where} was removed after it was found: "
            f"{key!r} is not there, and neither is the artifact's group, so its values "
            f"cannot be read{' ' + why if why else ''}."
        )
        if self._held_by == "source":
            return MissingChunkError(
                f"{found} The mount read it from its source, which no longer holds it (the "
                "source was moved or deleted, or the artifact removed from it): restore the "
                "source where the mount records it (cytearc-vfs info TARGET names it), then "
                "find the artifact again (cv.find_artifact, cv.list_artifacts)"
            )
        return MissingChunkError(
            f"{found} Find the artifact again (cv.find_artifact, cv.list_artifacts), or "
            "publish it again"
        )
