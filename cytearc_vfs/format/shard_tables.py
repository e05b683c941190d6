"""Shard tables: which shard files a count array was written with, by size and index checksum.

A shard of ``counts`` or ``countsT`` ends with its index and the index's
crc32c (the ``sharding_indexed`` codec with ``index_location="end"``), and
the index holds the offset and length of every inner chunk. So the last four
bytes of a shard identify its layout of chunks, and its size bounds it.
Checksums inside the shard catch a flipped byte, but not a shard file that
is deleted (zarr reads the fill value), swapped with another shard of the
same array, or replaced by one encoded anew: each of those is a well-formed
shard. The writer therefore records, on each count array, the attribute
``cytearc:shardTable``::

    {"version": 1, "shards": N, "stored": "<base64 bitmap>",
     "sizes": "<base64 zlib little-endian uint64>",
     "crc32c": "<base64 little-endian uint32>"}

over the ``N`` shards of the array's first axis (row shards span every
column). :func:`check_stored_shards` compares a store with it on open (a local store:
a listing, each shard's size and last four bytes; another store: a listing
with sizes, so an open costs no request per shard), and the gather reader
compares every shard index it reads (:meth:`ShardTable.check_index`), so a
deleted, swapped or replaced shard is an :class:`IdentityMismatchError`
naming the shard, never other values. Arrays written before the table
existed have none and are read as before; ``repack`` writes one.
"""

from __future__ import annotations

import asyncio
import base64
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.store import Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, ObjectStore

from ..errors import IdentityMismatchError, RecordShapeError
from .gathering import gather_all
from .object_keys import store_key
from .object_listing import list_recursive

__all__ = [
    "SHARD_TABLE_ATTR",
    "ShardTable",
    "check_stored_shards",
    "read_shard_table",
    "scan_shards",
    "shard_key",
]

#: Attribute of ``counts`` and ``countsT`` holding the shard table.
SHARD_TABLE_ATTR = "cytearc:shardTable"
_VERSION = 1
# Size and tail requests to a non-local store in flight at once.
_CONCURRENT_REQUESTS = 64
REMEDY = (
    "shard files were deleted, replaced or moved after writing; restore the store from a copy "
    "or re-import the dataset"
)
#: The remedy for a store whose records do not parse (a table among them): the
#: data-only rewrite reads such a store. The store check
#: (:mod:`.source_store`) names it for every record, so it lives here, below it.
REWRITE_REMEDY = (
    "re-import the dataset, or rewrite it with `cytearc-vfs repack --data-only SOURCE DEST`"
)


def shard_key(array_path: str, shard: int) -> str:
    """Key of row shard ``shard`` of the array at ``array_path``."""
    return f"{array_path}/c/{shard}/0"


