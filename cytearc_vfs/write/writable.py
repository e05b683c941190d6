"""Whether a local destination can be written where it is asked, found before any work.

A destination whose folder exists may still refuse what a writer creates
there: a virtual file system (``/proc``, ``/sys``), a folder on a read-only
file system, one without write permission, or a "folder" that is a file.
The operating system's answer (a bare ``FileNotFoundError`` for
``/proc/x.zarr``) would come only when the writer creates its first
directory, after it has read and checked its input, and names no remedy.

:func:`require_writable` asks the file system itself, once, before the
writer starts: it creates a probe directory where the writer would create
its own, and removes it at once. Permission bits are not read instead: they
say nothing of ``/proc``, of a read-only mount, or of the root user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from ..errors import VfsError
from ..remote.locations import Location, given_location, local_path

__all__ = ["UnwritableDestinationError", "require_writable", "require_writable_destination"]

#: What an ``errno`` of a refused probe means for the destination.
_REASONS = {
    errno.EROFS: "is on a read-only file system",
    errno.EACCES: "may not be written by this user (permission denied)",
    errno.EPERM: "does not allow new directories (operation not permitted)",
    errno.ENOENT: "does not accept new directories (the system answers that they do not exist)",
    errno.ENOSPC: "is on a file system with no space left",
    errno.EDQUOT: "is on a file system whose quota is used up",
}


class UnwritableDestinationError(VfsError, PermissionError):
    """A local destination cannot be written where it is asked.

    Its folder is a file, is on a read-only or virtual file system
    (``/proc``, ``/sys``), or may not be written by this user. Raised before
    the writer reads its input; nothing was written. A ``PermissionError``
    (so an ``OSError``) without an ``errno``: the command line reports it as
    a refusal.
    """


def require_writable_destination(location: Location) -> None:
    """Refuse a local destination that cannot be written (:func:`require_writable`).

    Writers call it first, before they read their inputs; a URL or a store
    that is not local passes (its backend answers for it). A destination
    that is a file passes too: the destination check refuses it, saying so.
    """
    path = local_path(location)
    if path is None or ((path.exists() or path.is_symlink()) and not path.is_dir()):
        return
    require_writable(path, where=f"destination {given_location(location)}")


def require_writable(path: Path, *, where: str) -> None:
    """Refuse the local destination ``path`` unless new entries can be created there.

    The folder that receives the writer's first entry is ``path`` itself
    when it is an existing directory, else the nearest of its folders that
    exists (a writer creates the missing ones). That folder must be a
    directory in which a directory can be created: a probe directory is
    made there and removed.

    Parameters
    ----------
    path
        The destination (a store directory, or the folder an export writes into).
    where
        The destination as the refusal names it (``"destination '/proc/x.zarr'"``).

    Raises
    ------
    UnwritableDestinationError
        The folder is a file, or refuses a new directory; the message names
        the destination, the folder, the reason and the remedy.
    """
    folder = path
    while not folder.is_dir():
        if folder.exists() or folder.is_symlink():
            raise UnwritableDestinationError(
                f"{where} cannot be written: its folder {str(folder)!r} is "
                "a file, not a directory, so nothing can be created in it. Choose a "
                "destination whose folders are directories. Nothing was written"
            )
        if folder.parent == folder:
            return  # nothing of the path exists, not even its root: the writer will say so
        folder = folder.parent
    try:
        probe = tempfile.mkdtemp(prefix=".cytearc-vfs-probe-", dir=folder)
    except OSError as exc:
        reason = _REASONS.get(exc.errno or 0) or f"refuses new directories ({exc.strerror})"
        raise UnwritableDestinationError(
            f"{where} cannot be written: its folder {str(folder)!r}"
            f"{_file_system(folder)} {reason}, so the destination cannot be created there. "
            "Choose a destination in a folder you can write to. Nothing was written"
        ) from exc
    # the probe is empty and hidden: a failed removal changes nothing the writer does
    with contextlib.suppress(OSError):
        os.rmdir(probe)


def _file_system(folder: Path) -> str:
    """`` (on a proc file system mounted at '/proc')`` naming the file system that holds ``folder``, or ``""``.

    Read from ``/proc/self/mountinfo`` where there is one (Linux): the type
    explains refusals such as ``/proc``'s, whose folders exist but hold no
    files of anyone's.
    """
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    resolved = str(folder.resolve())
    best, kind = "", ""
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        # mount points escape spaces as \040
        point = fields[4].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, line.split(" - ", 1)[1].split()[0]
    return f" (on a {kind} file system mounted at {best!r})" if kind else ""
