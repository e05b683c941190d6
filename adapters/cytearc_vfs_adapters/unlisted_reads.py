"""Reads of an object store by credentials that may read but not list it.

S3 answers ``403 AccessDenied``, not ``404``, for a key that does not exist
when the caller lacks ``s3:ListBucket`` (a common read-only policy). Any
reading of a Zarr container asks for documents that are absent in every
store (a Zarr v2 root's ``zarr.json``, a v3 root's ``.zmetadata``, a v2
array's ``.zgroup``), so such credentials failed on the first of them, with
a message blaming their read access.

:class:`RefusedReads` tells the two readings of a ``403`` apart for the
backend store (:class:`~.backends.SharedClientObjectStore`). On the first
refused read it asks once whether the credentials may list the store (one
listing of its root) and read its root group (a ``HEAD`` of its
``zarr.json`` and ``.zgroup``). A listing answered means the ``403`` is the
object's own; a root group that cannot be read means the credentials may
not read the store at all (or nothing is there): either way the ``403`` is
raised as it came. Credentials that may read the root but not list are the
case S3 answers so, and then

- a metadata document answered ``403`` is absent: a document holds no
  values;
- a chunk answered ``403`` is refused in one line (forbidden or lost, and
  the remedies), never read as its fill value: nothing proves it absent
  (zarr leaves chunks of only the fill value unwritten, such as the
  all-false mask of a nullable column, but a forbidden chunk would read as
  the same zeros). A composite's open, which has records that can prove a
  chunk absent, reads so through its own pinned source store
  (docs/remote.md, "Absent keys on AWS S3").

A store that may list never reaches any of this: it is told ``404``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS
from cytearc_vfs.remote.failures import forbidden_unlisted, refused

__all__ = ["RefusedReads"]


class RefusedReads:
    """What one store's refused reads mean (see the module); ``where`` names the store in
    messages, ``read_unlisted`` tells whether its credentials may read its root group
    but not list it (a listing, and a ``HEAD`` of its root group documents)."""

    def __init__(self, where: str, read_unlisted: Callable[[], Awaitable[bool]]) -> None:
        self._where = where
        self._read_unlisted = read_unlisted
        # None: not asked yet; asked once, by the first refused read
        self._unlisted: bool | None = None
        self._asking: asyncio.Lock | None = None

    async def _may_not_list(self) -> bool:
        if self._unlisted is None:
            if self._asking is None:
                self._asking = asyncio.Lock()
            async with self._asking:
                if self._unlisted is None:
                    self._unlisted = await self._read_unlisted()
        return self._unlisted

    async def absent(self, key: str, exc: BaseException) -> bool:
        """Whether the failed read ``exc`` of ``key`` means that ``key`` is absent; raises
        the refusal of a chunk that nothing proves absent (``PermissionError``, one
        line); ``False``: the caller raises ``exc`` as it came."""
        if not refused(exc) or not await self._may_not_list():
            return False
        if key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            return True
        raise PermissionError(forbidden_unlisted(self._where, key)) from exc
