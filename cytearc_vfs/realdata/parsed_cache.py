"""A parsed copy of a pinned member that is slow to parse, kept in the data cache.

CellTypist's sample is a 53 MB CSV: pandas takes 4-7 s to parse it, in every
process that loads it (the demo, each test worker). What the loader makes
of it is a function of the pinned bytes alone, so the result is kept once,
as an ``.npz`` beside the cached member, named by the member's pinned sha256
and by :data:`PARSED_FORMAT`, with the size and modification time of the
file it was parsed from. A later load that finds it, for the same file,
reads it in tens of milliseconds; one that finds it unreadable (truncated,
damaged: the zip's CRC-32 checks catch both) or made from another file
parses the member again and replaces it.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = [
    "PARSED_FORMAT",
    "STALE_TEMP_SECONDS",
    "ParsedCounts",
    "load_parsed",
    "parsed_path",
    "store_parsed",
]

_log = logging.getLogger(__name__)

#: Bumped when what is stored changes; copies of another format are not read.
PARSED_FORMAT = 1
#: Age after which a temporary of a parsed copy is taken as left by a killed process.
STALE_TEMP_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class ParsedCounts:
    """A CSR matrix of counts with its cell and feature names."""

    matrix: sp.csr_matrix
    cells: list[str]
    features: list[str]


def parsed_path(folder: Path, sha256: str) -> Path:
    """Where the parsed copy of the member pinned at ``sha256`` is kept, in ``folder``."""
    return folder / f"parsed-{sha256[:16]}-v{PARSED_FORMAT}.npz"


def _stamp(source: Path) -> npt.NDArray[np.int64]:
    stat = source.stat()
    return np.asarray([stat.st_size, stat.st_mtime_ns], dtype=np.int64)


def load_parsed(path: Path, source: Path) -> ParsedCounts | None:
    """The parsed copy at ``path`` of the file ``source``; None if there is none, it
    cannot be read whole, or it was made from another file."""
    try:
        # opened here: np.load leaves a file it opened itself open when the zip is bad
        with path.open("rb") as file, np.load(file, allow_pickle=False) as stored:
            if not np.array_equal(stored["source"], _stamp(source)):
                _log.info("the parsed copy %s is of another %s; parsing again", path, source)
                return None
            rows, columns = (int(n) for n in stored["shape"])
            shape = (rows, columns)
            matrix = sp.csr_matrix(
                (stored["data"], stored["indices"], stored["indptr"]), shape=shape
            )
            cells = stored["cells"].tolist()
            features = stored["features"].tolist()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        _log.warning("the parsed copy %s cannot be read (%s); parsing again", path, exc)
        return None
    if len(cells) != shape[0] or len(features) != shape[1]:
        _log.warning("the parsed copy %s does not fit its own shape; parsing again", path)
        return None
    return ParsedCounts(matrix, cells, features)


def _remove_stale_temps(path: Path) -> None:
    # Writers hold no lock (a copy is renamed in whole), so another process
    # may be writing its temporary now: only one far older than a write
    # takes (seconds) is taken as left behind by a process that was killed.
    horizon = time.time() - STALE_TEMP_SECONDS
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if stale.stat().st_mtime < horizon:
                stale.unlink()
        except OSError:  # gone already, or not ours to remove: the next write tries again
            continue


def store_parsed(path: Path, source: Path, parsed: ParsedCounts) -> None:
    """Keep ``parsed`` (of the file ``source``) at ``path``, whole or not at all (a
    temporary renamed in).

    A cache that cannot be written is no error: the next load parses again.
    Temporaries left by processes killed while writing (older than
    :data:`STALE_TEMP_SECONDS`) are removed first.
    """
    _remove_stale_temps(path)
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        _log.info("cannot keep a parsed copy at %s (%s)", path, exc)
        return
    try:
        with os.fdopen(handle, "wb") as file:
            os.fchmod(file.fileno(), 0o644)  # as the cached member (mkstemp makes 0o600)
            np.savez(
                file,
                data=parsed.matrix.data,
                indices=parsed.matrix.indices,
                indptr=parsed.matrix.indptr,
                shape=np.asarray(parsed.matrix.shape, dtype=np.int64),
                cells=np.asarray(parsed.cells, dtype=str),
                features=np.asarray(parsed.features, dtype=str),
                source=_stamp(source),
            )
        os.replace(name, path)
    except OSError as exc:
        _log.info("cannot keep a parsed copy at %s (%s)", path, exc)
        Path(name).unlink(missing_ok=True)
