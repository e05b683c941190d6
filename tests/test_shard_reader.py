"""The direct shard reader: placements, layouts it meets, damage, and what it fetches.

Every read is compared with numpy on the dense matrix. Selections are chosen
so that each orientation is used (a few features x all cells reads countsT,
a few cells x all features reads counts), with repeats and any order.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from decode_counting import decoding_jobs
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
import cytearc_vfs.read.decode_threads as decode_threads
import cytearc_vfs.read.local_shards as local_shards
import cytearc_vfs.read.placement as placement
import cytearc_vfs.read.shard_reader as shard_reader
import cytearc_vfs.read.strip_assembly as strip_assembly
from cytearc_vfs.errors import RecordShapeError
from cytearc_vfs.read.gather import choose_orientation

N_CELLS, N_FEATURES = 600, 300


@pytest.fixture
def dense() -> np.ndarray:
    rng = np.random.default_rng(7)
    values = rng.geometric(0.4, size=(N_CELLS, N_FEATURES)).astype(np.uint16)
    values[rng.random((N_CELLS, N_FEATURES)) > 0.1] = 0
    return values


def _store(tmp_path: Path, dense: np.ndarray, name: str = "s.zarr", **kwargs: Any) -> Path:
    path = tmp_path / name
    cv.write_counts(path, sp.csr_array(dense), **kwargs)
    return path


SELECTIONS = {
    "features, repeated and unsorted (countsT)": (None, np.array([250, 3, 3, 77, 299, 0, 77])),
    "cells, repeated and unsorted (counts)": (np.array([599, 10, 10, 300, 0, 42]), None),
    "both, repeated": (np.array([5, 5, 400, 3]), np.array([9, 1, 9, 200])),
    "band": (slice(100, 400), slice(None)),
    "mask": (np.arange(N_CELLS) % 7 == 0, np.arange(N_FEATURES) % 5 == 1),
}


def _expected(dense: np.ndarray, cells: Any, features: Any) -> np.ndarray:
    rows = dense if cells is None else dense[cells]
    return rows if features is None else rows[:, features]


@pytest.mark.parametrize("selection", list(SELECTIONS))
def test_reads_equal_numpy_in_both_orientations(
    tmp_path: Path, dense: np.ndarray, selection: str
) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, dense))
    cells, features = SELECTIONS[selection]
    np.testing.assert_array_equal(reader.read(cells, features), _expected(dense, cells, features))


def test_selections_pick_the_orientation_they_are_meant_to(
    dense: np.ndarray, tmp_path: Path
) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, dense))
    source = reader._mapping.sources[0]
    all_cells, all_features = np.arange(N_CELLS), np.arange(N_FEATURES)
    few = np.array([0, 3, 77])
    assert choose_orientation(all_cells, few, source.info.layout, 2).orientation == "countsT"
    assert choose_orientation(few, all_features, source.info.layout, 2).orientation == "counts"


def test_rows_split_into_column_chunks(tmp_path: Path, dense: np.ndarray) -> None:
    # 256-byte chunks: a row of 300 features spans two or more column chunks
    path = _store(tmp_path, dense, layout=("64KiB", "256B"))
    reader = cv.VirtualArrayReader(path)
    source = reader._mapping.sources[0]
    assert source.counts_fast is not None and source.counts_fast.col_chunks >= 2
    width = source.counts_fast.chunks[1]
    second = np.array([width + 2, width + 3])  # both in the second column chunk
    for cells, features in [*SELECTIONS.values(), (np.array([4]), second)]:
        np.testing.assert_array_equal(
            reader.read(cells, features), _expected(dense, cells, features)
        )
    reader.reset_stats()
    reader.read(np.array([4]), second)  # one row chunk, one column chunk
    assert reader.stats.chunks_decoded == 1


def test_strips_placed_in_small_batches(
    tmp_path: Path, dense: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store(tmp_path, dense, layout=("64KiB", "2KiB"))
    monkeypatch.setattr(strip_assembly, "STRIP_BATCH_BYTES", 1)  # one row chunk per batch
    reader = cv.VirtualArrayReader(path)
    for cells, features in SELECTIONS.values():
        np.testing.assert_array_equal(
            reader.read(cells, features), _expected(dense, cells, features)
        )


def test_a_shard_job_is_cut_in_pieces_for_the_threads(
    tmp_path: Path, dense: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read within one shard is decoded by every thread, each a piece of its row
    chunks (``job_pieces``), and places the same values, dense and sparse."""
    path = _store(tmp_path, dense, layout=("64KiB", "2KiB"))
    monkeypatch.setattr(shard_reader, "PIECE_BYTES", 1)
    monkeypatch.setattr(shard_reader, "decoder_threads", lambda: 4)
    jobs: list[int] = []
    read = local_shards.LocalShardReader.read

    def counted(self: Any, path: str, offsets: Any, sizes: Any, work: Any) -> None:
        jobs.append(len(work.row_chunks))
        read(self, path, offsets, sizes, work)

    monkeypatch.setattr(local_shards.LocalShardReader, "read", counted)
    reader = cv.VirtualArrayReader(path)
    array = zarr.open_array(path, path="RNA/counts", mode="r")
    chunk_rows = array.metadata.codecs[0].chunk_shape[0]
    band = slice(0, min(array.shards[0], 8 * chunk_rows))
    np.testing.assert_array_equal(reader.read(band, None), dense[band])
    assert len(jobs) == 4 and sum(jobs) == -(-(band.stop - band.start) // chunk_rows)
    np.testing.assert_array_equal(reader.read_sparse(band, None).toarray(), dense[band])
    for cells, features in SELECTIONS.values():
        expected = _expected(dense, cells, features)
        np.testing.assert_array_equal(reader.read(cells, features), expected)
        np.testing.assert_array_equal(reader.read_sparse(cells, features).toarray(), expected)


def test_job_pieces_hold_equal_rows_at_chunk_edges() -> None:
    bounds = np.array([0, 10, 20, 30, 40, 50, 60, 70, 80])
    # cuts at the chunk edges nearest 80/3 and 160/3 rows
    assert shard_reader.job_pieces(bounds, shard_reader.PIECE_BYTES, 3) == [
        (0, 3),
        (3, 5),
        (5, 8),
    ]
    # too few wanted bytes for two pieces, or one chunk: one job
    assert shard_reader.job_pieces(bounds, 1, 3) == [(0, 8)]
    assert shard_reader.job_pieces(np.array([0, 10**6]), 10**6, 4) == [(0, 1)]
    # rows bunched in the first chunks: pieces by rows, not by chunks
    bunched = np.array([0, 1000, 2000, 2001, 2002, 2003])
    assert shard_reader.job_pieces(bunched, shard_reader.PIECE_BYTES, 2) == [(0, 1), (1, 5)]


def _overlapping_composite(
    tmp_path: Path, dense: np.ndarray
) -> tuple[cv.VirtualArrayReader, np.ndarray]:
    """A reader of two sources sharing features 100-199, and the matrix it reads."""
    ids = [f"g{i}" for i in range(N_FEATURES)]
    a = _store(tmp_path, dense[:250, :200], "a.zarr", features=ids[:200])
    b = _store(tmp_path, dense[250:, 100:], "b.zarr", features=ids[100:])
    comp = cv.create_composite(tmp_path / "c.zarr", {"a": a, "b": b})
    expected = np.zeros((N_CELLS, N_FEATURES), dtype=dense.dtype)
    expected[:250, :200] = dense[:250, :200]
    expected[250:, 100:] = dense[250:, 100:]
    return comp.reader(), expected


@pytest.mark.parametrize("copy_runs", [0, placement.MAX_COPY_RUNS], ids=["gather", "slices"])
def test_composite_reads_through_placements(
    tmp_path: Path, dense: np.ndarray, copy_runs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # column maps placed by one gather (np.take) or by slice copies of their stretches
    monkeypatch.setattr(placement, "MAX_COPY_RUNS", copy_runs)
    reader, expected = _overlapping_composite(tmp_path, dense)
    for cells, features in SELECTIONS.values():
        np.testing.assert_array_equal(
            reader.read(cells, features), _expected(expected, cells, features)
        )


def _shard_file(path: Path, array: str = "RNA/counts") -> Path:
    return path / array / "c" / "0" / "0"


def test_local_reads_fetch_only_touched_chunks(tmp_path: Path, dense: np.ndarray) -> None:
    path = _store(tmp_path, dense, layout=("64KiB", "2KiB"))
    reader = cv.VirtualArrayReader(path)
    cells = np.array([0, 1, 200, 599])
    reader.read(cells, None)  # warms the shard index cache
    reader.reset_stats()
    reader.read(cells, None)
    array = zarr.open_array(path, path="RNA/counts", mode="r")
    chunk_rows = array.metadata.codecs[0].chunk_shape[0]
    shard_rows = array.shards[0]
    expected_bytes = 0
    shards = set()
    for row_chunk in sorted({int(c) // chunk_rows for c in cells}):
        shard = row_chunk * chunk_rows // shard_rows
        shards.add(shard)
        raw = (path / "RNA/counts/c" / str(shard) / "0").read_bytes()
        per_shard = shard_rows // chunk_rows
        index = np.frombuffer(raw[-(16 * per_shard + 4) : -4], dtype="<u8").reshape(-1, 2)
        expected_bytes += int(index[row_chunk - shard * per_shard, 1])
    stats = reader.stats
    assert stats.bytes_read == expected_bytes
    assert stats.requests == len(shards)
    assert stats.chunks_decoded == len({int(c) // chunk_rows for c in cells})


class SeeingStore(WrapperStore[LocalStore]):
    """A wrapper (as a latency or fault injector would be) that records chunk fetches."""

    seen: list[str]

    def __init__(self, store: LocalStore) -> None:
        super().__init__(store)
        self.seen = []

    def _with_store(self, store: LocalStore) -> SeeingStore:
        clone = type(self)(store)
        clone.seen = self.seen
        return clone

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.seen.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def get_ranges(  # type: ignore[override]
        self, key: str, byte_ranges: Sequence[ByteRequest | None], **options: Any
    ) -> Any:
        self.seen.append(key)
        async for batch in self._store.get_ranges(key, byte_ranges, **options):
            yield batch


def test_wrapped_local_store_sees_every_fetch(tmp_path: Path, dense: np.ndarray) -> None:
    path = _store(tmp_path, dense)
    seeing = SeeingStore(LocalStore(path, read_only=True))
    reader = cv.VirtualArrayReader(seeing)
    np.testing.assert_array_equal(reader.read(np.array([3, 500]), None), dense[[3, 500]])
    assert any(key.startswith("RNA/counts/c/") for key in seeing.seen)


def _remote_reads(
    path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> tuple[list[int], list[str], list[tuple[int, int]], list[np.ndarray]]:
    """Every read of the remote-path test through a fresh wrapped store, decoded by
    ``threads`` threads with pieces of any size: the row chunks of each decoding
    job, the keys fetched, the (requests, chunks decoded) of each read, and what
    each read returned."""
    monkeypatch.setattr(shard_reader, "PIECE_BYTES", 1)
    monkeypatch.setattr(shard_reader, "decoder_threads", lambda: threads)
    seeing = SeeingStore(LocalStore(path, read_only=True))
    reader = cv.VirtualArrayReader(seeing)
    assert reader._mapping.sources[0].counts_fast is not None  # the gather reader, not zarr's
    chunk_rows = (
        zarr.open_array(path, path="RNA/counts", mode="r").metadata.codecs[0].chunk_shape[0]
    )
    band = slice(0, 8 * chunk_rows)
    counts: list[tuple[int, int]] = []
    values: list[np.ndarray] = []
    with monkeypatch.context() as patch:
        jobs = decoding_jobs(patch)
        for cells, features in [(band, None), *SELECTIONS.values()]:
            for read in (reader.read, reader.read_sparse):
                reader.reset_stats()
                got = read(cells, features)
                values.append(got if isinstance(got, np.ndarray) else got.toarray())
                counts.append((reader.stats.requests, reader.stats.chunks_decoded))
    return jobs, seeing.seen, counts, values


def test_a_remote_shard_job_is_decoded_in_pieces_after_one_fetch(
    tmp_path: Path, dense: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store read through a wrapper (as an object store is: no local files) fetches
    a shard's touched chunks as before, then decodes them on every thread, each a
    piece of its row chunks: the same values, requests and chunks as one job."""
    path = _store(tmp_path, dense, layout=("64KiB", "2KiB"))
    chunk_rows = (
        zarr.open_array(path, path="RNA/counts", mode="r").metadata.codecs[0].chunk_shape[0]
    )
    shard_rows = zarr.open_array(path, path="RNA/counts", mode="r").shards[0]
    assert shard_rows >= 8 * chunk_rows  # the first read's band is within one shard
    pieces, seen, counts, values = _remote_reads(path, monkeypatch, threads=4)
    whole, seen_whole, counts_whole, values_whole = _remote_reads(path, monkeypatch, threads=1)
    # the band, dense then sparse: 8 row chunks in 4 pieces, against one job
    assert pieces[:8] == [2, 2, 2, 2, 2, 2, 2, 2] and whole[:2] == [8, 8]
    assert len(pieces) > len(whole) and sum(pieces) == sum(whole)
    # pieces add no request: the same keys fetched, as often, read by read
    assert sorted(seen) == sorted(seen_whole)
    assert counts == counts_whole
    expected = [dense[band] for band in [slice(0, 8 * chunk_rows)] * 2]
    for cells, features in SELECTIONS.values():
        expected += [_expected(dense, cells, features)] * 2
    for got, got_whole, want in zip(values, values_whole, expected, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_whole, want)


def test_damaged_chunk_fails_with_a_clear_error(tmp_path: Path, dense: np.ndarray) -> None:
    path = _store(tmp_path, dense)
    shard = _shard_file(path)
    raw = bytearray(shard.read_bytes())
    raw[0:16] = b"\xff" * 16  # the first chunk's zstd frame header
    shard.write_bytes(bytes(raw))
    reader = cv.VirtualArrayReader(path)
    with pytest.raises(RecordShapeError, match=r"RNA/counts does not decode.*Re-import"):
        reader.read(np.array([0]), None)


def test_truncated_shard_fails_with_a_clear_error(tmp_path: Path, dense: np.ndarray) -> None:
    path = _store(tmp_path, dense)
    shard = _shard_file(path)
    shard.write_bytes(shard.read_bytes()[:-100])
    reader = cv.VirtualArrayReader(path)
    with pytest.raises(RecordShapeError, match=r"crc32c does not match.*Re-import"):
        reader.read(np.array([0]), None)


def _read_in_child(path: str, expected: np.ndarray) -> None:
    reader = cv.VirtualArrayReader(path)
    os._exit(0 if np.array_equal(reader.read(np.array([3, 500]), None), expected) else 1)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_reads_after_parent(tmp_path: Path, dense: np.ndarray) -> None:
    path = _store(tmp_path, dense)
    cv.VirtualArrayReader(path).read(np.array([1]), None)  # the parent's decoding pool is up
    child = multiprocessing.get_context("fork").Process(
        target=_read_in_child, args=(str(path), dense[[3, 500]])
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0  # a forked child gets its own decoding threads


def test_feature_plans_are_kept_for_a_repeated_selection(tmp_path: Path, dense: np.ndarray) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, dense))
    features = np.array([7, 3, 3, 250])
    first = reader.read(np.array([1, 2]), features)
    kept = reader._kept_plans
    assert kept is not None
    again = reader.read(np.array([500, 1]), features.copy())  # equal values, another array
    assert reader._kept_plans is kept
    np.testing.assert_array_equal(first, dense[[1, 2]][:, features])
    np.testing.assert_array_equal(again, dense[[500, 1]][:, features])
    other = reader.read(np.array([1, 2]), np.array([0, 1]))
    assert reader._kept_plans is not kept
    np.testing.assert_array_equal(other, dense[[1, 2]][:, [0, 1]])


def test_cell_plans_are_kept_for_a_repeated_selection(tmp_path: Path, dense: np.ndarray) -> None:
    sources = {
        "a": _store(tmp_path, dense[:250], "a.zarr"),
        "b": _store(tmp_path, dense[250:], "b.zarr"),
    }
    reader = cv.create_composite(tmp_path / "c.zarr", sources).reader()
    cells = np.array([300, 2, 2, 599])  # both sources, a repeat
    first = reader.read(cells, np.array([4, 9]))
    kept = reader._kept_cells
    assert kept is not None and all(plan is not None for plan in kept[1])
    again = reader.read(cells.copy(), np.array([0, 299, 4]))  # all cells' plans reused
    assert reader._kept_cells is kept
    np.testing.assert_array_equal(first, dense[cells][:, [4, 9]])
    np.testing.assert_array_equal(again, dense[cells][:, [0, 299, 4]])
    only_a = reader.read(np.array([0, 1]), None)
    assert reader._kept_cells is not kept and reader._kept_cells[1][1] is None
    np.testing.assert_array_equal(only_a, dense[[0, 1]])


def test_a_job_that_cannot_start_fails_the_read(
    tmp_path: Path, dense: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = cv.VirtualArrayReader(_store(tmp_path, dense))

    def no_pool() -> None:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(decode_threads, "decoder_pool", no_pool)
    with pytest.raises(RuntimeError, match="cannot schedule"):
        reader.read(np.array([0, 1]), None)  # fails; does not wait forever


def test_sources_zarr_reads_place_the_same_values(
    tmp_path: Path, dense: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a layout the shard reader does not know is read through zarr's indexing
    import cytearc_vfs.read.source_arrays as source_arrays

    monkeypatch.setattr(source_arrays, "fast_reader_from", lambda *args, **kwargs: None)
    reader, expected = _overlapping_composite(tmp_path, dense)
    assert reader._mapping.sources[0].counts_fast is None
    for cells, features in SELECTIONS.values():
        np.testing.assert_array_equal(
            reader.read(cells, features), _expected(expected, cells, features)
        )
