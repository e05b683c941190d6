"""The chunk check of a write from a store that cannot list asks each chunk with
``exists``: at most :data:`~cytearc_vfs.read.prefetch.MAX_IN_FLIGHT` at once.

All of them were started together, one request per chunk: an AnnData on S3
read with credentials that may not list (``s3:ListBucket``) and 100,000
chunks sent 100,000 HEAD requests at once, where every other concurrent read
of the package keeps a few dozen in flight so as not to be throttled.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anndata as ad
import numpy as np
import scipy.sparse as sp
import zarr
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.read.prefetch import MAX_IN_FLIGHT


class _CountedUnlisted(WrapperStore[LocalStore]):
    """A real local store that cannot list (``supports_listing`` false), counting the
    ``exists`` requests in flight at once."""

    def __init__(self, store: LocalStore) -> None:
        super().__init__(store)
        self.in_flight = 0
        self.most = 0
        self.asked = 0

    @property
    def supports_listing(self) -> bool:
        return False

    async def exists(self, key: str) -> bool:
        self.in_flight += 1
        self.asked += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.001)  # a round trip: the others start meanwhile
            return await super().exists(key)
        finally:
            self.in_flight -= 1


def _small_chunks(path: Path, chunk: int) -> None:
    """X's indices and data stored again in chunks of ``chunk`` entries."""
    group = zarr.open_group(path, mode="r+")
    for name in ("indices", "data"):
        values = group[f"X/{name}"][:]
        del group[f"X/{name}"]
        group.create_array(f"X/{name}", data=values, chunks=(chunk,))


def test_chunks_are_asked_a_bounded_number_at_a_time(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    matrix = sp.random(300, 40, density=0.2, format="csr", dtype=np.float32, random_state=rng)
    matrix.data = np.ceil(matrix.data * 10)
    source = tmp_path / "a.zarr"
    ad.AnnData(X=matrix).write_zarr(source)
    _small_chunks(source, 8)  # 2,400 entries: 300 chunks in each of two arrays
    store = _CountedUnlisted(LocalStore(source, read_only=True))
    info = cv.write_counts(tmp_path / "out.zarr", store)
    assert info.not_imported is None
    assert store.asked >= 600  # every chunk was asked
    assert store.most <= MAX_IN_FLIGHT, store.most
    counts = zarr.open_array(cv.open_store(tmp_path / "out.zarr"), path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], matrix.toarray())
