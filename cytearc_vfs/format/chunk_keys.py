"""Chunk keys of a Zarr array: how an array names its chunks, read back strictly.

An operation that renames chunks must know exactly which stored keys are
chunks of the array and at which grid position, and a writer replacing a
destination must know which keys under an array are its chunks (anything
else is not ours to delete: :mod:`cytearc_vfs.write.destinations`). A key
counts as a chunk of rank ``r`` only when encoding its parsed position gives
the key back (``c/01`` is not chunk ``(1,)``, and ``c/1/2`` is not a chunk
of a one-dimensional array); anything else under the array's prefix is left
alone by :mod:`cytearc_vfs.arrays.resizing` and
:mod:`cytearc_vfs.arrays.promotion` unless it stands where a chunk is about
to be moved.

A remote source's wrappers see keys without their array's document:
:func:`is_chunk_key` tells chunk objects (pinned and cached,
:mod:`cytearc_vfs.remote.pinned_store`) from documents by the key alone.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RecordShapeError

__all__ = ["ChunkKeys", "array_documents", "grid_keys", "grid_size", "is_chunk_key"]


@dataclass(frozen=True, slots=True)
class ChunkKeys:
    """An array's ``chunk_key_encoding``: its name and separator."""

    name: str
    """``"default"`` (keys ``c/0/1``) or ``"v2"`` (keys ``0.1``)."""
    separator: str
    """``"/"`` or ``"."``."""

    @classmethod
    def from_document(cls, document: Mapping[str, Any], *, where: str) -> ChunkKeys:
        """The encoding a ``zarr.json`` names (zarr's default when it names none).

        >>> ChunkKeys.from_document({"chunk_key_encoding": {"name": "v2"}}, where="a")
        ChunkKeys(name='v2', separator='.')
        """
        encoding = document.get("chunk_key_encoding", {"name": "default"})
        if isinstance(encoding, str):
            encoding = {"name": encoding}
        if not isinstance(encoding, Mapping):
            raise RecordShapeError(f"{where}: chunk_key_encoding {encoding!r} is not an object")
        name = encoding.get("name")
        configuration = encoding.get("configuration") or {}
        if name not in ("default", "v2") or not isinstance(configuration, Mapping):
            raise RecordShapeError(
                f"{where}: chunk_key_encoding {encoding!r} is not one of Zarr v3's "
                "('default' or 'v2', with an optional separator)"
            )
        separator = configuration.get("separator", "/" if name == "default" else ".")
        if separator not in ("/", "."):
            raise RecordShapeError(f"{where}: chunk key separator {separator!r} is not '/' or '.'")
        return cls(str(name), str(separator))

    @classmethod
    def of_array(cls, document: Mapping[str, Any], *, where: str) -> ChunkKeys:
        """The encoding of an array's metadata document: a v3 ``zarr.json`` or a v2 ``.zarray``.

        A Zarr v2 array names its chunks as the ``v2`` encoding does, with its
        ``dimension_separator`` (``"."`` when it names none).

        >>> ChunkKeys.of_array({"zarr_format": 2, "dimension_separator": "/"}, where="a")
        ChunkKeys(name='v2', separator='/')
        >>> ChunkKeys.of_array({"zarr_format": 3, "node_type": "array"}, where="a")
        ChunkKeys(name='default', separator='/')
        """
        if document.get("zarr_format") != 2:
            return cls.from_document(document, where=where)
        separator = document.get("dimension_separator") or "."
        if separator not in ("/", "."):
            raise RecordShapeError(f"{where}: dimension_separator {separator!r} is not '/' or '.'")
        return cls("v2", str(separator))

    def encode(self, coords: Sequence[int]) -> str:
        """The key of the chunk at grid position ``coords`` (relative to the array).

        >>> ChunkKeys("default", "/").encode((1, 2))
        'c/1/2'
        >>> ChunkKeys("default", ".").encode(())
        'c'
        >>> ChunkKeys("v2", ".").encode(())
        '0'
        """
        indices = [str(int(c)) for c in coords]
        if self.name == "default":
            return self.separator.join(["c", *indices])
        return self.separator.join(indices) or "0"

    def decode(self, key: str, rank: int) -> tuple[int, ...] | None:
        """The grid position of chunk ``key`` of a rank-``rank`` array, or ``None``.

        ``None`` for every key that is not exactly how this encoding names a
        chunk of that rank (another rank, leading zeros, other files).

        >>> ChunkKeys("default", "/").decode("c/3/0", 2)
        (3, 0)
        >>> ChunkKeys("default", "/").decode("c/03/0", 2) is None
        True
        >>> ChunkKeys("default", "/").decode("c/3", 2) is None
        True
        >>> ChunkKeys("v2", ".").decode("0", 0)
        ()
        """
        if rank == 0:
            return () if key == self.encode(()) else None
        body = key
        if self.name == "default":
            head = "c" + self.separator
            if not key.startswith(head):
                return None
            body = key[len(head) :]
        parts = body.split(self.separator)
        if len(parts) != rank:
            return None
        coords: list[int] = []
        for part in parts:
            # ASCII digits without leading zeros: the only spelling zarr writes
            if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
                return None
            coords.append(int(part))
        return tuple(coords)

    def decode_in(self, key: str, grid: Sequence[int]) -> tuple[int, ...] | None:
        """The grid position of chunk ``key`` of an array with ``grid`` chunks along
        each dimension, or ``None`` when ``key`` names no chunk of it.

        The one reading of a chunk key for every store that computes its chunks
        (a composite's counts, an AnnData view): such a store answers exactly the
        keys it lists, so a key zarr would not write (``c/00/0``, ``c/+1/0``,
        ``c/\\u0660/0``, ``c/ 1/0``, another rank) or a position outside the grid
        is no key at all, never another chunk's bytes.

        >>> keys = ChunkKeys("default", "/")
        >>> keys.decode_in("c/1/0", (2, 1)), keys.decode_in("c", ())
        ((1, 0), ())
        >>> [keys.decode_in(k, (2, 1)) for k in ("c/2/0", "c/01/0", "c/\\u0661/0", "c/1")]
        [None, None, None, None]
        """
        coords = self.decode(key, len(grid))
        if coords is None or any(c >= n for c, n in zip(coords, grid, strict=True)):
            return None
        return coords


