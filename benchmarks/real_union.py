"""Issue 14's real-data shape, rebuilt from the pinned datasets of ``cytearc_vfs.realdata``.

The issue measured a store of 8 sources materialized with ``write_counts``:
31,659 cells x 71,084 union genes. This recipe joins 8 sources tiled from
the real datasets the package pins, outer on gene names, into a matrix of
the same kind: **31,269 cells x 75,340 genes, 27,671,522 non-zeros** (the
numbers are checked):

* Wu 2020 (200 x 30,727) x 20, and x 20 again with every gene renamed
  (``R_`` + name), so half the cells measure genes the other half lacks;
* the CellTypist sample (559 x 32,786) x 9, twice;
* the 10x mouse subset (10,000 x 1,000);
* pbmc68k reduced (700 x 765) x 3;
* the 10x chr21 matrix (1,107 x 507).

Earlier sessions built it ad hoc and lost it with their VM; here it is
rebuilt in about 10 s from the package's cache (downloaded once).

    uv run python benchmarks/real_union.py union.h5ad     # writes it as an h5ad
    uv run python benchmarks/bench_portable.py --real union --band 10000 --repeat 9
"""

from __future__ import annotations

import sys

import anndata as ad
import numpy as np
import scipy.sparse as sp

from cytearc_vfs.realdata import loaders

SHAPE = (31_269, 75_340)
NNZ = 27_671_522


def _tiles(data: ad.AnnData, count: int, prefix: str, *, renamed: bool = False) -> ad.AnnData:
    """``count`` copies of ``data``'s counts, cells renamed ``{prefix}{tile}-{id}``."""
    x = sp.csr_matrix(data.X)
    result = ad.AnnData(X=sp.vstack([x] * count, format="csr"))
    result.obs_names = [f"{prefix}{t}-{name}" for t in range(count) for name in data.obs_names]
    result.var_names = [f"R_{g}" if renamed else str(g) for g in data.var_names]
    return result


def union_counts() -> sp.csr_array:
    """The 8 sources joined outer, rounded to counts (CSR, float values as stored)."""
    wu = loaders.wu2020()
    celltypist = loaders.celltypist_sample()
    sources = [
        _tiles(wu, 20, "wu"),
        _tiles(wu, 20, "wuR", renamed=True),
        _tiles(celltypist, 9, "ctA"),
        _tiles(celltypist, 9, "ctB"),
        _tiles(loaders.mouse_10k_subset(), 1, "m"),
        _tiles(loaders.pbmc68k_reduced(), 3, "p"),
        _tiles(loaders.chr21_10x(), 1, "c"),
    ]
    joined = ad.concat(sources, join="outer")
    counts = sp.csr_array(joined.X)
    counts.data = np.rint(counts.data)
    counts.eliminate_zeros()
    if counts.shape != SHAPE or counts.nnz != NNZ:
        raise RuntimeError(
            f"the union came out {counts.shape} with {counts.nnz:,} non-zeros, not {SHAPE} "
            f"with {NNZ:,}: a pinned dataset changed; update the recipe's numbers"
        )
    return counts


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/real_union.py OUT.h5ad")
    counts = union_counts()
    ad.AnnData(X=sp.csr_matrix(counts)).write_h5ad(sys.argv[1])
    print(f"{counts.shape[0]:,} x {counts.shape[1]:,}, {counts.nnz:,} non-zeros -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
