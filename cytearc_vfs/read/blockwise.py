"""Reading a count matrix block by block: batched streams and lazy dask arrays.

:meth:`~cytearc_vfs.read.reader.VirtualArrayReader.iter_features`,
:meth:`~cytearc_vfs.read.reader.VirtualArrayReader.iter_cells` and
:meth:`~cytearc_vfs.read.reader.VirtualArrayReader.to_dask` cut the matrix
into blocks of adjacent cells or features, each read by one gather; this
module sizes the blocks and builds the dask graph. A dask block carries the
reader's *recipe* (store, assay, workspace, storage options), not the reader,
so it runs in any process, which builds its reader once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import IdentityMismatchError, SourceGoneError
from ..format.layout import DEFAULT_MEM_BUDGET
from ..format.sizes import parse_size
from ..remote.store_keys import store_key
from .count_mapping import ProvidesCountMapping

__all__ = [
    "BlockReader",
    "DeferredStore",
    "OpenReader",
    "batch_size",
    "blocks_along",
    "checked_chunks",
    "dask_array",
    "deferred",
    "keep_reader",
    "kept_reader",
    "opened",
    "recipe_key",
    "require_identity",
]

Indices = npt.NDArray[np.int64]
#: Bytes of one block of :func:`dask_array` when no chunks are given.
DASK_BLOCK_BYTES = 64 << 20


class BlockReader(Protocol):
    """What a dask block reads with: a reader's :meth:`read` of two slices."""

    def read(self, cells: slice, features: slice) -> npt.NDArray[Any]:
        """The dense block of ``cells`` x ``features``."""
        ...

    def _identity(self) -> str:
        """The fingerprint of what the reader reads (shape, dtype, sources)."""
        ...


def require_identity(reader: BlockReader, expected: str, made_by: str) -> None:
    """Refuse a reader opened anew (in a worker, or after a refusal) that reads
    another store than the one a lazy array was made from by ``made_by``.

    The array's blocks would otherwise mix the old store's values (blocks read
    before the store was replaced) with the new one's, or read a store of
    another shape than the array's.
    """
    if reader._identity() != expected:
        raise IdentityMismatchError(
            f"{reader!r} is not the store this lazy array was made from: it was "
            f"replaced or rewritten since {made_by} (its shape, dtype or a source's "
            "fingerprint differ), and its blocks would mix the old store's values "
            f"with the new one's. Call {made_by} again on the store as it is now."
        )


@dataclass(frozen=True)
class DeferredStore:
    """A composite or mount as a dask graph carries it: opened in the task that reads.

    Unpickling the store itself opens and verifies it (every source), and
    dask unpickles the graph on the scheduler and each task's arguments per
    task: a composite would be opened once per block, and an open's refusal
    (a source replaced) raised on the scheduler, reaching the client as its
    "Error during deserialization of the task graph". Carried so, the store
    is opened once per process, inside a task, whose error the client gets.
    """

    opener: Callable[..., Any]
    """What unpickling the store calls (its ``__reduce__``)."""
    arguments: tuple[Any, ...]
    """Its arguments: the backing store or target, record, source options."""

    def open(self) -> Any:
        """The store, opened and verified in this process."""
        return self.opener(*self.arguments)


def deferred(store: Any) -> Any:
    """``store`` as a dask graph carries it: a composite or mount as a
    :class:`DeferredStore`, anything else (a location, a plain store) as it is."""
    if not isinstance(store, ProvidesCountMapping):
        return store
    reduced = store.__reduce__()
    if not isinstance(reduced, tuple):  # pragma: no cover - stores reduce to a call
        return store
    return DeferredStore(reduced[0], tuple(reduced[1]))


def opened(store: Any) -> Any:
    """A store a dask graph carried, opened (see :func:`deferred`)."""
    return store.open() if isinstance(store, DeferredStore) else store


class OpenReader(Protocol):
    """How a process opens the reader of a recipe (``VirtualArrayReader``'s constructor)."""

    def __call__(
        self,
        store: Any,
        assay: str,
        *,
        workspace: str | None,
        storage_options: Mapping[str, Any] | None,
    ) -> BlockReader:
        """A reader of ``store``'s ``assay``."""
        ...


