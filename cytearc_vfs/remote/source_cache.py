"""The bounded cache of remote source bytes, in the system temporary directory.

Spec ("Zarr internals", remote sources): remote sources read through a
temporary cache in the system temporary directory (``TMPDIR`` on Linux and
macOS). It keeps the encoded shards that a read covers densely and the
shard-index suffixes of sharded reads, up to ``CYTEARC_SOURCE_CACHE_BYTES``
per open composite (or mount): bytes or a size such as ``512M``, 2 GiB when
unset, ``0`` to read the sources directly. The directory is created by the
first fetch and removed when the store closes or the process exits. A fault
of the local directory turns the cache off, and reads continue from the
sources.

One :class:`SourceCache` belongs to one open store. Entries are files named
by a hash of their key, written whole to a temporary name and renamed, so a
reader never sees a half-written entry; the index of entries (least recently
used first) lives in memory, so nothing on disk is ever trusted beyond the
open store that wrote it. The index records each entry's size and a crc32c
per 64 KiB block; every read checks the blocks it returns, so a truncated or
altered file is never served: it turns the cache off (one warning naming the
file) and the read goes to the source.

The directory holds an owner record (:mod:`cytearc_vfs.remote.cache_owners`), and
making it first removes the directories of processes that died without
cleaning up (killed with SIGKILL, say).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from typing import NamedTuple

import google_crc32c

from .cache_owners import CACHE_PREFIX, sweep_orphans, write_owner

__all__ = [
    "CACHE_ENV",
    "DEFAULT_CACHE_BYTES",
    "CacheInfo",
    "SourceCache",
    "cache_bytes_from_env",
    "parse_cache_bytes",
]

CACHE_ENV = "CYTEARC_SOURCE_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 2 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
BLOCK_BYTES = 64 << 10
"""Bytes covered by one checksum: a range read checks (and reads) whole blocks."""

logger = logging.getLogger(__name__)


class CacheInfo(NamedTuple):
    """What a store's source cache holds and has done (``store.cache_info()``)."""

    hits: int
    """Requests served from the cache."""
    misses: int
    """Cacheable requests fetched from the source."""
    bytes_cached: int
    """Bytes the cache holds now."""
    max_bytes: int
    """Its budget (``CYTEARC_SOURCE_CACHE_BYTES``)."""
    evictions: int
    """Entries dropped to stay under the budget."""
    enabled: bool
    """False when the budget is 0 or a fault of the directory turned it off."""
    directory: str | None
    """Its directory, once the first fetch created it."""
    refetches: int = 0
    """Cached parts (a shard, its index, a range) whose bytes failed a reader's check:
    each was dropped and fetched again from the source once."""


def parse_cache_bytes(text: str) -> int:
    """A cache size: bytes, or a number with ``K``, ``M``, ``G`` or ``T`` (binary
    multiples, ``B`` or ``iB`` optional).

    >>> parse_cache_bytes("512M"), parse_cache_bytes("2 GiB"), parse_cache_bytes("0")
    (536870912, 2147483648, 0)
    """
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(
            f"{CACHE_ENV}={text!r} is not a size: give bytes (e.g. 1048576), a size such as "
            "512M or 2G, or 0 to read remote sources without a cache"
        )
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.upper()])