#: A chunk's indices as one key segment: v2's ``3.1``, or one of ``/``-separated ``3/1``.
_INDICES = re.compile(r"\d+(\.\d+)*")
#: v3's default encoding with the ``.`` separator (``c.3.1``). A 0-d array's one
#: chunk, ``{array}/c``, is not told from a node named ``c`` by the key alone, so
#: it is left out: such keys are read as they were before pins (no scalar is a shard).
_DOTTED_V3 = re.compile(r"c(\.\d+)+")


def _arrays_of_chunk(key: str) -> list[str]:
    """The paths of the arrays ``key`` can be a chunk of; empty when it is no chunk key.

    One path for zarr v3's default encoding (``{array}/c/3/1``,
    ``{array}/c.3.1``); for v2's (``{array}/3.1``, ``{array}/3/1``) every
    split of the trailing index segments, since the key alone does not say
    how many belong to the array's name.
    """
    segments = key.split("/")
    if _DOTTED_V3.fullmatch(segments[-1]):
        return ["/".join(segments[:-1])]
    trailing = 0
    while trailing < len(segments) and _INDICES.fullmatch(segments[-1 - trailing]):
        trailing += 1
    if trailing == 0:
        return []
    v2 = ["/".join(segments[: len(segments) - n]) for n in range(1, trailing + 1)]
    if trailing < len(segments) and segments[-1 - trailing] == "c":
        # v3's default encoding, or a v2 array named "c" (an obs column, say)
        return ["/".join(segments[: -1 - trailing]), *v2]
    return v2


