"""``promote``: give an array a new dimension, renaming its chunks, never re-encoding them.

Conventions (the R zarr package's ``promote(dimension, length)``, 0-based):
``dimension`` is the position of the new dimension in the new shape (0
prepends it, ``ndim`` appends it); ``length`` is its length and its chunk
size, so it starts out as one full chunk. Every chunk ``(i_0, ..., i_{r-1})``
is renamed ``(i_0, ..., 0, ..., i_{r-1})`` with its bytes unchanged;
:mod:`.axis_insertion` shows for which codecs that is sound and refuses
the others by name. A ``length`` above 1 is refused when the array holds
any chunk (the chunks would hold ``length`` times as many elements); grow
the new dimension with :func:`~.resizing.resize` instead (``high``).

On a local directory with ``/`` in chunk keys, ``c/0/1`` is a file that
must become the directory of ``c/0/1/0``: chunks then move in two passes,
through ``cytearc.staging/`` (two renames each, both ``os.replace``).
Object stores and memory hold flat keys and move each chunk once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from .axis_insertion import insert_axis
from .consolidated import ConsolidationReport, consolidated_groups, shown
from .documents import (
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
from .journal import Plan, chained_marks, execute
from .key_moves import mover_for
from .resizing import _reserved, relative_keys
from .store_records import require_unrecorded

__all__ = ["PromoteChange", "plan_promote", "promote", "promote_array"]


@dataclass(frozen=True, slots=True)
class PromoteChange(ConsolidationReport):
    """What a promote did (and, from
    :class:`~.consolidated.ConsolidationReport`, what became of consolidated metadata)."""

    shape_before: tuple[int, ...]
    """Shape before."""
    shape_after: tuple[int, ...]
    """Shape after."""
    moved: int
    """Chunks (shards) renamed."""
    staged: bool
    """Whether the chunks went through the staging prefix (two renames each)."""


def _ancestors(key: str) -> Iterable[str]:
    parts = key.split("/")
    for end in range(1, len(parts)):
        yield "/".join(parts[:end])


def _position(value: object, name: str, upper: int, *, lower: int = 0, meaning: str = "") -> int:
    """``value`` as an integer in ``lower..upper``; refused naming the range and ``meaning``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} is an integer, not {value!r}")
    number: int = value.__index__()
    if not lower <= number <= upper:
        raise ValueError(f"{name} {number} is outside {lower}..{upper}{meaning}")
    return number


def plan_promote(
    document: ArrayDocument,
    keys: Iterable[str],
    dimension: int,
    length: int = 1,
    *,
    flat: bool,
    name: str | None = None,
) -> Plan:
    """The plan of ``promote(dimension, length, name=name)`` for an array holding ``keys``.

    ``flat`` says whether the store may hold ``c/0`` and ``c/0/0`` at once
    (object stores, memory) or not (directories).

    Raises
    ------
    ValueError
        ``dimension`` outside ``0..ndim``, ``length`` below 1, a codec that
        does not keep its bytes valid, ``length > 1`` on an array with chunks, or
        a ``name`` another dimension has.
    TypeError
        A ``name`` that is not a string.
    """
    where = describe_document(document)
    rank = len(document.shape)
    dimension = _position(
        dimension,
        "dimension",
        rank,
        meaning=f" (where the new dimension goes: before dimension 0..{rank - 1} of this "
        f"{rank}-dimensional array, or {rank} after its last)"
        if rank
        else " (a 0-dimensional array takes its first dimension at 0)",
    )
    names = _names_after(document, dimension, name, where=where)
    length = _position(length, "length", 2**62, lower=1, meaning=" (the new dimension's size)")
    before = document.document
    codecs = insert_axis(before.get("codecs", []), dimension, rank, length=length, where=where)
    sources: list[tuple[int, ...]] = []
    drops: list[str] = []
    others: set[str] = set()
    grid_shape = document.grid_shape
    for key in keys:
        if _reserved(key):
            continue
        coords = document.keys.decode(key, rank)
        if coords is None:
            others.add(key)
        elif all(0 <= k < g for k, g in zip(coords, grid_shape, strict=True)):
            sources.append(coords)
        else:
            drops.append(key)
    if length > 1 and sources:
        raise ValueError(
            f"promote of {where} with length {length} refused: the array holds "
            f"{len(sources)} chunk(s), and a chunk {length} cells long on the new dimension "
            f"holds {length} times the elements their bytes encode. Promote with length 1, "
            f"then grow the new dimension: resize(array, high=[... {length - 1} at dimension "
            f"{dimension} ...])"
        )
    encode = document.keys.encode
    pairs = [(encode(c), encode((*c[:dimension], 0, *c[dimension:]))) for c in sorted(sources)]
    pairs = [(source, target) for source, target in pairs if source != target]
    targets = {target for _, target in pairs}
    in_the_way = targets | {a for t in targets for a in _ancestors(t)}
    drops += sorted(others & (targets if flat else in_the_way))
    sources_keys = {source for source, _ in pairs}
    staged = not flat and any(a in sources_keys for t in targets for a in _ancestors(t))
    if staged:
        moves = [(s, f"{STAGING_NAME}/{t}") for s, t in pairs]
        moves += [(f"{STAGING_NAME}/{t}", t) for _, t in pairs]
    else:
        moves = pairs
    shape = list(before["shape"])
    grid = list(before["chunk_grid"]["configuration"]["chunk_shape"])
    after = {
        **before,
        "shape": [*shape[:dimension], length, *shape[dimension:]],
        "chunk_grid": {
            **before["chunk_grid"],
            "configuration": {
                **before["chunk_grid"]["configuration"],
                "chunk_shape": [*grid[:dimension], length, *grid[dimension:]],
            },
        },
        "codecs": codecs,
    }
    if names is not None:
        after["dimension_names"] = names
    return Plan(
        operation="promote",
        arguments={"dimension": dimension, "length": length, "staged": staged},
        before=before,
        after=after,
        drops=tuple(sorted(drops)),
        moves=tuple(moves),
        marks=chained_marks(moves),
    )


