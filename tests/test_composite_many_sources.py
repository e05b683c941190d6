"""Composites of many local sources: what an open costs per source, counted, and still fail-closed."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import realistic_counts
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.format.gathering import gather_bounded
from cytearc_vfs.format.paths import AssayPaths, join
from cytearc_vfs.read.prefetch import assay_documents

N_SOURCES = 6


class SourceCalls:
    """Counts, per source directory, the LocalStore calls made below it: the
    async ``get`` and ``list_dir`` (one trip through zarr's event loop and a
    worker thread each) and ``get_sync`` (a read on the caller's thread)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, roots: list[Path]) -> None:
        self.calls: dict[str, Counter[str]] = {str(root.resolve()): Counter() for root in roots}
        self.keys: dict[str, list[str]] = {str(root.resolve()): [] for root in roots}
        get, list_dir, get_sync = LocalStore.get, LocalStore.list_dir, LocalStore.get_sync

        def count(store: LocalStore, kind: str, key: str) -> None:
            root = str(Path(store.root).resolve())
            if root in self.calls:
                self.calls[root][kind] += 1
                if kind != "list_dir":
                    self.keys[root].append(key)

        async def counted_get(store: LocalStore, key: str, *args: Any, **kwargs: Any) -> Any:
            count(store, "get", key)
            return await get(store, key, *args, **kwargs)

        async def counted_list_dir(store: LocalStore, prefix: str) -> AsyncIterator[str]:
            count(store, "list_dir", prefix)
            async for name in list_dir(store, prefix):
                yield name

        def counted_get_sync(store: LocalStore, key: str, **kwargs: Any) -> Any:
            count(store, "get_sync", key)
            return get_sync(store, key, **kwargs)

        monkeypatch.setattr(LocalStore, "get", counted_get)
        monkeypatch.setattr(LocalStore, "list_dir", counted_list_dir)
        monkeypatch.setattr(LocalStore, "get_sync", counted_get_sync)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("many")
    for index in range(N_SOURCES):
        counts = realistic_counts(20, 12, density=0.2, seed=index)
        cv.write_counts(
            root / f"s{index}.zarr",
            counts,
            cells=[f"s{index}c{j}" for j in range(20)],
            features=[f"g{(index + j) % 15}" for j in range(12)],
        )
    return root


@pytest.fixture
def atlas(written: Path, tmp_path: Path) -> Path:
    """A copy of the sources of the test's own (tests edit them), and a composite
    ``atlas.zarr`` over the copy."""
    shutil.copytree(written, tmp_path, dirs_exist_ok=True)
    cv.create_composite(
        tmp_path / "atlas.zarr", {f"s{i}": tmp_path / f"s{i}.zarr" for i in range(N_SOURCES)}
    ).close()
    return tmp_path


def test_an_open_reads_each_source_documents_once_in_one_call(
    atlas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each source's documents (and the two listings verification asks for) are
    read in one call on a worker thread: no per-document trip through zarr's
    event loop. Before, each of the 13 documents and 2 listings of every source
    was its own ``LocalStore.get`` / ``list_dir`` (15 hand-offs a source)."""
    roots = [atlas / f"s{i}.zarr" for i in range(N_SOURCES)]
    calls = SourceCalls(monkeypatch, roots)
    store = cv.open_store(atlas / "atlas.zarr")
    expected = assay_documents(AssayPaths("RNA"))
    assert join("RNA", "state", "zarr.json") in expected  # absent, asked for once
    for root in roots:
        found = calls.calls[str(root.resolve())]
        assert found == Counter({"get_sync": len(expected)}), (root, found)
        assert sorted(calls.keys[str(root.resolve())]) == sorted(expected)
    # and the open store reads the same values
    assert store.sources[0].info.shape == (20, 12)
    reader = cv.VirtualArrayReader(store)
    assert reader.read().shape == (20 * N_SOURCES, 15)


def test_a_creation_reads_each_source_tables_documents_with_its_other_documents(
    written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creation reads the cell and feature tables next: their listings and column
    documents come from the binding's one call, so only chunks are fetched one
    by one (the tables' columns and the three summaries). Before, each table's
    listing and each column's document was its own call too (6 more a source)."""
    roots = [written / f"s{i}.zarr" for i in range(N_SOURCES)]
    calls = SourceCalls(monkeypatch, roots)
    cv.create_composite(
        tmp_path / "atlas.zarr", {f"s{i}": root for i, root in enumerate(roots)}
    ).close()
    paths = AssayPaths("RNA")
    columns = ["ids", "I", "names"]
    tables = [
        join(table, c, "zarr.json") for table in ("cellData", "RNA/featureData") for c in columns
    ]
    chunks = [
        *(join(table, c, "c", "0") for table in ("cellData", "RNA/featureData") for c in columns),
        *(
            join(paths.summaries, name, "c", "0")
            for name in ("rowSums", "rowPositive", "columnPositive")
        ),
    ]
    for root in roots:
        found = calls.calls[str(root.resolve())]
        documents = set(assay_documents(paths)) | set(tables)
        assert found == Counter({"get_sync": len(documents), "get": len(chunks)}), (root, found)
        assert sorted(calls.keys[str(root.resolve())]) == sorted([*documents, *chunks])


def test_a_source_changed_among_many_is_still_refused(atlas: Path) -> None:
    """The documents read in one call are the ones verified: a source whose counts
    were rewritten with other values fails the open, naming it."""
    cv.write_counts(
        atlas / "s3.zarr",
        realistic_counts(20, 12, density=0.2, seed=99),
        cells=[f"s3c{j}" for j in range(20)],
        features=[f"g{(3 + j) % 15}" for j in range(12)],
        overwrite=True,
    )
    with pytest.raises(cv.IdentityMismatchError, match=r"source 's3' .* fingerprint"):
        cv.open_store(atlas / "atlas.zarr")


def test_a_listing_held_from_the_open_still_refuses_a_retired_state_group(atlas: Path) -> None:
    """Verification's listings (root, assay group) come from the same call as the
    documents: a retired ``state`` group of Zarr v2 in one source is found there."""
    state = atlas / "s2.zarr" / "RNA" / "state"
    state.mkdir()
    (state / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    with pytest.raises(cv.UnsupportedSourceError, match="retired RNA/state group"):
        cv.open_store(atlas / "atlas.zarr")


def test_a_missing_source_among_many_names_it(atlas: Path) -> None:
    shutil.rmtree(atlas / "s4.zarr")
    with pytest.raises(OSError, match=r"source 's4' at .*s4.zarr cannot be read"):
        cv.open_store(atlas / "atlas.zarr")


def test_jobs_of_many_items_run_a_few_at_a_time_in_order() -> None:
    """A creation reads its sources' tables and summaries ``MAX_IN_FLIGHT`` sources
    at a time (gather_bounded): never more jobs running than the limit, every item
    taken once, results in the items' order."""
    running, most, seen = 0, 0, []

    async def job(item: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        seen.append(item)
        await asyncio.sleep(0.001 * (item % 3))
        running -= 1
        return item * 10

    assert asyncio.run(gather_bounded(job, list(range(20)), 4)) == [i * 10 for i in range(20)]
    assert most == 4
    assert sorted(seen) == list(range(20))
    assert asyncio.run(gather_bounded(job, [], 4)) == []


def test_a_failing_job_cancels_the_others_before_it_is_raised() -> None:
    started, finished = [], []

    async def job(item: int) -> int:
        started.append(item)
        if item == 2:
            raise OSError("source 2 cannot be read")
        await asyncio.sleep(0.05)
        finished.append(item)
        return item

    async def main() -> None:
        with pytest.raises(OSError, match="source 2"):
            await gather_bounded(job, list(range(10)), 3)
        # nothing still running once the failure is raised, and no item after it started
        assert not [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]

    asyncio.run(main())
    assert finished == []
    assert sorted(started) == [0, 1, 2]
