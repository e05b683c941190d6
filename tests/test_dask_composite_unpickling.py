"""A composite's dask blocks open the composite in the task that reads, once per
process: not each time a task is unpickled (dask unpickles a task's arguments
per task, and the scheduler unpickles the whole graph), where an open verifies
every source, and where an open's refusal reached the client as the
scheduler's "Error during deserialization of the task graph"."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.composite import store as composite_store
from cytearc_vfs.errors import IdentityMismatchError

FEATURES = [f"g{i}" for i in range(12)]


@pytest.fixture
def composite(tmp_path: Path) -> Iterator[tuple[Any, np.ndarray]]:
    parts = [realistic_counts(40, 12, density=0.3, seed=seed) for seed in range(3)]
    sources = {}
    for index, part in enumerate(parts):
        sources[f"s{index}"] = tmp_path / f"s{index}.zarr"
        cv.write_counts(sources[f"s{index}"], part, features=FEATURES)
    opened = cv.create_composite(tmp_path / "c.zarr", sources)
    yield opened, np.vstack([part.toarray() for part in parts])
    opened.close()


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The composite opens (verifications) made from now on."""
    from cytearc_vfs_adapters.anndata_output import conversion

    from cytearc_vfs.read import blockwise

    monkeypatch.setattr(blockwise, "_PROCESS_READERS", {})
    monkeypatch.setattr(conversion, "_PROCESS_READERS", {})
    made: list[str] = []
    verify = composite_store.verify_composite

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(str(args[1]))
        return verify(*args, **kwargs)

    monkeypatch.setattr(composite_store, "verify_composite", counted)
    return made


def _as_a_new_process() -> None:
    """Forget the readers this process keeps (the fixture's own dicts), as a worker has none."""
    from cytearc_vfs_adapters.anndata_output import conversion

    from cytearc_vfs.read import blockwise

    blockwise._PROCESS_READERS.clear()
    conversion._PROCESS_READERS.clear()


def _run_as_distributed(lazy: Any) -> Any:
    """Compute ``lazy`` as dask.distributed does: the graph unpickled (on the
    scheduler), then each task unpickled on its own and run."""
    import dask

    graph = pickle.loads(pickle.dumps(dict(lazy.__dask_graph__())))
    tasks = {key: pickle.loads(pickle.dumps(task)) for key, task in graph.items()}
    results = dask.get(tasks, list(lazy.__dask_keys__()))  # type: ignore[attr-defined]
    return results


@pytest.mark.parametrize("made_by", ["to_dask", "to_anndata"])
def test_unpickling_blocks_opens_nothing_and_a_process_opens_the_composite_once(
    composite: tuple[Any, np.ndarray], opens: list[str], made_by: str
) -> None:
    pytest.importorskip("dask")
    opened, expected = composite
    if made_by == "to_dask":
        lazy = opened.reader().to_dask(chunks=(10, 6))  # 24 blocks
    else:
        pytest.importorskip("anndata")
        lazy = cv.to_anndata(opened).X.rechunk((10, 6))
    del opens[:]
    _as_a_new_process()
    graph = pickle.loads(pickle.dumps(dict(lazy.__dask_graph__())))
    for task in graph.values():
        pickle.loads(pickle.dumps(task))
    assert opens == [], "unpickling the graph or a task opened the composite"
    blocks = _run_as_distributed(lazy)
    assert len(opens) == 1, f"{len(opens)} opens for one process"
    got = np.block(
        [[np.asarray(b.toarray() if hasattr(b, "toarray") else b) for b in row] for row in blocks]
    )
    np.testing.assert_array_equal(got, expected)


def test_a_source_replaced_before_compute_is_refused_by_the_task(
    composite: tuple[Any, np.ndarray], opens: list[str], tmp_path: Path
) -> None:
    dask = pytest.importorskip("dask")
    opened, _ = composite
    lazy = opened.reader().to_dask(chunks=(40, 12))
    shutil.rmtree(tmp_path / "s1.zarr")
    cv.write_counts(tmp_path / "s1.zarr", realistic_counts(40, 12, seed=9), features=FEATURES)
    _as_a_new_process()
    graph = pickle.loads(pickle.dumps(dict(lazy.__dask_graph__())))  # the scheduler's part
    with pytest.raises(IdentityMismatchError, match="s1"):
        dask.get(graph, list(lazy.__dask_keys__()))  # type: ignore[attr-defined]


@pytest.mark.parametrize("made_by", ["to_dask", "to_anndata"])
def test_blocks_computed_where_the_array_was_made_open_nothing(
    composite: tuple[Any, np.ndarray], opens: list[str], made_by: str
) -> None:
    """The threaded scheduler runs blocks in this process: they read through the
    composite already open here, with its cache, not a second open."""
    pytest.importorskip("dask")
    opened, expected = composite
    if made_by == "to_dask":
        got = opened.reader().to_dask(chunks=(10, 6)).compute(scheduler="threads")
    else:
        pytest.importorskip("anndata")
        got = cv.to_anndata(opened).X.compute(scheduler="threads").toarray()
    np.testing.assert_array_equal(got, expected)
    assert opens == []


def test_a_worker_with_threads_opens_a_lazy_x_composite_once(
    composite: tuple[Any, np.ndarray], opens: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("anndata")
    from cytearc_vfs_adapters.anndata_output import conversion

    opened, expected = composite
    monkeypatch.setattr(conversion, "BLOCK_FEATURES", 4)  # blocks of 4 features...
    itemsize = opened.reader().dtype.itemsize
    monkeypatch.setattr(conversion, "BLOCK_BYTES", 4 * 10 * itemsize)  # ...of 10 cells
    x = cv.to_anndata(opened).X
    assert x.numblocks == (12, 3)
    travelled = pickle.loads(pickle.dumps(x))  # as a worker gets it: no reader kept
    _as_a_new_process()
    del opens[:]
    got = travelled.compute(scheduler="threads", num_workers=4)
    np.testing.assert_array_equal(got.toarray(), expected)
    assert len(opens) == 1


def test_a_worker_with_threads_opens_a_to_dask_composite_once(
    composite: tuple[Any, np.ndarray], opens: list[str]
) -> None:
    opened, expected = composite
    lazy = opened.reader().to_dask(chunks=(10, 4))
    _as_a_new_process()
    del opens[:]
    np.testing.assert_array_equal(lazy.compute(scheduler="threads", num_workers=4), expected)
    assert len(opens) == 1
