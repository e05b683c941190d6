"""A mount whose target is in S3, unpickled again and again in one process (a
process pool's tasks), is verified once and then reused, as one with a local
target is (mount.md): its target, an obstore store, pickles its options in
another order each time (a Rust hash map), which made every unpickling miss
the kept mount and open and verify the mount anew."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv

pytestmark = pytest.mark.remote


def test_a_mount_with_an_s3_target_is_verified_once_per_process(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cytearc_vfs.mount import unpickling

    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    counts = realistic_counts(40, 8, density=0.3, seed=1)
    cv.write_counts(f"s3://{bucket}/a.zarr", counts, storage_options=options)
    mount = cv.mount_datastore(
        f"s3://{bucket}/a.zarr",
        f"s3://{bucket}/t.zarr",
        source_storage_options=options,
        storage_options=options,
    )
    monkeypatch.setattr(unpickling, "_kept", type(unpickling._kept)())
    opens: list[int] = []
    verify = unpickling._verified

    def counted(*args: Any) -> Any:
        opens.append(1)
        return verify(*args)

    monkeypatch.setattr(unpickling, "_verified", counted)
    blob = pickle.dumps(mount)
    for _ in range(3):  # as each task of a pool gets it: pickled anew each time
        again = pickle.loads(pickle.dumps(pickle.loads(blob)))
        np.testing.assert_array_equal(again.reader().read(), counts.toarray())
    assert len(opens) == 1, f"{len(opens)} verified opens for one mount in one process"
    assert len(unpickling._kept) == 1
    mount.close()
