"""A composite kept in S3 through ``to_dask`` and a lazy ``X``: each task carries
its backing ``obstore`` store, whose pickle lists its options in another order
each time (a Rust hash map). The process's kept reader is found by a key fixed
when the array is made, not by re-pickling each task's copy of the store,
which made every block open (and verify) the composite anew."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.composite import store as composite_store

pytestmark = pytest.mark.remote


def test_blocks_of_a_composite_in_s3_open_it_once_per_process(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("anndata")
    import dask
    from cytearc_vfs_adapters.anndata_output import conversion

    from cytearc_vfs.read import blockwise

    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    counts = realistic_counts(120, 12, density=0.3, seed=1)
    source = f"s3://{bucket}/s.zarr"
    cv.write_counts(source, counts, storage_options=options)
    composite = cv.create_composite(
        f"s3://{bucket}/c.zarr",
        {"s": source},
        storage_options=options,
        source_storage_options={"s": options},
    )
    monkeypatch.setattr(conversion, "BLOCK_FEATURES", 6)  # 2 feature blocks of X
    arrays = {
        "to_dask": composite.reader().to_dask(chunks=(30, 12)),
        "to_anndata": cv.to_anndata(composite).X,
    }
    opens: list[int] = []
    verify = composite_store.verify_composite

    def counted(*args: Any, **kwargs: Any) -> Any:
        opens.append(1)
        return verify(*args, **kwargs)

    monkeypatch.setattr(composite_store, "verify_composite", counted)
    for made_by, lazy in arrays.items():
        # a worker: no reader kept, each task unpickled on its own
        monkeypatch.setattr(blockwise, "_PROCESS_READERS", {})
        monkeypatch.setattr(conversion, "_PROCESS_READERS", {})
        graph = dict(lazy.__dask_graph__())
        tasks = {key: pickle.loads(pickle.dumps(task)) for key, task in graph.items()}
        del opens[:]
        blocks = dask.get(tasks, list(lazy.__dask_keys__()))  # type: ignore[attr-defined]
        assert len(opens) == 1, f"{made_by}: {len(opens)} composite opens in one process"
        got = np.block([[getattr(b, "toarray", lambda b=b: b)() for b in row] for row in blocks])
        np.testing.assert_array_equal(got, counts.toarray())
    composite.close()
