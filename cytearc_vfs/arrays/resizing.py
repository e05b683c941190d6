"""``resize``: grow or shrink any dimensions at either end in one pass, by renaming chunks.

Conventions (the R zarr package's ``resize(low, high)``, 0-based):

- ``low[d]`` and ``high[d]`` are signed changes at the start and the end
  of dimension ``d``: positive grows that end, negative shrinks it, 0 leaves
  it. ``resize(a, high=[5, 0])`` appends 5 rows; ``resize(a, low=[-10, 0])``
  drops the first 10.
- The chunk grid is anchored at index 0, so the low end moves in whole
  chunks (whole shards for a sharded array): ``low`` is rounded outward,
  away from the data: a growth up to the next multiple of the chunk size
  (more cells added, the new ones missing), a shrink down to the previous
  one (fewer cells removed). ``high`` is used as given.
- Cells that no write reached read as missing (:func:`~.reading.read`).

Every chunk that stays is renamed to its new grid position (its stored
bytes are not decoded or re-encoded); chunks that fall outside are deleted;
only an edge chunk that a shrink of the high end cuts through is rewritten,
with the cut-off cells set to the fill value, so that growing the array
again shows them as missing rather than as the old values. A high-end
growth also checks the old edge chunks: cells past the old edge that hold
anything but the fill value (zarr's own ``Array.resize`` leaves them so)
are cleared the same way. The whole change is journaled (:mod:`.journal`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from .consolidated import ConsolidationReport, Reconsolidation, consolidated_groups, shown
from .documents import (
    JOURNAL_NAME,
    OPERATION_KEPT,
    PROGRESS_NAME,
    STAGING_NAME,
    ArrayDocument,
    array_location,
    array_lock,
    read_document,
    refresh,
    refuse_unfinished,
    require_v3,
    require_writable,
    writes_refused,
)
from .edges import EdgeChunks, Outcome
from .journal import Plan, chained_marks, execute
from .key_moves import mover_for
from .store_records import require_unrecorded

__all__ = ["MAX_LENGTH", "ResizeChange", "applied_low", "plan_resize", "resize", "resize_array"]

Changes = Sequence[int] | None


@dataclass(frozen=True, slots=True)
class ResizeChange(ConsolidationReport):
    """What a resize did (and, from
    :class:`~.consolidated.ConsolidationReport`, what became of consolidated metadata)."""

    shape_before: tuple[int, ...]
    """Shape before."""
    shape_after: tuple[int, ...]
    """Shape after."""
    low: tuple[int, ...]
    """The low-end changes applied (``low`` rounded outward to whole chunks)."""
    high: tuple[int, ...]
    """The high-end changes applied (as given)."""
    moved: int
    """Chunks (shards) renamed."""
    dropped: int
    """Chunks deleted (outside the new shape, or stray keys in the way)."""
    edge_chunks: int
    """Edge chunks rewritten to clear cells past the new or old edge."""


def changes(value: Changes, rank: int, name: str) -> tuple[int, ...]:
    """``low`` or ``high`` as one integer per dimension (``None``: all 0).

    >>> changes(None, 2, "low")
    (0, 0)
    >>> changes([1], 2, "low")
    Traceback (most recent call last):
    ...
    ValueError: low has 1 value for an array of 2 dimensions; give one change per dimension
    """
    if value is None:
        return (0,) * rank
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} is a sequence of integers, one per dimension, not {value!r}")
    items = list(value)
    if len(items) != rank:
        raise ValueError(
            f"{name} has {len(items)} value{'s' if len(items) != 1 else ''} for an array of "
            f"{rank} dimension{'s' if rank != 1 else ''}; give one change per dimension"
        )
    out: list[int] = []
    for item in items:
        if isinstance(item, bool) or not hasattr(item, "__index__"):
            raise TypeError(f"{name} holds {item!r}; changes are integers")
        out.append(item.__index__())
    return tuple(out)


def applied_low(low: Sequence[int], grid: Sequence[int]) -> tuple[int, ...]:
    """``low`` rounded outward to whole chunks: growths up, shrinks down (towards 0).

    >>> applied_low((3, -3, -12, 20, 0), (10, 10, 10, 10, 10))
    (10, 0, -10, 20, 0)
    """
    # -(-c // s) * s is the ceiling for growths and truncation towards 0 for shrinks
    return tuple(-(-change // size) * size for change, size in zip(low, grid, strict=True))


#: The longest dimension a resize makes: int64's maximum, what Zarr readers index with.
MAX_LENGTH = 2**63 - 1

_RESERVED = frozenset({"zarr.json", JOURNAL_NAME, PROGRESS_NAME})


def _reserved(key: str) -> bool:
    return key in _RESERVED or key.startswith(STAGING_NAME + "/")


def _ordered(sources: list[tuple[int, ...]], shift: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Sources in an order whose renames never overwrite a chunk still to move.

    A chunk moves from ``c`` to ``c + shift``; if that is another chunk
    ``c'``, then ``c' . shift = c . shift + |shift|^2``, so descending
    ``c . shift`` moves ``c'`` first. Chunks of equal ``c . shift`` are
    independent: their order is chosen so that a level does not start with
    the rename that refills the previous rename's source where another
    choice exists (such a pair needs a progress mark, :mod:`.journal`).

    >>> _ordered([(0, 0), (1, 0), (0, 1), (1, 1)], (1, 0))
    [(1, 0), (1, 1), (0, 0), (0, 1)]
    """
    levels: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for coords in sources:
        levels[sum(c * s for c, s in zip(coords, shift, strict=True))].append(coords)
    order: list[tuple[int, ...]] = []
    for level in sorted(levels, reverse=True):
        group = sorted(levels[level])
        if order and len(group) > 1 and _shifted(group[0], shift) == order[-1]:
            group[0], group[1] = group[1], group[0]
        order.extend(group)
    return order


