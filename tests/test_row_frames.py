"""Row-framed inner chunks: the format, what zarr decodes, and what the gather reader decodes.

Row frames are the chunk encoding of stores written before the portable
layout (tests/test_portable_layout.py); such stores keep reading exactly,
and are written here as they were (``row_framed_writes``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
import zstandard
from decode_counting import inflated_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import Zstd
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.encoding.row_frames import (
    FRAME_MIN_BYTES,
    RowFrameEncoder,
    frame_index,
    rows_per_frame,
)
from cytearc_vfs.errors import RecordShapeError
from cytearc_vfs.format.shard_tables import SHARD_TABLE_ATTR
from cytearc_vfs.write.row_framed import row_framed_writes

ENCODER = RowFrameEncoder(level=1)


@pytest.mark.parametrize(
    ("shape", "itemsize", "expected"),
    [
        ((26, 10_000), 1, 1),  # a row of 10 KB is a frame
        ((3, 80_000), 4, 1),
        ((131, 1_000), 1, 9),  # 9 rows make 8 KiB
        ((4, 1_000), 2, 4),  # the whole chunk is under 8 KiB: one plain frame
        ((1, 5), 1, 1),
    ],
)
def test_rows_per_frame(shape: tuple[int, int], itemsize: int, expected: int) -> None:
    assert rows_per_frame(shape, itemsize) == expected


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 300),
    per_frame=st.integers(1, 45),
    dtype=st.sampled_from(["<u1", "<u2", "<u4", "<f4"]),
    seed=st.integers(0, 2**16),
)
def test_frames_decode_as_one_chunk_and_one_by_one(
    rows: int, cols: int, per_frame: int, dtype: str, seed: int
) -> None:
    block = (np.random.default_rng(seed).random((rows, cols)) * 50).astype(dtype)
    data = ENCODER.encode(block, rows_per_frame=per_frame)
    # what zarr's ZstdCodec does: numcodecs decodes concatenated frames, skips the index
    whole = np.frombuffer(Zstd().decode(data), dtype=dtype).reshape(rows, cols)
    np.testing.assert_array_equal(whole, block)
    index = frame_index(data)
    if per_frame >= rows:
        assert index is None
        return
    assert index is not None and index.rows_per_frame == per_frame
    assert len(index.offsets) - 1 == -(-rows // per_frame)
    for frame, (start, stop) in enumerate(zip(index.offsets, index.offsets[1:], strict=False)):
        rows_out = zstandard.ZstdDecompressor().decompress(data[start:stop])
        expected = block[frame * per_frame : (frame + 1) * per_frame]
        np.testing.assert_array_equal(np.frombuffer(rows_out, dtype=dtype), expected.ravel())


def test_a_trailer_that_does_not_add_up_is_not_an_index() -> None:
    block = np.arange(4 * 4096, dtype=np.uint8).reshape(4, 4096)
    data = ENCODER.encode(block, rows_per_frame=1)
    assert frame_index(data) is not None
    assert frame_index(b"junk" + data) is None  # sizes no longer reach the index
    assert frame_index(data[:-12] + b"\x01\x00\x00\x00\xff\x00\x00\x00CRF1") is None
    assert frame_index(b"CRF1") is None
    plain = zstandard.ZstdCompressor().compress(block.tobytes())
    assert frame_index(plain) is None


def _stored_chunk(shard: bytes, array: zarr.Array[Any], chunk: int) -> bytes:
    """Bytes of inner chunk ``chunk`` of a shard (read through the shard index)."""
    assert array.shards is not None
    n = array.shards[0] // array.chunks[0]
    index = np.frombuffer(shard[-(16 * n + 4) : -4], dtype="<u8").reshape(n, 2)
    offset, size = (int(value) for value in index[chunk])
    return shard[offset : offset + size]


def _store(tmp_path: Path, values: np.ndarray) -> Path:
    path = tmp_path / "s.zarr"
    with row_framed_writes():
        cv.write_counts(path, sp.csr_array(values))
    return path


@pytest.fixture
def wide() -> np.ndarray:
    """9,000 cells x 200 features: a countsT row is 9 KB, so each feature is a frame."""
    rng = np.random.default_rng(3)
    values = rng.geometric(0.5, size=(9_000, 200)).astype(np.uint8)
    values[rng.random(values.shape) > 0.2] = 0
    return values


def test_written_chunks_are_row_frames(tmp_path: Path, wide: np.ndarray) -> None:
    path = _store(tmp_path, wide)
    counts_t = zarr.open_array(path, path="RNA/countsT", mode="r")
    assert counts_t.chunks == (29, 9_000)
    index = frame_index(_stored_chunk((path / "RNA/countsT/c/0/0").read_bytes(), counts_t, 0))
    assert index is not None and index.rows_per_frame == 1 and len(index.offsets) == 30
    counts = zarr.open_array(path, path="RNA/counts", mode="r")
    assert rows_per_frame(counts.chunks, 1) == -(-FRAME_MIN_BYTES // 200)
    np.testing.assert_array_equal(counts_t[:], wide.T)  # plain zarr reads them
    np.testing.assert_array_equal(counts[:], wide)


def test_a_feature_read_decodes_only_its_frames(tmp_path: Path, wide: np.ndarray) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, wide))
    features = np.array([17, 3, 3])
    block, inflated = inflated_bytes(reader, None, features)
    np.testing.assert_array_equal(block, wide[:, features])
    assert inflated == 2 * 9_000  # two distinct features of one byte per cell
    # consecutive features decode as one stream, still only their rows
    block, inflated = inflated_bytes(reader, None, np.arange(5, 9))
    np.testing.assert_array_equal(block, wide[:, 5:9])
    assert inflated == 4 * 9_000


def test_a_cell_read_decodes_the_frames_of_its_rows(tmp_path: Path, wide: np.ndarray) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, wide))
    per_frame = -(-FRAME_MIN_BYTES // 200)
    cells = np.array([8_999, 5, 6, 4_000])
    block, inflated = inflated_bytes(reader, cells, None)
    np.testing.assert_array_equal(block, wide[cells])
    # cells 5 and 6 share a frame; the last frame of the array is the chunk's last
    assert inflated <= 3 * per_frame * 200


def test_single_frame_chunks_written_by_zarr_still_read(tmp_path: Path, wide: np.ndarray) -> None:
    path = _store(tmp_path, wide)
    original = zarr.open_array(path, path="RNA/counts", mode="r")
    # rewrite counts through zarr's own pipeline: same codecs, one zstd frame per chunk
    rewritten = zarr.open_array(path, path="RNA/counts", mode="r+")
    rewritten[:] = original[:]
    # another writer records no shard table (this package's would refuse the rewrite)
    del rewritten.attrs[SHARD_TABLE_ATTR]
    shard = (path / "RNA/counts/c/0/0").read_bytes()
    assert frame_index(_stored_chunk(shard, rewritten, 0)) is None
    reader = cv.VirtualArrayReader(path)
    cells = np.array([3, 2_000, 2_001, 8_000])
    np.testing.assert_array_equal(reader.read(cells, None), wide[cells])


def test_a_damaged_frame_fails_with_a_clear_error(tmp_path: Path, wide: np.ndarray) -> None:
    path = _store(tmp_path, wide)
    shard_path = path / "RNA/countsT/c/0/0"
    shard = bytearray(shard_path.read_bytes())
    first_chunk = _stored_chunk(bytes(shard), zarr.open_array(path, path="RNA/countsT"), 0)
    index = frame_index(first_chunk)
    assert index is not None
    start = bytes(shard).index(first_chunk) + index.offsets[3]
    shard[start : start + 4] = b"\x00\x00\x00\x00"  # frame 3 loses its magic number
    shard_path.write_bytes(bytes(shard))
    reader = cv.VirtualArrayReader(path)
    np.testing.assert_array_equal(reader.read(None, np.array([2])), wide[:, [2]])
    with pytest.raises(RecordShapeError, match=r"does not decode.*Re-import"):
        reader.read(None, np.array([3]))


class _Wrapped(WrapperStore[LocalStore]):
    """Any wrapper (latency, faults) sends reads through the store's fetches, not pread."""


