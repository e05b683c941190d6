"""Exploration for issue 14: which portable chunk encoding should replace row frames?

Decided first: ``b`` (written during issue 14's first half); then replaced by
Blosc blocks, ``a``'s geometry in a standard codec that keeps ``b``'s cheap
single-row reads (what ``write_counts`` writes since; docs/layout.md, and
``bench_portable.py`` for the tracked comparison of all three).

A throwaway measurement, not a benchmark the project tracks. One generated
count matrix per shape (uint16, 5 % non-zero, mostly 1-3 with a long tail)
is stored as ``counts`` and ``countsT`` of a full CyteArc store in these
encodings:

``a``   the writer before issue 14 (``cv.write_counts`` inside
        ``row_framed_writes``): sharded, large inner chunks
        (``chunkBytes`` 256 KiB), each chunk several zstd "row frames" plus
        a skippable index frame.
``a0``  the same geometry written by zarr-python: one zstd frame per inner
        chunk (what removing row frames without other change gives).
``b``   standard sharding with small inner chunks: the fewest whole rows
        that make >= 8 KiB uncompressed (``FRAME_MIN_BYTES``), bytes +
        zstd(level 1, checksum), crc32c shard index at the end; the same
        shard rows as ``a`` (rounded to whole chunks).
``c``   nested sharding: the outer shard and inner chunk shapes of ``a`` (read
        from its ``cytearc:countMatrixLayout``), each inner chunk itself a
        ``ShardingCodec`` whose sub-chunks are ``b``'s few-row groups, each
        zstd(checksum), with a crc32c index. A sharding codec's inner chunks
        must divide its chunk evenly, so the sub-chunk is the smallest divisor
        of ``a``'s chunk rows reaching 8 KiB, or the largest divisor below it
        (printed; it is smaller than 8 KiB when ``a``'s chunk rows are prime).
``c*``  (only when ``c``'s sub-chunks had to shrink) nested sharding with
        ``a``'s chunk rows rounded up to a multiple of ``b``'s rows, so the
        sub-chunks are exactly ``b``'s.

``a0``, ``b``, ``c`` and ``c*`` are written with zarr-python's own
``zarr.create_array`` and ``ShardingCodec``, one shard band at a time, into a
copy of ``a``'s store (tables, summaries, records), whose layout record is
rewritten to the new geometry where it changes, so ``cv.VirtualArrayReader``
opens every variant.

For each variant: does each reader read ``counts`` and ``countsT`` whole and
exactly (zarr-python, zarrs, tensorstore, zarrita: the readers of
``tests/interop``); the write time (``a``: all of ``write_counts``, tables
and summaries included; the others: the two arrays through zarr-python);
zarr-python reading a band of 2,000 rows and 1,000 random rows (``oindex``);
tensorstore and zarrs reading the band; the disk bytes of the two arrays;
whether ``cv.VirtualArrayReader`` takes its fast path
(``read.shard_reader.fast_reader_for``) and reads 1,000 random cells exactly,
and how long it takes. Times are medians of ``--repeat`` warm runs (page
cache warm: local-disk decode cost, not I/O).

    uv run python benchmarks/explore_portable_chunks.py              # both shapes (~15 min)
    uv run python benchmarks/explore_portable_chunks.py --shapes 20000x3000 --repeat 3
    # --density D --tmpdir DIR --keep --json out.json --skip-readers zarrita
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import cytearc_vfs as cv
from cytearc_vfs.encoding.row_frames import FRAME_MIN_BYTES
from cytearc_vfs.read.shard_reader import fast_reader_for
from cytearc_vfs.write.row_framed import row_framed_writes

# the readers of the interop table (tests/interop), so both speak of the same readers
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.interop.outcomes import run_reader
from tests.interop.readers import READERS, Target

LAYOUT_ATTR = "cytearc:countMatrixLayout"
BAND_ROWS = 2_000
RANDOM_ROWS = 1_000


# ---------------------------------------------------------------- the matrix


def generate(n_cells: int, n_features: int, density: float, seed: int = 14) -> sp.csr_array:
    """uint16 counts: ``density`` non-zero, geometric 1-3 mostly, a 0.2 % tail up to 5,000."""
    rng = np.random.default_rng(seed)
    nnz = int(n_cells * n_features * density)
    rows = rng.integers(0, n_cells, nnz)
    cols = rng.integers(0, n_features, nnz)
    values = rng.geometric(0.45, nnz).astype(np.int64)
    tail = rng.random(nnz) < 0.002
    values[tail] = rng.integers(256, 5_000, int(tail.sum()))
    matrix = sp.coo_array((values, (rows, cols)), shape=(n_cells, n_features)).tocsr()
    matrix.sum_duplicates()
    matrix.data = np.minimum(matrix.data, 65_535).astype(np.uint16)
    return sp.csr_array(matrix)


# ---------------------------------------------------------------- geometry


def rows_for(row_bytes: int) -> int:
    """Fewest whole rows of at least ``FRAME_MIN_BYTES`` (row frames use the same rule)."""
    return max(1, -(-FRAME_MIN_BYTES // row_bytes))


def sub_rows_dividing(chunk_rows: int, row_bytes: int) -> int:
    """Sub-chunk rows of a nested chunk: they must divide ``chunk_rows``.

    The smallest divisor reaching 8 KiB, else the largest divisor below it
    (a chunk of prime rows gets one-row sub-chunks); the whole chunk when it
    is one frame in ``a`` too.

    >>> sub_rows_dividing(42, 6000), sub_rows_dividing(43, 6000), sub_rows_dividing(6, 40000)
    (2, 1, 1)
    """
    want = rows_for(row_bytes)
    if want >= chunk_rows:
        return chunk_rows
    divisors = [d for d in range(1, chunk_rows) if chunk_rows % d == 0]
    reaching = [d for d in divisors if d >= want]
    return min(reaching) if reaching else max(d for d in divisors if d < want)


@dataclass(frozen=True)
class Geometry:
    """How one array of a variant is chunked."""

    shards: tuple[int, int]
    chunks: tuple[int, int]
    sub_chunks: tuple[int, int] | None = None
    """Nested variants: the inner sharding codec's chunk shape."""

    def describe(self) -> str:
        text = f"shards {list(self.shards)} chunks {list(self.chunks)}"
        if self.sub_chunks is not None:
            text += f" sub {list(self.sub_chunks)}"
        return text


