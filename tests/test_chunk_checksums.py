"""A flipped byte in a stored count chunk is an error in every read path, never a wrong value.

Count chunks are zstd frames with zstd's content checksum (XXH64 of each
frame's rows), and the shard index carries Zarr's crc32c: whatever a flip
hits, zarr's decoder and the gather reader either fail or read the original.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import realistic_counts

import cytearc_vfs as cv

FLIPS = 60


def _read_everything(location: Path) -> list[np.ndarray | Exception]:
    outcomes: list[np.ndarray | Exception] = []
    for read in (
        lambda: cv.VirtualArrayReader(location).read(),
        lambda: zarr.open_array(location, path="RNA/counts", mode="r")[:],
        lambda: zarr.open_array(location, path="RNA/countsT", mode="r")[:].T,
    ):
        try:
            outcomes.append(np.asarray(read()))
        except Exception as exc:  # any error is a correct answer to corruption
            outcomes.append(exc)
    return outcomes


def test_frames_carry_checksums(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "s.zarr", realistic_counts(200, 300, seed=2))
    codecs = zarr.open_array(tmp_path / "s.zarr", path="RNA/counts", mode="r").metadata.to_dict()
    assert '"checksum": true' in str(codecs).replace("'", '"').replace("True", "true")


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
