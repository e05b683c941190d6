"""Local row frames read by the compiled loop: only the wanted rows' frames, the same values.

Row frames are the chunk encoding of stores written before the portable
layout; those stores keep reading so, and are written here as they were
(``row_framed_writes``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv
import cytearc_vfs.read.local_shards as local_shards
import cytearc_vfs.read.strip_assembly as strip_assembly
from cytearc_vfs.encoding.row_frames import frame_index, frame_rows
from cytearc_vfs.read.shard_reader import ShardedReader
from cytearc_vfs.write.row_framed import row_framed_writes

kernels = pytest.importorskip("cytearc_vfs.encoding._kernels")
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
    with row_framed_writes():
        cv.write_counts(path, sp.csr_array(values), layout=LAYOUT)
    return path, values


# rows of 2,000 bytes: frames of 5 rows; chunks of 32 rows (6 frames of 5, one of 2)
NARROW_CELLS, NARROW_FEATURES = 300, 1000


@pytest.fixture
def narrow(tmp_path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(12)
    values = rng.geometric(0.4, size=(NARROW_CELLS, NARROW_FEATURES)).astype(np.uint16)
    values[rng.random(values.shape) > 0.1] = 0
    values[64:96] = 0  # a whole chunk never written
    values[1, 1] = 1000
    path = tmp_path / "narrow.zarr"
    with row_framed_writes():
        cv.write_counts(path, sp.csr_array(values), layout=LAYOUT)
    return path, values


@pytest.fixture(params=["wide", "narrow"])
def store(request: pytest.FixtureRequest) -> tuple[Path, np.ndarray]:
    """A store of one row per frame, and one of several rows per frame."""
    stored: tuple[Path, np.ndarray] = request.getfixturevalue(request.param)
    return stored


def _fast(reader: cv.VirtualArrayReader) -> ShardedReader:
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
    total = stored = 0
    for chunk in sorted({cell // chunk_rows for cell in cells}):
        shard, local = divmod(chunk, per_shard)
        raw = (path / "RNA/counts/c" / str(shard) / "0").read_bytes()
        index = np.frombuffer(raw[-(16 * per_shard + 4) : -4], dtype="<u8").reshape(-1, 2)
        offset, size = (int(v) for v in index[local])
        if offset == 2**64 - 1:
            continue
        frames = frame_index(raw[offset : offset + size])
        assert frames is not None
        stored += 1
        total += 20 + 4 * (len(frames.offsets) - 1)  # the frame index
        per_frame = frames.rows_per_frame
        for frame in {
            cell % chunk_rows // per_frame for cell in cells if cell // chunk_rows == chunk
        }:
            total += frames.offsets[frame + 1] - frames.offsets[frame]
    return total, stored


def test_only_the_wanted_frames_are_read(store: tuple[Path, np.ndarray]) -> None:
    path, values = store
    reader = cv.VirtualArrayReader(path)
    fast = _fast(reader)
    assert fast._local is not None and fast._local.frame_reads
    # the narrow store's chunks end in a short frame
    assert (fast.chunks, fast._local.rows_per_frame) in {((7, 4500), 1), ((32, 1000), 5)}
    # 15 and 70: chunks never written; 50-52 and 200-203 share frames
    cells = [0, 3, 15, 50, 51, 52, 70, 200, 203, 239]
    reader.read(cells, None)  # warms the shard index cache
    reader.reset_stats()
    block = reader.read(cells, None)
    np.testing.assert_array_equal(block, values[cells])
    expected_bytes, stored = _frame_bytes(path, cells)
    assert reader.stats.bytes_read == expected_bytes
    assert reader.stats.chunks_decoded == stored


# selections of a store of (cells, features)
SELECTIONS: dict[str, Callable[[int, int], tuple[Any, Any]]] = {
    "cells, repeated and unsorted": lambda n, m: (
        np.array([239, 10, 10, 120, 0, 42, 17, 66]),
        None,
    ),
    "band across a missing chunk": lambda n, m: (slice(5, 100), slice(None)),
    "every cell": lambda n, m: (None, np.array([m - 1, 0, 7])),
    "mask": lambda n, m: (np.arange(n) % 5 == 0, np.arange(m) % 3 == 1),
}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("selection", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_compiled_and_python_reads_place_the_same_values(
    store: tuple[Path, np.ndarray],
    compiled: bool,
    selection: Callable[[int, int], tuple[Any, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, values = store
    if not compiled:
        monkeypatch.setattr(local_shards, "read_row_frames", None)
    reader = cv.VirtualArrayReader(path)
    assert _fast(reader)._local.frame_reads is compiled
    cells, features = selection(*values.shape)
    expected = values if cells is None else values[cells]
    expected = expected if features is None else expected[:, features]
    np.testing.assert_array_equal(reader.read(cells, features), expected)


def test_a_chunk_that_is_not_one_frame_per_row_sends_the_rest_of_the_job_to_python(
    wide: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, values = wide
    monkeypatch.setattr(strip_assembly, "STRIP_BATCH_BYTES", 1)  # one row chunk per strip
    compiled = local_shards.read_row_frames
    assert compiled is not None
    calls: list[int] = []

    def second_strip_refused(*args: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 2 else compiled(*args)

    monkeypatch.setattr(local_shards, "read_row_frames", second_strip_refused)
    reader = cv.VirtualArrayReader(path)
    cells = np.array([1, 2, 8, 30, 36, 60])  # chunks 0, 1, 4, 5, 8 of shard 0
    reader.read(cells, None)
    calls.clear()
    reader.reset_stats()
    np.testing.assert_array_equal(reader.read(cells, None), values[cells])
    assert len(calls) == 2  # the rest went through whole-chunk reads
    assert reader.stats.chunks_decoded == 5


def test_a_shard_truncated_after_open_is_refused_naming_it(
    wide: tuple[Path, np.ndarray],
) -> None:
    # not read at the kept index's offsets (the file ending early): the shard
    # is not the file whose index was read (read/opened_files.py)
    path, _ = wide
    reader = cv.VirtualArrayReader(path)
    reader.read([100], None)  # the shard index is read and kept
    shard = path / "RNA/counts/c/0/0"
    with open(shard, "r+b") as file:
        file.truncate(os.path.getsize(shard) // 2)
    with pytest.raises(
        cv.IdentityMismatchError,
        match=r"c/0/0 was rewritten \(\d+ bytes, \d+ before\) since the source was opened",
    ):
        reader.read([100], None)


def _chunk_file(tmp_path: Path, chunks: list[bytes]) -> tuple[int, list[int], list[int]]:
    data = b"".join(chunks)
    (tmp_path / "chunks").write_bytes(data)
    offsets = np.cumsum([0, *map(len, chunks)])[:-1].tolist()
    return os.open(tmp_path / "chunks", os.O_RDONLY), offsets, [len(c) for c in chunks]


def test_the_kernel_reads_frames_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    from cytearc_vfs.encoding.row_frames import RowFrameEncoder

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


def test_the_kernel_reads_the_frames_of_several_rows_that_hold_the_wanted_rows(
    tmp_path: Path,
) -> None:
    from cytearc_vfs.encoding.row_frames import RowFrameEncoder

    block = np.arange(5 * 5000, dtype=np.uint16).reshape(5, 5000) % 251
    framed = RowFrameEncoder(level=1).encode(block, rows_per_frame=2)  # frames of 2, 2, 1 rows
    frames = frame_index(framed)
    assert frames is not None and frames.rows_per_frame == 2
    fd, offsets, sizes = _chunk_file(tmp_path, [framed])
    i64 = np.asarray
    out = np.empty(len(framed), dtype=np.uint8)
    index_bytes = 20 + 4 * 3

    def read(rows: list[int], per_frame: int = 2) -> Any:
        return kernels.read_row_frames(
            fd, 5, i64(offsets), i64(sizes), i64([len(rows)]), i64(rows), out, per_frame
        )

    def frames_bytes(first: int, last: int) -> bytes:
        return framed[frames.offsets[first] : frames.offsets[last + 1]]

    try:
        for rows, wanted in (
            ([1, 4], frames_bytes(0, 0) + frames_bytes(2, 2)),  # two preads
            ([2, 3], frames_bytes(1, 1)),  # two rows of one frame
            ([1, 2], frames_bytes(0, 1)),  # consecutive frames: one pread
            ([4], frames_bytes(2, 2)),  # the short last frame
        ):
            got = read(rows)
            assert got == (len(wanted), len(wanted) + index_bytes), rows
            assert bytes(out[: got[0]]) == wanted
        assert read([1], per_frame=1) is None  # framed otherwise: the caller reads it whole
        with pytest.raises(IndexError, match="sorted, unique and below 5"):
            read([3, 2])
        with pytest.raises(ValueError, match="rows_per_frame from 1 to chunk_rows - 1"):
            read([1], per_frame=5)
    finally:
        os.close(fd)


@pytest.mark.parametrize("per_frame", [1, 2, 3, 7])
def test_frame_rows_finds_each_wanted_row_among_the_decoded_frames(per_frame: int) -> None:
    rng = np.random.default_rng(per_frame)
    chunk_rows = 10
    for _ in range(50):
        counts = rng.integers(0, 6, size=rng.integers(1, 5))
        rows = np.concatenate(
            [np.sort(rng.choice(chunk_rows, int(k), replace=False)) for k in counts]
        ).astype(np.int64)
        # decoding the frames that hold the rows, chunk by chunk, in order
        decoded = []
        at = 0
        for chunk, k in enumerate(counts.tolist()):
            for frame in sorted({int(r) // per_frame for r in rows[at : at + k]}):
                last = min(chunk_rows, (frame + 1) * per_frame)
                decoded.extend((chunk, r) for r in range(frame * per_frame, last))
            at += k
        total, picks = frame_rows(rows, counts.astype(np.int64), chunk_rows, per_frame)
        assert total == len(decoded)
        chunk_of = np.repeat(np.arange(len(counts)), counts)
        wanted = list(zip(chunk_of.tolist(), rows.tolist(), strict=True))
        positions = range(len(rows)) if picks is None else picks.tolist()
        assert [decoded[p] for p in positions] == wanted
