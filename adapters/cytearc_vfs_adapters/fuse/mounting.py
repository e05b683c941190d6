"""Mounting a :class:`~cytearc_vfs.fuse.tree.StoreTree` with libfuse 3, and unmounting it.

:func:`check_fuse` says, before anything is mounted, whether this machine can
mount at all (the ``mfusepy`` binding, libfuse 3, ``/dev/fuse``,
``fusermount3``), naming the remedy when it cannot. :class:`FuseMount` runs
libfuse's session loop on a thread of its own, so the caller's main thread
stays free to take SIGINT and SIGTERM (libfuse installs its exit handler only
for signals nobody handles, so the caller's handlers stay in force), and
unmounts with ``fusermount3 -u`` (lazily, ``-z``, when a process still uses
the mount), which ends the session loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from cytearc_vfs.errors import VfsError

from ..served_store import ServedStore
from .operations import TreeOperations
from .tree import StoreTree

__all__ = [
    "FuseMount",
    "FuseUnavailableError",
    "check_fuse",
    "enclosing_mount",
    "is_mounted",
    "load_binding",
]

logger = logging.getLogger(__name__)


class FuseUnavailableError(VfsError, OSError):
    """This machine cannot mount a FUSE file system; the message names the remedy."""


_INSTALL_FUSE3 = "install the fuse3 package (Debian/Ubuntu: apt-get install fuse3)"


def load_binding() -> ModuleType:
    """The ``mfusepy`` module, or an error naming what to install."""
    try:
        import mfusepy
    except ImportError as exc:
        raise ImportError(
            "cytearc-vfs mount-fs needs the FUSE binding mfusepy: pip install 'cytearc-vfs[fuse]'"
        ) from exc
    except (OSError, AttributeError) as exc:
        # mfusepy loads libfuse when imported: missing, or of a major version it cannot use
        raise FuseUnavailableError(
            f"FUSE is not available: the libfuse library could not be loaded ({exc}); "
            f"{_INSTALL_FUSE3}"
        ) from exc
    binding: ModuleType = mfusepy
    if binding.fuse_version_major != 3:
        raise FuseUnavailableError(
            f"FUSE is not available: found libfuse {binding.fuse_version_major}, and "
            f"cytearc-vfs mount-fs needs libfuse 3; {_INSTALL_FUSE3}"
        )
    return binding


def check_fuse() -> ModuleType:
    """Check that this machine can mount; returns the binding.

    Raises
    ------
    ImportError
        The ``mfusepy`` binding is not installed (the ``fuse`` extra).
    FuseUnavailableError
        No libfuse 3, no ``/dev/fuse`` (or no access to it), or no ``fusermount3``.
    """
    device = Path("/dev/fuse")
    if not device.exists() or not stat.S_ISCHR(device.stat().st_mode):
        raise FuseUnavailableError(
            "FUSE is not available: there is no /dev/fuse; load the fuse kernel module "
            "(modprobe fuse), or give the container the device (docker run --device /dev/fuse "
            "--cap-add SYS_ADMIN)"
        )
    if not os.access(device, os.R_OK | os.W_OK):
        raise FuseUnavailableError(
            "FUSE is not available: /dev/fuse cannot be opened by this user; ask for access "
            "to it (on most systems: membership of the fuse group)"
        )
    if shutil.which("fusermount3") is None:
        raise FuseUnavailableError(
            f"FUSE is not available: fusermount3 is missing; {_INSTALL_FUSE3}"
        )
    return load_binding()


def _unescape(field: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(field):
        digits = field[i + 1 : i + 4]
        if field[i] == "\\" and len(digits) == 3 and set(digits) <= set("01234567"):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mount_points() -> set[str] | None:
    """Every mount point of the mount table, or ``None`` when it cannot be read."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    return {
        _unescape(fields[4]) for fields in (line.split(" ") for line in lines) if len(fields) > 4
    }


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """Whether ``mountpoint`` is a mount point now (by ``/proc/self/mountinfo``).

    ``os.path.ismount`` stats the path, which fails on a FUSE mount whose
    server died; the mount table does not. The path is resolved first
    (symbolic links, ``..``), as the kernel resolves it when mounting: the
    table holds the resolved path.
    """
    target = os.path.realpath(mountpoint)
    points = _mount_points()
    if points is None:
        return os.path.ismount(target)
    return target in points


def enclosing_mount(path: str | os.PathLike[str]) -> str | None:
    """The nearest mount point that is ``path`` or holds it, by the mount table.

    For naming a dead FUSE mount ("Transport endpoint is not connected")
    whose path cannot be stat'ed; ``None`` when the table cannot be read.
    """
    points = _mount_points()
    if points is None:
        return None
    current = os.path.realpath(path)
    while current not in points and current != os.path.dirname(current):
        current = os.path.dirname(current)
    return current