@dataclass(frozen=True)
class ShardTable:
    """The shards a count array was written with: stored or not, size, index crc32c."""

    stored: npt.NDArray[np.bool_]
    sizes: npt.NDArray[np.uint64]
    crc32c: npt.NDArray[np.uint32]
    #: False for a scan that listed sizes without reading the shards' tails.
    tails_read: bool = True

    @classmethod
    def empty(cls, shards: int, *, tails_read: bool = True) -> ShardTable:
        """A table of ``shards`` shards, none stored yet."""
        return cls(
            np.zeros(shards, dtype=bool),
            np.zeros(shards, dtype=np.uint64),
            np.zeros(shards, dtype=np.uint32),
            tails_read,
        )

    def record(self, shard: int, size: int, tail: bytes) -> None:
        """Record shard ``shard`` as stored: ``size`` bytes ending with ``tail``."""
        self.stored[shard] = True
        self.sizes[shard] = size
        self.crc32c[shard] = int.from_bytes(tail[-4:].rjust(4, b"\0"), "little")

    def to_json(self) -> dict[str, Any]:
        """The attribute value."""
        return {
            "version": _VERSION,
            "shards": len(self.stored),
            "stored": base64.b64encode(np.packbits(self.stored).tobytes()).decode("ascii"),
            "sizes": base64.b64encode(zlib.compress(self.sizes.astype("<u8").tobytes(), 6)).decode(
                "ascii"
            ),
            "crc32c": base64.b64encode(self.crc32c.astype("<u4").tobytes()).decode("ascii"),
        }

    @classmethod
    def from_json(cls, value: object, *, shards: int, where: str) -> ShardTable:
        """Parse the attribute strictly: ``shards`` is the array's number of row shards."""
        fields = {"version", "shards", "stored", "sizes", "crc32c"}
        if not isinstance(value, Mapping) or set(value) != fields:
            raise RecordShapeError(
                f"{where}: {SHARD_TABLE_ATTR} must be an object with exactly the fields "
                f"{sorted(fields)}, found {value!r:.200}; {REWRITE_REMEDY}"
            )
        if value["version"] != _VERSION or value["shards"] != shards:
            raise RecordShapeError(
                f"{where}: {SHARD_TABLE_ATTR} has version {value['version']!r} and "
                f"{value['shards']!r} shards, expected version {_VERSION} and the array's "
                f"{shards}; {REWRITE_REMEDY}"
            )
        try:
            bitmap = base64.b64decode(value["stored"], validate=True)
            if len(bitmap) != -(-shards // 8):
                raise ValueError(f"a bitmap of {len(bitmap)} bytes for {shards} shards")
            stored = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=shards).astype(bool)
            sizes = np.frombuffer(
                zlib.decompress(base64.b64decode(value["sizes"], validate=True)), dtype="<u8"
            )
            crcs = np.frombuffer(base64.b64decode(value["crc32c"], validate=True), dtype="<u4")
        except (ValueError, TypeError, zlib.error) as exc:
            raise RecordShapeError(
                f"{where}: {SHARD_TABLE_ATTR} does not decode ({exc}); {REWRITE_REMEDY}"
            ) from None
        if len(stored) != shards or len(sizes) != shards or len(crcs) != shards:
            raise RecordShapeError(
                f"{where}: {SHARD_TABLE_ATTR} describes {len(sizes)} sizes and {len(crcs)} "
                f"checksums for {shards} shards; {REWRITE_REMEDY}"
            )
        return cls(stored, sizes.astype(np.uint64), crcs.astype(np.uint32))

    def check_index(self, key: str, shard: int, tail: bytes | None, *, where: str) -> None:
        """Refuse a shard read whose presence or index checksum differs from the table.

        ``tail`` holds the shard's last bytes as read (at least four), or
        ``None`` when the store has no such key.
        """
        if tail is None:
            if self.stored[shard]:
                raise IdentityMismatchError(
                    f"{where}: shard {key!r} was written ({int(self.sizes[shard])} bytes) but is "
                    f"missing; {REMEDY}"
                )
            return
        if not self.stored[shard]:
            raise IdentityMismatchError(
                f"{where}: shard {key!r} exists but was never written (its rows held only zeros); "
                f"{REMEDY}"
            )
        found = int.from_bytes(tail[-4:], "little")
        if found != int(self.crc32c[shard]):
            raise IdentityMismatchError(
                f"{where}: shard {key!r} is not the shard written there (its index checksum is "
                f"{found:08x}, recorded {int(self.crc32c[shard]):08x}); {REMEDY}"
            )


def read_shard_table(attrs: Mapping[str, Any], *, shards: int, where: str) -> ShardTable | None:
    """The table recorded in a count array's ``attrs``, or ``None`` for an older array."""
    value = attrs.get(SHARD_TABLE_ATTR)
    if value is None:
        return None
    return ShardTable.from_json(value, shards=shards, where=where)