def _names_after(
    document: ArrayDocument, dimension: int, name: str | None, *, where: str
) -> list[str | None] | None:
    """The dimension names after inserting ``name`` at ``dimension`` (``None``: the
    array has none and gets none)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name is the new dimension's name, a string, not {name!r}")
    names = document.document.get("dimension_names")
    if names is None and name is None:
        return None
    before: list[str | None] = list(names) if names is not None else [None] * len(document.shape)
    if name is not None and name in before:
        raise ValueError(
            f"promote of {where} refused: dimension {before.index(name)} is named {name!r} "
            "already; give the new dimension another name"
        )
    return [*before[:dimension], name, *before[dimension:]]


def describe_document(document: ArrayDocument) -> str:
    """The array's path for messages."""
    return f"array {document.path or '/'!r}"


def promote_array(
    array: zarr.Array[Any], dimension: int, length: int = 1, *, name: str | None = None
) -> PromoteChange:
    """:func:`promote`, reporting what it did."""
    store, path = array_location(array)
    with array_lock(store, path):  # no flush of this array in this process meanwhile
        return _promote_locked(array, store, path, dimension, length, name)


def _promote_locked(
    array: zarr.Array[Any], store: Store, path: str, dimension: int, length: int, name: str | None
) -> PromoteChange:
    require_v3(array, "promote")
    require_writable(store, path, "promote")
    refuse_unfinished(store, path)
    document = read_document(store, path)
    ancestors = require_unrecorded(store, path, document.document, "promote")
    mover = mover_for(store)
    keys = relative_keys(sync(mover.existing(document.prefix)), document.prefix)
    plan = plan_promote(document, keys, dimension, length, flat=mover.flat, name=name)
    plan = replace(plan, reconsolidate=consolidated_groups(ancestors))
    with writes_refused("promote", store, path, OPERATION_KEPT):
        again = execute(store, path, plan, stale_progress=PROGRESS_NAME in keys)
    refresh(array, plan.after)
    return PromoteChange(
        shape_before=document.shape,
        shape_after=tuple(plan.after["shape"]),
        moved=len(plan.moves) // (2 if plan.arguments["staged"] else 1),
        staged=bool(plan.arguments["staged"]),
        unconsolidated=tuple(shown(group) for group in plan.reconsolidate),
        reconsolidated=again.done,
        not_reconsolidated=again.failed,
    )


def promote(
    array: zarr.Array[Any], dimension: int, length: int = 1, *, name: str | None = None
) -> zarr.Array[Any]:
    """Insert a new dimension at ``dimension``, renaming every chunk, re-encoding none.

    Parameters
    ----------
    array
        A Zarr v3 array on a writable store; its object is updated in place
        and returned.
    dimension
        Position of the new dimension in the new shape, ``0`` (prepend) to
        ``array.ndim`` (append).
    length
        Length and chunk size of the new dimension (default 1). Above 1 only
        for an array that holds no chunk; otherwise promote with 1 and grow
        with :func:`~cytearc_vfs.arrays.resize`.
    name
        The new dimension's name among the array's ``dimension_names``
        (default: unnamed, ``None``). An array without dimension names gets
        them: ``None`` for the others.

    Returns
    -------
    zarr.Array
        ``array``, one dimension more; its values at index 0 of the new one.

    Raises
    ------
    ValueError
        A codec the bytes of whose chunks would not stay valid (named), a
        ``dimension`` out of range, ``length > 1`` with chunks, a ``name``
        another dimension has, a read-only store.

    Examples
    --------
    >>> a = zarr.create_array({}, shape=(2, 3), chunks=(1, 3), dtype="i4", fill_value=0)
    >>> a[:] = [[1, 2, 3], [4, 5, 6]]
    >>> promote(a, 0).shape
    (1, 2, 3)
    >>> a[0, 1].tolist()
    [4, 5, 6]
    """
    promote_array(array, dimension, length, name=name)
    return array
