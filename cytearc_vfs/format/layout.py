"""The count layout policy: from (unitBytes, chunkBytes) to chunk and shard shapes.

A policy is two numbers. ``chunkBytes`` is the target uncompressed size of one
inner chunk, ``unitBytes`` that of one shard (the unit a writer holds in
memory and writes at once). Both orientations are derived from the same
policy, so a ``countsT`` writer or a reader can replay the geometry from the
record alone. Halving a policy halves both numbers, which keeps the number of
chunks per shard.

Three geometry rules have written stores, and every one keeps reading.
What writers write today (:func:`array_geometry`, from issue 14 on) are inner
chunks of about ``chunkBytes`` of whole rows, each stored by Zarr's standard
``blosc`` codec as independent zstd blocks of the fewest whole rows that make
:data:`MIN_CHUNK_BYTES` (8 KiB), then ``crc32c``
(``encoding/blosc_blocks.py``): large chunks for zarr's pipeline, a
block's decode for a single-cell read. Two older rules are still here for the
stores they wrote: the *row-frame* rule (:func:`row_frame_geometry`, the same
shapes; each chunk one zstd stream of row frames and a skippable index,
``encoding/row_frames.py``), and, briefly during issue 14, the *single-frame*
rule (:func:`single_frame_geometry`: chunks of the fewest rows that make 8 KiB,
each one zstd frame). A record's own geometry and the array's codecs say which
wrote a store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .option_names import option_name
from .records import ArrayGeometry, CountLayout
from .sizes import format_size, parse_size

__all__ = [
    "DEFAULT_MEM_BUDGET",
    "DEFAULT_POLICY",
    "LayoutPolicy",
    "GeometryRule",
    "LayoutTooLargeError",
    "MIN_CHUNK_BYTES",
    "array_geometry",
    "count_layout",
    "fit_layout",
    "fit_policy",
    "least_fitting_budget",
    "group_bytes",
    "require_fit",
    "row_frame_geometry",
    "single_frame_geometry",
    "write_cost",
]

DEFAULT_MEM_BUDGET = 2 * 1024**3
#: The unit a single-cell read decodes: a Blosc block (a row frame before) of the
#: fewest whole rows of at least this many bytes: smaller zstd frames compress
#: worse, larger ones cost a single-cell read more decoding.
MIN_CHUNK_BYTES = 8 * 1024
# Bytes of working memory a sparse band costs per non-zero beyond its dense
# form: a CSR copy (value + int32 index), a COO piece while transposing
# (value + two int64 coordinates) and scipy's sort buffer.
_SPARSE_BYTES_PER_NONZERO = 32
# Transposed non-zeros per feature vary around the average; a group of
# features is costed a quarter above it.
_GROUP_SLACK = 1.25


class LayoutTooLargeError(ValueError):
    """A layout policy whose write does not fit the memory budget."""


@dataclass(frozen=True, slots=True)
class LayoutPolicy:
    """The count layout policy recorded in ``cytearc:countMatrixLayout``."""

    unit_bytes: int = 64 * 1024**2
    """Target uncompressed bytes of one shard."""
    chunk_bytes: int = 2 * 1024**2
    """Target uncompressed bytes of one inner chunk.

    2 MiB by default: zarr-python spends a few hundred microseconds of Python
    per chunk it decodes and copies each chunk into its result, so a band
    read through plain zarr comes near the gather reader only with large
    chunks (generated 8,000-gene counts: 256 KiB chunks 3.3x, 1 MiB
    1.8-2.1x, 2 MiB 1.8-1.9x; real counts of 75,340 genes 2.7x:
    ``benchmarks/bench_portable.py``), while a single-cell read still
    decodes one 8 KiB block of them."""

    def __post_init__(self) -> None:
        for field, value in (("unit_bytes", self.unit_bytes), ("chunk_bytes", self.chunk_bytes)):
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise TypeError(
                    f"LayoutPolicy {field} is a byte count (an int), not {value!r}; for sizes "
                    "such as '64M' use LayoutPolicy.parse(('64M', '2M')) or pass "
                    "layout=('64M', '2M')"
                )
            # a numpy integer would reach the JSON record, which takes Python ints only
            object.__setattr__(self, field, int(value))
        if self.chunk_bytes < 1 or self.unit_bytes < self.chunk_bytes:
            raise ValueError(
                f"layout policy needs 1 <= chunkBytes <= unitBytes, got unitBytes="
                f"{self.unit_bytes}, chunkBytes={self.chunk_bytes}"
            )

    @classmethod
    def parse(cls, value: LayoutPolicy | tuple[int | str, int | str] | None) -> LayoutPolicy:
        """Accept a policy, a ``(unitBytes, chunkBytes)`` pair (sizes allowed) or ``None``."""
        if value is None:
            return DEFAULT_POLICY
        if isinstance(value, LayoutPolicy):
            return value
        if isinstance(value, tuple) and len(value) == 2:
            return cls(
                parse_size(value[0], what="unitBytes"), parse_size(value[1], what="chunkBytes")
            )
        raise TypeError(
            "layout must be a LayoutPolicy or a (unitBytes, chunkBytes) pair such as "
            f"('64M', '1M'), not {value!r}"
        )

    def halved(self) -> LayoutPolicy:
        """The next smaller policy: both numbers halved together."""
        return LayoutPolicy(max(1, self.unit_bytes // 2), max(1, self.chunk_bytes // 2))

    def describe(self) -> str:
        """A form users can paste: ``LayoutPolicy(unit_bytes=..., chunk_bytes=...)``."""
        return f"LayoutPolicy(unit_bytes={self.unit_bytes}, chunk_bytes={self.chunk_bytes})"

    def named(self, *, pasteable: bool) -> str:
        """The policy in a message: ``layout LayoutPolicy(...)`` for a caller who can give
        one (Python), else as ``cytearc-vfs info`` shows a store's layout (a Python
        expression means nothing where no option takes it).

        >>> LayoutPolicy(8000, 800).named(pasteable=False)
        'the count layout unitBytes=8000 chunkBytes=800'
        """
        if pasteable:
            return f"layout {self.describe()}"
        return f"the count layout unitBytes={self.unit_bytes} chunkBytes={self.chunk_bytes}"


DEFAULT_POLICY = LayoutPolicy()


def array_geometry(n_rows: int, n_cols: int, itemsize: int, policy: LayoutPolicy) -> ArrayGeometry:
    """Chunk and shard shape of an ``n_rows x n_cols`` array under ``policy`` (what writers write).

    A shard is a band of whole rows across every column, so a band write
    touches one shard. An inner chunk spans all columns when a row fits in
    ``chunkBytes`` and holds as many rows as fit; wider rows are split into
    column blocks of ``chunkBytes``. Each chunk is stored as Blosc blocks of
    the fewest whole rows making :data:`MIN_CHUNK_BYTES`
    (:func:`~cytearc_vfs.encoding.blosc_blocks.chunk_block_bytes`), so the
    shapes are those of the row-frame rule, which made the same trade with a
    framing of its own.

    >>> array_geometry(1000, 100, 2, LayoutPolicy(8000, 800))
    ArrayGeometry(chunks=(4, 100), shards=(40, 100))
    >>> array_geometry(200_000, 3_000, 2, LayoutPolicy())  # 6 KB rows
    ArrayGeometry(chunks=(349, 3000), shards=(11168, 3000))
    >>> array_geometry(20_000, 2_000_000, 2, LayoutPolicy())  # wide rows: 2 MiB column blocks
    ArrayGeometry(chunks=(1, 1048576), shards=(16, 2097152))
    """
    rows = max(n_rows, 1)
    cols = max(n_cols, 1)
    chunk_cols = min(cols, max(1, policy.chunk_bytes // itemsize))
    chunk_rows = min(rows, max(1, policy.chunk_bytes // (chunk_cols * itemsize)))
    shard_cols = chunk_cols * -(-cols // chunk_cols)
    chunks_per_shard_rows = max(1, policy.unit_bytes // (chunk_rows * shard_cols * itemsize))
    chunk_bands = -(-rows // chunk_rows)
    shard_rows = chunk_rows * min(chunks_per_shard_rows, chunk_bands)
    return ArrayGeometry((chunk_rows, chunk_cols), (shard_rows, shard_cols))


def single_frame_geometry(
    n_rows: int, n_cols: int, itemsize: int, policy: LayoutPolicy
) -> ArrayGeometry:
    """The geometry of stores written while issue 14 was under way (tests, fixtures).

    Columns as in :func:`array_geometry`; an inner chunk holds only the
    fewest whole rows that make :data:`MIN_CHUNK_BYTES`, stored as one zstd
    frame; a shard is :func:`array_geometry`'s band rounded up to whole chunks.

    >>> single_frame_geometry(200_000, 3_000, 2, LayoutPolicy(64 * 1024**2, 256 * 1024))
    ArrayGeometry(chunks=(2, 3000), shards=(11180, 3000))
    """
    frames = array_geometry(n_rows, n_cols, itemsize, policy)
    chunk_rows, chunk_cols = frames.chunks
    rows = min(chunk_rows, max(1, -(-MIN_CHUNK_BYTES // (chunk_cols * itemsize))))
    shard_rows = rows * -(-frames.shards[0] // rows)
    return ArrayGeometry((rows, chunk_cols), (shard_rows, frames.shards[1]))


def row_frame_geometry(
    n_rows: int, n_cols: int, itemsize: int, policy: LayoutPolicy
) -> ArrayGeometry:
    """Chunk and shard shape of an ``n_rows x n_cols`` array under ``policy``, row-frame rule.

    The rule of stores written before issue 14 (their inner chunks are
    row-framed, ``encoding/row_frames.py``); still used to write such stores
    for tests and fixtures, and by benchmarks comparing layouts. Its shapes
    are :func:`array_geometry`'s.

    >>> row_frame_geometry(10, 5000, 4, LayoutPolicy(4000, 400))
    ArrayGeometry(chunks=(1, 100), shards=(1, 5000))
    """
    return array_geometry(n_rows, n_cols, itemsize, policy)


GeometryRule = Callable[[int, int, int, LayoutPolicy], ArrayGeometry]
"""A geometry rule: :func:`array_geometry` (what writers write), :func:`row_frame_geometry`
or :func:`single_frame_geometry`."""


def count_layout(
    shape: tuple[int, int],
    dtype: str,
    itemsize: int,
    policy: LayoutPolicy,
    *,
    transpose: bool,
    rule: GeometryRule = array_geometry,
) -> CountLayout:
    """The full layout record of a count matrix of ``shape`` under ``policy`` and ``rule``."""
    n_cells, n_features = shape
    return CountLayout(
        unit_bytes=policy.unit_bytes,
        chunk_bytes=policy.chunk_bytes,
        shape=(n_cells, n_features),
        dtype=dtype,
        counts=rule(n_cells, n_features, itemsize, policy),
        # countsT chunks follow the same rule: a feature read decodes about
        # MIN_CHUNK_BYTES (a block), as a cell read of counts does
        counts_t=rule(n_features, n_cells, itemsize, policy) if transpose else None,
    )


def group_bytes(layout: CountLayout, itemsize: int, nnz: int, n_features: int) -> int:
    """Bytes ``write_counts`` holds for the transposed non-zeros of ``n_features`` features.

    One CSC piece per counts band: a value and an int32 row index per
    non-zero (a quarter more for features denser than the average), and an
    index pointer entry per feature and band.
    """
    n_cells, all_features = layout.shape
    counts_bands = -(-n_cells // max(1, layout.counts.shards[0]))
    per_feature = (
        _GROUP_SLACK * (nnz / max(1, all_features)) * (itemsize + 4) + 8 * counts_bands + 16
    )
    return int(per_feature * n_features)


def write_cost(layout: CountLayout, itemsize: int, nnz: int, *, reserved: int = 0) -> int:
    """Peak working bytes of writing ``layout``, plus ``reserved`` bytes held beside it.

    While ``counts`` is written, a counts band holds its dense shard three
    times (the band being built, the band being written, its encoded bytes)
    and the sparse rows it came from, and the transposed non-zeros of the
    first countsT band of features are gathered beside it. While ``countsT``
    is written, the same group, a countsT band's dense shard three times,
    and (for later groups) a counts band's sparse rows read again. ``nnz=0``
    (a copy of dense bands, as ``repack`` makes) leaves the dense bands.
    ``reserved`` is what the writer holds outside its bands (the
    write-behind's held bytes, tables, count summaries).
    """
    n_cells, n_features = layout.shape
    density = nnz / max(1, n_cells * n_features)

    def dense(geometry: ArrayGeometry, n_rows: int) -> int:
        return min(geometry.shards[0], max(n_rows, 1)) * geometry.shards[1] * itemsize

    rows = min(layout.counts.shards[0], max(n_cells, 1))
    sparse = int(rows * n_features * density * _SPARSE_BYTES_PER_NONZERO)
    largest = dense(layout.counts, n_cells)
    group = 0
    if layout.counts_t is not None:
        largest = max(largest, dense(layout.counts_t, n_features))
        if nnz:
            group = group_bytes(layout, itemsize, nnz, min(layout.counts_t.shards[0], n_features))
    return 3 * largest + sparse + group + reserved


def _needed(cost: int, budget_for: Callable[[int], int] | None) -> int:
    return cost if budget_for is None else budget_for(cost)


def _smallest(policy: LayoutPolicy) -> bool:
    # Halving stops at count shards of one row (or at one-byte chunks).
    return policy.chunk_bytes <= 1


def fit_policy(
    policy: LayoutPolicy,
    shape: tuple[int, int],
    dtype: str,
    itemsize: int,
    nnz: int,
    mem_budget: int,
    *,
    transpose: bool,
    rule: GeometryRule = array_geometry,
    reserved: int = 0,
    budget_for: Callable[[int], int] | None = None,
) -> LayoutPolicy | None:
    """The largest halving of ``policy`` whose write fits ``mem_budget``, or ``None``.

    Halving stops when count shards are one row tall: smaller policies only
    make chunks narrower without saving memory. ``reserved`` is what the
    writer holds beside its bands (:func:`write_cost`); ``budget_for`` maps a
    cost to the smallest budget that covers it (a writer whose write-behind
    takes a share of its budget), by default the cost itself.
    """
    current = policy
    while True:
        layout = count_layout(shape, dtype, itemsize, current, transpose=transpose, rule=rule)
        if _needed(write_cost(layout, itemsize, nnz, reserved=reserved), budget_for) <= mem_budget:
            return current
        one_row = layout.counts.shards[0] == 1 and (
            layout.counts_t is None or layout.counts_t.shards[0] == 1
        )
        if one_row or _smallest(current):
            return None
        current = current.halved()


def require_fit(
    policy: LayoutPolicy,
    shape: tuple[int, int],
    dtype: str,
    itemsize: int,
    nnz: int,
    mem_budget: int,
    *,
    transpose: bool,
    rule: GeometryRule = array_geometry,
    reserved: int = 0,
    budget_for: Callable[[int], int] | None = None,
    layout_option: bool = True,
) -> CountLayout:
    """Return the layout of ``policy`` if its write fits, else refuse naming the fix.

    Imports use a policy exactly or not at all (spec, "Count layout"), so the
    refusal names the largest halving that fits instead of applying it, when
    the caller can give a layout (``layout_option``; the command line
    cannot), and the budget that fits ``policy``.
    """
    layout = count_layout(shape, dtype, itemsize, policy, transpose=transpose, rule=rule)
    cost = _needed(write_cost(layout, itemsize, nnz, reserved=reserved), budget_for)
    if cost <= mem_budget:
        return layout
    fitting = fit_policy(
        policy,
        shape,
        dtype,
        itemsize,
        nnz,
        mem_budget,
        transpose=transpose,
        rule=rule,
        reserved=reserved,
        budget_for=budget_for,
    )
    what = "counts write" + (" and countsT transpose" if transpose else "")
    if fitting is None:
        smallest = count_layout(shape, dtype, itemsize, LayoutPolicy(1, 1), transpose=transpose)
        least = _needed(write_cost(smallest, itemsize, nnz, reserved=reserved), budget_for)
        remedy = (
            f"no halving fits even with one-row shards; the smallest {option_name('mem_budget')} "
            f"that works is {format_size(least)} ({least} bytes)"
        )
    elif layout_option:
        remedy = (
            f"the largest halving that fits is layout={fitting.describe()} "
            f"(smaller shards make later countsT reads slower), or raise {option_name('mem_budget')} "
            f"to at least {format_size(cost)} ({cost} bytes)"
        )
    else:
        remedy = f"raise {option_name('mem_budget')} to at least {format_size(cost)} ({cost} bytes)"
    raise LayoutTooLargeError(
        f"{policy.named(pasteable=layout_option)} needs {format_size(cost)} for its {what} of a "
        f"{shape[0]} x {shape[1]} {dtype} matrix, over {option_name('mem_budget')} {format_size(mem_budget)}; "
        f"{remedy}. Nothing was written"
    )


def fit_layout(
    policy: LayoutPolicy,
    shape: tuple[int, int],
    dtype: str,
    itemsize: int,
    nnz: int,
    mem_budget: int,
    *,
    transpose: bool,
    min_shard_rows: int,
    rule: GeometryRule = array_geometry,
    reserved: int = 0,
    budget_for: Callable[[int], int] | None = None,
) -> CountLayout:
    """The layout of the largest halving of ``policy`` that fits (:func:`fit_policy`).

    For writers that fit instead of refusing (spec, "Count layout": repack,
    merge). A budget that no halving fits, or that would make count shards
    shorter than ``min_shard_rows`` (thousands of tiny shards are slow to
    write and to read), is refused naming the smallest budget that works:
    the only remedy, as these writers take no layout.
    """

    def layout_of(candidate: LayoutPolicy) -> CountLayout:
        return count_layout(shape, dtype, itemsize, candidate, transpose=transpose, rule=rule)

    fitting = fit_policy(
        policy,
        shape,
        dtype,
        itemsize,
        nnz,
        mem_budget,
        transpose=transpose,
        rule=rule,
        reserved=reserved,
        budget_for=budget_for,
    )
    if fitting is not None and layout_of(fitting).counts.shards[0] >= min(min_shard_rows, shape[0]):
        return layout_of(fitting)
    least = least_fitting_budget(
        policy,
        shape,
        dtype,
        itemsize,
        nnz,
        transpose=transpose,
        min_shard_rows=min_shard_rows,
        rule=rule,
        reserved=reserved,
        budget_for=budget_for,
    )
    raise LayoutTooLargeError(
        f"{option_name('mem_budget')} {format_size(mem_budget)} is too small to write the "
        f"{shape[0]} x {shape[1]} {dtype} counts in shards of at least "
        f"{min(min_shard_rows, shape[0])} row(s) (smaller shards are very slow to write and to "
        f"read); give a {option_name('mem_budget')} of at least {format_size(least)} "
        f"({least} bytes). Nothing was written"
    )


def least_fitting_budget(
    policy: LayoutPolicy,
    shape: tuple[int, int],
    dtype: str,
    itemsize: int,
    nnz: int,
    *,
    transpose: bool,
    min_shard_rows: int,
    rule: GeometryRule = array_geometry,
    reserved: int = 0,
    budget_for: Callable[[int], int] | None = None,
) -> int:
    """The smallest budget :func:`fit_layout` accepts: that of the smallest halving of
    ``policy`` whose count shards still hold ``min_shard_rows`` rows (or all rows)."""
    rows = min(min_shard_rows, shape[0])

    def layout_of(candidate: LayoutPolicy) -> CountLayout:
        return count_layout(shape, dtype, itemsize, candidate, transpose=transpose, rule=rule)

    least = policy
    while (
        least.halved() != least
        and not _smallest(least)
        and layout_of(least.halved()).counts.shards[0] >= rows
    ):
        least = least.halved()
    return _needed(write_cost(layout_of(least), itemsize, nnz, reserved=reserved), budget_for)
