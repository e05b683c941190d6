"""The portable count layout: chunks of about 1 MiB, each a standard Blosc container of
checksummed zstd blocks of a few rows.

What ``write_counts`` and ``repack`` write: standard ``sharding_indexed`` over
``bytes`` + ``blosc`` (zstd, no shuffle, blocks of the fewest whole rows
that make 8 KiB). c-blosc decodes each chunk to exactly its values (so do
zarr-python, zarrs, tensorstore and zarrita: ``tests/interop``); the gather
reader decodes only the blocks of the rows it needs. Stores written before
(row frames; the single frames of early issue 14) keep reading, alone and in
composites beside portable sources.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numcodecs.blosc
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
import zstandard
from decode_counting import inflated_bytes
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
import cytearc_vfs.read.local_shards as local_shards
from cytearc_vfs.encoding.blosc_blocks import open_chunk
from cytearc_vfs.encoding.row_frames import frame_index
from cytearc_vfs.format.layout import (
    DEFAULT_POLICY,
    MIN_CHUNK_BYTES,
    LayoutPolicy,
    count_layout,
    single_frame_geometry,
)
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters
from cytearc_vfs.write.row_framed import row_framed_writes, single_frame_writes

MISSING = 2**64 - 1


class _Wrapped(WrapperStore[LocalStore]):
    """Any wrapper sends reads through the store's fetches (the remote path), not pread."""