def is_chunk_key(key: str) -> bool:
    """Whether ``key`` is a chunk (shard) key: zarr v3's default encoding, or v2's.

    v2 names chunks by their indices alone (``X/indices/0``, ``X/3.1``, or
    ``X/3/1`` with the ``/`` separator), as AnnData stores in Zarr v2 do;
    no other object of a store is named by digits alone.

    >>> is_chunk_key("RNA/counts/c/3/0"), is_chunk_key("RNA/counts/zarr.json")
    (True, False)
    >>> is_chunk_key("X/indices/0"), is_chunk_key("X/3.1"), is_chunk_key("X/.zarray")
    (True, True, False)
    >>> is_chunk_key("obs/c/zarr.json"), is_chunk_key("a/c.0.2"), is_chunk_key("a b/c")
    (False, True, False)
    """
    return bool(_arrays_of_chunk(key))


def array_documents(chunk_key: str) -> tuple[str, ...]:
    """Where the document of the array holding ``chunk_key`` can be (v3's, then v2's).

    >>> array_documents("RNA/counts/c/0")
    ('RNA/counts/zarr.json', 'RNA/counts/.zarray', 'RNA/counts/c/zarr.json', 'RNA/counts/c/.zarray')
    >>> array_documents("X/indices/0")
    ('X/indices/zarr.json', 'X/indices/.zarray')
    >>> array_documents("c/0")
    ('zarr.json', '.zarray', 'c/zarr.json', 'c/.zarray')
    """
    return tuple(
        f"{array}/{name}" if array else name
        for array in _arrays_of_chunk(chunk_key)
        for name in ("zarr.json", ".zarray")
    )


def grid_size(path: str, document: Mapping[str, Any], *, where: str) -> int:
    """How many keys :func:`grid_keys` names for the same array, counted without
    naming them (a grid may be too large to name: a caller bounds it first).

    >>> grid_size("X", {"zarr_format": 2, "shape": [10**15, 4], "chunks": [1, 2]}, where="a")
    2000000000000000
    """
    return math.prod(_grid_counts(path, document, where=where))


def grid_keys(path: str, document: Mapping[str, Any], *, where: str) -> list[str]:
    """The key of every chunk object (every shard, for a sharded array) of the array at
    ``path`` whose metadata ``document`` is (a v3 ``zarr.json`` or a v2 ``.zarray``),
    stored or not: what a listing of the array would show at most, for a store that
    may not be listed. As many keys as :func:`grid_size` counts: bound that first.

    >>> grid_keys("X/data", {"zarr_format": 2, "shape": [5], "chunks": [2]}, where="a")
    ['X/data/0', 'X/data/1', 'X/data/2']
    >>> grid_keys("c", {"zarr_format": 3, "node_type": "array", "shape": [3, 2],
    ...     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}},
    ...     where="a")
    ['c/c/0/0', 'c/c/1/0']
    """
    keys = ChunkKeys.of_array(document, where=where)
    counts = _grid_counts(path, document, where=where)
    return [
        f"{path}/{keys.encode(coords)}"
        for coords in itertools.product(*(range(count) for count in counts))
    ]


def _grid_counts(path: str, document: Mapping[str, Any], *, where: str) -> list[int]:
    """Chunks along each dimension of the array ``document`` describes (regular grids only)."""
    shape = document.get("shape")
    if document.get("zarr_format") == 2:
        chunks = document.get("chunks")
    else:
        grid = document.get("chunk_grid")
        configuration = grid.get("configuration") if isinstance(grid, Mapping) else None
        regular = isinstance(grid, Mapping) and grid.get("name") == "regular"
        chunks = configuration.get("chunk_shape") if regular and configuration else None
    if (
        not isinstance(shape, (list, tuple))
        or not isinstance(chunks, (list, tuple))
        or len(shape) != len(chunks)
        or not all(isinstance(n, int) and n >= 0 for n in shape)
        or not all(isinstance(n, int) and n > 0 for n in chunks)
    ):
        raise RecordShapeError(
            f"{where}: the array {path!r} names no regular chunk grid (shape {shape!r}, "
            f"chunks {chunks!r}), so its chunks cannot be found without listing it"
        )
    return [-(-size // chunk) for size, chunk in zip(shape, chunks, strict=True)]
