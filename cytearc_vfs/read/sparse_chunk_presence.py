"""Refusing a sparse matrix whose stored chunks are missing: a partial copy.

zarr reads a chunk that has no object as its fill value (0), so a sparse
AnnData matrix whose copy was interrupted reads without error but wrong: a
missing ``data`` chunk turns its entries into zeros, a missing ``indices``
chunk moves them to column (or row) 0, a missing ``indptr`` chunk shifts
every entry after it. :func:`check_stored_chunks` refuses such a matrix
before anything is read from it; composite creation
(:mod:`.anndata_sources`) and ``write_counts`` from an AnnData container
(the adapter's ``SparseMatrixElement``) both call it.

Which chunks must be there: every chunk of ``indices`` and ``data`` that
holds stored entries ``[0, nnz)`` (``nnz = indptr[-1]``), and every chunk of
``indptr``. For a sharded array, a chunk is missing when its shard is, or
when the shard's index marks it absent. zarr itself leaves out a chunk
equal to the fill value (``write_empty_chunks=False``), so three absences
are legitimate and accepted:

* ``indptr`` chunks that lead the array (every chunk before them missing
  too), reading as zeros: leading empty rows, or a matrix without entries;
  the first stored value after them must be at most the minor length (one
  row's entries), else the leading rows were lost;
* an ``indices`` chunk that would read as zeros (fill value 0), where that is
  consistent: each major index holds at most one entry in the chunk's range
  (all at index 0: in practice a one-column matrix).

A ``data`` chunk of explicit stored zeros is the one legitimate absence that
is refused: the message says to drop them (``eliminate_zeros()``) and write
the matrix again. The check reads the key listing the caller already holds
(no request when it has one), ``indptr[-1]``, each shard index of a sharded
array (kept by the reads that follow) and, only when an ``indices`` chunk is
missing, ``indptr``.

:func:`listed_absence` is the part of it a listing alone can tell, for
``cytearc-vfs anndata ls``, which reads no chunk: what it reports, the full
check refuses too (docs/anndata.md, "cytearc-vfs anndata ls PATH").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.core.array import AsyncArray

from ..errors import MissingChunkError
from ..format.gathering import gather_all, gather_bounded
from .chunk_codecs import ChunkDecodeError
from .direct_chunks import DirectChunks, direct_chunks_for
from .prefetch import MAX_IN_FLIGHT

__all__ = [
    "AbsentChunk",
    "absent_chunks",
    "check_stored_chunks",
    "listed_absence",
    "stored_keys",
]

#: What a user does about a partial copy.
PARTIAL_COPY_REMEDY = (
    "the store looks like a partial or interrupted copy; copy it again from its origin, or "
    "write it again with anndata"
)


@dataclass(frozen=True, slots=True)
class AbsentChunk:
    """A chunk of a 1-D array that has no stored object."""

    key: str
    """Its key in the store (a shard's key and the inner chunk's number when sharded)."""
    start: int
    """The first position of the array it would hold."""
    stop: int
    """One past the last position it would hold (within the array's length)."""


async def stored_keys(arrays: Mapping[str, AsyncArray[Any]]) -> set[str]:
    """The stored chunk keys of ``arrays``: one listing of their element's prefix (its
    arrays are its members), or, on a store that cannot list or refuses to
    (``PermissionError``), an ``exists`` per chunk."""
    store = next(iter(arrays.values())).store_path.store
    if not store.supports_listing:
        return await _existing_keys(arrays)
    keys: set[str] = set()
    prefixes = {array.store_path.path.rpartition("/")[0] for array in arrays.values()}
    try:
        for prefix in sorted(prefixes):
            keys.update([key async for key in store.list_prefix(prefix + "/" if prefix else "")])
    except PermissionError:
        # credentials that may read but not list (S3 without s3:ListBucket): the
        # chunks are asked one by one, as on a store that cannot list
        return await _existing_keys(arrays)
    return keys


async def _existing_keys(arrays: Mapping[str, AsyncArray[Any]]) -> set[str]:
    """The stored chunk keys of ``arrays``, found without a listing: an ``exists`` each,
    at most :data:`~.prefetch.MAX_IN_FLIGHT` at once."""
    store = next(iter(arrays.values())).store_path.store
    candidates = [
        _chunk_key(array, n) for array in arrays.values() for n in range(_outer_count(array))
    ]
    # a few dozen in flight, as every other concurrent read: one request per chunk all
    # at once (100,000 HEADs for a large matrix on S3) invites the server's throttling
    found = await gather_bounded(store.exists, candidates, MAX_IN_FLIGHT)
    return {key for key, exists in zip(candidates, found, strict=True) if exists}


def _outer_count(array: AsyncArray[Any]) -> int:
    """Chunks (shards, when sharded) of 1-D ``array``."""
    shards = array.shards
    outer = int(shards[0]) if shards is not None else int(array.chunks[0])
    return -(-int(array.shape[0]) // outer)


def _chunk_key(array: AsyncArray[Any], chunk: int) -> str:
    key = array.metadata.encode_chunk_key((chunk,))
    path = array.store_path.path
    return f"{path}/{key}" if path else key


async def absent_chunks(
    array: AsyncArray[Any],
    keys: Collection[str],
    upto: int,
    direct: DirectChunks | None = None,
) -> list[AbsentChunk]:
    """The chunks of 1-D ``array`` holding positions ``[0, upto)`` that are not stored.

    ``keys`` are the stored keys under the array (from a listing). A sharded
    array's present shards have their index read (through ``direct``, which
    keeps it) for inner chunks marked absent.
    """
    length = min(int(array.shape[0]), max(0, upto))
    inner = int(array.chunks[0])
    shards = array.shards
    outer = int(shards[0]) if shards is not None else inner
    found: list[AbsentChunk] = []
    present_shards: list[int] = []
    for number in range(-(-length // outer)):
        key = _chunk_key(array, number)
        if key in keys:
            present_shards.append(number)
        else:
            found.append(AbsentChunk(key, number * outer, min(length, (number + 1) * outer)))
    if shards is None or not present_shards:
        return found
    reader = direct if direct is not None else direct_chunks_for(array)
    if reader is None:
        # an index this package does not parse (rare codecs): whole shards only
        return found
    indexes = await gather_all(*(reader.inner_chunks_present(n) for n in present_shards))
    for number, present in zip(present_shards, indexes, strict=True):
        key = _chunk_key(array, number)
        if present is None:  # removed since the listing
            found.append(AbsentChunk(key, number * outer, min(length, (number + 1) * outer)))
            continue
        for position in np.flatnonzero(~present).tolist():
            start = number * outer + position * inner
            if start < length:
                found.append(
                    AbsentChunk(
                        f"{key} (inner chunk {position})", start, min(length, start + inner)
                    )
                )
    return sorted(found, key=lambda chunk: chunk.start)


def _stores_any(array: AsyncArray[Any], keys: Collection[str]) -> bool:
    """Whether any chunk (or shard) of 1-D ``array`` is among the stored ``keys``."""
    return any(_chunk_key(array, n) in keys for n in range(_outer_count(array)))


async def _value_at(array: AsyncArray[Any], position: int) -> int:
    """One value of 1-D integer ``array``."""
    return int(np.asarray(await array.getitem(position)))


def _reads_as_zero(array: AsyncArray[Any]) -> bool:
    fill = array.metadata.fill_value
    return fill is None or bool(np.asarray(fill) == 0)


def _at_most_one_entry_each(indptr: npt.NDArray[np.int64], start: int, stop: int) -> bool:
    """Whether every major index holds at most one of the entries ``[start, stop)``.

    >>> _at_most_one_entry_each(np.array([0, 1, 2, 4]), 0, 2)
    True
    >>> _at_most_one_entry_each(np.array([0, 1, 2, 4]), 2, 4)
    False
    """
    low, high = np.maximum(indptr[:-1], start), np.minimum(indptr[1:], stop)
    return bool(np.all(high - low <= 1))


def _refusal(source: str, element: str, name: str, chunk: AbsentChunk, why: str) -> str:
    what = "entries" if name != "indptr" else "positions"
    return (
        f"{source}: the AnnData element {element!r} lacks the chunk {chunk.key!r} of its "
        f"{name} ({what} {chunk.start}:{chunk.stop}){why}; zarr would read it as zeros and "
        f"give wrong counts, so it is refused: {PARTIAL_COPY_REMEDY}"
    )


async def check_stored_chunks(
    arrays: Mapping[str, AsyncArray[Any]],
    *,
    minor: int,
    keys: Collection[str] | None,
    source: str,
    element: str,
    direct: Mapping[str, DirectChunks | None] | None = None,
) -> None:
    """Refuse the sparse element ``arrays`` (``indptr``, ``indices``, ``data``) when a
    chunk its entries need has no stored object (:class:`MissingChunkError`, naming
    ``source``, ``element``, the array, the chunk's key and its entries).

    ``minor`` is the length of the minor axis (columns of a CSR); ``keys`` the
    stored keys under the element, from the caller's listing (``None``: listed
    here); ``direct`` the arrays' chunk readers, whose shard indexes are kept. A
    shard index that does not decode is a :class:`ChunkDecodeError` naming ``source``
    and ``element`` too (caused by the reader's own, which names the shard).
    """
    try:
        await _check_stored_chunks(arrays, minor, keys, source, element, direct)
    except ChunkDecodeError as exc:
        raise ChunkDecodeError(f"{source}: the AnnData element {element!r}: {exc}") from exc


async def _check_stored_chunks(
    arrays: Mapping[str, AsyncArray[Any]],
    minor: int,
    keys: Collection[str] | None,
    source: str,
    element: str,
    direct: Mapping[str, DirectChunks | None] | None,
) -> None:
    if keys is None:
        keys = await stored_keys(arrays)
    readers = direct or {}
    indptr = arrays["indptr"]
    length = int(indptr.shape[0])
    missing = await absent_chunks(indptr, keys, length, readers.get("indptr"))
    leading = 0
    for chunk in missing:
        if chunk.start != leading:
            raise MissingChunkError(_refusal(source, element, "indptr", chunk, ""))
        leading = chunk.stop
    if leading == length:
        # no indptr chunk stored: all zeros, a matrix without entries... unless its
        # entries are stored, and the indptr that placed them was lost
        if _stores_any(arrays["data"], keys):
            why = ", and with it every chunk of indptr, while entries are stored"
            raise MissingChunkError(_refusal(source, element, "indptr", missing[0], why))
        return
    first = await _value_at(indptr, leading) if leading else 0
    if first > minor:
        # leading empty rows read as zeros; but then the first stored value is the
        # entries of one row, and it holds more than a row can
        why = f", before a stored value of {first}, more entries than one row can hold"
        raise MissingChunkError(_refusal(source, element, "indptr", missing[-1], why))
    nnz = await _value_at(indptr, length - 1)
    data_missing, indices_missing = await gather_all(
        absent_chunks(arrays["data"], keys, nnz, readers.get("data")),
        absent_chunks(arrays["indices"], keys, nnz, readers.get("indices")),
    )
    if data_missing:
        raise MissingChunkError(
            _refusal(
                source,
                element,
                "data",
                data_missing[0],
                " (zarr leaves out a chunk of explicit zeros too: if these entries are stored "
                "zeros, drop them with eliminate_zeros() and write the matrix again)",
            )
        )
    if not indices_missing:
        return
    pointers = np.asarray(await indptr.getitem(slice(None)), dtype=np.int64)
    for chunk in indices_missing:
        if not _reads_as_zero(arrays["indices"]) or not _at_most_one_entry_each(
            pointers, chunk.start, chunk.stop
        ):
            raise MissingChunkError(_refusal(source, element, "indices", chunk, ""))


def _stored_numbers(array: AsyncArray[Any], keys: Collection[str]) -> set[int]:
    """The numbers of the chunks (shards, when sharded) of 1-D ``array`` among ``keys``.

    A set: the checks below ask it once per chunk, and a list made them quadratic
    (16,000 chunks took 6 s, an element of 100,000 small chunks minutes).
    """
    return {n for n in range(_outer_count(array)) if _chunk_key(array, n) in keys}


def _absence(array: AsyncArray[Any], name: str, number: int, why: str = "") -> str:
    outer = int(array.shards[0]) if array.shards is not None else int(array.chunks[0])
    start, stop = number * outer, min(int(array.shape[0]), (number + 1) * outer)
    what = "entries" if name != "indptr" else "positions"
    return (
        f"the chunk {_chunk_key(array, number)!r} of its {name} ({what} {start}:{stop}) is "
        f"not stored{why}; zarr would read it as zeros and give wrong counts: "
        f"{PARTIAL_COPY_REMEDY}"
    )


def listed_absence(
    arrays: Mapping[str, AsyncArray[Any]], keys: Collection[str], *, major: int
) -> str | None:
    """What the stored ``keys`` alone prove missing from the sparse element ``arrays``
    (``indptr``, ``indices``, ``data``), in words, or ``None``. No value is read.

    Proven missing, and so refused by :func:`check_stored_chunks` too: a chunk of
    ``indptr`` after a stored one (only leading chunks may be zeros zarr left
    out), ``indptr`` lost whole while ``data`` holds chunks, and a chunk of
    ``data`` before the last stored entry; so is a chunk of ``indices`` there
    whose entries cannot all be zeros at index 0 zarr left out, at most one per
    row of the ``major`` axis: the missing chunks' entries would need more rows
    than there are (neighbouring chunks share at most one row). A
    stored chunk of ``data`` or ``indices`` holds stored entries (chunks past
    ``nnz`` are never written), and so does a stored last chunk of ``indptr``
    (its last value ``nnz``, unless zero). Not provable without reading: a
    chunk after the last one stored (``nnz`` is a value of ``indptr``), an
    inner chunk a present shard's index marks absent.
    """
    indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"]
    stored = {name: _stored_numbers(array, keys) for name, array in arrays.items()}
    leading = next((n for n in range(_outer_count(indptr)) if n in stored["indptr"]), None)
    if leading is None:
        if _outer_count(indptr) and stored["data"]:
            why = ", nor any chunk of indptr, while entries are stored"
            return _absence(indptr, "indptr", 0, why)
        return None  # a matrix without entries, whose indptr zarr left out
    for number in range(leading, _outer_count(indptr)):
        if number not in stored["indptr"]:
            return _absence(indptr, "indptr", number, ", after a stored one")
    # the entries known stored: up to the last stored chunk's first, or one when
    # indptr's last value (stored) says there are some
    reach = 1 if _outer_count(indptr) - 1 in stored["indptr"] else 0
    for name in ("data", "indices"):
        array = arrays[name]
        outer = int(array.shards[0]) if array.shards is not None else int(array.chunks[0])
        if stored[name]:
            reach = max(reach, max(stored[name]) * outer + 1)
    reach = min(reach, int(data.shape[0]))
    for name, array in (("data", data), ("indices", indices)):
        outer = int(array.shards[0]) if array.shards is not None else int(array.chunks[0])
        # chunks of indices that may be zeros zarr left out: each holds at most one
        # entry per row, so together they span rows, sharing at most one row between
        # neighbours (entries run in row order); more entries than that are not zeros
        missing = [n for n in range(-(-reach // outer)) if n not in stored[name]]
        zeros: list[int] = []
        spanned = 0
        for number in missing:
            entries = min(reach, (number + 1) * outer) - number * outer
            if name == "indices" and _reads_as_zero(array):
                zeros.append(number)
                spanned += entries - (1 if len(zeros) > 1 else 0)
                if spanned <= major:
                    continue
                why = (
                    f" (nor {len(missing) - 1} more of its chunks: as entries at index 0, one "
                    f"per row, they would need more than the {major} rows)"
                )
                return _absence(array, name, zeros[0], why if len(missing) > 1 else "")
            why = " (a chunk of stored zeros is left out too: drop them with eliminate_zeros())"
            return _absence(array, name, number, why if name == "data" else "")
    return None
