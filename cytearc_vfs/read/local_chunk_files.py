"""Chunk files of a local AnnData source: read with ``pread``, checked against the record.

A composite records, at creation, the size and version (modification and
change times) of every file of a local AnnData source's count element
(:mod:`.anndata_identity`). An open compares the watched directories, the
metadata documents and a sample of the chunk files, not every file: its cost
must not grow with the source. A chunk file rewritten in place (its bytes
changed without a rename, which moves no directory's times) can slip past
that sample, so the reads check what the open did not: every chunk file a
read opens is compared with its recorded size and version
(:class:`RecordedFiles`), from the ``fstat`` the read makes anyway, and a
recorded file that is gone is refused rather than read as fill values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import IdentityMismatchError, SourceGoneError
from .decode_threads import thread_scratch

__all__ = ["RecordedFiles", "file_version", "read_file"]


def file_version(stat: os.stat_result) -> str:
    """The version a local file is recorded with: its modification and change times.

    The change time moves on any rewrite, even one that restores the
    modification time, so a file replaced with one of equal size is seen.
    """
    return f"mtime:{stat.st_mtime_ns}:ctime:{stat.st_ctime_ns}"


@dataclass(frozen=True, slots=True)
class RecordedFiles:
    """The recorded ``[size, version]`` of a local source's files, by key (relative to
    the source's directory), checked as its chunk files are read."""

    objects: Mapping[str, Any]
    """``{key: [size, version]}`` as recorded when the composite was created."""
    source: str
    """The source as errors name it (``source 'a' at /data/a.zarr``)."""

    def check(self, key: str, stat: os.stat_result | None) -> None:
        """Refuse a recorded file whose size or version differs from the record, or that
        is gone (``stat`` is ``None``); a file the record does not hold is not checked.

        Raises
        ------
        IdentityMismatchError
            Naming the source, the file and the remedy.
        SourceGoneError
            The recorded file is gone.
        """
        recorded = self.objects.get(key)
        if recorded is None:
            return
        if stat is None:
            # gone, not changed: a SourceGoneError as for a CyteArc source's files
            # (exit 4, and what `except FileNotFoundError` catches)
            raise SourceGoneError(
                f"{self.source}: the chunk file {key} is gone (deleted or moved after the "
                "composite was created); restore the source at that path and reopen, or "
                "recreate the composite"
            )
        if [stat.st_size, file_version(stat)] != list(recorded):
            found = (
                f"was rewritten ({stat.st_size} bytes now, {recorded[0]} recorded)"
                if stat.st_size != recorded[0]
                else "was rewritten in place (its times differ from the record)"
            )
        else:
            return
        reopen = (
            "; if only its times changed (the same bytes written again), reopen the store, "
            "whose open compares the bytes"
            if stat.st_size == recorded[0]
            else ""
        )
        raise IdentityMismatchError(
            f"{self.source}: the chunk file {key} {found} after the composite was created; "
            f"restore the source, or recreate the composite{reopen}"
        )

    def check_path(self, root: str, key: str) -> None:
        """:meth:`check` of the file ``key`` under ``root`` (the source's directory), by
        its ``stat``."""
        if key not in self.objects:
            return
        try:
            stat: os.stat_result | None = os.stat(os.path.join(root, key))
        except (FileNotFoundError, NotADirectoryError):
            stat = None
        self.check(key, stat)


def read_file(
    root: str,
    key: str,
    recorded: RecordedFiles | None = None,
    span: tuple[int, int] | None = None,
) -> npt.NDArray[np.uint8] | None:
    """The bytes of the chunk file ``key`` under ``root``, in this thread's buffer
    (``None``: no such file, a chunk never written), checked against ``recorded``.

    ``span`` is ``(offset, nbytes)``: at most those bytes of the file (an inner
    chunk of a shard, whose index says where it is; fewer where the file ends
    first); the whole file is still checked against ``recorded``, by its
    ``fstat``.
    """
    path = os.path.join(root, key)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if recorded is not None:
            recorded.check(key, None)
        return None
    try:
        stat = os.fstat(descriptor)
        if recorded is not None:
            recorded.check(key, stat)
        if span is not None:
            # a shard cut short gives fewer bytes: the caller names the damage
            buffer: npt.NDArray[np.uint8] = thread_scratch(span[1], name="file")
            return buffer[: os.preadv(descriptor, [memoryview(buffer)], span[0])]
        buffer = thread_scratch(stat.st_size, name="file")
        if os.preadv(descriptor, [memoryview(buffer)], 0) != stat.st_size:
            raise OSError(f"{path} changed while it was read; read again")
    finally:
        os.close(descriptor)
    return buffer