def zstd() -> ZstdCodec:
    return ZstdCodec(level=1, checksum=True)


def serializer(geometry: Geometry) -> ShardingCodec:
    """The array's one array->bytes codec: sharding, maybe nested."""
    index = [BytesCodec(endian="little"), Crc32cCodec()]
    if geometry.sub_chunks is None:
        inner: list[Any] = [BytesCodec(endian="little"), zstd()]
    else:
        inner = [
            ShardingCodec(
                chunk_shape=geometry.sub_chunks,
                codecs=[BytesCodec(endian="little"), zstd()],
                index_codecs=index,
                index_location="end",
            )
        ]
    return ShardingCodec(
        chunk_shape=geometry.chunks, codecs=inner, index_codecs=index, index_location="end"
    )


# ---------------------------------------------------------------- writing


def write_array(
    store_dir: Path, path: str, values: npt.NDArray[Any], geometry: Geometry, attrs: dict[str, Any]
) -> None:
    """Replace ``path`` by ``values`` with ``geometry``, one shard band at a time, via zarr."""
    target = store_dir / path
    if target.exists():
        shutil.rmtree(target)
    array = zarr.create_array(
        zarr.storage.LocalStore(store_dir),
        name=path,
        shape=values.shape,
        dtype=values.dtype,
        chunks=geometry.shards,
        serializer=serializer(geometry),
        compressors=None,
        filters=None,
        fill_value=0,
        attributes=attrs,
        overwrite=True,
    )
    band = geometry.shards[0]
    for start in range(0, values.shape[0], band):
        array[start : start + band] = values[start : start + band]


def set_layout(store_dir: Path, group: str, layout: dict[str, Any]) -> None:
    """Rewrite the layout record on the matrix group (the arrays carry theirs as written)."""
    node = zarr.open_group(zarr.storage.LocalStore(store_dir), path=group, mode="r+")
    node.attrs[LAYOUT_ATTR] = layout


@dataclass
class Variant:
    """One encoding of both arrays in a full store."""

    name: str
    path: Path
    counts: Geometry
    counts_t: Geometry
    write_seconds: float = 0.0
    results: dict[str, Any] = field(default_factory=dict)


def geometry_of(layout: dict[str, Any], key: str) -> Geometry:
    return Geometry(tuple(layout[key]["shards"]), tuple(layout[key]["chunks"]))  # type: ignore[arg-type]