@contextlib.contextmanager
def _stderr_into(sink: Any) -> Iterator[None]:
    """Send file descriptor 2 (where libfuse prints its errors) into ``sink`` for a while."""
    saved = os.dup(2)
    try:
        os.dup2(sink.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines[:3])


class FuseMount:
    """A store tree mounted read-only at a directory, served on a thread.

    Parameters
    ----------
    shown
        What to show: the tree of one store, or a served store (reopened when a
        read finds a source gone or changed and it is back).
    mountpoint
        An existing directory that is not a mount point already.
    allow_other
        Let other users read the mount (libfuse's ``allow_other``; for users
        other than root it needs ``user_allow_other`` in ``/etc/fuse.conf``).
    """

    def __init__(
        self,
        shown: StoreTree | ServedStore,
        mountpoint: str | os.PathLike[str],
        *,
        allow_other: bool = False,
    ) -> None:
        # resolved, as the kernel resolves it: the mount table (is_mounted) holds this path
        self.mountpoint = os.path.realpath(mountpoint)
        self._allow_other = allow_other
        self._ready = threading.Event()
        self.operations = TreeOperations(shown, on_init=self._ready.set)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def _serve(self, binding: ModuleType) -> None:
        options: dict[str, Any] = {
            "foreground": True,
            "ro": True,
            "default_permissions": True,
            "fsname": "cytearc-vfs",
            "subtype": "cytearc-vfs",
        }
        if self._allow_other:
            options["allow_other"] = True
        try:
            # returns when the session ends: unmounted, or SIGHUP (libfuse's own handler)
            binding.FUSE(self.operations, self.mountpoint, raw_fi=True, **options)
        except BaseException as exc:  # reported by start() or stop(), not lost on the thread
            self._failure = exc

    def start(self, binding: ModuleType, *, timeout: float = 30.0) -> None:
        """Mount, and return once the kernel has started the session.

        Raises
        ------
        OSError
            Mounting failed (with libfuse's own reason), or took longer than ``timeout``.
        """
        with tempfile.TemporaryFile(mode="w+") as messages:
            # libfuse prints why a mount failed on stderr; it becomes part of
            # the one-line error instead of a second, unformatted account
            with _stderr_into(messages):
                self._thread = threading.Thread(
                    target=self._serve, args=(binding,), name="cytearc-vfs-fuse", daemon=True
                )
                self._thread.start()
                deadline = time.monotonic() + timeout
                while not self._ready.wait(0.1):
                    if not self._thread.is_alive() or time.monotonic() > deadline:
                        break
            messages.seek(0)
            said = _first_line(messages.read())
        if self._ready.is_set():
            if said:  # chatter of a mount that worked (libfuse 3.14 notes its thread limit)
                logger.debug("libfuse: %s", said)
            return
        reason = said or (
            f"{type(self._failure).__name__}: {self._failure}"
            if self._failure is not None
            else f"no session after {timeout:.0f} s"
        )
        raise OSError(f"could not mount at {self.mountpoint}: {reason}")

    @property
    def serving(self) -> bool:
        """Whether the session loop still runs."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, poll: float = 0.5) -> None:
        """Block until the session ends (unmounted from elsewhere, or SIGHUP).

        Wakes up every ``poll`` seconds, so the caller's signal handlers run
        promptly in the main thread.
        """
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(poll)

    def stop(self, *, timeout: float = 10.0) -> str:
        """Unmount (if still mounted) and end the session; what was done, in words.

        Tries a plain ``fusermount3 -u`` first; when a process still has a
        file or directory of the mount open, detaches it lazily (``-z``): it
        disappears from the mount table at once, and the kernel ends the
        session when the last user lets go.

        Raises
        ------
        OSError
            The mount could not be removed (the message says how to remove it).
        """
        done = "unmounted"
        if is_mounted(self.mountpoint):
            plain = subprocess.run(
                ["fusermount3", "-u", self.mountpoint], capture_output=True, text=True, check=False
            )
            if plain.returncode != 0 and is_mounted(self.mountpoint):
                lazy = subprocess.run(
                    ["fusermount3", "-u", "-z", self.mountpoint],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if lazy.returncode != 0 and is_mounted(self.mountpoint):
                    raise OSError(
                        f"could not unmount {self.mountpoint}: "
                        f"{_first_line(lazy.stderr or plain.stderr) or 'fusermount3 failed'}; "
                        f"run fusermount3 -u {self.mountpoint} yourself"
                    )
                done = "unmounted lazily (a process still had files of it open)"
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                done += "; the session is still ending"
        return done

    @property
    def failure(self) -> BaseException | None:
        """What ended the session loop with an error, if anything did."""
        return self._failure
