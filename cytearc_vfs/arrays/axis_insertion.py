"""Which codec chains keep a chunk's bytes valid when the array gains a dimension.

``promote`` inserts a dimension of length 1 whose chunk size is 1 and
renames every chunk without touching its bytes. That is sound exactly when
decoding the old bytes with the new metadata gives the old values, each at
its old position with index 0 on the new axis. Per codec:

``bytes``
    Serializes the chunk's elements in C order: element ``(i_0, ..., i_{r-1})``
    is number ``sum_k i_k * stride_k``, ``stride_k`` the product of the
    lengths after ``k``. A length-1 axis inserted anywhere carries index 0
    (adds nothing) and multiplies the strides before it by 1: every
    element keeps its number, so the byte stream is unchanged. The same
    holds for ``vlen-utf8`` and ``vlen-bytes``, which write the elements
    (count, lengths, bytes) in C order.
``transpose``
    Permutes axes before serialization. With the new axis given a place in
    ``order`` (old axis ``k`` renumbered ``k + 1`` when ``k >=`` the new
    axis), the transposed chunk is the old transposed chunk with a length-1
    axis inserted, which ``bytes`` serializes as before. The order *must*
    be rewritten: the old order is not a permutation of the new rank.
``sharding_indexed``
    A shard holds inner chunks placed by its index, an array of shape
    ``(chunks per shard..., 2)`` of (offset, length) pairs encoded by
    ``index_codecs`` (``bytes``, ``crc32c``). The new axis has one inner
    chunk per shard, so the index gains a length-1 axis: by the ``bytes``
    argument its bytes, and so its checksum, are unchanged; the offsets
    still point at the same inner chunks; the inner chunk shape gains the
    length-1 axis and the inner codecs are checked recursively.
bytes-to-bytes codecs (``gzip``, ``zstd``, ``blosc``, ``crc32c``, numcodecs' compressors, shuffle and checksums)
    See only the byte stream, which is unchanged.

Any other codec (``numcodecs.fixedscaleoffset``, ``numcodecs.pcodec``,
unknown extensions) is refused by name: nothing says its bytes do not
depend on the chunk shape.

A new dimension of length ``L > 1`` with chunk size ``L`` makes every
chunk hold ``L`` times as many elements: no chain keeps the old bytes
valid (they decode to too few elements), so such a promote is refused on
an array that holds any chunk (it is a metadata change on an empty one).
The R package's documentation claims the length does not matter; it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ORDER_PRESERVING_SERIALIZERS", "SHAPE_FREE_BYTES_CODECS", "insert_axis"]

#: Array-to-bytes codecs that write a chunk's elements in C order.
ORDER_PRESERVING_SERIALIZERS = frozenset({"bytes", "vlen-utf8", "vlen-bytes"})

#: Bytes-to-bytes codecs: they transform the byte stream and never see a shape.
SHAPE_FREE_BYTES_CODECS = frozenset(
    {
        "gzip",
        "zstd",
        "blosc",
        "crc32c",
        "numcodecs.adler32",
        "numcodecs.blosc",
        "numcodecs.bz2",
        "numcodecs.crc32",
        "numcodecs.crc32c",
        "numcodecs.fletcher32",
        "numcodecs.gzip",
        "numcodecs.jenkins_lookup3",
        "numcodecs.lz4",
        "numcodecs.lzma",
        "numcodecs.shuffle",
        "numcodecs.zlib",
        "numcodecs.zstd",
    }
)

_KNOWN = "transpose, bytes, vlen-utf8, vlen-bytes, sharding_indexed and byte-to-byte codecs"


def _name(codec: object) -> str:
    if isinstance(codec, str):
        return codec
    if isinstance(codec, Mapping) and isinstance(codec.get("name"), str):
        return str(codec["name"])
    raise ValueError(f"codec {codec!r} has no name")


def _configuration(codec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    configuration = codec.get("configuration")
    if not isinstance(configuration, Mapping):
        raise ValueError(f"codec {name!r} has no configuration")
    return configuration


def transposed_order(order: Sequence[int], axis: int) -> list[int]:
    """A transpose ``order`` for the array with a new axis at ``axis``.

    The new axis takes position ``axis`` in the order (any place keeps the
    bytes valid, this one keeps it where it is in the array).

    >>> transposed_order([1, 0], 0)
    [0, 2, 1]
    >>> transposed_order([1, 0], 2)
    [1, 0, 2]
    >>> transposed_order([2, 0, 1], 1)
    [3, 1, 0, 2]
    """
    renumbered = [k if k < axis else k + 1 for k in order]
    return [*renumbered[:axis], axis, *renumbered[axis:]]


def insert_axis(
    codecs: Sequence[Any], axis: int, rank: int, *, length: int = 1, where: str
) -> list[Any]:
    """The codec chain of the array with a new axis of chunk length ``length`` at ``axis``.

    Parameters
    ----------
    codecs
        The ``codecs`` of a ``zarr.json`` (or of a shard's inner chunks).
    axis
        Position of the new axis, ``0 <= axis <= rank``.
    rank
        Dimensions of the chunks ``codecs`` encode, before the insertion.
    length
        Chunk length along the new axis (inner chunk length for shards).
    where
        The array, for messages.

    Raises
    ------
    ValueError
        A codec that is not known to keep its bytes valid (named).

    Examples
    --------
    >>> insert_axis([{"name": "transpose", "configuration": {"order": [1, 0]}},
    ...              {"name": "bytes", "configuration": {"endian": "little"}}], 0, 2, where="a")
    [{'name': 'transpose', 'configuration': {'order': [0, 2, 1]}}, {'name': 'bytes', 'configuration': {'endian': 'little'}}]
    >>> insert_axis([{"name": "numcodecs.pcodec"}], 0, 1, where="a")
    Traceback (most recent call last):
    ...
    ValueError: promote of a refused: codec 'numcodecs.pcodec' is not known to keep its encoded bytes valid when a dimension is inserted (only transpose, bytes, vlen-utf8, vlen-bytes, sharding_indexed and byte-to-byte codecs are, docs/arrays.md); copy the values into a new array instead
    """
    out: list[Any] = []
    for codec in codecs:
        name = _name(codec)
        if name in ORDER_PRESERVING_SERIALIZERS or name in SHAPE_FREE_BYTES_CODECS:
            out.append(codec)
        elif name == "transpose":
            configuration = _configuration(codec, name)
            order = list(configuration.get("order", []))
            if sorted(order) != list(range(rank)):
                raise ValueError(f"{where}: transpose order {order} is not a permutation of {rank}")
            out.append(
                {
                    **codec,
                    "configuration": {**configuration, "order": transposed_order(order, axis)},
                }
            )
        elif name == "sharding_indexed":
            configuration = _configuration(codec, name)
            inner = list(configuration["chunk_shape"])
            out.append(
                {
                    **codec,
                    "configuration": {
                        **configuration,
                        "chunk_shape": [*inner[:axis], length, *inner[axis:]],
                        "codecs": insert_axis(
                            configuration.get("codecs", [{"name": "bytes"}]),
                            axis,
                            rank,
                            length=length,
                            where=where,
                        ),
                        # the index is (chunks per shard..., 2): one more axis, of length 1
                        "index_codecs": insert_axis(
                            configuration.get("index_codecs", [{"name": "bytes"}]),
                            axis,
                            rank + 1,
                            where=where,
                        ),
                    },
                }
            )
        else:
            raise ValueError(
                f"promote of {where} refused: codec {name!r} is not known to keep its encoded "
                f"bytes valid when a dimension is inserted (only {_KNOWN} are, "
                "docs/arrays.md); copy the values into a new array instead"
            )
    return out