def derived(
    name: str,
    base: Path,
    workdir: Path,
    dense: npt.NDArray[Any],
    make: Callable[[Geometry, int], Geometry],
) -> Variant:
    """Copy ``a``'s store and re-encode counts and countsT with ``make(a_geometry, row_bytes)``."""
    target = workdir / f"{name}.zarr"
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("counts", "countsT"))
    layout = json.loads((base / "RNA" / "zarr.json").read_text())["attributes"][LAYOUT_ATTR]
    itemsize = dense.dtype.itemsize
    counts = make(geometry_of(layout, "counts"), dense.shape[1] * itemsize)
    counts_t = make(geometry_of(layout, "countsT"), dense.shape[0] * itemsize)
    new_layout = dict(layout)
    new_layout["counts"] = {"chunks": list(counts.chunks), "shards": list(counts.shards)}
    new_layout["countsT"] = {"chunks": list(counts_t.chunks), "shards": list(counts_t.shards)}
    start = time.perf_counter()
    for array_path, values, geometry in (
        ("RNA/counts", dense, counts),
        ("RNA/countsT", np.ascontiguousarray(dense.T), counts_t),
    ):
        attrs = json.loads((base / array_path / "zarr.json").read_text())["attributes"]
        attrs[LAYOUT_ATTR] = new_layout
        write_array(target, array_path, values, geometry, attrs)
    seconds = time.perf_counter() - start
    set_layout(target, "RNA", new_layout)
    return Variant(name, target, counts, counts_t, seconds)


def plain_same_geometry(a: Geometry, row_bytes: int) -> Geometry:
    return a


