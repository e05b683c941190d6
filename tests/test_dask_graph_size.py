"""The dask graph of a composite of many sources carries the composite's location
and options, not its data: a task's pickle does not grow with the sources, and
the graph holds no array."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv

SOURCES = 40


def test_tasks_of_a_composite_of_many_sources_stay_small(tmp_path: Path) -> None:
    pytest.importorskip("anndata")
    features = [f"g{i}" for i in range(8)]
    sources = {}
    for index in range(SOURCES):
        sources[f"s{index}"] = tmp_path / f"s{index}.zarr"
        counts = realistic_counts(25, 8, density=0.3, seed=index)
        cv.write_counts(sources[f"s{index}"], counts, features=features)
    composite = cv.create_composite(tmp_path / "c.zarr", sources)
    for lazy in (composite.reader().to_dask(chunks=(100, 8)), cv.to_anndata(composite).X):
        graph = dict(lazy.__dask_graph__())
        sizes = [len(pickle.dumps(task)) for task in graph.values()]
        assert max(sizes) < 2_000, f"a task pickles to {max(sizes)} bytes"
        # the recipe is shared: the whole graph is about one recipe and a line per block
        assert len(pickle.dumps(graph)) < 2_000 + 200 * len(graph)
        flat = pickle.dumps(graph)
        for array_type in (b"_reconstruct", b"ndarray", b"scipy", b"pandas"):  # a dtype may travel
            assert array_type not in flat, f"an array travels in the graph ({array_type!r})"
    np.testing.assert_array_equal(
        composite.reader().to_dask(chunks=(100, 8)).compute(scheduler="sync"),
        composite.reader().read(),
    )
    composite.close()
