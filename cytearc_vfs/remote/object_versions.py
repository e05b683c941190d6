"""What identifies one version of a remote object, and a listing of a store's objects.

A listing (one request per 1,000 objects on S3) gives each object's size and
ETag; a read gives the ETag of the bytes it returned. Both are reduced here to
one *version token*, the string pins (:mod:`.pinned_store`) and seals
(:mod:`cytearc_vfs.read.prefetch`) compare, whichever client (obstore, or
s3fs through :mod:`.s3fs_objects`) described the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["ListedObject", "Listing", "version_token"]


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One object of a listing, as the backend described it."""

    size: int
    """Its size in bytes."""
    token: str | None
    """Its version (:func:`version_token`), ``None`` when the backend gives none."""


#: Every object of a store: key (relative to the store) -> what the listing said.
Listing = Mapping[str, ListedObject]


#: What obstore reports as the modification time of an answer that gave none.
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def version_token(meta: Any) -> str | None:
    """What identifies one version of an object in obstore's ``ObjectMeta``.

    The ETag where the backend gives one, else its version id, else
    last-modified and size together. An ETag is kept in its quoted form
    (RFC 9110): Azure lists ETags bare but answers a GET with them quoted,
    and one object must give one token both ways. obstore reports a
    response without ``Last-Modified`` (an HTTP server's answer that carries
    no version, such as ``cytearc-vfs serve``'s) as the Unix epoch: that
    is no version, and gives no token.

    >>> version_token({"e_tag": '"9f3e"', "version": None, "size": 3})
    'etag:"9f3e"'
    >>> version_token({"e_tag": "0x8DC9F3E", "version": None, "size": 3})
    'etag:"0x8DC9F3E"'
    >>> version_token({"e_tag": None, "version": None, "last_modified": "2026-01-01", "size": 3})
    'modified:2026-01-01:3'
    >>> version_token({"e_tag": None, "last_modified": _UNIX_EPOCH, "size": 3}) is None
    True
    """
    tag = meta.get("e_tag")
    if tag:
        weak = tag.startswith("W/")
        bare = tag.removeprefix("W/")
        quoted = bare if bare.startswith('"') and bare.endswith('"') else f'"{bare}"'
        return f"etag:{'W/' if weak else ''}{quoted}"
    if meta.get("version"):
        return f"version:{meta['version']}"
    modified = meta.get("last_modified")
    if modified is not None and modified != _UNIX_EPOCH and meta.get("size") is not None:
        return f"modified:{meta['last_modified']}:{meta['size']}"
    return None
