"""Loaders: each pinned data set as an AnnData of counts.

:data:`DATASETS` maps every name in :data:`.specs.SPECS` to its loader. Each
loader fetches its member (see :func:`.fetching.fetch`), reads it with the
reader its format needs, checks that the values are counts and returns a
float32 (or, for ``chr21_10x``, int32) CSR matrix with string-indexed
``obs`` and ``var``.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import anndata as ad
import h5py  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pandas as pd
import scipy.sparse as sp

from .cache import PathLike
from .counts import _build, _canonical, _decode, _require_counts, _unique_index
from .errors import CountsError
from .fetching import fetch
from .parsed_cache import ParsedCounts, load_parsed, parsed_path, store_parsed
from .specs import SPECS

__all__ = [
    "CELLTYPIST_TOLERANCE",
    "DATASETS",
    "PBMC_LOG_HALF_STEP",
    "celltypist_sample",
    "chr21_10x",
    "mouse_10k_subset",
    "pbmc68k_reduced",
    "wu2020",
]


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
    stat = path.stat()
    key = (path, stat.st_size, stat.st_mtime_ns)
    parsed = _PARSED_CELLTYPIST.get(key)
    if parsed is None:
        parsed = _PARSED_CELLTYPIST[key] = _celltypist_kept_or_parsed(path)
    # every caller gets its own AnnData to change
    return parsed.copy()


#: The CellTypist sample parsed, by its cached file: its CSV takes seconds to
#: parse (its parsed copy on disk tens of milliseconds to read), a copy
#: milliseconds. ``fetch`` verifies the file's pinned sha256 on every call, so a
#: file kept here is the pinned one.
_PARSED_CELLTYPIST: dict[tuple[Path, int, int], ad.AnnData] = {}


def _celltypist_kept_or_parsed(path: Path) -> ad.AnnData:
    """The sample from its parsed copy beside ``path`` (see :mod:`.parsed_cache`), or
    parsed from the CSV, keeping the copy for the next process."""
    kept = parsed_path(path.parent, SPECS["celltypist_sample"].sha256)
    stored = load_parsed(kept, path)
    if stored is None:
        parsed = _parse_celltypist(path)
        matrix = cast(sp.csr_matrix, parsed.X)
        store_parsed(
            kept, path, ParsedCounts(matrix, list(parsed.obs_names), list(parsed.var_names))
        )
        return parsed
    obs = pd.DataFrame(index=_unique_index("celltypist_sample", stored.cells, "cell"))
    var = pd.DataFrame(index=_unique_index("celltypist_sample", stored.features, "gene"))
    return _build(stored.matrix, obs, var)


def _parse_celltypist(path: Path) -> ad.AnnData:
    with path.open(newline="") as handle:
        header = next(csv.reader(handle))[1:]
    # low_memory=False parses each of the 32,786 columns in one pass instead of
    # in row chunks whose dtypes are then reconciled: about 3x faster here.
    frame = pd.read_csv(path, index_col=0, low_memory=False)
    # pandas renames duplicate columns ("X.1"); comparing with the raw header
    # catches that instead of inventing gene names.
    if list(frame.columns) != header:
        raise CountsError("celltypist_sample: duplicate or mangled gene names in the header")
    # checked as stored entries: the matrix is 94% zeros, which are whole counts
    # already, and each temporary of the dense 559 x 32,786 float64 values costs
    # more in fresh pages than its arithmetic (6 s of the load, against 0.1 s)
    matrix = sp.csr_matrix(frame.to_numpy(dtype=np.float64))
    counts = _require_counts("celltypist_sample", matrix.data, tolerance=CELLTYPIST_TOLERANCE)
    if counts.size and counts.max() > 2**24:  # float32 holds integers exactly up to 2**24
        raise CountsError("celltypist_sample: counts too large for float32")
    matrix = sp.csr_matrix(
        (counts.astype(np.float32), matrix.indices, matrix.indptr), shape=matrix.shape
    )
    # noise entries (1e-11) rounded to 0 are dropped here
    matrix = _canonical(matrix)
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
    totals = np.asarray(source.obs["n_counts"], dtype=np.float64)
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
