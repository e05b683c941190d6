"""``read`` and ``ArrayWriter`` on the loopback S3 server: every request counted.

What each costs beside the chunks: ``read`` two metadata ``get``s (the
journal, absent, and ``zarr.json``, which must still be the array object's:
``test_arrays_stale_handles.py``); a writer three when made and one per
flush; a unit written all over one ``PUT``, a partial one a ``GET`` and a
``PUT``.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from loopback_proxy import LoopbackProxy
from s3_server import S3Server

from cytearc_vfs.arrays import ArrayWriter, read
from cytearc_vfs.remote.locations import open_location

pytestmark = pytest.mark.remote


def _keys(seen: list, method: str) -> list[str]:  # type: ignore[type-arg]
    return [s.path.split("/x.zarr/", 1)[-1] for s in seen if s.method == method]


def test_writer_and_read_requests_on_s3(s3_server: S3Server) -> None:
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        bucket = s3_server.new_bucket()
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        store = open_location(f"s3://{bucket}/x.zarr", read_only=False, storage_options=options)
        array = zarr.create_array(
            store, name="a", shape=(10, 6), chunks=(4, 3), dtype="f4", fill_value=np.nan
        )
        array[:] = np.arange(60, dtype="f4").reshape(10, 6)
        proxy.take()
        writer = ArrayWriter(array)
        assert _keys(proxy.take(), "GET") == [
            "a/cytearc.journal.json",
            "a/zarr.json",
            "zarr.json",  # the root: does a CyteArc store's group hold the array
        ]
        writer.write(np.zeros((4, 3)), [range(4, 8), range(3, 6)])  # chunk (1, 1) whole
        writer.write([[-5.0]], [range(0, 1), range(0, 1)])  # one cell of chunk (0, 0)
        writer.write(np.ones((2, 3)), [range(8, 10), range(0, 3)])  # the edge chunk (2, 0) whole
        assert writer.flush() == 3
        seen = proxy.take()
        assert _keys(seen, "GET") == ["a/zarr.json", "a/c/0/0"]  # the check; the partial unit
        assert sorted(_keys(seen, "PUT")) == ["a/c/0/0", "a/c/1/1", "a/c/2/0"]
        assert len(seen) == 5
        got = read(array, [range(0, 1), range(0, 2)], raw=True)
        assert got.tolist() == [[-5.0, 1.0]]
        assert _keys(proxy.take(), "GET") == ["a/cytearc.journal.json", "a/zarr.json", "a/c/0/0"]
    finally:
        proxy.close()
