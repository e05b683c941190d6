"""A flipped byte in a stored count chunk is an error in every read path, never a wrong value.

Count chunks are Blosc containers of zstd blocks, each frame with zstd's
content checksum (XXH64 of its rows), and the shard index carries Zarr's
crc32c: whatever a flip hits (a Blosc header, a block table, a frame, the
index), zarr's decoder and the gather reader, reading whole chunks or single
rows' blocks, either fail or read the original.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
import zstandard
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.encoding.blosc_blocks import open_chunk

FLIPS = 60


def _by_halves(location: Path) -> np.ndarray:
    """Every cell, read as the even and then the odd cells: blocks of single rows."""
    reader = cv.VirtualArrayReader(location)
    n_cells = reader.shape[0]
    even = np.asarray(reader.read(np.arange(0, n_cells, 2)))
    odd = np.asarray(reader.read(np.arange(1, n_cells, 2)))
    whole = np.empty((n_cells, even.shape[1]), dtype=even.dtype)
    whole[0::2], whole[1::2] = even, odd
    return whole


def _read_everything(location: Path) -> list[np.ndarray | Exception]:
    outcomes: list[np.ndarray | Exception] = []
    for read in (
        lambda: cv.VirtualArrayReader(location).read(),
        lambda: _by_halves(location),
        lambda: zarr.open_array(location, path="RNA/counts", mode="r")[:],
        lambda: zarr.open_array(location, path="RNA/countsT", mode="r")[:].T,
    ):
        try:
            outcomes.append(np.asarray(read()))
        except Exception as exc:  # any error is a correct answer to corruption
            outcomes.append(exc)
    return outcomes


def test_every_block_frame_carries_its_checksum(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(2_000, 300, seed=2), layout=("1M", "64K"))
    array = zarr.open_array(tmp_path / "s.zarr", path="RNA/counts", mode="r")
    assert array.shards is not None
    per_shard = array.shards[0] // array.chunks[0]
    frames = 0
    for shard in (tmp_path / "s.zarr" / "RNA" / "counts" / "c").rglob("*"):
        if not shard.is_file():
            continue
        raw = shard.read_bytes()
        index = np.frombuffer(raw[-(16 * per_shard + 4) : -4], dtype="<u8").reshape(-1, 2)
        for offset, size in index[index[:, 0] != 2**64 - 1].tolist():
            chunk = open_chunk(raw[offset : offset + size], verify=True)
            for block in range(chunk.n_blocks):
                frame, compressed = chunk.frame(block)
                assert compressed and zstandard.get_frame_parameters(frame).has_checksum
                frames += 1
    assert frames > 10


@pytest.mark.parametrize("array", ["counts", "countsT"])
def test_byte_flips_never_read_as_wrong_values(tmp_path: Path, array: str) -> None:
    matrix = realistic_counts(600, 400, seed=5, density=0.1)
    original = tmp_path / "original.zarr"
    cv.write_counts(original, matrix)
    expected = matrix.toarray()
    shards = sorted(p for p in (original / "RNA" / array / "c").rglob("*") if p.is_file())
    rng = np.random.default_rng(17)
    silent = errors = unchanged = 0
    for trial in range(FLIPS):
        damaged = tmp_path / f"flip{trial}.zarr"
        shutil.copytree(original, damaged)
        shard = damaged / shards[trial % len(shards)].relative_to(original)
        data = bytearray(shard.read_bytes())
        position = int(rng.integers(0, len(data)))
        data[position] ^= 1 << int(rng.integers(0, 8))
        shard.write_bytes(bytes(data))
        for outcome in _read_everything(damaged):
            if isinstance(outcome, Exception):
                errors += 1
            elif np.array_equal(outcome, expected):
                unchanged += 1
            else:
                silent += 1
        shutil.rmtree(damaged)
    print(
        f"{array}: {FLIPS} flips x 3 read paths: {errors} errors, {unchanged} original values, {silent} silently wrong"
    )
    assert silent == 0
    assert errors > 0
