"""How the command line fails: exit codes, and one clear line per error.

Every error a user can cause ends in one line on stderr, ``cytearc-vfs
COMMAND: message``, and a documented exit code (``docs/cli.md``); with
``--json`` the same is printed as a JSON object on stdout. A traceback is
shown only for ``--debug`` (or ``CYTEARC_VFS_DEBUG=1``), and for errors that
are bugs the line says so and how to report them.
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

from ..errors import (
    IdentityMismatchError,
    IncompleteStoreError,
    MissingChunkError,
    RecordShapeError,
    SourceUnavailableError,
    VfsError,
)
from ..remote.failures import (
    BackendOptionsError,
    StoreAccessError,
    failing_location,
    failure_remedy,
    is_backend_error,
    named_source_failure,
)
from ..remote.password_masking import passwords_masked

__all__ = ["ExitCode", "Failure", "InputRefusedError", "classify_failure", "one_line"]


class ExitCode(IntEnum):
    """The exit status of ``cytearc-vfs``."""

    OK = 0
    """The command did what it was asked."""
    PROBLEMS = 1
    """``verify`` read the store and found problems (listed in its output)."""
    REFUSED = 2
    """The command line or its input was refused; nothing was changed."""
    DAMAGED = 3
    """A store failed closed: incomplete, changed identity, malformed record, unreadable data."""
    ENVIRONMENT = 4
    """The system failed: disk full, permission denied, network or backend error, memory."""
    INTERNAL = 70
    """A bug in cytearc-vfs; rerun with ``--debug`` and report the traceback."""
    SIGINT = 130
    """Interrupted by Ctrl-C (SIGINT); an unfinished destination was removed."""
    SIGTERM = 143
    """Terminated (SIGTERM); an unfinished destination was removed."""


class InputRefusedError(VfsError, ValueError):
    """The command refuses its input (wrong kind of location, bad option)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """An exception as the command line reports it."""

    code: ExitCode
    """Exit status."""
    category: str
    """``refused``, ``damaged``, ``environment`` or ``internal``."""
    message: str
    """One line: what went wrong, where, and the remedy."""


def one_line(text: str) -> str:
    """``text`` on one line: its line breaks become ``; ``, and a URL's password ``***``
    (a backend's own words name the URLs it requested, credentials and all)."""
    return passwords_masked(re.sub(r"\s*\n\s*", "; ", text.strip())) or "no message"


_DECODE_ERROR = re.compile(r"decompress|codec|checksum|crc32c|corrupt", re.IGNORECASE)


#: Where the command line takes a backend's options.
_OPTIONS = "--storage-options (JSON or @FILE)"

#: obstore's errors that name a wrong option or path, not a failing system
_BACKEND_REFUSALS = frozenset({"UnknownConfigurationKeyError", "InvalidPathError"})


def _backend_failure(exc: BaseException) -> Failure | None:
    """The failure of an error raised by the obstore backend itself, or ``None``.

    obstore's errors are not ``OSError``s, and their text goes on with a
    multi-line debug dump: without this, a missing credential read as a bug.
    """
    if type(exc).__module__.partition(".")[0] != "obstore":
        return None
    text = str(exc).strip()
    first = passwords_masked(text.splitlines()[0]) if text else "no message"
    if type(exc).__name__ in _BACKEND_REFUSALS:
        return Failure(
            ExitCode.REFUSED,
            "refused",
            f"the storage backend refused its options: {first} ({type(exc).__name__}); "
            "fix --storage-options (or --source-storage-options)",
        )
    # the remedy of the cause the error names (timed out, nothing answering, refused).
    # obstore names its store in its first words ("Generic HTTP error", "Generic S3
    # error"); the URLs after them may be an object store's endpoint or metadata service
    remedy = failure_remedy(exc, http=first.startswith("Generic HTTP"), options=_OPTIONS)
    return Failure(
        ExitCode.ENVIRONMENT,
        "environment",
        f"the storage backend failed: {first} ({type(exc).__name__}); {remedy}",
    )


def _is_fetch_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a :class:`~cytearc_vfs.realdata.DataFetchError`.

    Looked up among the loaded modules: importing :mod:`cytearc_vfs.realdata`
    loads anndata, and an error of it can only come from a command that loaded it.
    """
    errors = sys.modules.get("cytearc_vfs.realdata.errors")
    return errors is not None and isinstance(exc, errors.DataFetchError)


def _location_failure(exc: BaseException, locations: Mapping[str, str]) -> Failure | None:
    """The failure of a backend's error about one of the command's ``locations`` (printed
    location -> how its options are given), named with that location and its flag, or
    ``None`` when ``exc`` is no backend's error or names none of them."""
    if not locations or not is_backend_error(exc):
        return None
    where = failing_location(exc, list(locations))
    if where not in locations:
        return None
    said = StoreAccessError.naming(where, exc, options=locations[where])
    return Failure(ExitCode.ENVIRONMENT, "environment", one_line(str(said)))


