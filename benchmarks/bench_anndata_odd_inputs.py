"""Benchmark: AnnData sources that are valid but unusual, and a changed source's open.

Three questions, each answered against the obvious alternative in the same run:

* **Non-canonical CSR** (indices unsorted within rows, repeated indices that
  anndata sums): a composite sorts and sums each entry batch it reads. What
  does that cost against the same counts stored canonical (where the check is
  one comparison pass), and against anndata (``read_zarr``, then the rows:
  the whole matrix loaded, as a user would read such a file)?
  Selections: 1,000 random cells x all genes, a band of 5,000 cells.
* **The check on canonical data**: the same reads with the check patched out,
  so its own cost shows (``canonical_entries`` returning its input).
* **A changed source at open**: a chunk of ``X/data`` rewritten with another
  size fails the open from the listing and documents; rewritten with the
  same size (only a digest tells) the group is digested. Time and files read.

    uv run python benchmarks/bench_anndata_odd_inputs.py                 # 40,000 x 2,000
    uv run python benchmarks/bench_anndata_odd_inputs.py --cells 10000 --json -
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, write_json


def counts(cells: int, genes: int, density: float, seed: int = 0) -> sp.csr_matrix:
    """Canonical CSR counts (float32, mostly 1-3)."""
    rng = np.random.default_rng(seed)
    matrix = sp.random(cells, genes, density=density, format="csr", random_state=seed)
    matrix.data = rng.geometric(0.45, matrix.nnz).astype(np.float32)
    return matrix


def non_canonical(matrix: sp.csr_matrix, seed: int = 1) -> sp.csr_matrix:
    """The same counts with every row's entries shuffled and one in 20 split in two
    (a repeated index whose values sum to the original)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    split = rng.random(matrix.nnz) < 0.05
    split &= matrix.data > 1
    first = np.floor(matrix.data / 2)
    data = np.concatenate([np.where(split, first, matrix.data), (matrix.data - first)[split]])
    cols = np.concatenate([matrix.indices, matrix.indices[split]])
    owner = np.concatenate([rows, rows[split]])
    order = np.lexsort((rng.random(len(owner)), owner))  # rows in order, entries shuffled
    indptr = np.zeros(matrix.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=matrix.shape[0]), out=indptr[1:])
    shuffled = sp.csr_matrix((data[order], cols[order], indptr), shape=matrix.shape)
    shuffled.has_sorted_indices = False
    shuffled.has_canonical_format = False
    return shuffled


def write(matrix: sp.csr_matrix, path: Path) -> Path:
    import anndata as ad

    data = ad.AnnData(X=matrix)
    data.obs_names = [f"c{i}" for i in range(matrix.shape[0])]
    data.var_names = [f"g{i}" for i in range(matrix.shape[1])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.write_zarr(path)
    return path


def reads(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import anndata as ad

    import cytearc_vfs as cv
    from cytearc_vfs.read import anndata_reads

    truth = counts(args.cells, args.genes, args.density)
    sources = {
        "canonical": write(truth, work / "canonical.zarr"),
        "non-canonical": write(non_canonical(truth), work / "non_canonical.zarr"),
    }
    rng = np.random.default_rng(5)
    random_cells = min(1000, args.cells)
    band_cells = min(5000, args.cells // 2)
    # labels give the sizes read (fewer than 1,000 and 5,000 on a small matrix)
    selections = {
        f"{random_cells:,} random cells": np.sort(
            rng.choice(args.cells, random_cells, replace=False)
        ),
        f"{band_cells:,}-cell band": np.arange(band_cells) + args.cells // 3,
    }
    results: dict[str, Any] = {}
    for number, (label, cells) in enumerate(selections.items()):
        row: dict[str, float] = {}
        expected = truth[cells].toarray()
        for name, source in sources.items():
            store = cv.create_composite(work / f"{name}-{number}.zarr", {"s": source})
            reader = store.reader()
            seconds, block = median_time(lambda r=reader, c=cells: r.read(c), args.repeat)
            assert np.array_equal(block, expected), name
            row[name] = seconds
            if name == "canonical":
                original = anndata_reads.canonical_entries
                anndata_reads.canonical_entries = lambda *entries: entries  # type: ignore[assignment]
                try:
                    row["canonical, check patched out"] = median_time(
                        lambda r=reader, c=cells: r.read(c), args.repeat
                    )[0]
                finally:
                    anndata_reads.canonical_entries = original
            store.close()

        def anndata_rows(cells: np.ndarray = cells) -> np.ndarray:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return np.asarray(ad.read_zarr(sources["non-canonical"]).X[cells].toarray())

        seconds, block = median_time(anndata_rows, max(1, args.repeat // 2))
        assert np.array_equal(block, expected)
        row["anndata read_zarr + rows (non-canonical)"] = seconds
        results[label] = row
    return results


def changed_open(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import zarr
    from zarr.storage import LocalStore

    import cytearc_vfs as cv

    source = write(counts(args.cells, args.genes, args.density, seed=9), work / "changed.zarr")
    location = work / "changed-composite.zarr"
    cv.create_composite(location, {"s": source}).close()
    chunk = next(
        p
        for p in sorted((source / "X" / "data").rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    )
    original = chunk.read_bytes()
    reads: list[int] = []
    get = LocalStore.get

    async def counted(store: LocalStore, key: str, *a: Any, **k: Any) -> Any:
        buffer = await get(store, key, *a, **k)
        reads.append(0 if buffer is None else len(buffer.to_bytes()))
        return buffer

    def open_fails() -> None:
        try:
            cv.open_store(location)
        except cv.IdentityMismatchError:
            return
        raise AssertionError("the changed source opened")

    result: dict[str, Any] = {
        "X bytes": sum(p.stat().st_size for p in (source / "X").rglob("*") if p.is_file())
    }
    for label, replacement in {
        "resized chunk (fails from the listing)": original + b"\0",
        "same-size chunk (group digested)": original[:-1] + bytes([original[-1] ^ 1]),
    }.items():
        chunk.write_bytes(replacement)
        LocalStore.get = counted  # type: ignore[method-assign]
        try:
            reads.clear()
            open_fails()
            files, read = len(reads), sum(reads)
            seconds, _ = median_time(open_fails, args.repeat)
        finally:
            LocalStore.get = get  # type: ignore[method-assign]
        result[label] = {"seconds": seconds, "files read": files, "bytes read": read}
    chunk.write_bytes(original)
    assert zarr.open_group(source, mode="r") is not None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=40_000)
    parser.add_argument("--genes", type=int, default=2_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the results as JSON to this file ('-': stdout)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-odd-"))
    try:
        results = {"reads": reads(args, work), "changed source open": changed_open(args, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.cells:,} cells x {args.genes:,} genes, density {args.density}; median of {args.repeat}"
    )
    for label, row in results["reads"].items():
        base = row["canonical"]
        print(f"\n{label}:")
        for name, seconds in row.items():
            print(f"  {name:45s} {seconds * 1000:9.1f} ms  {seconds / base:6.2f}x canonical")
    changed = results["changed source open"]
    print(f"\nopen of a changed source (X: {changed['X bytes']:,} bytes):")
    slow = changed["same-size chunk (group digested)"]["seconds"]
    for label, row in changed.items():
        if label != "X bytes":
            print(
                f"  {label:45s} {row['seconds'] * 1000:9.1f} ms  {row['files read']:4d} files  "
                f"{row['bytes read']:>11,} bytes  {row['seconds'] / slow:5.2f}x digest"
            )
    write_json({"args": vars(args), **results}, args.json)


if __name__ == "__main__":
    main()