def small_chunks(a: Geometry, row_bytes: int) -> Geometry:
    rows = rows_for(row_bytes)
    shard_rows = -(-a.shards[0] // rows) * rows
    return Geometry((shard_rows, a.shards[1]), (rows, a.chunks[1]))


def nested(a: Geometry, row_bytes: int) -> Geometry:
    sub = sub_rows_dividing(a.chunks[0], row_bytes)
    return Geometry(a.shards, a.chunks, (sub, a.chunks[1]))


def nested_rounded(a: Geometry, row_bytes: int) -> Geometry:
    rows = rows_for(row_bytes)
    chunk_rows = -(-a.chunks[0] // rows) * rows
    per_shard = a.shards[0] // a.chunks[0]
    return Geometry(
        (chunk_rows * per_shard, a.shards[1]), (chunk_rows, a.chunks[1]), (rows, a.chunks[1])
    )


# ---------------------------------------------------------------- measuring


def median_seconds(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls after one untimed warm-up call, and the last result."""
    result = fn()  # warm: imports, codec pipelines, page cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(
    variant: Variant,
    dense: npt.NDArray[Any],
    *,
    repeat: int,
    readers: list[str],
    rng: np.random.Generator,
) -> None:
    out = variant.results
    root = str(variant.path)
    expected = {"RNA/counts": dense, "RNA/countsT": np.ascontiguousarray(dense.T)}
    for name in readers:
        reader = READERS[name]
        if reader.unavailable() is not None:
            out[f"reads: {name}"] = "unavailable"
            continue
        cells = []
        for path, values in expected.items():
            target = Target(root, path, values, scrub=(root,))
            outcome = run_reader(lambda r=reader, t=target: r.read(t), values, scrub=(root,))
            short = path.split("/")[-1]
            cells.append(
                f"{short} {outcome.status}"
                + (f" ({_short(outcome.detail)})" if outcome.status != "exact" else "")
            )
        out[f"reads: {name}"] = "; ".join(cells)
    out["disk MB (counts+countsT)"] = round(
        (disk_bytes(variant.path / "RNA/counts") + disk_bytes(variant.path / "RNA/countsT")) / 1e6,
        1,
    )
    out["write s"] = round(variant.write_seconds, 2)

    n_cells = dense.shape[0]
    start = min(n_cells - BAND_ROWS, n_cells // 3) if n_cells > BAND_ROWS else 0
    band = slice(start, start + BAND_ROWS)
    rows = np.sort(rng.choice(n_cells, size=min(RANDOM_ROWS, n_cells), replace=False))

    counts = zarr.open_array(zarr.storage.LocalStore(root, read_only=True), path="RNA/counts")
    seconds, got = median_seconds(lambda: counts[band], repeat)
    out["zarr band ms"] = _ms(seconds, np.array_equal(got, dense[band]))
    seconds, got = median_seconds(lambda: counts.oindex[rows, :], repeat)
    out["zarr 1k random rows ms"] = _ms(seconds, np.array_equal(got, dense[rows]))

    try:
        import tensorstore as ts

        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{root}/RNA/counts/"},
        }
        handle = ts.open(spec, open=True, read=True).result()
        seconds, got = median_seconds(lambda: handle[band].read().result(), repeat)
        out["tensorstore band ms"] = _ms(seconds, np.array_equal(got, dense[band]))
    except Exception as exc:
        out["tensorstore band ms"] = f"fails: {_short(str(exc).splitlines()[0])}"

    try:
        config = {
            "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
            "codec_pipeline.strict": True,
        }
        with zarr.config.set(config):
            rust = zarr.open_array(zarr.storage.LocalStore(root, read_only=True), path="RNA/counts")
            seconds, got = median_seconds(lambda: rust[band], repeat)
        out["zarrs band ms"] = _ms(seconds, np.array_equal(got, dense[band]))
    except Exception as exc:
        out["zarrs band ms"] = f"fails: {_short(str(exc).splitlines()[0])}"

    out["gather fast path"] = (
        "yes" if fast_reader_for(counts) is not None else "no (falls back to zarr)"
    )
    gather = cv.VirtualArrayReader(root)
    seconds, got = median_seconds(lambda: gather.read(cells=rows), repeat)
    out["gather 1k random cells ms"] = _ms(seconds, np.array_equal(got, dense[rows]))
    band_seconds, got = median_seconds(
        lambda: gather.read(cells=np.arange(band.start, band.stop)), repeat
    )
    out["gather band ms"] = _ms(band_seconds, np.array_equal(got, dense[band]))


def _short(message: str, head: int = 40, tail: int = 70) -> str:
    """Both ends of a long error: the library's kind of error and its cause."""
    if len(message) <= head + tail + 5:
        return message
    return f"{message[:head]} ... {message[-tail:]}"


def _ms(seconds: float, exact: bool) -> str:
    return f"{seconds * 1e3:.0f}" + ("" if exact else " WRONG VALUES")


# ---------------------------------------------------------------- main


def run_shape(
    n_cells: int, n_features: int, args: argparse.Namespace, workdir: Path
) -> list[Variant]:
    print(f"\n# {n_cells:,} x {n_features:,}, density {args.density}", flush=True)
    matrix = generate(n_cells, n_features, args.density)
    dense = matrix.toarray()
    base = workdir / "a.zarr"
    start = time.perf_counter()
    with row_framed_writes():  # the encoding the exploration started from
        info = cv.write_counts(base, matrix)
    a_seconds = time.perf_counter() - start
    if info.dtype != np.uint16:
        raise SystemExit(f"write_counts stored {info.dtype}; this exploration expects uint16")
    layout = json.loads((base / "RNA" / "zarr.json").read_text())["attributes"][LAYOUT_ATTR]
    variants = [
        Variant(
            "a",
            base,
            geometry_of(layout, "counts"),
            geometry_of(layout, "countsT"),
            a_seconds,
        )
    ]
    plans: list[tuple[str, Callable[[Geometry, int], Geometry]]] = [
        ("a0", plain_same_geometry),
        ("b", small_chunks),
        ("c", nested),
    ]
    itemsize = dense.dtype.itemsize
    shrunk = any(
        nested(geometry_of(layout, key), row_bytes).sub_chunks[0]  # type: ignore[index]
        < min(rows_for(row_bytes), geometry_of(layout, key).chunks[0])
        for key, row_bytes in (("counts", n_features * itemsize), ("countsT", n_cells * itemsize))
    )
    if shrunk:
        plans.append(("c*", nested_rounded))
    for name, make in plans:
        print(f"writing {name}", flush=True)
        variants.append(derived(name, base, workdir, dense, make))
    rng = np.random.default_rng(0)
    readers = [r for r in READERS if r not in args.skip_readers]
    for variant in variants:
        print(f"measuring {variant.name}", flush=True)
        measure(variant, dense, repeat=args.repeat, readers=readers, rng=rng)
    return variants


def table(variants: list[Variant]) -> str:
    names = [v.name for v in variants]
    metrics = ["counts geometry", "countsT geometry", *variants[0].results]
    lines = ["| metric | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for metric in metrics:
        cells = []
        for v in variants:
            if metric == "counts geometry":
                cells.append(v.counts.describe())
            elif metric == "countsT geometry":
                cells.append(v.counts_t.describe())
            else:
                cells.append(str(v.results.get(metric, "")))
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="20000x3000,5000x60000")
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tmpdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--skip-readers", default="", help="comma-separated, e.g. zarrita")
    args = parser.parse_args()
    args.skip_readers = {s for s in args.skip_readers.split(",") if s}
    results: dict[str, Any] = {}
    for shape in args.shapes.split(","):
        n_cells, n_features = (int(x) for x in shape.lower().split("x"))
        workdir = Path(tempfile.mkdtemp(prefix=f"portable-{shape}-", dir=args.tmpdir))
        try:
            variants = run_shape(n_cells, n_features, args, workdir)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        print(table(variants), flush=True)
        results[shape] = {
            v.name: {
                "counts": v.counts.describe(),
                "countsT": v.counts_t.describe(),
                **v.results,
            }
            for v in variants
        }
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
