"""The count layout policy: from (unitBytes, chunkBytes) to chunk and shard shapes.

A policy is two numbers. ``chunkBytes`` is the target uncompressed size of one
inner chunk, ``unitBytes`` that of one shard (the unit a writer holds in
memory and writes at once). Both orientations are derived from the same
policy, so a ``countsT`` writer or a reader can replay the geometry from the
record alone. Halving a policy halves both numbers, which keeps the number of
chunks per shard.

Two geometry rules exist. Stores written from issue 14 on use the *portable*
rule (:func:`array_geometry`): inner chunks of the fewest whole rows that make
:data:`MIN_CHUNK_BYTES` (8 KiB), each one plain zstd frame, so every Zarr
reader decodes every chunk as it is. Stores written before used the
*row-frame* rule (:func:`row_frame_geometry`): inner chunks of ``chunkBytes``
whose zstd stream holds one frame per 8 KiB of rows plus a skippable index
(``encoding/row_frames.py``). A record's own geometry says which rule wrote
it; where the two rules agree, the row-frame chunks were single plain frames
anyway, so the store is portable either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
    "fit_policy",
    "require_fit",
    "row_frame_geometry",
    "write_cost",
]

DEFAULT_MEM_BUDGET = 2 * 1024**3
#: The portable rule's inner chunk: the fewest whole rows of at least this many
#: bytes (the size of one row frame before): smaller zstd frames compress
#: worse, larger ones cost a single-cell read more decoding.
MIN_CHUNK_BYTES = 8 * 1024
# Bytes of working memory a sparse band costs per non-zero beyond its dense
# form: a CSR copy (value + int32 index), a COO piece while transposing
# (value + two int64 coordinates) and scipy's sort buffer.
_SPARSE_BYTES_PER_NONZERO = 32


class LayoutTooLargeError(ValueError):
    """A layout policy whose write does not fit the memory budget."""


@dataclass(frozen=True, slots=True)
class LayoutPolicy:
    """The count layout policy recorded in ``cytearc:countMatrixLayout``."""

    unit_bytes: int = 64 * 1024**2
    """Target uncompressed bytes of one shard."""
    chunk_bytes: int = 256 * 1024
    """Target uncompressed bytes of one inner chunk."""

    def __post_init__(self) -> None:
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


DEFAULT_POLICY = LayoutPolicy()


def array_geometry(n_rows: int, n_cols: int, itemsize: int, policy: LayoutPolicy) -> ArrayGeometry:
    """Chunk and shard shape of an ``n_rows x n_cols`` array under ``policy`` (portable rule).

    Columns are split as in :func:`row_frame_geometry` (blocks of ``chunkBytes``
    when a row is wider), but an inner chunk holds only the fewest whole rows
    that make :data:`MIN_CHUNK_BYTES`, never more rows than ``chunkBytes``
    allows. A shard is the row-frame rule's band of rows rounded up to whole
    chunks, so a band write still touches one shard and holds about
    ``unitBytes``. Each inner chunk is one plain zstd frame: standard for every
    Zarr reader, and a single-cell read decodes about 8 KiB, as a row frame was.

    >>> array_geometry(1000, 100, 2, LayoutPolicy(8000, 800))
    ArrayGeometry(chunks=(4, 100), shards=(40, 100))
    >>> array_geometry(200_000, 3_000, 2, LayoutPolicy())  # 6 KB rows: chunks of 2 rows
    ArrayGeometry(chunks=(2, 3000), shards=(11180, 3000))
    >>> array_geometry(20_000, 200_000, 2, LayoutPolicy())  # wide rows: 256 KiB column blocks
    ArrayGeometry(chunks=(1, 131072), shards=(128, 262144))
    """
    frames = row_frame_geometry(n_rows, n_cols, itemsize, policy)
    chunk_rows, chunk_cols = frames.chunks
    rows = min(chunk_rows, max(1, -(-MIN_CHUNK_BYTES // (chunk_cols * itemsize))))
    shard_rows = rows * -(-frames.shards[0] // rows)
    return ArrayGeometry((rows, chunk_cols), (shard_rows, frames.shards[1]))


def row_frame_geometry(
    n_rows: int, n_cols: int, itemsize: int, policy: LayoutPolicy
) -> ArrayGeometry:
    """Chunk and shard shape of an ``n_rows x n_cols`` array under ``policy``, row-frame rule.

    The rule of stores written before the portable layout (their inner chunks
    are row-framed, ``encoding/row_frames.py``); still used to write such
    stores for tests and fixtures, and by benchmarks comparing the two.

    A shard is a band of whole rows across every column, so a band write
    touches one shard. An inner chunk spans all columns when a row fits in
    ``chunkBytes`` and holds as many rows as fit; wider rows are split into
    column blocks of ``chunkBytes``.

    >>> row_frame_geometry(1000, 100, 2, LayoutPolicy(8000, 800))
    ArrayGeometry(chunks=(4, 100), shards=(40, 100))
    >>> row_frame_geometry(10, 5000, 4, LayoutPolicy(4000, 400))
    ArrayGeometry(chunks=(1, 100), shards=(1, 5000))
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


