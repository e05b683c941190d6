"""Local one-row frames read by the compiled loop: only the wanted frames, the same values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv
import cytearc_vfs.shard_reader as shard_reader
from cytearc_vfs.row_frames import frame_index

kernels = pytest.importorskip("cytearc_vfs._kernels")
if not hasattr(kernels, "read_row_frames"):
    pytest.skip("no pread on this platform", allow_module_level=True)

# rows of 9,000 bytes: one frame per row; chunks of 7 rows, shards of ~116
N_CELLS, N_FEATURES = 240, 4500
LAYOUT = ("1MiB", "64KiB")
ZERO_ROWS = slice(14, 28)  # two whole chunks never written


@pytest.fixture
def wide(tmp_path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(11)
    values = rng.geometric(0.4, size=(N_CELLS, N_FEATURES)).astype(np.uint16)
    values[rng.random(values.shape) > 0.1] = 0
    values[ZERO_ROWS] = 0
    values[1, 1] = 1000  # keeps the store uint16: rows of 9,000 bytes
    path = tmp_path / "wide.zarr"
    cv.write_counts(path, sp.csr_array(values), layout=LAYOUT)
    return path, values


def _fast(reader: cv.VirtualArrayReader) -> shard_reader.ShardedReader:
    fast = reader._mapping.sources[0].counts_fast
    assert fast is not None
    return fast


def _frame_bytes(path: Path, cells: list[int]) -> tuple[int, int]:
    """Bytes the frame path reads for ``cells`` (each touched chunk's index and
    its wanted frames), and the touched chunks that are stored."""
    array = zarr.open_array(path, path="RNA/counts", mode="r")
    chunk_rows = array.metadata.codecs[0].chunk_shape[0]
    assert array.shards is not None
    per_shard = array.shards[0] // chunk_rows
    index_bytes = 20 + 4 * chunk_rows
    total = stored = 0
    for chunk in sorted({cell // chunk_rows for cell in cells}):
        shard, local = divmod(chunk, per_shard)
        raw = (path / "RNA/counts/c" / str(shard) / "0").read_bytes()
        index = np.frombuffer(raw[-(16 * per_shard + 4) : -4], dtype="<u8").reshape(-1, 2)
        offset, size = (int(v) for v in index[local])
        if offset == 2**64 - 1:
            continue
        frames = frame_index(raw[offset : offset + size])
        assert frames is not None and frames.rows_per_frame == 1
        stored += 1
        total += index_bytes
        for row in {cell % chunk_rows for cell in cells if cell // chunk_rows == chunk}:
            total += frames.offsets[row + 1] - frames.offsets[row]
    return total, stored


def test_only_the_wanted_frames_are_read(wide: tuple[Path, np.ndarray]) -> None:
    path, values = wide
    reader = cv.VirtualArrayReader(path)
    assert _fast(reader)._frame_reads
    cells = [0, 3, 15, 50, 51, 52, 200, 239]  # 15: a chunk never written
    reader.read(cells, None)  # warms the shard index cache
    reader.reset_stats()
    block = reader.read(cells, None)
    np.testing.assert_array_equal(block, values[cells])
    expected_bytes, stored = _frame_bytes(path, cells)
    assert reader.stats.bytes_read == expected_bytes
    assert reader.stats.chunks_decoded == stored


SELECTIONS: dict[str, tuple[Any, Any]] = {
    "cells, repeated and unsorted": (np.array([239, 10, 10, 120, 0, 42, 17]), None),
    "band across a missing chunk": (slice(5, 40), slice(None)),
    "every cell": (None, np.array([4499, 0, 7])),
    "mask": (np.arange(N_CELLS) % 5 == 0, np.arange(N_FEATURES) % 3 == 1),
}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("selection", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_compiled_and_python_reads_place_the_same_values(
    wide: tuple[Path, np.ndarray],
    compiled: bool,
    selection: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, values = wide
    if not compiled:
        monkeypatch.setattr(shard_reader, "read_row_frames", None)
    reader = cv.VirtualArrayReader(path)
    assert _fast(reader)._frame_reads is compiled
    cells, features = selection
    expected = values if cells is None else values[cells]
    expected = expected if features is None else expected[:, features]
    np.testing.assert_array_equal(reader.read(cells, features), expected)


def test_a_chunk_that_is_not_one_frame_per_row_sends_the_rest_of_the_job_to_python(
    wide: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, values = wide
    monkeypatch.setattr(shard_reader, "STRIP_BATCH_BYTES", 1)  # one row chunk per strip
    compiled = shard_reader.read_row_frames
    assert compiled is not None
    calls: list[int] = []

    def second_strip_refused(*args: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 2 else compiled(*args)

    monkeypatch.setattr(shard_reader, "read_row_frames", second_strip_refused)
    reader = cv.VirtualArrayReader(path)
    cells = np.array([1, 2, 8, 30, 36, 60])  # chunks 0, 1, 4, 5, 8 of shard 0
    reader.read(cells, None)
    calls.clear()
    reader.reset_stats()
    np.testing.assert_array_equal(reader.read(cells, None), values[cells])
    assert len(calls) == 2  # the rest went through whole-chunk reads
    assert reader.stats.chunks_decoded == 5


def test_a_shard_truncated_after_open_is_an_os_error_naming_it(
    wide: tuple[Path, np.ndarray],
) -> None:
    path, _ = wide
    reader = cv.VirtualArrayReader(path)
    reader.read([100], None)  # the shard index is read and kept
    shard = path / "RNA/counts/c/0/0"
    with open(shard, "r+b") as file:
        file.truncate(os.path.getsize(shard) // 2)
    with pytest.raises(OSError, match=r"c/0/0: the file ends before byte \d+; the shard is trunc"):
        reader.read([100], None)


def _chunk_file(tmp_path: Path, chunks: list[bytes]) -> tuple[int, list[int], list[int]]:
    data = b"".join(chunks)
    (tmp_path / "chunks").write_bytes(data)
    offsets = np.cumsum([0, *map(len, chunks)])[:-1].tolist()
    return os.open(tmp_path / "chunks", os.O_RDONLY), offsets, [len(c) for c in chunks]


def test_the_kernel_reads_frames_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    from cytearc_vfs.row_frames import RowFrameEncoder

    block = np.arange(4 * 5000, dtype=np.uint16).reshape(4, 5000) % 251
    encoder = RowFrameEncoder(level=1)
    framed = encoder.encode(block, rows_per_frame=1)
    single = encoder.encode(block, rows_per_frame=4)
    fd, offsets, sizes = _chunk_file(tmp_path, [framed, single])
    try:
        i64 = np.asarray
        out = np.empty(len(framed), dtype=np.uint8)
        args = (i64(offsets[:1]), i64(sizes[:1]), i64([2]))
        got = kernels.read_row_frames(fd, 4, *args, i64([1, 3]), out)
        assert got is not None
        frames = frame_index(framed)
        assert frames is not None
        wanted = (
            framed[frames.offsets[1] : frames.offsets[2]]
            + framed[frames.offsets[3] : frames.offsets[4]]
        )
        assert got == (len(wanted), len(wanted) + 20 + 16)
        assert bytes(out[: got[0]]) == wanted
        # a single-frame chunk: the caller reads it whole
        assert (
            kernels.read_row_frames(fd, 4, i64(offsets), i64(sizes), i64([1, 1]), i64([0, 0]), out)
            is None
        )
        with pytest.raises(IndexError, match="sorted, unique and below 4"):
            kernels.read_row_frames(fd, 4, *args, i64([3, 1]), out)
        with pytest.raises(IndexError, match="sorted, unique and below 4"):
            kernels.read_row_frames(
                fd, 4, i64(offsets[:1]), i64(sizes[:1]), i64([1]), i64([4]), out
            )
        with pytest.raises(ValueError, match="do not fit"):
            kernels.read_row_frames(fd, 4, *args, i64([1, 3]), out[:10])
        with pytest.raises(ValueError, match="do not add up"):
            kernels.read_row_frames(fd, 4, *args, i64([1]), out)
        with pytest.raises(ValueError, match="int64 arrays of one length"):
            kernels.read_row_frames(fd, 4, i64(offsets), *args[1:], i64([1, 3]), out)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        kernels.read_row_frames(fd, 4, *args, i64([1, 3]), out)  # a closed descriptor
