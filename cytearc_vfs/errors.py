"""The package's own errors.

Each co-inherits the builtin a caller would naturally catch (``ValueError``),
so ``except ValueError`` keeps working for code that does not know this
package, while ``except VfsError`` catches only ours.
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import os
import warnings
from typing import Any

__all__ = [
    "REFUSED_WRITE_ERRNOS",
    "DestinationBusyError",
    "IdentityMismatchError",
    "IncompleteStoreError",
    "MissingChunkError",
    "NonFiniteArtifactError",
    "RecordShapeError",
    "SourceGoneError",
    "SourceUnavailableError",
    "UnsupportedSourceError",
    "VfsError",
    "VfsWarning",
    "warn_at_caller",
]


#: ``errno`` values of a folder that refuses writes: a read-only file system, no
#: permission. Writers turn these into a ``PermissionError`` that names the
#: operation and the remedy; zarr's own error names a temporary file of its
#: atomic write and no remedy.
REFUSED_WRITE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class VfsError(Exception):
    """Base of every error raised by cytearc_vfs itself.

    Every one pickles with its message and attributes (an error raised in a dask
    worker process comes back to the caller so), whatever its constructor takes:
    Python's own pickling calls the constructor with the message alone.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restored, (type(self), self.args, dict(self.__dict__)))


def _restored(kind: type[VfsError], args: tuple[Any, ...], state: dict[str, Any]) -> VfsError:
    """``kind``'s error with ``args`` and attributes ``state``, its constructor not called."""
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class VfsWarning(UserWarning):
    """A warning cytearc_vfs gives on purpose (the command line shows these, and no others)."""


def warn_at_caller(message: str, category: type[Warning] = VfsWarning) -> None:
    """Warn ``message``, attributed to the first line outside this package and its adapters.

    A fixed ``stacklevel`` names the caller's line only while the call depth
    stays as it was written: a decorator or a helper added between the public
    name and the warning moves it into the package. Skipping the package's own
    files names the user's line from any depth.
    """
    warnings.warn(message, category, skip_file_prefixes=_package_directories())


@functools.cache
def _package_directories() -> tuple[str, ...]:
    """The directories of cytearc_vfs and of its adapters (found without importing them)."""
    found = [os.path.dirname(os.path.abspath(__file__))]
    adapters = importlib.util.find_spec("cytearc_vfs_adapters")
    if adapters is not None and adapters.submodule_search_locations:
        found.extend(os.path.abspath(path) for path in adapters.submodule_search_locations)
    return tuple(directory + os.sep for directory in found)


class DestinationBusyError(VfsError, FileExistsError):
    """Another writer writes the destination (docs/writing.md, "One writer per destination")."""


class IdentityMismatchError(VfsError, ValueError):
    """A source's or a mapping's fingerprint differs from the persisted record."""


class IncompleteStoreError(VfsError, ValueError):
    """A composite, an artifact, an assay or an array is not marked complete."""


class MissingChunkError(VfsError, ValueError):
    """A source's sparse matrix lacks a stored chunk inside its entries: a partial copy."""


class RecordShapeError(VfsError, ValueError):
    """A persisted record has a missing or unknown field, or a field of the wrong type."""


class SourceUnavailableError(VfsError, OSError):
    """A store being read cannot be read: a composite's or mount's source (or the
    store under a reader) is unreachable, refused, timed out, or gone.

    The message names the source, its location, what failed and the one remedy
    of the cause; the backend's own error, if any, is the ``__cause__``. An
    ``OSError``, so code written for the file system's errors keeps working.
    """


class SourceGoneError(SourceUnavailableError, FileNotFoundError):
    """A source (or an object of it) is no longer where it was recorded or opened:
    deleted or moved. Never read as zeros; restore it there, or recreate the
    composite (mount again)."""


class UnsupportedSourceError(VfsError, ValueError):
    """A source this layer cannot bind: a composite, a mount, or a pending assay."""


class NonFiniteArtifactError(VfsError, ValueError):
    """A finite-only artifact array received NaN or infinity.

    Attributes name the refusal so callers need not parse the message.
    """

    def __init__(self, message: str, *, operation: str, array: str, row: int) -> None:
        super().__init__(message)
        self.operation = operation
        self.array = array
        self.row = row