def _shifted(coords: tuple[int, ...], shift: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(c + s for c, s in zip(coords, shift, strict=True))


def plan_resize(
    document: ArrayDocument,
    keys: Iterable[str],
    low: Changes = None,
    high: Changes = None,
    *,
    edges: Mapping[tuple[int, ...], Outcome] | None = None,
) -> Plan:
    """The plan of ``resize(low, high)`` for an array holding ``keys`` (relative to it).

    ``edges`` says what clearing each edge chunk does (:mod:`.edges`; read
    from the store by :func:`resize_array`): ``clean`` ones are left alone,
    ``empty`` ones are dropped (not moved), ``clear`` ones rewritten before
    the renames. Without it every edge chunk is listed to clear, which is
    right unless clearing empties one (then its rename would find it gone).

    Raises
    ------
    ValueError
        A dimension would end with a negative length.
    """
    shape, grid = document.shape, document.grid
    rank = len(shape)
    asked_low = changes(low, rank, "low")
    high_changes = changes(high, rank, "high")
    low_changes = applied_low(asked_low, grid)
    new_shape = tuple(
        n + lo + hi for n, lo, hi in zip(shape, low_changes, high_changes, strict=True)
    )
    for axis, length in enumerate(new_shape):
        if length > MAX_LENGTH:
            raise ValueError(
                f"resize would make dimension {axis} {length} long (length {shape[axis]}, low "
                f"{low_changes[axis]}, high {high_changes[axis]}); Zarr readers index with "
                f"64-bit signed integers (tensorstore refuses more), so a dimension is at most "
                f"2**63 - 1 = {MAX_LENGTH}: give smaller changes"
            )
        if length < 0:
            raise ValueError(
                f"resize would leave dimension {axis} with length {length} (length "
                f"{shape[axis]}, low {low_changes[axis]} after rounding to whole chunks of "
                f"{grid[axis]}, high {high_changes[axis]}); a dimension can shrink to 0 at most"
            )
    shift = tuple(lo // size for lo, size in zip(low_changes, grid, strict=True))
    # the old cells that stay, per dimension: [keep_low, keep_high)
    keep_low = tuple(max(0, -lo) for lo in low_changes)
    keep_high = tuple(n + min(0, hi) for n, hi in zip(shape, high_changes, strict=True))
    grid_shape = document.grid_shape

    def kept(coords: tuple[int, ...]) -> bool:
        return all(
            0 <= k < g and k * c < hi and (k + 1) * c > lo
            for k, g, c, lo, hi in zip(coords, grid_shape, grid, keep_low, keep_high, strict=True)
        )

    sources: list[tuple[int, ...]] = []
    drops: list[str] = []
    others: set[str] = set()
    for key in keys:
        if _reserved(key):
            continue
        coords = document.keys.decode(key, rank)
        if coords is None:
            others.add(key)
        elif kept(coords):
            sources.append(coords)
        else:
            drops.append(key)
    bounds = _clear_bounds(shape, grid, keep_high, high_changes)
    at_edge = [
        c
        for c in sources
        if any(
            b is not None and (k + 1) * size > b for k, size, b in zip(c, grid, bounds, strict=True)
        )
    ]
    outcomes = dict.fromkeys(at_edge, "clear") if edges is None else edges
    emptied = {c for c in at_edge if outcomes[c] == "empty"}
    clear = sorted(c for c in at_edge if outcomes[c] == "clear")
    encode = document.keys.encode
    drops += [encode(c) for c in sorted(emptied)]
    sources = [c for c in sources if c not in emptied]
    moves: list[tuple[str, str]] = []
    if any(shift):
        moves = [(encode(c), encode(_shifted(c, shift))) for c in _ordered(sources, shift)]
        # a stray key where a chunk lands would make its rename an overwrite
        drops += sorted(others & {target for _, target in moves})
    return Plan(
        operation="resize",
        arguments={
            "low": list(asked_low),
            "high": list(high_changes),
            "low_applied": list(low_changes),
        },
        before=document.document,
        after={**document.document, "shape": list(new_shape)},
        clear_bounds=bounds if clear else (),
        clear_chunks=tuple(clear),
        drops=tuple(sorted(drops)),
        moves=tuple(moves),
        marks=chained_marks(moves),
    )


def _clear_bounds(
    shape: Sequence[int],
    grid: Sequence[int],
    keep_high: Sequence[int],
    high: Sequence[int],
) -> tuple[int | None, ...]:
    """Per dimension, from which old index edge chunks must hold only the fill value.

    A non-aligned shrink cuts cells off; a growth from a non-aligned edge
    shows the cells past the old edge.

    >>> _clear_bounds((25, 25, 20), (10, 10, 10), (23, 25, 20), (-2, 3, 5))
    (23, 25, None)
    """
    bounds: list[int | None] = []
    for n, size, keep, change in zip(shape, grid, keep_high, high, strict=True):
        if change < 0 and keep % size:
            bounds.append(keep)
        elif change > 0 and n % size:
            bounds.append(n)
        else:
            bounds.append(None)
    return tuple(bounds)


def relative_keys(store_keys: Iterable[str], prefix: str) -> list[str]:
    """Keys under ``prefix`` with the prefix removed."""
    return [key[len(prefix) :] for key in store_keys if key.startswith(prefix)]


def resize_array(array: zarr.Array[Any], low: Changes = None, high: Changes = None) -> ResizeChange:
    """:func:`resize`, reporting what it did."""
    store, path = array_location(array)
    with array_lock(store, path):  # no flush of this array in this process meanwhile
        return _resize_locked(array, store, path, low, high)


def _resize_locked(
    array: zarr.Array[Any], store: Store, path: str, low: Changes, high: Changes
) -> ResizeChange:
    require_v3(array, "resize")
    require_writable(store, path, "resize")
    refuse_unfinished(store, path)
    document = read_document(store, path)
    ancestors = require_unrecorded(store, path, document.document, "resize")
    prefix = document.prefix
    keys = relative_keys(sync(mover_for(store).existing(prefix)), prefix)
    plan = plan_resize(document, keys, low, high)
    if plan.clear_chunks:
        # read the edge chunks once now: the plan must know which to leave,
        # rewrite or delete before anything is renamed
        inspector = EdgeChunks(store, path, plan.before, plan.clear_bounds)
        outcomes = {coords: inspector.inspect(coords) for coords in plan.clear_chunks}
        plan = plan_resize(document, keys, low, high, edges=outcomes)
    again = Reconsolidation()
    if not plan.changes_nothing:
        plan = replace(plan, reconsolidate=consolidated_groups(ancestors))
        with writes_refused("resize", store, path, OPERATION_KEPT):
            again = execute(store, path, plan, stale_progress=PROGRESS_NAME in keys)
    refresh(array, plan.after)
    return ResizeChange(
        shape_before=document.shape,
        shape_after=tuple(plan.after["shape"]),
        low=tuple(plan.arguments["low_applied"]),
        high=tuple(plan.arguments["high"]),
        moved=len(plan.moves),
        dropped=len(plan.drops),
        edge_chunks=len(plan.clear_chunks),
        unconsolidated=tuple(shown(group) for group in plan.reconsolidate),
        reconsolidated=again.done,
        not_reconsolidated=again.failed,
    )


def resize(array: zarr.Array[Any], low: Changes = None, high: Changes = None) -> zarr.Array[Any]:
    """Grow or shrink any dimensions of ``array`` at either end, in one pass.

    Parameters
    ----------
    array
        A Zarr v3 array on a writable store. Its object is updated in place
        (as zarr's own ``Array.resize`` does) and returned.
    low, high
        One signed integer per dimension (0-based order): positive grows that
        end, negative shrinks it, 0 (or ``None`` for all) leaves it. ``low``
        is rounded outward to whole chunks (whole shards when sharded):
        growths up, shrinks down; the new cells read as missing.

    Returns
    -------
    zarr.Array
        ``array``, now of the new shape.

    Raises
    ------
    ValueError
        A dimension would become negative; a read-only store; a chunk grid or
        storage transformer the operation does not handle.
    RecordShapeError
        An unfinished operation's journal that cannot be completed.

    Examples
    --------
    >>> a = zarr.create_array({}, shape=(25,), chunks=(10,), dtype="i4", fill_value=-1)
    >>> a[:] = range(25)
    >>> resize(a, low=[3], high=[-2]).shape  # low 3 becomes one chunk: 10
    (33,)
    >>> a[8:12].tolist()
    [-1, -1, 0, 1]
    """
    resize_array(array, low, high)
    return array