def cache_bytes_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The budget ``CYTEARC_SOURCE_CACHE_BYTES`` sets (2 GiB when unset or empty)."""
    text = (os.environ if environ is None else environ).get(CACHE_ENV, "").strip()
    return DEFAULT_CACHE_BYTES if not text else parse_cache_bytes(text)


def _remove(directory: str, owner: int) -> None:
    # Only the process that made the directory removes it: a forked child
    # that exits (or closes its copy of the store) must not take the
    # directory from under its parent, whose cache still serves from it.
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


#: Every cache of this process, so a forked child can let go of its parent's directories.
_LIVE: weakref.WeakSet[SourceCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_LIVE):
        cache._forget_after_fork()


def block_checksums(data: bytes | memoryview) -> bytes:
    """crc32c of each :data:`BLOCK_BYTES` block of ``data``, 4 bytes each.

    >>> len(block_checksums(b"x" * (BLOCK_BYTES + 1)))
    8
    """
    whole = bytes(data)  # the C extension takes bytes, not views
    return b"".join(
        google_crc32c.value(whole[start : start + BLOCK_BYTES]).to_bytes(4, "little")
        for start in range(0, len(whole), BLOCK_BYTES)
    )


class _Entry(NamedTuple):
    size: int
    checksums: bytes  # block_checksums of the bytes written
    key: str  # what it was stored under (discard finds a part's entries by it)


class SourceCache:
    """A byte-budgeted, least-recently-used cache of source bytes in files.

    Thread-safe. Every operation that touches the directory turns the cache
    off on an ``OSError`` (a full disk, a removed or unwritable directory)
    or on an entry whose size or checksums differ from what was written:
    :meth:`get` then misses and :meth:`put` does nothing, so reads go to
    the sources.
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = cache_bytes_from_env() if max_bytes is None else max_bytes
        if self.max_bytes < 0:
            raise ValueError(f"a cache budget must be 0 or more bytes, not {self.max_bytes}")
        self._enabled = self.max_bytes > 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # by file name, LRU first
        self._bytes = self._hits = self._misses = self._evictions = self._refetches = 0
        self._directory: str | None = None
        self._finalizer: weakref.finalize[[str, int], SourceCache] | None = None
        self._swept = False
        # fetches from the source in flight, by key: a concurrent miss of the same key
        # waits for that fetch instead of making its own request
        self._flight_lock = threading.Lock()
        self._in_flight: dict[str, Future[tuple[bytes | None] | None]] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------------ use

    def get(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or ``None`` (a miss)."""
        name = _name(key)
        with self._lock:
            if not self._enabled:
                return None
            if name not in self._entries or self._directory is None:
                self._misses += 1
                return None
            self._entries.move_to_end(name)
            entry = self._entries[name]
            path = os.path.join(self._directory, name)
            try:
                with open(path, "rb") as file:
                    data = file.read()
            except OSError as exc:
                self._fault(f"cannot read {path} ({exc})")
                return None
            if len(data) != entry.size or block_checksums(data) != entry.checksums:
                self._fault(_damaged(path, len(data), entry.size))
                return None
            self._hits += 1
            return data

    def get_range(self, key: str, start: int, stop: int) -> bytes | None:
        """Bytes ``start:stop`` of the entry ``key`` when it is cached (a hit), else
        ``None`` without counting a miss (ranges are not cached on their own)."""
        name = _name(key)
        with self._lock:
            if not self._enabled or self._directory is None or name not in self._entries:
                return None
            entry = self._entries[name]
            stop = min(stop, entry.size)
            if not 0 <= start <= stop:
                return None
            self._entries.move_to_end(name)
            # whole checksummed blocks around the range are read and checked
            first_block, end_block = start // BLOCK_BYTES, -(-stop // BLOCK_BYTES)
            low = first_block * BLOCK_BYTES
            high = min(entry.size, end_block * BLOCK_BYTES)
            path = os.path.join(self._directory, name)
            try:
                descriptor = os.open(path, os.O_RDONLY)
                try:
                    blocks = os.pread(descriptor, high - low, low)
                    actual = os.fstat(descriptor).st_size
                finally:
                    os.close(descriptor)
            except OSError as exc:
                self._fault(f"cannot read {path} ({exc})")
                return None
            expected = entry.checksums[4 * first_block : 4 * end_block]
            if actual != entry.size or block_checksums(blocks) != expected:
                self._fault(_damaged(path, actual, entry.size))
                return None
            self._hits += 1
            return blocks[start - low : stop - low]

    def begin_fetch(self, key: str) -> Future[tuple[bytes | None] | None] | None:
        """Claim the fetch of ``key`` from the source: ``None`` when the caller is to fetch
        it (and must call :meth:`end_fetch` whatever happens), else the fetch already in
        flight, whose result is ``(bytes,)`` (``(None,)``: no such key) or ``None`` when
        that fetch failed (the waiter then fetches for itself)."""
        if not self._enabled:
            return None  # no cache: each read goes to the source (CYTEARC_SOURCE_CACHE_BYTES=0)
        with self._flight_lock:
            running = self._in_flight.get(key)
            if running is None:
                self._in_flight[key] = Future()
            return running

    def end_fetch(self, key: str, fetched: tuple[bytes | None] | None) -> None:
        """End the fetch of ``key`` claimed by :meth:`begin_fetch`, with what it fetched
        (put in the cache before this, so a later miss finds it there) or ``None``."""
        with self._flight_lock:
            running = self._in_flight.pop(key, None)
        if running is not None and not running.done():
            running.set_result(fetched)

    def shared_hit(self) -> None:
        """Count a request served by another's fetch in flight (no request of its own)."""
        with self._lock:
            self._hits += 1

    def size(self, key: str) -> int | None:
        """The size of the entry ``key``, or ``None`` when it is not cached (no
        counters change)."""
        with self._lock:
            entry = self._entries.get(_name(key)) if self._enabled else None
            return None if entry is None else entry.size

    def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key``, evicting the least recently used entries to
        stay within the budget (an entry larger than the budget is not kept)."""
        size = len(data)
        name = _name(key)
        self._sweep_once()
        checksums = block_checksums(data)
        with self._lock:
            if not self._enabled or size > self.max_bytes or name in self._entries:
                return
            try:
                directory = self._open_directory()
                while self._bytes + size > self.max_bytes and self._entries:
                    victim, victim_entry = self._entries.popitem(last=False)
                    self._bytes -= victim_entry.size
                    self._evictions += 1
                    os.unlink(os.path.join(directory, victim))
                # whole or not at all: a half-written file never has the entry's name
                partial = os.path.join(directory, f".{name}.{threading.get_ident()}")
                with open(partial, "wb") as file:
                    file.write(data)
                os.replace(partial, os.path.join(directory, name))
            except OSError as exc:
                self._fault(f"cannot write to {self._directory or tempfile.gettempdir()} ({exc})")
                return
            self._entries[name] = _Entry(size, checksums, key)
            self._bytes += size

    def discard(self, prefix: str) -> int:
        """Drop every entry whose key starts with ``prefix`` (bytes that failed a reader's
        check: the read fetches them again from the source); returns how many.

        Each call counts one refetch (:attr:`CacheInfo.refetches`), entries or not.
        """
        with self._lock:
            self._refetches += 1
            names = [name for name, entry in self._entries.items() if entry.key.startswith(prefix)]
            for name in names:
                entry = self._entries.pop(name)
                self._bytes -= entry.size
                if self._directory is not None:
                    # dropped from the index already: never served, even if it stays
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self._directory, name))
            return len(names)

    def info(self) -> CacheInfo:
        """Counters and state (see :class:`CacheInfo`)."""
        with self._lock:
            return CacheInfo(
                hits=self._hits,
                misses=self._misses,
                bytes_cached=self._bytes,
                max_bytes=self.max_bytes,
                evictions=self._evictions,
                enabled=self._enabled,
                directory=self._directory,
                refetches=self._refetches,
            )

    def close(self) -> None:
        """Remove the directory and everything in it; later reads miss and refill
        a new directory (a closed store that is used again)."""
        with self._lock:
            self._drop()

    # ------------------------------------------------------------ internals

    def _sweep_once(self) -> None:
        # Before this cache makes its directory, remove those of dead
        # processes; outside the lock, since it may delete gigabytes.
        with self._lock:
            claim = self._enabled and not self._swept
            self._swept = True
        if claim:
            sweep_orphans()

    def _open_directory(self) -> str:
        if self._directory is None:
            # tempfile honours TMPDIR; the name says whose it is
            directory = tempfile.mkdtemp(prefix=CACHE_PREFIX)
            # removed at garbage collection or interpreter exit at the latest
            self._finalizer = weakref.finalize(self, _remove, directory, os.getpid())
            self._directory = directory
            write_owner(directory)
        return self._directory

    def _drop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # removes the directory once
        self._finalizer = None
        self._directory = None
        self._entries.clear()
        self._bytes = 0

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's directory and index stay the parent's.

        The child starts empty and makes its own directory at its first fetch
        (removed when the child closes the store or exits); it never evicts,
        writes or removes the parent's files. The lock is made anew, since
        another thread of the parent may have held it at the fork.
        """
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = None
        self._lock = threading.Lock()
        self._flight_lock = threading.Lock()
        self._in_flight = {}  # the parent's fetches: never answered in the child
        self._directory = None
        self._entries = OrderedDict()
        self._bytes = 0

    def _fault(self, reason: str) -> None:
        # the local directory failed: the sources stay readable without it
        if self._enabled:
            logger.warning("source cache turned off, reads continue from the sources: %s", reason)
        self._enabled = False
        self._drop()


def _damaged(path: str, size: int, expected: int) -> str:
    if size != expected:
        return f"cache file {path} holds {size} bytes, not the {expected} written"
    return f"cache file {path} does not match the checksums recorded when it was written"


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
