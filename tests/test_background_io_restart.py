"""A process goes on after an interrupted command: its next reads work.

``main([...])`` may run in a notebook or a test. An interrupted command stops
zarr's event loop (:func:`cytearc_vfs.cli.interrupts.stop_background_io`), and
zarr makes a new one on its next call; fsspec's asynchronous clients (gcsfs,
s3fs) cached before it stayed bound to the closed loop, so every later read of
a ``gs://`` or fsspec ``s3://`` store failed with "Event loop is closed".
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from cloud_servers import BACKEND_FIXTURES, CloudBackend
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli.interrupts import stop_background_io

pytestmark = pytest.mark.remote


def _read_counts(url: str, options: dict[str, object]) -> np.ndarray:
    store = cv.open_store(url, storage_options=options)
    return np.asarray(zarr.open_array(store, path="RNA/counts", mode="r")[:])


def _fsspec_options(backend: CloudBackend) -> dict[str, object]:
    options = backend.storage_options()
    if backend.name == "gs":
        return options  # gcsfs already
    return {  # s3fs's names for the S3 server's options
        "backend": "fsspec",
        "key": options["access_key_id"],
        "secret": options["secret_access_key"],
        "endpoint_url": options["endpoint"],
    }


@pytest.mark.parametrize("name", ["gs", "s3"])
def test_reads_through_fsspec_go_on_after_the_background_io_stopped(
    name: str, request: pytest.FixtureRequest
) -> None:
    backend: CloudBackend = request.getfixturevalue(BACKEND_FIXTURES[name])
    counts = realistic_counts(30, 12, seed=3).toarray()
    url = f"{backend.new_root()[0]}/a.zarr"
    options = _fsspec_options(backend)
    cv.write_counts(url, counts, features=[f"g{i}" for i in range(12)], storage_options=options)
    np.testing.assert_array_equal(_read_counts(url, options), counts)

    stop_background_io()

    np.testing.assert_array_equal(_read_counts(url, options), counts)
