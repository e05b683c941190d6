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
open store that wrote it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

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


def _remove(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


class SourceCache:
    """A byte-budgeted, least-recently-used cache of source bytes in files.

    Thread-safe. Every operation that touches the directory turns the cache
    off on an ``OSError`` (a full disk, a removed or unwritable directory):
    :meth:`get` then misses and :meth:`put` does nothing, so reads go to
    the sources.
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = cache_bytes_from_env() if max_bytes is None else max_bytes
        if self.max_bytes < 0:
            raise ValueError(f"a cache budget must be 0 or more bytes, not {self.max_bytes}")
        self._enabled = self.max_bytes > 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # file name -> size, LRU first
        self._bytes = self._hits = self._misses = self._evictions = 0
        self._directory: str | None = None
        self._finalizer: weakref.finalize[[str], SourceCache] | None = None

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
            path = os.path.join(self._directory, name)
            try:
                with open(path, "rb") as file:
                    data = file.read()
            except OSError:
                self._fault()
                return None
            if len(data) != self._entries[name]:  # changed under us: not ours to trust
                self._fault()
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
            size = self._entries[name]
            stop = min(stop, size)
            if not 0 <= start <= stop:
                return None
            self._entries.move_to_end(name)
            try:
                descriptor = os.open(os.path.join(self._directory, name), os.O_RDONLY)
                try:
                    data = os.pread(descriptor, stop - start, start)
                finally:
                    os.close(descriptor)
            except OSError:
                self._fault()
                return None
            if len(data) != stop - start:
                self._fault()
                return None
            self._hits += 1
            return data

    def size(self, key: str) -> int | None:
        """The size of the entry ``key``, or ``None`` when it is not cached (no
        counters change)."""
        with self._lock:
            return self._entries.get(_name(key)) if self._enabled else None

    def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key``, evicting the least recently used entries to
        stay within the budget (an entry larger than the budget is not kept)."""
        size = len(data)
        name = _name(key)
        with self._lock:
            if not self._enabled or size > self.max_bytes or name in self._entries:
                return
            try:
                directory = self._open_directory()
                while self._bytes + size > self.max_bytes and self._entries:
                    victim, victim_size = self._entries.popitem(last=False)
                    self._bytes -= victim_size
                    self._evictions += 1
                    os.unlink(os.path.join(directory, victim))
                # whole or not at all: a half-written file never has the entry's name
                partial = os.path.join(directory, f".{name}.{threading.get_ident()}")
                with open(partial, "wb") as file:
                    file.write(data)
                os.replace(partial, os.path.join(directory, name))
            except OSError:
                self._fault()
                return
            self._entries[name] = size
            self._bytes += size

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
            )

    def close(self) -> None:
        """Remove the directory and everything in it; later reads miss and refill
        a new directory (a closed store that is used again)."""
        with self._lock:
            self._drop()

    # ------------------------------------------------------------ internals

    def _open_directory(self) -> str:
        if self._directory is None:
            # tempfile honours TMPDIR; the name says whose it is
            self._directory = tempfile.mkdtemp(prefix="cytearc-source-cache-")
            # removed at garbage collection or interpreter exit at the latest
            self._finalizer = weakref.finalize(self, _remove, self._directory)
        return self._directory

    def _drop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # removes the directory once
        self._finalizer = None
        self._directory = None
        self._entries.clear()
        self._bytes = 0

    def _fault(self) -> None:
        # the local directory failed: the sources stay readable without it
        self._enabled = False
        self._drop()


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
