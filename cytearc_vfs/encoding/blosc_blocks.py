"""Inner chunks stored as Blosc containers of checksummed zstd blocks (the portable layout).

Zarr v3's standard ``blosc`` codec stores a chunk in the c-blosc 1 format: a
16-byte header (format version, compressor format version, flags, type size,
uncompressed size, block size, compressed size), where each block starts
(``int32``), then the blocks. Each block holds ``blocksize`` bytes of the
chunk (the last may hold fewer), compressed on its own. With the ``zstd``
compressor and no shuffle a block is not split (the header's "no split"
flag): it is its compressed size (``int32``) followed by one zstd frame, or
by the block's raw bytes when that size equals the block's, i.e. when
compression would not make it smaller. A chunk that does not compress at all
is one raw copy after the header (the "memcpyed" flag).

So a chunk of many rows whose ``blocksize`` is a few whole rows gives both
readers what they need:

* every Zarr implementation decodes it with codecs it already has
  (``bytes`` + ``blosc``: zarr-python, zarrs, tensorstore and zarrita), and
  a large chunk costs zarr-python's per-chunk overhead once for many rows;
* the gather reader finds a row's block from the header and decodes only
  that block, as it decoded a row frame before (``row_frames.py``).

:func:`encode_chunk` builds the container itself, byte for byte as c-blosc
lays it out (the header equals what ``numcodecs.blosc.compress`` writes for
the same settings: tested), for one reason: each block's zstd frame carries
its content size and **content checksum** (XXH64), which every zstd decoder
verifies, c-blosc's included; c-blosc's own compressor writes frames without
one. The chunk then ends with the standard ``crc32c`` codec's checksum of the
container, which covers what the frames' checksums do not (the header and
the block table) for every reader that decodes whole chunks.

The gather reader checks that crc32c where it decodes a chunk whole. A
single-cell read decodes one block: checksumming the whole chunk (about
115 KB compressed for 1 MiB of counts) for one 16 KB block made random cells
a third slower, measured. It checks the block's frame (zstd's checksum) and
the block's place in the table instead: a block must end where the next
begins and begin where the previous ends (:meth:`BlockChunk.frame`), so a
damaged start or size is an error, never another block's rows.
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

import google_crc32c
import numcodecs.blosc
import numpy as np
import numpy.typing as npt
import zstandard
from zarr.codecs import BloscCodec, Crc32cCodec

from .row_frames import rows_per_frame

__all__ = [
    "BLOSC_CNAME",
    "BLOSC_LEVEL",
    "BlockChunk",
    "DamagedChunkError",
    "block_codecs",
    "chunk_block_bytes",
    "encode_chunk",
    "open_chunk",
]

#: The compressor inside Blosc and its level: zstd at level 1, as the count
#: chunks before (fast to write; reads decode at the same speed at any level).
BLOSC_CNAME: Final = "zstd"
BLOSC_LEVEL = 1
# version, compressor version, flags, type size, nbytes, blocksize, cbytes
_HEADER = struct.Struct("<BBBBIII")
_HEADER_BYTES = _HEADER.size
_U32 = struct.Struct("<I")
_CRC_BYTES = 4
# c-blosc 1 (blosc.h, blosc.c): header format version; zstd's format version
# and compressor code (the flags' top three bits); header flags: byte shuffle,
# stored raw, bit shuffle, blocks not split
_VERSION, _ZSTD_VERSION, _ZSTD_FORMAT = 2, 1, 4
_SHUFFLE, _MEMCPYED, _BITSHUFFLE, _DONT_SPLIT = 0x1, 0x2, 0x4, 0x10


class DamagedChunkError(ValueError):
    """A chunk whose Blosc header or block table does not fit its bytes."""


def chunk_block_bytes(chunk_shape: tuple[int, int], itemsize: int) -> int:
    """Blosc ``blocksize`` of chunks of ``chunk_shape``: the rows of a row frame before
    (:func:`~cytearc_vfs.encoding.row_frames.rows_per_frame`, the fewest whole rows
    making 8 KiB, never more than the chunk).

    >>> chunk_block_bytes((65, 8_000), 2)  # 16 KB rows: a block per row
    16000
    >>> chunk_block_bytes((174, 3_000), 2)  # 6 KB rows: two rows a block
    12000
    >>> chunk_block_bytes((4, 1_000), 1)  # the whole chunk
    4000
    """
    return rows_per_frame(chunk_shape, itemsize) * chunk_shape[1] * itemsize


def block_codecs(itemsize: int, block_bytes: int) -> tuple[BloscCodec, Crc32cCodec]:
    """The inner compressors of a count array: Blosc (zstd, no shuffle, ``block_bytes``)
    and crc32c."""
    blosc = BloscCodec(
        typesize=itemsize,
        cname=BLOSC_CNAME,
        clevel=BLOSC_LEVEL,
        shuffle="noshuffle",
        blocksize=block_bytes,
    )
    return blosc, Crc32cCodec()


def encode_chunk(
    values: npt.NDArray[Any], block_bytes: int, compressor: zstandard.ZstdCompressor
) -> bytes:
    """The stored bytes of one inner chunk (C-contiguous, little-endian ``values``):
    the Blosc container, then its crc32c (little-endian).

    ``compressor`` writes zstd frames with content size and checksum (this
    thread's: contexts are not thread-safe). A block whose frame would not be
    smaller than the block is stored raw, and a chunk whose blocks would not
    be smaller than the chunk is stored whole, raw, as c-blosc does.
    """
    raw = memoryview(values).cast("B")
    nbytes = raw.nbytes
    blocks: list[bytes] = []
    for start in range(0, nbytes, block_bytes):
        piece = raw[start : start + block_bytes]
        frame = compressor.compress(piece)
        blocks.append(frame if len(frame) < piece.nbytes else bytes(piece))
    table = _HEADER_BYTES + 4 * len(blocks)
    sizes = [4 + len(block) for block in blocks]
    cbytes = table + sum(sizes)
    flags = _DONT_SPLIT | _ZSTD_FORMAT << 5
    itemsize = values.dtype.itemsize
    if cbytes >= _HEADER_BYTES + nbytes:  # incompressible: one raw copy
        header = _HEADER.pack(
            _VERSION,
            _ZSTD_VERSION,
            flags | _MEMCPYED,
            itemsize,
            nbytes,
            block_bytes,
            _HEADER_BYTES + nbytes,
        )
        return _with_crc32c(header + bytes(raw))
    starts = np.cumsum([table, *sizes[:-1]], dtype="<u4")
    parts = [
        _HEADER.pack(_VERSION, _ZSTD_VERSION, flags, itemsize, nbytes, block_bytes, cbytes),
        starts.tobytes(),
    ]
    for block in blocks:
        parts += (_U32.pack(len(block)), block)
    return _with_crc32c(b"".join(parts))


def _with_crc32c(container: bytes) -> bytes:
    return container + _U32.pack(google_crc32c.value(container))


class BlockChunk(NamedTuple):
    """A stored chunk's Blosc bytes and where its blocks are."""

    body: Any
    """The Blosc container (the chunk's stored bytes before its crc32c)."""
    nbytes: int
    """Uncompressed bytes of the chunk."""
    block_bytes: int
    """Uncompressed bytes of a block (the last one may hold fewer)."""
    n_blocks: int
    """Blocks this module can take apart; 0: the chunk is stored raw after the
    header, or in a form not taken apart here (shuffled, split, another
    compressor), and is decoded whole by c-blosc (:meth:`decode_whole`)."""

    def block_size(self, block: int) -> int:
        """Uncompressed bytes of ``block``."""
        return min(self.block_bytes, self.nbytes - block * self.block_bytes)

    def frame(self, block: int) -> tuple[Any, bool]:
        """The stored bytes of ``block``, and whether they are a zstd frame (else raw)."""
        start, size = self._place(block)
        # it must end where the next block begins and begin where the previous
        # ends: a damaged start or size never reads another block's rows
        end = self._place(block + 1)[0] if block + 1 < self.n_blocks else len(self.body)
        if start + 4 + size != end or (block and sum(self._place(block - 1)) + 4 != start):
            raise DamagedChunkError(f"block {block} does not fit between its neighbours")
        return self.body[start + 4 : end], size != self.block_size(block)

    def _place(self, block: int) -> tuple[int, int]:
        """Where ``block`` starts and its stored size (as its table and prefix say)."""
        if not 0 <= block < self.n_blocks:
            raise DamagedChunkError(f"block {block} of a chunk of {self.n_blocks} blocks")
        (start,) = _U32.unpack_from(self.body, _HEADER_BYTES + 4 * block)
        if not _HEADER_BYTES + 4 * self.n_blocks <= start <= len(self.body) - 4:
            raise DamagedChunkError(f"block {block} of the chunk lies outside it")
        (size,) = _U32.unpack_from(self.body, start)
        return start, size

    def decode_whole(self, target: Any) -> None:
        """Decode the whole chunk into ``target`` (a writable buffer of :attr:`nbytes`) with
        c-blosc (for chunks not taken apart: slower than decoding the blocks' frames)."""
        numcodecs.blosc.decompress(self.body, target)


def _readonly(data: Any) -> Any:
    """``data`` as bytes or a read-only array, which google_crc32c takes (it refuses
    writable buffers and memoryviews); no copy."""
    if isinstance(data, bytes):
        return data
    view = np.frombuffer(data, dtype=np.uint8)
    if view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def open_chunk(data: Any, *, verify: bool) -> BlockChunk:
    """Read a stored chunk's Blosc header (the chunk ends with its crc32c).

    With ``verify``, the crc32c is checked first (for a chunk decoded whole).
    :class:`DamagedChunkError` where the crc32c or the header does not fit
    the bytes. Block frames are checked as they are taken
    (:meth:`BlockChunk.frame`) and decoded (zstd's checksums).
    """
    size = (len(data) if isinstance(data, bytes) else memoryview(data).nbytes) - _CRC_BYTES
    if size < _HEADER_BYTES:
        raise DamagedChunkError(f"the chunk holds {size + 4} bytes, fewer than a Blosc header")
    body = data[:size]
    if verify and google_crc32c.value(_readonly(body)) != _U32.unpack_from(data, size)[0]:
        raise DamagedChunkError("its crc32c does not match its bytes")
    _, _, flags, _, nbytes, block_bytes, cbytes = _HEADER.unpack_from(data, 0)
    if cbytes != size or block_bytes < 1:
        raise DamagedChunkError(
            f"its Blosc header (compressed size {cbytes}, block size {block_bytes}) does not "
            f"match its {size} bytes"
        )
    takes_apart = (
        not flags & (_MEMCPYED | _SHUFFLE | _BITSHUFFLE)
        and flags & _DONT_SPLIT
        and flags >> 5 == _ZSTD_FORMAT
    )
    n_blocks = 0
    if takes_apart:
        n_blocks = -(-nbytes // block_bytes)
        if _HEADER_BYTES + 4 * n_blocks > cbytes:
            raise DamagedChunkError(f"its {n_blocks} block starts run past its end")
    return BlockChunk(body, nbytes, block_bytes, n_blocks)