def _values(n_cells: int, n_features: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.geometric(0.4, size=(n_cells, n_features)).astype(np.uint16)
    values[rng.random(values.shape) > 0.08] = 0
    values[40:60] = 0  # whole chunks never written
    values[0, 0] = 1000  # uint16
    return values


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    """The same counts written portable (today) and row-framed (as before issue 14)."""
    root = tmp_path_factory.mktemp("portable")
    # 3 KB rows: chunks of 699 rows in blocks of 3 (87 rows in frames of 3 before)
    values = _values(3_000, 1_500, seed=21)
    cv.write_counts(root / "portable.zarr", sp.csr_array(values))
    with row_framed_writes():
        cv.write_counts(root / "framed.zarr", sp.csr_array(values))
    return root / "portable.zarr", root / "framed.zarr", values


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """The counts of :func:`stores` as written in early issue 14: chunks of 3 rows, one frame each."""
    values = _values(3_000, 1_500, seed=21)
    path = tmp_path_factory.mktemp("single") / "single.zarr"
    with single_frame_writes():
        cv.write_counts(path, sp.csr_array(values))
    return path, values


def _chunks(path: Path, array_path: str) -> list[tuple[tuple[int, int], bytes]]:
    """Every stored inner chunk of an array, by chunk coordinates, via the shard index."""
    array = zarr.open_array(path, path=array_path, mode="r")
    assert array.shards is not None
    r, c = array.chunks
    per = (array.shards[0] // r, array.shards[1] // c)
    found = []
    for shard in sorted((path / array_path / "c").glob("*/*")):
        raw = shard.read_bytes()
        index = np.frombuffer(raw[-(16 * per[0] * per[1] + 4) : -4], dtype="<u8").reshape(*per, 2)
        shard_row, shard_col = int(shard.parent.name), int(shard.name)
        for i in range(per[0]):
            for j in range(per[1]):
                offset, size = (int(v) for v in index[i, j])
                if offset != MISSING:
                    coords = (shard_row * per[0] + i, shard_col * per[1] + j)
                    found.append((coords, raw[offset : offset + size]))
    return found


@pytest.mark.parametrize("array_path", ["RNA/counts", "RNA/countsT"])
def test_every_chunk_is_a_standard_blosc_container(
    stores: tuple[Path, Path, np.ndarray], array_path: str
) -> None:
    portable, _, values = stores
    expected = values if array_path == "RNA/counts" else np.ascontiguousarray(values.T)
    array = zarr.open_array(portable, path=array_path, mode="r")
    r, c = array.chunks
    chunks = _chunks(portable, array_path)
    assert chunks
    for (i, j), data in chunks:
        assert frame_index(data) is None  # no row frames
        decoded = np.frombuffer(numcodecs.blosc.decompress(data[:-4]), dtype="<u2").reshape(r, c)
        block = expected[i * r : (i + 1) * r, j * c : (j + 1) * c]
        np.testing.assert_array_equal(decoded[: block.shape[0], : block.shape[1]], block)
        assert not decoded[block.shape[0] :].any()  # the edge chunk's padding is the fill value
        # the header is c-blosc's own for these settings (only the compressed size differs)
        reference = numcodecs.blosc.compress(
            decoded,
            b"zstd",
            1,
            numcodecs.blosc.NOSHUFFLE,
            array.metadata.codecs[0].codecs[1].blocksize,
        )
        assert data[:12] == reference[:12]
        chunk = open_chunk(data, verify=True)
        assert chunk.block_bytes == -(-MIN_CHUNK_BYTES // (c * 2)) * c * 2
        for index in range(chunk.n_blocks):
            frame, compressed = chunk.frame(index)
            assert compressed and zstandard.get_frame_parameters(frame).has_checksum
    assert np.array_equal(array[:], expected)


def test_geometry_is_the_recorded_policy_replayed(stores: tuple[Path, Path, np.ndarray]) -> None:
    portable, framed, values = stores
    record = zarr.open_group(portable, mode="r")["RNA"].attrs["cytearc:countMatrixLayout"]
    layout = count_layout(values.shape, "uint16", 2, DEFAULT_POLICY, transpose=True)
    assert record == layout.to_json()
    assert layout.counts.chunks == (699, 1_500)  # the rows that fit in chunkBytes (2 MiB)
    assert layout.counts_t is not None and layout.counts_t.chunks == (349, 3_000)
    old = zarr.open_group(framed, mode="r")["RNA"].attrs["cytearc:countMatrixLayout"]
    # stores before: chunkBytes 256 KiB by default
    assert old["counts"]["chunks"] == [87, 1_500] and old["chunkBytes"] == 256 * 1024
    before = LayoutPolicy(64 * 1024**2, 256 * 1024)
    early = count_layout(
        values.shape, "uint16", 2, before, transpose=True, rule=single_frame_geometry
    )
    assert early.counts.chunks == (3, 1_500)  # the fewest rows making 8 KiB


@pytest.mark.parametrize("local", [True, False])
def test_reads_decode_only_the_touched_blocks(
    stores: tuple[Path, Path, np.ndarray], local: bool
) -> None:
    portable, _, values = stores
    store = LocalStore(portable, read_only=True)
    reader = cv.VirtualArrayReader(store if local else _Wrapped(store))
    cells = np.array([2_999, 5, 4, 1_000, 45])  # 4 and 5 share a block of 3 rows
    block, inflated = inflated_bytes(reader, cells, None)
    np.testing.assert_array_equal(block, values[cells])
    assert inflated == 4 * 3 * 1_500 * 2  # four blocks of 3 rows
    features = np.array([7, 1_499, 6])  # countsT blocks of 2 features: 6 and 7 share one
    block, inflated = inflated_bytes(reader, None, features)
    np.testing.assert_array_equal(block, values[:, features])
    assert inflated == 2 * 2 * 3_000 * 2
    # a band decodes its chunks' blocks, each once
    block, inflated = inflated_bytes(reader, slice(0, 699), None)
    np.testing.assert_array_equal(block, values[:699])
    assert inflated == 699 * 1_500 * 2


def test_local_cell_reads_fetch_only_the_blocks_they_decode(
    stores: tuple[Path, Path, np.ndarray],
) -> None:
    portable, _, values = stores
    reader = cv.VirtualArrayReader(portable)
    fast = reader._mapping.sources[0].counts_fast
    assert fast is not None and fast._blocks and not fast._joined
    reader.read(np.array([0]), None)  # the shard index
    reader.reset_stats()
    cells = np.array([10, 11, 2_000])  # 10 and 11 share a block
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    read = reader.stats.bytes_read
    sizes = dict(_chunks(portable, "RNA/counts"))
    touched = sum(len(sizes[(cell // 699, 0)]) for cell in (10, 2_000))
    if local_shards.read_row_frames is not None:  # the compiled loop: tables and two blocks
        tables = 2 * (16 + 4 * -(-699 // 3))
        assert tables < read < tables + 2 * 3 * 1_500 * 2
        assert read < touched / 4
    else:  # else the touched chunks, whole
        assert read == touched


def test_single_frame_stores_fetch_only_the_touched_chunks(
    single: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    portable, values = single
    cells = np.array([10, 11, 2_000])
    sizes = dict(_chunks(portable, "RNA/counts"))
    wanted = sum(len(sizes[(cell // 3, 0)]) for cell in {10, 2_000})  # 10 and 11 share a chunk
    reader = cv.VirtualArrayReader(portable)
    fast = reader._mapping.sources[0].counts_fast
    assert (
        fast is not None
        and fast._joined
        and fast._local is not None
        and not fast._local.frame_reads
    )
    reader.read(cells[:1], None)  # the shard index
    if local_shards.read_ranges is not None:  # the compiled loop: only the chunks' bytes
        kernel = local_shards.read_ranges
        ranges: list[int] = []

        def counted(fd: int, offsets: Any, sizes: Any, out: Any) -> int:
            ranges.extend(sizes.tolist())
            return kernel(fd, offsets, sizes, out)

        monkeypatch.setattr(local_shards, "read_ranges", counted)
        np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
        assert sum(ranges) == wanted and len(ranges) == 2
    # without the kernel: one preadv per run of consecutive chunks, only theirs
    monkeypatch.setattr(local_shards, "read_ranges", None)
    preads: list[int] = []
    original = os.preadv

    def counting(fd: int, buffers: list[Any], offset: int) -> int:
        preads.append(sum(memoryview(b).nbytes for b in buffers))
        result: int = original(fd, buffers, offset)
        return result

    monkeypatch.setattr(os, "preadv", counting)
    cells = np.array([4, 5, 1_999])  # 4 and 5 share a chunk
    wanted = sum(len(sizes[(cell // 3, 0)]) for cell in {4, 1_999})
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    assert sum(preads) == wanted and len(preads) == 2


def test_a_truncated_portable_shard_is_an_error(tmp_path: Path) -> None:
    values = _values(300, 1_500, seed=24)
    path = tmp_path / "s.zarr"
    cv.write_counts(path, sp.csr_array(values))
    reader = cv.VirtualArrayReader(path)
    reader.read(np.array([0]), None)  # the shard index is kept
    shard = path / "RNA/counts/c/0/0"
    shard.write_bytes(shard.read_bytes()[:100])
    # refused as a file changed since the open, not read at the kept offsets
    with pytest.raises(cv.IdentityMismatchError, match=r"was rewritten \(100 bytes"):
        reader.read(np.array([299]), None)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_reads_like_numpy_local_and_through_a_store(
    stores: tuple[Path, Path, np.ndarray], single: tuple[Path, np.ndarray], seed: int
) -> None:
    portable, _, values = stores
    rng = np.random.default_rng(seed)
    cells = rng.choice(values.shape[0], 40)
    features = rng.choice(values.shape[1], 30)
    for path in (portable, single[0]):
        for reader in (
            cv.VirtualArrayReader(path),
            cv.VirtualArrayReader(_Wrapped(LocalStore(path, read_only=True))),
        ):
            _reads_like_numpy(reader, values, cells, features)


def _reads_like_numpy(
    reader: cv.VirtualArrayReader, values: np.ndarray, cells: np.ndarray, features: np.ndarray
) -> None:
    if True:
        for selection, expected in [
            ((cells, None), values[cells]),
            ((None, features), values[:, features]),
            ((cells, features), values[cells][:, features]),
            ((slice(100, 2_500), None), values[100:2_500]),
        ]:
            np.testing.assert_array_equal(np.asarray(reader.read(*selection)), expected)


def test_zarr_default_and_fused_pipelines_read_exactly(
    stores: tuple[Path, Path, np.ndarray], single: tuple[Path, np.ndarray]
) -> None:
    portable, _, values = stores
    fused = {"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}
    rows = np.array([3, 2_998, 700])
    for config, path in [({}, portable), (fused, portable), ({}, single[0])]:
        with zarr.config.set(config):
            counts = zarr.open_array(path, path="RNA/counts", mode="r")
            counts_t = zarr.open_array(path, path="RNA/countsT", mode="r")
            np.testing.assert_array_equal(counts[:], values)
            np.testing.assert_array_equal(counts_t[:], values.T)
            np.testing.assert_array_equal(counts.oindex[rows, :], values[rows])


def test_a_composite_of_row_framed_and_portable_sources_reads_exactly(
    stores: tuple[Path, Path, np.ndarray], tmp_path: Path
) -> None:
    portable, framed, values = stores
    other = _values(500, 1_500, seed=22)
    second = tmp_path / "second.zarr"
    cv.write_counts(second, sp.csr_array(other), cells=[f"b{i}" for i in range(500)], features=None)
    third = tmp_path / "third.zarr"
    with row_framed_writes():
        cv.write_counts(
            third, sp.csr_array(other[::-1]), cells=[f"c{i}" for i in range(500)], features=None
        )
    composite = tmp_path / "composite.zarr"
    cv.create_composite(composite, {"framed": framed, "new": second, "old": third})
    expected = np.vstack([values, other, other[::-1]])
    reader = cv.VirtualArrayReader(composite)
    rng = np.random.default_rng(4)
    cells = rng.choice(expected.shape[0], 60)
    features = rng.choice(expected.shape[1], 25)
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), expected[cells])
    np.testing.assert_array_equal(np.asarray(reader.read(None, features)), expected[:, features])
    np.testing.assert_array_equal(
        np.asarray(reader.read(slice(2_900, 3_100), None)), expected[2_900:3_100]
    )
    store = cv.open_store(composite)
    np.testing.assert_array_equal(zarr.open_array(store, path="RNA/counts", mode="r")[:], expected)
    # and a composite over the portable store beside a row-framed one
    mixed = tmp_path / "mixed.zarr"
    cv.create_composite(mixed, {"p": portable, "f": third})
    reader = cv.VirtualArrayReader(mixed)
    both = np.vstack([values, other[::-1]])
    np.testing.assert_array_equal(np.asarray(reader.read(cells % 3_500, None)), both[cells % 3_500])


def test_repack_writes_a_row_framed_store_the_portable_way(
    stores: tuple[Path, Path, np.ndarray], tmp_path: Path
) -> None:
    _, framed, values = stores
    out = tmp_path / "repacked.zarr"
    cv.repack(framed, out)
    record = zarr.open_group(out, mode="r")["RNA"].attrs["cytearc:countMatrixLayout"]
    # the store's own policy (256 KiB chunks), the portable encoding
    before = LayoutPolicy(64 * 1024**2, 256 * 1024)
    assert record == count_layout(values.shape, "uint16", 2, before, transpose=True).to_json()
    for array_path in ("RNA/counts", "RNA/countsT"):
        for _, data in _chunks(out, array_path):
            assert frame_index(data) is None and open_chunk(data, verify=True).n_blocks > 1
    assert cv.counts_fingerprint(out) == cv.counts_fingerprint(framed)
    reader = cv.VirtualArrayReader(out)
    np.testing.assert_array_equal(
        np.asarray(reader.read(np.array([5, 2_000]), None)), values[[5, 2_000]]
    )
    # a portable store is copied as it is
    again = tmp_path / "again.zarr"
    cv.repack(out, again)
    for array_path in ("RNA/counts", "RNA/countsT"):
        assert _chunks(again, array_path) == _chunks(out, array_path)


@pytest.mark.parametrize("layout", ["portable", "single frames"])
def test_random_cells_through_a_store_make_at_most_16_range_requests_per_shard(
    tmp_path: Path, layout: str
) -> None:
    # one shard of 1,000 chunks of 2 rows (or 6 chunks of 349 rows); 300
    # random cells touch ~260 (or all) of them
    values = _values(2_000, 3_000, seed=23)
    path = tmp_path / "s.zarr"
    if layout == "portable":
        cv.write_counts(path, sp.csr_array(values))
        chunks = (349, 3_000)
    else:
        with single_frame_writes():
            cv.write_counts(path, sp.csr_array(values), layout=("64M", "256K"))
        chunks = (2, 3_000)
    assert zarr.open_array(path, path="RNA/counts", mode="r").chunks == chunks
    counters = ReadCounters()
    store = CountingStore(_Wrapped(LocalStore(path, read_only=True)), counters)
    reader = cv.VirtualArrayReader(store)
    cells = np.sort(np.random.default_rng(5).choice(2_000, 300, replace=False))
    reader.read(cells[:1], None)  # the shard index, and one chunk
    counters.reset()
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    stats = counters.snapshot()
    assert 1 <= stats.requests <= 16
    shard = (path / "RNA/counts/c/0/0").stat().st_size
    if layout == "portable":  # every chunk touched: the whole shard in one request
        assert stats.requests == 1 and stats.bytes_read == shard
    else:  # fewer bytes than the whole shard (what a read touching most chunks fetches)
        assert stats.bytes_read < shard


def test_read_ranges_kernel(tmp_path: Path) -> None:
    kernels = pytest.importorskip("cytearc_vfs.encoding._kernels")
    if not hasattr(kernels, "read_ranges"):
        pytest.skip("no pread on this platform")
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 4)
    i64 = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
    out = np.zeros(40, dtype=np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        # 10:20 and 20:25 follow each other (one pread); then 1000:1010
        assert kernels.read_ranges(fd, i64([10, 20, 1000]), i64([10, 5, 10]), out) == 25
        expected = [*range(10, 25), *[(1000 + k) % 256 for k in range(10)]]
        assert out[:25].tolist() == expected
        with pytest.raises(EOFError, match="ends before byte 1030"):
            kernels.read_ranges(fd, i64([1020]), i64([10]), out)
        with pytest.raises(ValueError, match="do not fit"):
            kernels.read_ranges(fd, i64([0]), i64([41]), out)
        with pytest.raises(ValueError, match="negative"):
            kernels.read_ranges(fd, i64([-1]), i64([1]), out)
        with pytest.raises(ValueError, match="one length"):
            kernels.read_ranges(fd, i64([0, 1]), i64([1]), out)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        kernels.read_ranges(fd, i64([0]), i64([1]), out)  # a closed descriptor


FIXTURE = Path(__file__).parent / "fixtures" / "row_framed_before_issue14.zarr"
"""A store written by ``write_counts`` before issue 14 (row frames), checked in as written:
90 x 700 uint16, ``layout=("64K", "16K")``; its values in the ``.npz`` beside it."""


def _fixture_values() -> np.ndarray:
    return np.asarray(sp.load_npz(FIXTURE.with_suffix(".npz")).toarray())


def test_a_store_written_before_issue_14_opens_and_reads_exactly(tmp_path: Path) -> None:
    values = _fixture_values()
    copy = tmp_path / "old.zarr"
    shutil.copytree(FIXTURE, copy)  # opening never writes, but reads need no shared files
    cv.open_store(copy)
    framed = [data for _, data in _chunks(copy, "RNA/counts") if frame_index(data) is not None]
    assert framed  # it is row-framed
    reader = cv.VirtualArrayReader(copy)
    cells = np.array([89, 0, 45, 31, 12])
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), values[cells])
    np.testing.assert_array_equal(np.asarray(reader.read(None, [699, 3])), values[:, [699, 3]])
    np.testing.assert_array_equal(zarr.open_array(copy, path="RNA/countsT", mode="r")[:], values.T)
    # row_framed_writes writes exactly what write_counts wrote then
    again = tmp_path / "again.zarr"
    with row_framed_writes():
        cv.write_counts(
            again,
            sp.csr_array(values),
            cells=[f"cell{i}" for i in range(90)],
            features=[f"gene{j}" for j in range(700)],
            layout=("64K", "16K"),
        )
    for array_path in ("RNA/counts", "RNA/countsT"):
        assert _chunks(again, array_path) == _chunks(copy, array_path)
    assert cv.dataset_fingerprint(again) == cv.dataset_fingerprint(copy)
    # and a composite of it with a portable store reads exactly
    portable = tmp_path / "new.zarr"
    cv.write_counts(
        portable,
        sp.csr_array(values[::-1]),
        cells=[f"new{i}" for i in range(90)],
        features=[f"gene{j}" for j in range(700)],
    )
    composite = tmp_path / "c.zarr"
    cv.create_composite(composite, {"old": copy, "new": portable})
    expected = np.vstack([values, values[::-1]])
    reader = cv.VirtualArrayReader(composite)
    cells = np.array([5, 170, 89, 90, 100])
    np.testing.assert_array_equal(np.asarray(reader.read(cells, None)), expected[cells])