def _scan_local(directory: str, array_path: str, shards: int) -> ShardTable:
    found = ShardTable.empty(shards)
    shard_dir = os.path.join(directory, *array_path.split("/"), "c")
    if not os.path.isdir(shard_dir):
        return found
    with os.scandir(shard_dir) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        shard = _shard_number(array_path, name, shards)
        try:
            with open(os.path.join(shard_dir, name, "0"), "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                tail = os.pread(handle.fileno(), 4, max(0, size - 4))
        except (FileNotFoundError, NotADirectoryError):
            continue
        found.record(shard, size, tail)
    return found


async def _scan_any(store: Store, array_path: str, shards: int, *, tails: bool) -> ShardTable:
    found = ShardTable.empty(shards, tails_read=tails)
    prefix = f"{array_path}/c/"
    sizes = await _listed_sizes(store, prefix)
    limit = asyncio.Semaphore(_CONCURRENT_REQUESTS)

    async def one(key: str) -> None:
        name, _, rest = key[len(prefix) :].partition("/")
        shard = _shard_number(array_path, name, shards)
        if rest != "0":
            raise IdentityMismatchError(
                f"{key!r} is not a shard of a count array written by this package; {REMEDY}"
            )
        tail = b""
        async with limit:
            size = sizes[key]
            if size is None:
                size = await store.getsize(key)
            if tails:
                got = await store.get(key, default_buffer_prototype(), SuffixByteRequest(4))
                if got is None:
                    return
                tail = got.to_bytes()
        found.record(shard, size, tail)

    await gather_all(*(one(key) for key in sizes))
    return found


async def _listed_sizes(store: Store, prefix: str) -> dict[str, int | None]:
    """Keys below ``prefix`` with their sizes where the listing carries them."""
    if isinstance(store, ObjectStore):  # an object store lists sizes: no request per key
        # an HTTP server that refuses Depth: infinity is walked at Depth: 1
        # (a shard directory: one request, then one per shard)
        return {
            store_key(store, item["path"]): int(item["size"])
            for item in await list_recursive(store, prefix)
        }
    listed: dict[str, int | None] = {}
    async for key in store.list_prefix(prefix):
        if key.endswith("/"):
            # no key ends in '/': a backend that cannot read a directory's listing
            # (fsspec's HTTP filesystem, from an HTML index it does not follow)
            # answers with the directory itself, which is no shard gone or added
            raise ValueError(
                f"this store cannot list {prefix!r}: its backend answered with the "
                f"directory itself ({key!r}), not the files in it, as fsspec's HTTP "
                "filesystem does for a server whose directories it cannot list; open "
                "the location through obstore, the default backend for http(s):// "
                'locations (without {"backend": "fsspec"} in its storage options)'
            )
        listed[key] = None
    return listed


def _shard_number(array_path: str, name: str, shards: int) -> int:
    # a chunk key's index is ASCII digits without a leading zero ("²" and "01" are not)
    canonical = name.isascii() and name.isdigit() and str(int(name)) == name
    if not canonical or int(name) >= shards:
        raise IdentityMismatchError(
            f"{array_path}/c/{name} is not one of the {shards} row shards of {array_path}; {REMEDY}"
        )
    return int(name)


def scan_shards(
    store: Store, array_path: str, shards: int, *, tails: bool | None = None
) -> ShardTable:
    """The table of the shard files the store holds now for the array at ``array_path``.

    A local store is read with one directory listing and one four-byte read
    per shard. Other stores are listed (an object store's listing carries
    the sizes; others are asked each shard's size, a bounded number at a
    time), and their shards' last four bytes are read only when ``tails`` is
    true (the default for local stores only): a request per shard is what an
    open of a remote store cannot afford, and the gather reader compares the
    checksum of every index it reads anyway.
    """
    if type(store) is LocalStore:
        return _scan_local(str(store.root), array_path, shards)
    return sync(_scan_any(store, array_path, shards, tails=bool(tails)))


def check_stored_shards(store: Store, array_path: str, table: ShardTable, *, where: str) -> None:
    """Compare the shard files of the array at ``array_path`` with its recorded table.

    Every written shard must be present with its size and index checksum, and
    no other shard may exist.

    Raises
    ------
    IdentityMismatchError
        Naming the first shard that is missing, extra, resized or replaced.
    """
    found = scan_shards(store, array_path, len(table.stored))
    differ = (found.stored != table.stored) | (found.sizes != table.sizes)
    if found.tails_read:  # else the gather reader compares them as it reads
        differ |= found.crc32c != table.crc32c
    for shard in np.flatnonzero(differ).tolist()[:1]:
        key = shard_key(array_path, shard)
        if found.stored[shard] and found.sizes[shard] != table.sizes[shard] and table.stored[shard]:
            raise IdentityMismatchError(
                f"{where}: shard {key!r} holds {int(found.sizes[shard])} bytes, "
                f"{int(table.sizes[shard])} were written; {REMEDY}"
            )
        tail = int(found.crc32c[shard]).to_bytes(4, "little") if found.stored[shard] else None
        table.check_index(key, shard, tail, where=where)