GeometryRule = Callable[[int, int, int, LayoutPolicy], ArrayGeometry]
"""A geometry rule: :func:`array_geometry` (what writers write) or :func:`row_frame_geometry`."""


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
        # MIN_CHUNK_BYTES, as counts chunks make a cell read
        counts_t=rule(n_features, n_cells, itemsize, policy) if transpose else None,
    )


def write_cost(layout: CountLayout, itemsize: int, nnz: int) -> int:
    """Peak working bytes of writing ``layout``: the larger of its two band writes.

    A counts band holds its dense shard three times (the band being built, the
    band being written, its encoded bytes) plus
    the sparse rows it came from; a countsT band the same for its feature
    band, plus the transposed non-zeros of at least one band.
    """
    n_cells, n_features = layout.shape
    density = nnz / max(1, n_cells * n_features)

    def band(geometry: ArrayGeometry, n_rows: int, n_cols: int) -> int:
        rows = min(geometry.shards[0], max(n_rows, 1))
        dense = rows * geometry.shards[1] * itemsize
        sparse = int(rows * n_cols * density * _SPARSE_BYTES_PER_NONZERO)
        return 3 * dense + sparse

    cost = band(layout.counts, n_cells, n_features)
    if layout.counts_t is not None:
        cost = max(cost, band(layout.counts_t, n_features, n_cells))
    return cost


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
) -> LayoutPolicy | None:
    """The largest halving of ``policy`` whose write fits ``mem_budget``, or ``None``.

    Halving stops when count shards are one row tall: smaller policies only
    make chunks narrower without saving memory.
    """
    current = policy
    while True:
        layout = count_layout(shape, dtype, itemsize, current, transpose=transpose, rule=rule)
        if write_cost(layout, itemsize, nnz) <= mem_budget:
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
) -> CountLayout:
    """Return the layout of ``policy`` if its write fits, else refuse naming the fix.

    Imports use a policy exactly or not at all (spec, "Count layout"), so the
    refusal names the largest halving that fits instead of applying it.
    """
    layout = count_layout(shape, dtype, itemsize, policy, transpose=transpose, rule=rule)
    cost = write_cost(layout, itemsize, nnz)
    if cost <= mem_budget:
        return layout
    fitting = fit_policy(
        policy, shape, dtype, itemsize, nnz, mem_budget, transpose=transpose, rule=rule
    )
    what = "counts write" + (" and countsT transpose" if transpose else "")
    if fitting is None:
        remedy = (
            "no halving fits even with one-row shards; raise mem_budget "
            f"above {format_size(write_cost(count_layout(shape, dtype, itemsize, LayoutPolicy(1, 1), transpose=transpose), itemsize, nnz))}"
        )
    else:
        remedy = (
            f"the largest halving that fits is layout={fitting.describe()} "
            "(smaller shards make later countsT reads slower), or raise mem_budget"
        )
    raise LayoutTooLargeError(
        f"layout {policy.describe()} needs about {format_size(cost)} for its {what} of a "
        f"{shape[0]} x {shape[1]} {dtype} matrix, over mem_budget {format_size(mem_budget)}; "
        f"{remedy}. Nothing was written"
    )
