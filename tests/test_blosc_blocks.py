"""Count chunks as Blosc containers of checksummed zstd blocks (``encoding/blosc_blocks.py``).

The container is c-blosc 1's own format, so c-blosc (through numcodecs, as
zarr-python reads it) decodes every chunk :func:`encode_chunk` writes,
including blocks stored raw and chunks stored whole; the gather reader reads
the same chunks block by block, local (the compiled frame reads) and through
a store, and refuses damaged ones with the remedy.
"""

from __future__ import annotations

import os
from pathlib import Path

import numcodecs.blosc
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
import zstandard
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.encoding.blosc_blocks import (
    DamagedChunkError,
    chunk_block_bytes,
    encode_chunk,
    open_chunk,
)
from cytearc_vfs.errors import RecordShapeError

COMPRESSOR = zstandard.ZstdCompressor(level=1, write_content_size=True, write_checksum=True)


def _sparse_rows(rows: int, cols: int, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.geometric(0.4, size=(rows, cols)).astype(dtype)
    values[rng.random(values.shape) > 0.1] = 0
    return values


def _noise_rows(rows: int, cols: int, dtype: str, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(0, info.max, size=(rows, cols), dtype=dtype)


def _kinds() -> dict[str, np.ndarray]:
    mixed = _sparse_rows(40, 700, "uint16", 1)
    mixed[6:12] = _noise_rows(6, 700, "uint16", 2)  # block 1 (6 rows) does not compress: raw
    return {
        "sparse uint8": _sparse_rows(50, 900, "uint8", 3),
        "sparse uint16, a short last block": _sparse_rows(41, 700, "uint16", 4),
        "sparse uint32": _sparse_rows(20, 300, "uint32", 5),
        "raw blocks among compressed ones": mixed,
        "noise: the chunk stored whole": _noise_rows(30, 500, "uint16", 6),
    }


@pytest.mark.parametrize("kind", list(_kinds()))
def test_c_blosc_decodes_every_chunk_exactly(kind: str) -> None:
    values = _kinds()[kind]
    block_bytes = chunk_block_bytes(values.shape, values.itemsize)
    data = encode_chunk(values, block_bytes, COMPRESSOR)
    decoded = np.frombuffer(numcodecs.blosc.decompress(data[:-4]), dtype=values.dtype)
    np.testing.assert_array_equal(decoded.reshape(values.shape), values)
    # c-blosc's own header for these settings; only the compressed size may differ
    reference = numcodecs.blosc.compress(values, b"zstd", 1, numcodecs.blosc.NOSHUFFLE, block_bytes)
    assert data[:12] == reference[:12]
    chunk = open_chunk(data, verify=True)
    raw = values.reshape(-1).view(np.uint8)
    for block in range(chunk.n_blocks):
        frame, compressed = chunk.frame(block)
        piece = raw[block * block_bytes : block * block_bytes + chunk.block_size(block)]
        if compressed:
            assert zstandard.get_frame_parameters(frame).has_checksum
            assert zstandard.ZstdDecompressor().decompress(frame) == piece.tobytes()
        else:
            assert bytes(frame) == piece.tobytes()
    if kind.startswith("noise"):
        assert chunk.n_blocks == 0  # one raw copy, decoded whole
    if kind.startswith("raw blocks"):
        assert not all(chunk.frame(block)[1] for block in range(chunk.n_blocks))


def test_a_header_that_does_not_fit_its_bytes_is_refused() -> None:
    values = _sparse_rows(20, 900, "uint16", 7)
    data = encode_chunk(values, 1_800, COMPRESSOR)
    with pytest.raises(DamagedChunkError, match="compressed size"):
        open_chunk(data[:-1], verify=False)
    with pytest.raises(DamagedChunkError, match="crc32c does not match"):
        open_chunk(data[:-5] + data[-4:], verify=True)
    with pytest.raises(DamagedChunkError, match="fewer than a Blosc header"):
        open_chunk(data[:10], verify=False)
    moved = bytearray(data)
    moved[16:20] = (len(data) + 10).to_bytes(4, "little")  # block 0 starts past the end
    with pytest.raises(DamagedChunkError, match="block 0 of the chunk lies outside it"):
        open_chunk(bytes(moved), verify=False).frame(0)
    swapped = bytearray(data)  # block 1 pointed at block 0: a valid frame, the wrong rows
    swapped[20:24] = swapped[16:20]
    with pytest.raises(DamagedChunkError, match="does not fit between its neighbours"):
        open_chunk(bytes(swapped), verify=False).frame(1)


class _Wrapped(WrapperStore[LocalStore]):
    """Reads through the store's fetches (the object-store path), not pread."""


@pytest.fixture(scope="module")
def awkward(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A store with raw blocks (noise rows), chunks stored whole, and compressed blocks."""
    values = _sparse_rows(3_000, 700, "uint16", 8)
    values[100:110] = _noise_rows(10, 700, "uint16", 9)  # raw blocks
    values[1_500:2_300] = _noise_rows(800, 700, "uint16", 10)  # whole chunks of noise
    path = tmp_path_factory.mktemp("blosc") / "s.zarr"
    cv.write_counts(path, sp.csr_array(values), layout=("4M", "256K"))
    return path, values


@pytest.mark.parametrize("local", [True, False])
def test_the_gather_reader_reads_raw_blocks_and_whole_chunks_exactly(
    awkward: tuple[Path, np.ndarray], local: bool
) -> None:
    path, values = awkward
    store = LocalStore(path, read_only=True)
    reader = cv.VirtualArrayReader(path if local else _Wrapped(store))
    rng = np.random.default_rng(11)
    for cells in (
        np.array([99, 100, 105, 109, 110, 2_999]),
        np.array([1_499, 1_500, 1_800, 2_299, 2_300]),
        rng.choice(3_000, 200, replace=False),
    ):
        np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    np.testing.assert_array_equal(np.asarray(reader.read(slice(50, 2_400), None)), values[50:2_400])
    features = rng.choice(700, 30, replace=False)
    np.testing.assert_array_equal(np.asarray(reader.read(None, features)), values[:, features])
    np.testing.assert_array_equal(zarr.open_array(path, path="RNA/counts", mode="r")[:], values)


def _first_chunk(path: Path) -> tuple[Path, int, int]:
    """The first shard file of counts, and its first chunk's offset and size."""
    array = zarr.open_array(path, path="RNA/counts", mode="r")
    assert array.shards is not None
    per = array.shards[0] // array.chunks[0]
    shard = path / "RNA" / "counts" / "c" / "0" / "0"
    raw = shard.read_bytes()
    offset, size = np.frombuffer(raw[-(16 * per + 4) : -4], dtype="<u8").reshape(per, 2)[0]
    return shard, int(offset), int(size)


@pytest.mark.parametrize("local", [True, False])
def test_a_damaged_block_table_is_an_error_naming_the_remedy(tmp_path: Path, local: bool) -> None:
    values = _sparse_rows(2_000, 700, "uint16", 12)
    path = tmp_path / "s.zarr"
    cv.write_counts(path, sp.csr_array(values), layout=("4M", "256K"))
    shard, offset, _ = _first_chunk(path)
    data = bytearray(shard.read_bytes())
    # block 1's start, pointed at block 0's: a frame, but the wrong rows
    data[offset + 20 : offset + 24] = data[offset + 16 : offset + 20]
    shard.write_bytes(bytes(data))
    reader = cv.VirtualArrayReader(path if local else _Wrapped(LocalStore(path, read_only=True)))
    with pytest.raises(RecordShapeError, match=r"RNA/counts does not decode.*[Rr]e-import"):
        reader.read(np.array([3]), None)  # block 1: its rows are 2-3


def test_frame_reads_kernel_reads_blosc_blocks(tmp_path: Path) -> None:
    kernels = pytest.importorskip("cytearc_vfs.encoding._kernels")
    if not hasattr(kernels, "read_row_frames"):
        pytest.skip("no pread on this platform")
    values = _sparse_rows(10, 900, "uint16", 13)
    values[:5] = _noise_rows(5, 900, "uint16", 14)  # block 0 (rows 0-4) does not compress
    block_bytes = chunk_block_bytes(values.shape, 2)  # 5 rows of 1,800 bytes
    data = encode_chunk(values, block_bytes, COMPRESSOR)
    path = tmp_path / "chunk"
    path.write_bytes(b"\0" * 7 + data)
    i64 = lambda items: np.array(items, dtype=np.int64)  # noqa: E731
    out = np.zeros(len(data), dtype=np.uint8)
    per = block_bytes // 1_800
    fd = os.open(path, os.O_RDONLY)
    try:
        got = kernels.read_row_frames(
            fd, 10, i64([7]), i64([len(data)]), i64([1]), i64([9]), out, per, block_bytes
        )
        assert got is not None
        frames = out[: got[0]].tobytes()
        decoded = zstandard.ZstdDecompressor().decompress(frames)
        assert decoded == values[5:10].tobytes()  # the second block: rows 5-9
        # a wanted block stored raw: not frames (the caller reads the chunk whole)
        assert (
            kernels.read_row_frames(
                fd, 10, i64([7]), i64([len(data)]), i64([1]), i64([4]), out, per, block_bytes
            )
            is None
        )
        # another block size than the header's: not this layout
        assert (
            kernels.read_row_frames(
                fd, 10, i64([7]), i64([len(data)]), i64([1]), i64([9]), out, per, block_bytes + 2
            )
            is None
        )
    finally:
        os.close(fd)


@pytest.mark.parametrize("local", [True, False])
def test_wide_rows_decode_straight_into_the_result(tmp_path: Path, local: bool) -> None:
    # 80 KB rows: each wanted row's block is decoded into its strip row
    values = _sparse_rows(300, 40_000, "uint16", 15)
    values[7] = _noise_rows(1, 40_000, "uint16", 16)  # a raw block
    path = tmp_path / "wide.zarr"
    cv.write_counts(path, sp.csr_array(values))
    assert zarr.open_array(path, path="RNA/counts", mode="r").chunks[0] > 1
    reader = cv.VirtualArrayReader(path if local else _Wrapped(LocalStore(path, read_only=True)))
    rng = np.random.default_rng(17)
    for cells in (np.array([7, 8, 299, 0]), rng.choice(300, 60, replace=False)):
        np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    features = rng.choice(40_000, 20, replace=False)
    cells = rng.choice(300, 30, replace=False)
    np.testing.assert_array_equal(
        np.asarray(reader.read(cells, features)), values[cells][:, features]
    )