@pytest.mark.parametrize(
    "selection",
    [(None, np.array([150, 7, 7, 28])), (np.array([8_999, 5, 6, 4_000]), None)],
    ids=["features", "cells"],
)
def test_frames_read_through_a_wrapped_store(
    tmp_path: Path, wide: np.ndarray, selection: tuple[Any, Any]
) -> None:
    path = _store(tmp_path, wide)
    reader = cv.VirtualArrayReader(_Wrapped(LocalStore(path, read_only=True)))
    cells, features = selection
    expected = (wide if cells is None else wide[cells]) if features is None else wide[:, features]
    np.testing.assert_array_equal(reader.read(cells, features), expected)


@settings(max_examples=20, deadline=None)
@given(
    n_cells=st.integers(1, 400),
    n_features=st.sampled_from([3, 700, 5_000, 9_000]),
    wide_values=st.booleans(),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_framed_stores_read_like_numpy(
    tmp_path_factory: pytest.TempPathFactory,
    n_cells: int,
    n_features: int,
    wide_values: bool,
    seed: int,
    data: st.DataObject,
) -> None:
    # rows of 3 B to 18 KB: one-row frames, several rows per frame, plain chunks
    rng = np.random.default_rng(seed)
    values = rng.geometric(0.3, size=(n_cells, n_features)) * (300 if wide_values else 1)
    values[rng.random(values.shape) > 0.1] = 0
    path = tmp_path_factory.mktemp("framed") / "s.zarr"
    with row_framed_writes():
        cv.write_counts(path, sp.csr_array(values))
    reader = cv.VirtualArrayReader(path)
    index = st.lists(st.integers(0, n_cells - 1), min_size=1, max_size=12)
    cells = np.array(data.draw(index | st.just(list(range(n_cells)))))
    features = np.array(
        data.draw(st.lists(st.integers(0, n_features - 1), min_size=1, max_size=12))
    )
    for selection, expected in [
        ((cells, None), values[cells]),
        ((None, features), values[:, features]),
        ((cells, features), values[cells][:, features]),
    ]:
        np.testing.assert_array_equal(reader.read(*selection), expected)
    counts_t = zarr.open_array(path, path="RNA/countsT", mode="r")
    np.testing.assert_array_equal(
        counts_t.get_orthogonal_selection((features, cells)), values[cells][:, features].T
    )
