"""Which requests fetch the byte ranges a read needs from one shard on an object store.

A request to an object store costs a round trip (~25 ms in one region)
whatever it carries, so the gather reader (:mod:`cytearc_vfs.read.shard_reader`)
asks for fewer, larger ranges than the chunks it decodes: a shard most of
whose chunks a read touches, or a small one, is fetched whole with its
index; the touched chunks of the others are grouped into requests by
:func:`coalesce_ranges`. The rules are measured by ``benchmarks/bench_remote.py``
and ``benchmarks/bench_remote_caches.py`` (docs/remote.md).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "COALESCE_RATIO",
    "MAX_RANGE_REQUESTS",
    "SMALL_GAP_BYTES",
    "SMALL_SHARD_BYTES",
    "WHOLE_SHARD_SHARE",
    "coalesce_ranges",
]

# Fetch the whole shard when the touched chunks hold at least this share of it
# (of its bytes once its index is known; of its chunks before, when the whole
# shard is fetched instead of its index: one request, the index in its tail).
WHOLE_SHARD_SHARE = 0.5
# Neighbouring chunk ranges of a shard are fetched in one request while that
# request carries at most this many bytes per byte needed.
COALESCE_RATIO = 1.25
# At most this many range requests per shard for chunks of the portable
# layout: random rows touch thousands of its small chunks, and a request to
# an object store costs far more than the few KiB between two of them.
MAX_RANGE_REQUESTS = 16
# Ranges of a shard this close also share one request, whatever the ratio: a
# request to an object store costs a round trip (~25 ms in one region, the
# time 2.5 MB take at 100 MB/s), far more than the bytes of a gap this size.
# zarr's sharding codec merges ranges less than 1 MiB apart for the same
# reason (array.sharding_coalesce_max_gap_bytes).
SMALL_GAP_BYTES = 1 << 20
# A shard of at most this many bytes (its size from the shard table) is
# fetched whole when a read touches it: one round trip instead of two (its
# index, then its chunks), for bytes that cost less than the trip saved.
SMALL_SHARD_BYTES = 1 << 20


def coalesce_ranges(
    offsets: Sequence[int],
    sizes: Sequence[int],
    ratio: float = COALESCE_RATIO,
    max_requests: int | None = None,
    max_gap: int = 0,
) -> list[tuple[int, int, list[int]]]:
    """Requests covering byte ranges ``offsets[i]:offsets[i] + sizes[i]`` of one object.

    Ranges are taken in offset order and a range joins the request before it
    while the request's span stays within ``ratio`` times the bytes its ranges
    need, so a request never carries more than ``ratio`` x what it needs, or
    while the gap before it is at most ``max_gap`` bytes (a gap that costs
    less than a request). Returns ``(start, stop, members)`` per request, ``members`` the indices of
    the ranges it covers, in offset order.

    >>> coalesce_ranges([0, 120, 1000], [100, 100, 50])
    [(0, 220, [0, 1]), (1000, 1050, [2])]
    >>> coalesce_ranges([0, 200], [100, 100])  # a gap as large as a range: two requests
    [(0, 100, [0]), (200, 300, [1])]
    >>> coalesce_ranges([300, 0], [10, 300])  # any order; adjacent ranges always join
    [(0, 310, [1, 0])]
    >>> coalesce_ranges([0, 200], [100, 100], max_gap=100)  # a small gap: one request
    [(0, 300, [0, 1])]

    With ``max_requests``, requests beyond it are joined across the smallest
    gaps first (then a request may carry more than ``ratio`` x its needs):

    >>> coalesce_ranges([0, 200, 1000, 1150], [100] * 4, max_requests=2)
    [(0, 300, [0, 1]), (1000, 1250, [2, 3])]
    """
    order = sorted(range(len(offsets)), key=lambda i: offsets[i])
    requests: list[tuple[int, int, list[int]]] = []
    needed = 0
    for i in order:
        start, stop = offsets[i], offsets[i] + sizes[i]
        if requests:
            first, last, members = requests[-1]
            span = max(last, stop) - first
            if span <= ratio * (needed + sizes[i]) or start - last <= max_gap:
                requests[-1] = (first, max(last, stop), [*members, i])
                needed += sizes[i]
                continue
        requests.append((start, stop, [i]))
        needed = sizes[i]
    if max_requests is None or len(requests) <= max_requests:
        return requests
    gaps = [requests[k + 1][0] - requests[k][1] for k in range(len(requests) - 1)]
    joined = set(sorted(range(len(gaps)), key=gaps.__getitem__)[: len(requests) - max_requests])
    merged = [requests[0]]
    for k, (start, stop, members) in enumerate(requests[1:]):
        if k in joined:
            first, _, previous = merged[-1]
            merged[-1] = (first, stop, [*previous, *members])
        else:
            merged.append((start, stop, members))
    return merged
