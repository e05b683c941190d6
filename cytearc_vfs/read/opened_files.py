"""A local source's files as its open found them: a source replaced while open is refused.

An open compares a source with the fingerprints its composite (or mount)
recorded; the reads come later, possibly days later in a served or mounted
store. The gather reader keeps each shard's index from its first read, so a
source replaced in between (``write_counts(..., overwrite=True)``, a copy
over it) would be read at the old offsets: bytes that fail their checksum
(reported as damage), run past the file's end, or, worst, decode as the new
source's values under the old fingerprint. So a local source's reads check
which files they read, at no extra request and at a cost that does not grow
with the source:

- the open records the identity (device, inode, size, modification and
  change times) of each count array's ``zarr.json``, *before* it reads the
  documents it verifies: a replacement after that ``stat`` changes the
  identity, one before it is in the documents the open compared
  (:func:`opened_source`);
- the first read of a shard's index ``fstat``\\ s the descriptor it reads
  from, records the shard file's identity and compares the array document's
  with the open's (:meth:`ShardFiles.first_read`), so a replacement between
  the open and the first read is caught too;
- every later read of that shard compares the ``fstat`` of the descriptor it
  opens anyway with that record (:meth:`ShardFiles.check`).

A replaced file is an :class:`IdentityMismatchError` naming the source, the
file and the remedy (open again, which compares the fingerprints); a damaged
file that was not replaced still fails its checksums as damage. AnnData
sources check their chunk files against the composite's record instead
(:mod:`.local_chunk_files`); remote sources pin their objects' ETags
(:mod:`cytearc_vfs.remote.pinned_store`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import IdentityMismatchError
from .local_chunk_files import file_version

__all__ = ["FileIdentity", "OpenedSource", "ShardFiles", "opened_source", "open_checked"]


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file a path named: device, inode, size and version (times)."""

    device: int
    """``st_dev``."""
    inode: int
    """``st_ino``: a file renamed into place (zarr writes so) is a new inode."""
    size: int
    """Bytes."""
    version: str
    """Modification and change times (:func:`~.local_chunk_files.file_version`):
    a rewrite in place moves them."""

    @classmethod
    def of(cls, stat: os.stat_result) -> FileIdentity:
        """The identity of the file ``stat`` describes."""
        return cls(stat.st_dev, stat.st_ino, stat.st_size, file_version(stat))

    def change_to(self, now: FileIdentity | None) -> str | None:
        """How ``now`` differs from this identity, in words (``None``: not at all)."""
        if now is None:
            return "was deleted"
        if (now.device, now.inode) != (self.device, self.inode):
            return f"was replaced by another file ({now.size} bytes, {self.size} before)"
        if now.size != self.size:
            return f"was rewritten ({now.size} bytes, {self.size} before)"
        if now.version != self.version:
            return "was rewritten in place (the same size, other times)"
        return None


def _identity_at(path: str) -> FileIdentity | None:
    try:
        return FileIdentity.of(os.stat(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True, slots=True)
class OpenedSource:
    """The array documents of a local source as its open found them."""

    root: str
    """The source's directory."""
    label: str
    """The source as errors name it (``source 'a' at /data/a.zarr``)."""
    reopen: str
    """The remedy's first half: how to open it again (``reopen the composite,
    whose open checks the source's fingerprints``)."""
    documents: Mapping[str, FileIdentity | None]
    """``{array path: identity of its zarr.json}`` (``None``: none at the open)."""

    def refusal(self, path: str, change: str) -> IdentityMismatchError:
        """The error for the file at ``path`` (absolute) that changed as ``change`` says."""
        return IdentityMismatchError(
            f"{self.label}: the file {path} {change} since the source was opened, so it is "
            f"not what the open checked. {self.reopen[:1].upper()}{self.reopen[1:]} "
            "(a `cytearc-vfs serve` or `mount-fs` of it reopens by itself): a source "
            "restored from a copy, or written again with the same values, reads again after "
            "that, and one with other values is refused there"
        )

    def check_document(self, array: str) -> None:
        """Refuse reading ``array`` when its ``zarr.json`` is not the one the open found
        (a document gone altogether is left to the reader's own, more precise error)."""
        if array not in self.documents:
            return
        recorded = self.documents[array]
        path = os.path.join(self.root, array, "zarr.json")
        now = _identity_at(path)
        if recorded is None or now is None:
            return
        change = recorded.change_to(now)
        if change is not None:
            raise self.refusal(path, change)

    def unchanged(self) -> bool:
        """Whether every array document is still the file the open found (one
        ``stat`` each): what lets a process reuse an open it verified before."""
        return all(
            _identity_at(os.path.join(self.root, array, "zarr.json")) == recorded
            for array, recorded in self.documents.items()
        )


def opened_source(root: str, arrays: list[str], *, label: str, reopen: str) -> OpenedSource:
    """``stat`` the ``zarr.json`` of each array of ``arrays`` under ``root``: call it
    before the open reads them (see the module docstring)."""
    # a relative root is the one the open meant: kept absolute, a later change of the
    # working directory cannot turn every check into "no such file" (and so none)
    root = os.path.abspath(root)
    documents = {array: _identity_at(os.path.join(root, array, "zarr.json")) for array in arrays}
    return OpenedSource(root, label, reopen, documents)


@dataclass(frozen=True, slots=True)
class ShardFiles:
    """The shard files of one local array as a reader first read their indexes."""

    opened: OpenedSource
    """What the open found."""
    array: str
    """The array's path in the source."""
    seen: dict[str, FileIdentity] = field(default_factory=dict)
    """``{shard file path: identity at its index read}``, filled by :meth:`first_read`
    (from the decoding threads: one key's item is set once, under the GIL)."""

    def first_read(self, path: str, stat: os.stat_result | None) -> None:
        """Record the shard file at ``path`` whose index is being read (``stat``: of the
        descriptor read from; ``None``: no such file), after checking that the array
        is still the one the open found."""
        self.opened.check_document(self.array)
        if stat is not None:
            self.seen[path] = FileIdentity.of(stat)

    def check(self, path: str, stat: os.stat_result | None) -> None:
        """Refuse reading chunks of the shard at ``path`` when it is not the file whose
        index was read (``stat``: of the descriptor opened; ``None``: it is gone)."""
        recorded = self.seen.get(path)
        if recorded is None:
            return
        change = recorded.change_to(None if stat is None else FileIdentity.of(stat))
        if change is not None:
            raise self.opened.refusal(path, change)


def open_checked(path: str, files: ShardFiles | None) -> int:
    """A read-only descriptor of the shard file ``path``, checked by ``files`` (when
    given) with its ``fstat``; the caller closes it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if files is not None:
            files.check(path, None)
        raise
    if files is not None:
        try:
            files.check(path, os.fstat(descriptor))
        except BaseException:
            os.close(descriptor)
            raise
    return descriptor