def classify_failure(exc: BaseException, locations: Mapping[str, str] | None = None) -> Failure:
    """The exit code, category and one-line message of ``exc``, raised by a command
    whose locations (as printed) take their options as ``locations`` says
    (:func:`~cytearc_vfs.cli.location_flags.location_flags`)."""
    message = one_line(str(exc))
    # imported here: the command line's --help does not load the readers
    from ..read.chunk_codecs import ChunkDecodeError

    damaged = (
        IncompleteStoreError,
        IdentityMismatchError,
        RecordShapeError,
        MissingChunkError,
        ChunkDecodeError,
    )
    if isinstance(exc, damaged):
        return Failure(ExitCode.DAMAGED, "damaged", message)
    if isinstance(exc, BackendOptionsError):
        # said again with the flag that gives this location's options
        options = (locations or {}).get(exc.where, _OPTIONS)
        restated = BackendOptionsError(exc.where, exc.problem, options=options)
        return Failure(ExitCode.REFUSED, "refused", one_line(str(restated)))
    # a backend's own error from the command's checks of its locations (what they
    # hold, whether a destination is free) names the location and its own flag
    located = _location_failure(exc, locations or {})
    if located is not None:
        return located
    if isinstance(exc, SourceUnavailableError):
        # a source that cannot be read or is gone (a FileNotFoundError too, which is
        # not the command line's input here), named with what failed and the remedy
        return Failure(ExitCode.ENVIRONMENT, "environment", message)
    if isinstance(exc, NotADirectoryError) and exc.filename is not None:
        # the operating system's own words ("[Errno 20] Not a directory: 'a.h5ad/x.zarr'")
        return Failure(
            ExitCode.REFUSED,
            "refused",
            f"{message} (NotADirectoryError); a folder of that path is a file: "
            "choose a path whose folders are directories",
        )
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        # the name given, not the system: no space or permission would let it be made
        return Failure(
            ExitCode.REFUSED,
            "refused",
            f"{message}; a name in that path is longer than the file system allows (255 "
            "bytes a name on most): choose a shorter name",
        )
    if isinstance(exc, (FileExistsError, FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return Failure(ExitCode.REFUSED, "refused", message)
    if isinstance(exc, PermissionError) and exc.errno is None:
        # raised by this layer (a protected group), not by the operating system
        return Failure(ExitCode.REFUSED, "refused", message)
    if isinstance(exc, ImportError) and "pip install" in message:
        # an optional extra that is not installed: the message names it
        return Failure(ExitCode.ENVIRONMENT, "environment", message)
    if isinstance(exc, StoreAccessError) and exc.__cause__ is not None:
        # named by the Python API, whose remedy says storage_options=: said again with
        # the command line's option
        options = (locations or {}).get(exc.where, _OPTIONS)
        said = StoreAccessError.naming(exc.where, exc.__cause__, options=options)
        return Failure(ExitCode.ENVIRONMENT, "environment", one_line(str(said)))
    if isinstance(exc, OSError) and isinstance(exc, VfsError):
        # raised by this layer about the system (FUSE missing): the message names the remedy
        return Failure(ExitCode.ENVIRONMENT, "environment", message)
    if isinstance(exc, OSError) and named_source_failure(exc):
        # a source that cannot be read, named with what failed and the remedy of its
        # cause, in the command line's option names already
        return Failure(ExitCode.ENVIRONMENT, "environment", message)
    if _is_fetch_failure(exc):
        # the demo's real data could not be downloaded (offline, no pip, a cache
        # that cannot be made): the system, not the command line; the message says why
        return Failure(ExitCode.ENVIRONMENT, "environment", message)
    backend = _backend_failure(exc)
    if backend is not None:
        return backend
    if isinstance(exc, (OSError, MemoryError)):
        detail = message if not isinstance(exc, MemoryError) else "out of memory"
        return Failure(
            ExitCode.ENVIRONMENT,
            "environment",
            f"{detail} ({type(exc).__name__}); fix the cause (space, permissions, network) "
            "and run the command again",
        )
    if isinstance(exc, (VfsError, ValueError, TypeError, KeyError, IndexError)):
        if isinstance(exc, KeyError) and exc.args:
            message = one_line(str(exc.args[0]))
        return Failure(ExitCode.REFUSED, "refused", message)
    if isinstance(exc, RuntimeError) and _DECODE_ERROR.search(message):
        return Failure(
            ExitCode.DAMAGED,
            "damaged",
            f"stored data could not be decoded ({message}); the store is damaged. Run "
            "cytearc-vfs verify on it, and restore it from a copy or write it again",
        )
    return Failure(
        ExitCode.INTERNAL,
        "internal",
        f"internal error {type(exc).__name__}: {message}. This is a bug in cytearc-vfs; "
        "rerun with --debug and report the traceback",
    )
