"""The FUSE callbacks: a :class:`~cytearc_vfs.fuse.tree.StoreTree` answered to the kernel.

:class:`TreeOperations` is the operations object the binding (``mfusepy``)
calls, from libfuse's worker threads, one call per kernel request. Each call
runs the tree's coroutine on zarr's event loop (``zarr.core.sync.sync``) and
translates the outcome into what the kernel expects: a stat dictionary,
directory entries, bytes, or an ``OSError`` whose errno the binding returns.

Errors: an absent path is ``ENOENT``, a name longer than a local store's
file system allows ``ENAMETOOLONG`` (as that directory answers); anything else that goes wrong while
answering (a source that disappeared, a backend error, a failed checksum) is
``EIO``, logged once per failed call with the store's own message, so a
reader gets an error and never bytes that are not the store's. So is a read
of a local file that was replaced or rewritten since its handle was opened
(:meth:`StoreTree.read` compares the file's ``stat`` identity): each read
reads the store anew, and would otherwise mix two files' bytes. A call that
finds a composite's or mount's source gone or changed first asks its
:class:`~cytearc_vfs_adapters.served_store.ServedStore` to reopen the
location (the source may have been restored) and is answered again, once, on
the new store; each call reads from one store only. The tree is
read-only: every request that would change it is ``EROFS`` (the mount is
also made with ``ro``, so the kernel refuses most of them before they get
here).

Computed values (a composite's count chunks) are computed once per open
file and shared by every handle open on the same key at the same time; the
kernel reads a file in pieces, and computing the chunk for each piece would
multiply the work by the number of pieces. Such files are opened with
direct I/O: the kernel then passes a reader's own request sizes (up to a
megabyte per request) instead of its 128 KiB read-ahead pieces, eight times
fewer round trips for an 8 MiB chunk, and keeps no page cache of a value
that is recomputed on every open anyway.

The binding is used with ``raw_fi``: ``open``, ``read`` and ``release``
receive libfuse's ``fuse_file_info`` (to set ``direct_io``), and wrap
:meth:`TreeOperations.open_file`, :meth:`~TreeOperations.read_file` and
:meth:`~TreeOperations.release_file`, which work with handle numbers.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store
from zarr.core.sync import sync

from ..served_store import ServedStore
from .tree import Entry, StoreTree

__all__ = ["TreeOperations"]

logger = logging.getLogger(__name__)

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT


@dataclass(slots=True)
class _Computed:
    """One computed value, shared by the handles open on its key."""

    handles: int = 0
    """How many open handles use it; the value is dropped with the last."""
    value: Future[bytes] | None = None
    """The value once someone started computing it; ``None`` before, or after a failure."""


@dataclass(slots=True)
class _Handle:
    """An open file."""

    key: str
    size: int
    """The size ``getattr`` reported when the file was opened."""
    computed: _Computed | None = field(default=None)
    """Set for a computed value (see :meth:`StoreTree.is_computed`)."""
    identity: str | None = None
    """A local file's identity when opened (:attr:`Entry.identity`): every read
    checks it, so a file replaced while open is ``EIO``, never mixed bytes."""


def _key_of(path: str) -> str:
    return path.strip("/")


class TreeOperations:
    """The operations object a FUSE binding calls (see the module).

    Parameters
    ----------
    shown
        What the file system shows: the tree of one store, or a served store
        (reopened when a read finds a source gone or changed and it is back).
    on_init
        Called once libfuse has mounted the tree and the kernel has started
        the session (the tree is usable from then on).
    """

    # the binding passes times as integer nanoseconds (and warns otherwise)
    use_ns = True

    def __init__(
        self, shown: StoreTree | ServedStore, *, on_init: Callable[[], None] | None = None
    ) -> None:
        if isinstance(shown, StoreTree):
            self._served, self._tree = ServedStore.fixed(shown.store), shown
        else:
            self._served, self._tree = shown, StoreTree(shown.current)
        self._on_init = on_init
        self._mounted_ns = time.time_ns()
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._lock = threading.Lock()  # guards the two tables below, never held during I/O
        self._handles: dict[int, _Handle] = {}
        self._computed: dict[str, _Computed] = {}
        self._next_handle = 1
        self.computed_values = 0
        """How many values were computed for reading (a count, for tests and stats)."""

    # ----------------------------------------------------------- plumbing

    def _run[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        return sync(coroutine)

    def _tree_of(self, store: Store) -> StoreTree:
        """The tree of ``store`` (made again when a reopen put another store in service)."""
        with self._lock:
            if self._tree.store is not store:
                self._tree = StoreTree(store)
            return self._tree

    def _answered[T](self, ask: Callable[[StoreTree], Coroutine[Any, Any, T]]) -> T:
        """What ``ask`` answers from the store in service, all of it from one store.

        A failure that says a source is gone or changed reopens the location
        (:meth:`ServedStore.recover`) and asks again, once, on the new store;
        a refusal carries what the reopen found as a note.
        """
        first = self._served.use()
        try:
            return self._run(ask(self._tree_of(first)))
        except Exception as exc:
            store = self._run(self._served.recover(first, exc))
            if store is None:
                self._note(exc)
                raise
        finally:
            self._served.done(first)
        try:
            return self._run(ask(self._tree_of(store)))
        except Exception as exc:
            self._note(exc)
            raise
        finally:
            self._served.done(store)

    def _note(self, exc: Exception) -> None:
        note = self._served.explain(exc)
        if note:
            exc.add_note(note)

    def _failed(self, what: str, key: str, exc: BaseException) -> OSError:
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # A name longer than a local store's file system allows (statfs
            # says 255 bytes; the kernel passes FUSE names far longer): no key
            # has it, as a directory of the store itself would answer. It was
            # EIO, and a stderr line echoing the whole name.
            return OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), key)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
        logger.error(
            "mount-fs: %s %r failed (%s: %s%s); answered EIO",
            what,
            key,
            type(exc).__name__,
            first,
            notes,
        )
        return OSError(errno.EIO, f"{what} {key!r} failed: {exc}{notes}")

    def _entry(self, key: str) -> Entry:
        try:
            found = self._answered(lambda tree: tree.entry(key))
        except Exception as exc:
            raise self._failed("stat", key, exc) from exc
        if found is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), key)
        return found

    def _attributes(self, entry: Entry) -> dict[str, Any]:
        modified = self._mounted_ns if entry.modified_ns is None else entry.modified_ns
        if entry.is_dir:
            mode, links = stat.S_IFDIR | 0o555, 2
        else:
            mode, links = stat.S_IFREG | 0o444, 1
        return {
            "st_mode": mode,
            "st_nlink": links,
            "st_size": entry.size,
            "st_blocks": -(-entry.size // 512),
            "st_blksize": 1 << 20,
            "st_uid": self._uid,
            "st_gid": self._gid,
            # a local file's own time, as serve's Last-Modified; where the store
            # keeps none (directories, computed chunks, remote keys) the mount's start
            "st_atime": modified,
            "st_mtime": modified,
            "st_ctime": modified,
        }

    # ----------------------------------------------------------- lifecycle

    def init(self, path: str) -> None:
        """The session started (libfuse's ``init``)."""
        if self._on_init is not None:
            self._on_init()

    def destroy(self, path: str) -> None:
        """The session ended: drop every open handle's value."""
        with self._lock:
            self._handles.clear()
            self._computed.clear()

    # ----------------------------------------------------------- metadata

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        """``stat`` of a path: sizes from the store, computing nothing."""
        return self._attributes(self._entry(_key_of(path)))

    def readdir(self, path: str, fh: int) -> list[str | tuple[str, int, int]]:
        """The names in a directory, each with its file type (no value is read)."""
        key = _key_of(path)
        try:
            children = self._answered(lambda tree: tree.children(key))
        except Exception as exc:
            raise self._failed("list", key, exc) from exc
        entries: list[str | tuple[str, int, int]] = [".", ".."]
        entries += [
            (name, stat.S_IFDIR if is_dir else stat.S_IFREG, 0) for name, is_dir in children
        ]
        return entries

    def statfs(self, path: str) -> dict[str, int]:
        """File system statistics: a read-only tree with no free space."""
        return {"f_bsize": 1 << 20, "f_frsize": 1 << 20, "f_namemax": 255}

    # ----------------------------------------------------------- reading

    def open_file(self, path: str, flags: int) -> int:
        """Open a file for reading; a handle number."""
        if flags & _WRITE_FLAGS:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        key = _key_of(path)
        entry = self._entry(key)
        if entry.is_dir:
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        tree = self._tree_of(self._served.current)
        with self._lock:
            computed = None
            if tree.is_computed(key):
                computed = self._computed.setdefault(key, _Computed())
                computed.handles += 1
            handle = self._next_handle
            self._next_handle += 1
            identity = entry.identity if computed is None else None
            self._handles[handle] = _Handle(key, entry.size, computed, identity)
        return handle

    def _computed_value(self, handle: _Handle, computed: _Computed) -> bytes:
        # Concurrent reads of one value share one computation: the first
        # caller computes (outside the lock), the others wait on its future.
        with self._lock:
            owner = computed.value is None
            if owner:
                computed.value = Future()
            future = computed.value
        assert future is not None
        if owner:
            try:
                value = self._answered(lambda tree: tree.read_whole(handle.key))
            except BaseException as exc:
                with self._lock:
                    computed.value = None  # the next read tries again
                future.set_exception(exc)
                raise
            with self._lock:
                self.computed_values += 1
            future.set_result(value)
            return value
        return future.result()

    def is_computed(self, fh: int) -> bool:
        """Whether the open file ``fh`` holds a computed value."""
        with self._lock:
            handle = self._handles.get(fh)
        return handle is not None and handle.computed is not None

    def read_file(self, path: str, size: int, offset: int, fh: int) -> bytes:
        """``size`` bytes from ``offset`` (fewer at the end); ``EIO`` when the store fails."""
        with self._lock:
            handle = self._handles.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF), path)
        stop = min(offset + size, handle.size)
        if stop <= offset:
            return b""
        try:
            if handle.computed is not None:
                value = self._computed_value(handle, handle.computed)
                if len(value) != handle.size:
                    raise OSError(
                        errno.EIO,
                        f"computed {len(value)} bytes, but its size was given as {handle.size}",
                    )
                return value[offset:stop]
            return self._answered(lambda tree: tree.read(handle.key, offset, stop, handle.identity))
        except Exception as exc:
            raise self._failed("read", handle.key, exc) from exc

    def release_file(self, path: str, fh: int) -> int:
        """Close a handle; the last handle on a computed value drops it."""
        with self._lock:
            handle = self._handles.pop(fh, None)
            if handle is not None and handle.computed is not None:
                handle.computed.handles -= 1
                if handle.computed.handles == 0:
                    self._computed.pop(handle.key, None)
        return 0

    # ------------------------------------------- the binding's file callbacks

    def open(self, path: str, info: Any) -> int:
        """libfuse's ``open`` (``info`` is its ``fuse_file_info``)."""
        info.fh = self.open_file(path, info.flags)
        if self.is_computed(info.fh):
            info.direct_io = 1
        return 0

    def read(self, path: str, size: int, offset: int, info: Any) -> bytes:
        """libfuse's ``read``."""
        return self.read_file(path, size, offset, info.fh)

    def release(self, path: str, info: Any) -> int:
        """libfuse's ``release``."""
        return self.release_file(path, info.fh)

    # ----------------------------------------------------------- read-only

    def _read_only(self, *args: Any) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    create = mkdir = mknod = rmdir = unlink = symlink = link = rename = _read_only
    write = truncate = chmod = chown = utimens = setxattr = removexattr = _read_only
