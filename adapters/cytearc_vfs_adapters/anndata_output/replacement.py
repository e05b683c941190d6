"""Putting a finished export in place, and removing an output, with no state between.

An export is written under a temporary name and renamed onto its destination
when complete. Replacing an existing AnnData is where a crash could leave the
destination empty (renamed aside, the new one not yet in) or leave a store
that is half removed yet readable: anndata reads a Zarr AnnData whose chunk
files are missing as fill values. So:

- a file (``.h5ad``) is replaced by one ``os.replace``, atomic;
- a directory (``.zarr``) is swapped with the temporary by one
  ``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, on the file systems that
  support it: ext4, xfs, btrfs, tmpfs...), atomic; where it is not supported
  the old store is renamed aside first and the new one renamed in, and a
  crash between the two renames leaves the old store whole under
  ``.NAME.<hex>.replaced``;
- an output being removed loses its root metadata first, so from the first
  deleted file on, no reader opens what is left.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
from pathlib import Path

from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS

__all__ = ["move_into_place", "remove_output"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one atomic step; ``False`` where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # not Linux, or a C library without renameat2
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    if (
        renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
        == 0
    ):
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # the file system (or kernel) does not exchange
    raise OSError(code, f"exchanging {second} with its replacement: {os.strerror(code)}")


def remove_output(path: Path) -> None:
    """Remove a file or a store directory; a store's root metadata goes first."""
    if path.is_dir() and not path.is_symlink():
        for name in sorted(METADATA_DOCUMENTS):
            (path / name).unlink(missing_ok=True)
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def move_into_place(temporary: Path, path: Path) -> None:
    """Rename the finished ``temporary`` onto ``path``, replacing what is there."""
    if not (path.exists() or path.is_symlink()):
        os.rename(temporary, path)
        return
    if not temporary.is_dir():
        os.replace(temporary, path)
        return
    if _exchange(temporary, path):
        # the old store now has the temporary's name: marked as replaced before removal
        replaced = path.with_name(f".{path.name}.{uuid.uuid4().hex}.replaced")
        os.rename(temporary, replaced)
        remove_output(replaced)
        return
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex}.replaced")
    os.rename(path, aside)
    os.rename(temporary, path)
    remove_output(aside)
