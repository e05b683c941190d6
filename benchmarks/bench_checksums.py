"""What zstd content checksums on count chunks cost: writes and random cell reads.

The same generated matrix (realistic sparsity: ~5 % non-zero, counts mostly
1-3 with a long tail) is written with and without checksums, alternately,
and 1,000 random cells are read from both stores in alternation, so drift of
the machine falls on both sides. Prints medians and ratios (checksums / none);
the target of issue 12 is under 5 % on both.

    uv run python benchmarks/bench_checksums.py [--cells 40000] [--genes 3000] [--reads 80]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import numpy as np
import scipy.sparse as sp
from zarr.codecs import ZstdCodec

import cytearc_vfs as cv
import cytearc_vfs.encoding.row_frames as row_frames
import cytearc_vfs.write.shards as writer


def generated_counts(n_cells: int, n_genes: int, seed: int = 1) -> sp.csr_array:
    """Sparse counts of realistic shape (generated, not real data)."""
    rng = np.random.default_rng(seed)
    nnz = int(n_cells * n_genes * 0.05)
    values = rng.geometric(0.45, nnz).astype(np.float32)
    coo = sp.coo_array(
        (values, (rng.integers(0, n_cells, nnz), rng.integers(0, n_genes, nnz))),
        shape=(n_cells, n_genes),
    )
    return sp.csr_array(coo.tocsr())


def _write(path: str, counts: sp.csr_array, *, checksums: bool) -> float:
    # the switch exists for this comparison only: the package always writes them
    row_frames.FRAME_CHECKSUMS = checksums
    row_frames._THREAD.__dict__.clear()  # compressors are cached per thread
    writer.COUNT_COMPRESSOR = ZstdCodec(level=writer.COUNT_ZSTD_LEVEL, checksum=checksums)
    started = time.perf_counter()
    cv.write_counts(path, counts, overwrite=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40_000)
    parser.add_argument("--genes", type=int, default=3_000)
    parser.add_argument("--reads", type=int, default=80)
    parser.add_argument("--writes", type=int, default=3)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-checksums-")
    try:
        _compare(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _compare(args: argparse.Namespace, folder: str) -> None:
    """Write and read with and without checksums under ``folder``, and print."""
    counts = generated_counts(args.cells, args.genes)
    paths = {flag: f"{folder}/checksums-{flag}.zarr" for flag in (False, True)}
    writes: dict[bool, list[float]] = {False: [], True: []}
    # one write not timed, to a store of its own: the process's first write_counts
    # pays one-time costs (imports, thread pools; ~0.6 s here) that otherwise fall
    # on the first "none" write, which --writes 1 or 2 then reports as its time
    _write(f"{folder}/warm.zarr", counts[:1_000], checksums=False)
    for _ in range(args.writes):
        for flag in (False, True):
            writes[flag].append(_write(paths[flag], counts, checksums=flag))
    row_frames.FRAME_CHECKSUMS = True
    readers = {flag: cv.VirtualArrayReader(path) for flag, path in paths.items()}
    rng = np.random.default_rng(0)
    reads: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(args.reads):
        cells = np.sort(rng.choice(args.cells, 1_000, replace=False))
        values = {}
        for flag in (False, True) if repeat % 2 else (True, False):
            started = time.perf_counter()
            values[flag] = readers[flag].read(cells=cells)
            reads[flag].append(time.perf_counter() - started)
        assert np.array_equal(values[False], values[True])
    w0, w1 = statistics.median(writes[False]), statistics.median(writes[True])
    r0, r1 = statistics.median(reads[False]), statistics.median(reads[True])
    print(f"generated counts {args.cells} x {args.genes} (~5% non-zero), values equal")
    print(f"write_counts        none {w0:7.3f} s   checksums {w1:7.3f} s   ratio {w1 / w0:.3f}")
    print(
        f"1,000 random cells  none {r0 * 1e3:7.2f} ms  checksums {r1 * 1e3:7.2f} ms  ratio {r1 / r0:.3f}"
    )


if __name__ == "__main__":
    main()
