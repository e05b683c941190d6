"""Who owns a source cache directory, and sweeping those whose owner is gone.

A source cache directory is removed when its store closes or its process
exits, but a process killed with SIGKILL (or by the out-of-memory killer)
runs no cleanup. Each directory therefore holds a small owner record: the
process id, the process id namespace it belongs to (the inode of
``/proc/self/ns/pid``), the machine's boot id and the process's start time.
When a process makes its own cache directory it removes the
``cytearc-source-cache-*`` directories in the same temporary directory whose
owner is certainly gone:

- recorded on another boot (the machine restarted since), or
- recorded in this process's pid namespace, by a process id that no longer
  exists, is a zombie, or now belongs to a process started at another time
  (the id was reused).

Anything uncertain is kept: a directory without a readable record (another
version, or one being created this instant), another user's directory, a
record of another pid namespace (a container, ``unshare -p``, sharing the
temporary directory: its ids name other processes here, its pid 1 is not
ours) or without one (written before namespaces were recorded), a process
that exists but whose start time cannot be read.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sys
import tempfile

__all__ = ["CACHE_PREFIX", "OWNER_FILE", "owner_is_gone", "sweep_orphans", "write_owner"]

logger = logging.getLogger(__name__)

CACHE_PREFIX = "cytearc-source-cache-"
OWNER_FILE = ".owner.json"
"""Name of the owner record inside a cache directory (entries never start with '.')."""


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            return file.read().strip() or None
    except OSError:
        return None  # not Linux: pid reuse across boots cannot be told apart


def _pid_namespace() -> int | None:
    """The inode of this process's pid namespace (``None`` where /proc has none)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _start_time(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks since boot)`` of ``pid`` from /proc, if readable."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after it
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def write_owner(directory: str) -> None:
    """Record this process as the owner of ``directory`` (written whole, then renamed)."""
    started = _start_time(os.getpid())
    record = {
        "pid": os.getpid(),
        "pid_ns": _pid_namespace(),
        "boot_id": _boot_id(),
        "start_time": None if started is None else started[1],
    }
    partial = os.path.join(directory, f"{OWNER_FILE}.partial")
    with open(partial, "w") as file:
        json.dump(record, file)
    os.replace(partial, os.path.join(directory, OWNER_FILE))


def owner_is_gone(record: object) -> bool:
    """Whether the process an owner record names is certainly not running.

    >>> me = {"pid": os.getpid(), "pid_ns": _pid_namespace(), "boot_id": _boot_id()}
    >>> owner_is_gone({**me, "start_time": None})
    False
    >>> owner_is_gone("not a record")
    False
    """
    if not isinstance(record, dict) or sys.platform == "win32":
        # (on Windows, os.kill(pid, 0) would end the process: never sweep there)
        return False
    pid, boot, start = record.get("pid"), record.get("boot_id"), record.get("start_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    current_boot = _boot_id()
    if isinstance(boot, str) and current_boot is not None and boot != current_boot:
        return True  # written before the machine restarted
    if record.get("pid_ns") != _pid_namespace():
        # another namespace's pid names another process here (or none), and a
        # record without one (on Linux) may be of any: not ours to judge
        # (where there are no namespaces, both are None)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # exists, owned by someone else
    found = _start_time(pid)
    if found is None:
        return False
    state, started = found
    if state == "Z":
        return True  # killed, not yet reaped: it will never read its cache again
    return isinstance(start, str) and boot == current_boot and started != start


def sweep_orphans(parent: str | None = None, *, keep: str | None = None) -> list[str]:
    """Remove cache directories in ``parent`` (the temporary directory) whose owner is gone.

    Never raises: a sweep is housekeeping, and a failure leaves the
    directory for a later sweep. ``keep`` is never touched.

    Returns
    -------
    list of str
        The directories removed.
    """
    parent = tempfile.gettempdir() if parent is None else parent
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for entry in entries:
        if not entry.name.startswith(CACHE_PREFIX) or entry.path == keep:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
                continue
            with open(os.path.join(entry.path, OWNER_FILE)) as file:
                record = json.load(file)
        except (OSError, ValueError):
            continue
        if owner_is_gone(record):
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.exists(entry.path):
                removed.append(entry.path)
    if removed:
        logger.info(
            "removed %d source cache director%s of processes that no longer run: %s",
            len(removed),
            "y" if len(removed) == 1 else "ies",
            ", ".join(removed),
        )
    return removed