def batch_size(
    batch: int | None, mem_budget: int | str | None, other_axis: int, itemsize: int
) -> int:
    """Cells or features read at once: ``batch`` if given, else as many as
    ``mem_budget`` (default a quarter of the package's) allows when each spans
    ``other_axis`` values of ``itemsize`` bytes.

    >>> batch_size(None, "1MiB", 1_000, 4)
    87
    >>> batch_size(10, None, 1_000, 4)
    10
    """
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
            raise TypeError(
                f"batch must be a whole number of cells or features, got {batch!r} "
                f"({type(batch).__name__}); pass an int, or none to size batches by mem_budget"
            )
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        return int(batch)
    budget = (
        DEFAULT_MEM_BUDGET // 4 if mem_budget is None else parse_size(mem_budget, what="mem_budget")
    )
    # the output block, the gathered source block, and its scatter copy
    per_item = 3 * max(1, other_axis) * itemsize
    return max(1, budget // per_item)


def blocks_along(
    length: int, size: int, gather: Callable[[Indices], npt.NDArray[Any]]
) -> Iterator[tuple[slice, npt.NDArray[Any]]]:
    """``(slice, gather(positions))`` of each run of ``size`` positions of an axis of
    ``length``, in order.

    >>> [(s.start, s.stop, b.tolist()) for s, b in blocks_along(5, 2, lambda p: p * 10)]
    [(0, 2, [0, 10]), (2, 4, [20, 30]), (4, 5, [40])]
    """
    for start in range(0, length, size):
        stop = min(length, start + size)
        yield slice(start, stop), gather(np.arange(start, stop, dtype=np.int64))


def dask_array(
    open_reader: OpenReader,
    recipe: tuple[Any, ...],
    shape: tuple[int, int],
    dtype: np.dtype,
    chunks: tuple[int | None, int | None] | None,
    *,
    name: str,
    kept: BlockReader | None = None,
) -> Any:
    """A lazy ``dask.array`` of ``shape`` whose blocks each open (once per process)
    the reader of ``recipe`` with ``open_reader`` and read their slices.

    ``chunks`` defaults to whole rows of :data:`DASK_BLOCK_BYTES` a block.
    ``kept``: the reader of ``recipe`` open in this process, which blocks run
    here reuse.
    """
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError(
            "to_dask needs dask, an optional extra: pip install 'cytearc-vfs[dask]'"
        ) from exc
    if not recipe:
        raise ValueError(
            "this reader was built from a bound mapping; make one from a store to use dask"
        )
    if chunks is None:
        rows = max(1, DASK_BLOCK_BYTES // max(1, shape[1] * dtype.itemsize))
        chunks = (min(max(shape[0], 1), rows), max(shape[1], 1))
    else:
        chunks = checked_chunks(chunks, shape)
    recipe = (deferred(recipe[0]), *recipe[1:])
    key = recipe_key(recipe)
    if kept is not None:
        # blocks run in this process (the threaded scheduler) read through the
        # reader that made the array, and the store it has open, not a new open
        keep_reader(_PROCESS_READERS, key, kept)
    row_blocks = tuple(_split(shape[0], chunks[0]))
    col_blocks = tuple(_split(shape[1], chunks[1]))
    graph: dict[Any, Any] = {}
    row_start = 0
    for i, n_rows in enumerate(row_blocks):
        col_start = 0
        for j, n_cols in enumerate(col_blocks):
            graph[(name, i, j)] = (
                _read_block,
                open_reader,
                recipe,
                key,
                (row_start, row_start + n_rows),
                (col_start, col_start + n_cols),
            )
            col_start += n_cols
        row_start += n_rows
    return da.Array(graph, name, chunks=(row_blocks, col_blocks), dtype=dtype)  # type: ignore[no-untyped-call]


def checked_chunks(chunks: object, shape: tuple[int, int]) -> tuple[int, int]:
    """``chunks`` as whole block sizes of cells and features; ``-1`` or ``None``
    is the whole axis (dask's convention). Anything else is refused.

    >>> checked_chunks((-1, 4), (50, 10))
    (50, 4)
    """
    wanted = "chunks must be a pair of block sizes (cells, features), each a whole number >= 1"
    if not isinstance(chunks, (tuple, list)) or len(chunks) != 2:
        raise TypeError(
            f"{wanted} (-1 or None: the whole axis), got {chunks!r}; "
            "e.g. to_dask(chunks=(10_000, -1)), or no chunks for blocks of 64 MiB"
        )
    sizes = []
    for size, length in zip(chunks, shape, strict=True):
        if size is None or (isinstance(size, (int, np.integer)) and size == -1):
            sizes.append(max(1, length))
        elif isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"{wanted}, got {chunks!r} ({type(size).__name__} {size!r})")
        elif size < 1:
            raise ValueError(f"{wanted} (-1 or None: the whole axis), got {chunks!r}")
        else:
            sizes.append(int(size))
    return sizes[0], sizes[1]


def _split(length: int, size: int) -> list[int]:
    """Sizes of the blocks of an axis of ``length`` cut every ``size`` (one empty
    block for an empty axis, as dask wants).

    >>> _split(5, 2), _split(4, 2), _split(0, 3)
    ([2, 2, 1], [2, 2], [0])
    """
    sizes = [size] * (length // size)
    if length % size or not sizes:
        sizes.append(length % size)
    return sizes


# This process's readers, by pickled recipe: a worker opens (and verifies)
# a store once, not once per block.
_PROCESS_READERS: dict[str, BlockReader] = {}

#: How many readers a process keeps for later blocks (least recently used go
#: first): a long-lived worker would otherwise hold every store it ever read,
#: with its open files and source cache, until it exits.
KEPT_READERS = 16

_kept_lock = threading.Lock()
# held while a block opens its store (one open at a time in a process)
_open_lock = threading.Lock()


def kept_reader(readers: dict[Any, Any], key: Any) -> Any:
    """The reader kept under ``key`` (now the most recently used), or ``None``."""
    with _kept_lock:
        reader = readers.pop(key, None)
        if reader is not None:
            readers[key] = reader
        return reader


def keep_reader(readers: dict[Any, Any], key: Any, reader: Any | None) -> None:
    """Keep ``reader`` under ``key`` (``None``: drop it), dropping the least
    recently used beyond :data:`KEPT_READERS`."""
    with _kept_lock:
        readers.pop(key, None)
        if reader is not None:
            readers[key] = reader
        while len(readers) > KEPT_READERS:
            del readers[next(iter(readers))]


def recipe_key(recipe: tuple[Any, ...]) -> str:
    """The key a process keeps the reader of ``recipe`` under, fixed where the
    array is made and carried by its tasks.

    Not the pickle of each task's own copy: an ``obstore`` store pickles its
    options in another order each time (a Rust hash map), so every block of a
    composite kept in S3 would miss the kept reader and open the composite anew.
    """
    return hashlib.sha256(store_key(recipe)).hexdigest()


def _read_block(
    open_reader: OpenReader,
    recipe: tuple[Any, ...],
    key: str,
    rows: tuple[int, int],
    cols: tuple[int, int],
) -> npt.NDArray[Any]:
    """One dask block: reuse this process's reader of the recipe, or build it once.

    A kept reader that refuses a source changed since it was opened is
    dropped and the store opened anew, once: the new open says what changed,
    or is refused unless it reads the store the array was made from (a source
    replaced with equal values), where the kept reader would refuse every
    later block of this process.
    """
    reader: BlockReader | None = kept_reader(_PROCESS_READERS, key)
    if reader is not None:
        try:
            return reader.read(slice(*rows), slice(*cols))
        except (IdentityMismatchError, SourceGoneError):
            keep_reader(_PROCESS_READERS, key, None)
    with _open_lock:  # the process's threads open a store once, not each
        reader = kept_reader(_PROCESS_READERS, key)
        if reader is None:
            store, assay, workspace, options, identity = recipe
            reader = open_reader(
                opened(store), assay, workspace=workspace, storage_options=options or None
            )
            require_identity(reader, identity, "to_dask")
            keep_reader(_PROCESS_READERS, key, reader)
    return reader.read(slice(*rows), slice(*cols))
