"""Storing count arrays shard by shard: the codecs they are created with and the shard writer.

``write_counts`` and ``repack`` create ``counts`` and ``countsT`` with
:func:`create_count_array` (sharding over ``bytes`` + ``blosc`` + ``crc32c``:
zstd blocks of about 8 KiB, each with its checksum, and a ``crc32c`` shard
index; docs/layout.md) and store whole shard bands through
:class:`ShardWriter`, which encodes them itself (:class:`ShardEncoder`: no
per-chunk Python of zarr's pipeline, which would dominate a write of
thousands of small inner chunks per shard) and records each stored shard
for the array's ``cytearc:shardTable``.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.codecs import BloscCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..encoding.blosc_blocks import block_codecs, chunk_block_bytes
from ..encoding.shard_encoding import ShardEncoder
from ..format.shard_tables import SHARD_TABLE_ATTR, ShardTable
from .stopping import in_this_work

__all__ = [
    "COUNT_COMPRESSOR",
    "COUNT_ZSTD_LEVEL",
    "ShardWriter",
    "blosc_block_bytes",
    "create_count_array",
]

#: zstd level of count chunks: fast to write, and reads decode at the same speed
COUNT_ZSTD_LEVEL = 1
# The compressor of the layouts before Blosc blocks (row frames, single
# frames). checksum=True: every zstd frame carries its content checksum,
# which every reader verifies (ShardEncoder writes the same frames).
COUNT_COMPRESSOR = ZstdCodec(level=COUNT_ZSTD_LEVEL, checksum=True)


def create_count_array(
    group: zarr.Group,
    name: str,
    shape: tuple[int, int],
    dtype: np.dtype,
    chunks: tuple[int, int],
    shards: tuple[int, int],
    attrs: dict[str, Any],
    *,
    blosc_blocks: bool = True,
) -> zarr.Array[Any]:
    """Create a count array of this package's codecs (fill value 0).

    ``blosc_blocks=False`` writes the zstd frames of the layouts before
    (``write/row_framed.py``: tests and fixtures only).
    """
    itemsize = np.dtype(dtype).itemsize
    compressors = (
        block_codecs(itemsize, chunk_block_bytes(chunks, itemsize))
        if blosc_blocks
        else (COUNT_COMPRESSOR,)
    )
    return group.create_array(
        name,
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        compressors=compressors,
        fill_value=0,
        attributes=attrs,
    )


def blosc_block_bytes(array: zarr.Array[Any]) -> int | None:
    """The Blosc block size of a count array's inner chunks, ``None`` for zstd frames."""
    codecs = array.metadata.codecs if array.metadata.zarr_format == 3 else ()
    for codec in codecs:
        if isinstance(codec, ShardingCodec):
            for inner in codec.codecs:
                if isinstance(inner, BloscCodec):
                    return int(inner.blocksize)
    return None


class ShardWriter:
    """Encodes and stores whole shards, one in flight beside the band being built.

    Shards are encoded by :class:`ShardEncoder` (the sharding codec's format,
    without zarr's per-chunk overhead) with compression spread over
    ``threads`` and stored with one ``set`` each.
    """

    def __init__(self, threads: int = 2) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cytearc-write")
        self._compress = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cytearc-zstd")
        self._encoders: dict[str, ShardEncoder] = {}
        self._pending: Future[None] | None = None
        #: The shards stored so far, by array path (recorded on the array when done).
        self.tables: dict[str, ShardTable] = {}

    def _encoder(self, array: zarr.Array[Any]) -> ShardEncoder:
        encoder = self._encoders.get(array.path)
        if encoder is None:
            assert array.shards is not None
            encoder = ShardEncoder(
                (array.chunks[0], array.chunks[1]),
                (array.shards[0], array.shards[1]),
                array.dtype,
                level=COUNT_ZSTD_LEVEL,
                pool=self._compress,
                block_bytes=blosc_block_bytes(array),
            )
            self._encoders[array.path] = encoder
        return encoder

    def _write(self, array: zarr.Array[Any], start: int, dense: npt.NDArray[Any]) -> None:
        assert array.shards is not None
        shard = self._encoder(array).encode(dense)
        if shard is None:
            return  # an all-zero shard is not stored; zarr reads the fill value
        shard_row = start // array.shards[0]
        key = f"{array.path}/c/{shard_row}/0"
        store = array.store_path.store
        sync(store.set(key, default_buffer_prototype().buffer.from_bytes(shard)))
        table = self.tables.get(array.path)
        if table is None:
            table = self.tables[array.path] = ShardTable.empty(
                -(-array.shape[0] // array.shards[0])
            )
        table.record(shard_row, len(shard), shard[-4:])

    def table_of(self, array: zarr.Array[Any]) -> dict[str, Any]:
        """The shard table attribute of ``array`` (wait for its writes first)."""
        assert array.shards is not None
        table = self.tables.get(array.path)
        if table is None:  # every shard held only zeros
            table = ShardTable.empty(-(-array.shape[0] // array.shards[0]))
        return {SHARD_TABLE_ATTR: table.to_json()}

    def submit(self, array: zarr.Array[Any], start: int, dense: npt.NDArray[Any]) -> None:
        """Store the shard band of ``array`` starting at row ``start`` (after the one in flight)."""
        self.wait()
        # in the writer's work: an interrupt stops this shard's zarr tasks with the rest
        self._pending = self._pool.submit(in_this_work(self._write), array, start, dense)

    def wait(self) -> None:
        """Wait for the shard in flight (raising its error)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def close(self) -> None:
        """Finish the shard in flight and stop the threads."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)
            self._compress.shutdown(wait=True)
