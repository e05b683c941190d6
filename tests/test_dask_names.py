"""Each ``to_dask`` array has a name of its own: dask merges graphs by key, so two
arrays sharing a name would compute one's blocks in place of the other's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv


def test_arrays_of_two_readers_made_one_after_the_other_keep_their_own_values(
    tmp_path: Path,
) -> None:
    pytest.importorskip("dask")
    import dask.array as da

    a = realistic_counts(60, 12, density=0.3, seed=1)
    b = realistic_counts(60, 12, density=0.3, seed=2)
    cv.write_counts(tmp_path / "a.zarr", a)
    cv.write_counts(tmp_path / "b.zarr", b)
    # each reader is dropped once its array is made, so the next may reuse its address
    x = cv.VirtualArrayReader(tmp_path / "a.zarr").to_dask(chunks=(30, 12))
    y = cv.VirtualArrayReader(tmp_path / "b.zarr").to_dask(chunks=(30, 12))
    assert x.name != y.name
    np.testing.assert_array_equal(
        da.stack([x, y]).compute(scheduler="sync"), [a.toarray(), b.toarray()]
    )


def test_arrays_of_one_reader_in_other_chunks_do_not_share_blocks(tmp_path: Path) -> None:
    pytest.importorskip("dask")
    import dask.array as da

    a = realistic_counts(60, 12, density=0.3, seed=3)
    cv.write_counts(tmp_path / "a.zarr", a)
    reader = cv.VirtualArrayReader(tmp_path / "a.zarr")
    coarse, fine = reader.to_dask(chunks=(60, 12)), reader.to_dask(chunks=(7, 5))
    assert coarse.name != fine.name
    both = da.concatenate([coarse, fine], axis=1).compute(scheduler="sync")
    np.testing.assert_array_equal(both, np.hstack([a.toarray(), a.toarray()]))
