"""Composites of many local sources: what an open costs per source, counted, and still fail-closed."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import realistic_counts
from zarr.core.array import AsyncArray
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.format.gathering import gather_bounded
from cytearc_vfs.format.paths import AssayPaths, join
from cytearc_vfs.read import prefetch
from cytearc_vfs.read.prefetch import LocalReaders, PrefetchedStore, assay_documents
from cytearc_vfs.read.shard_reader import ShardedReader

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


class ParseCounts:
    """Counts, per source directory, what an open parses and builds from its
    documents: each document read from the prefetched view (and then parsed as
    JSON), each count array document parsed into zarr's metadata, and each zarr
    array and shard reader built over ``counts`` or ``countsT``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, roots: list[Path]) -> None:
        self.documents: Counter[tuple[str, str]] = Counter()
        self.metadata: Counter[tuple[str, tuple[int, ...]]] = Counter()
        self.arrays: Counter[tuple[str, str]] = Counter()
        self.readers: Counter[tuple[str, str]] = Counter()
        self.roots = {str(root.resolve()) for root in roots}
        held, from_dict = PrefetchedStore.held, ArrayV3Metadata.from_dict.__func__
        array_init, reader_init = AsyncArray.__init__, ShardedReader.__init__

        def root_of(store: Any) -> str | None:
            while hasattr(store, "wrapped") and not isinstance(store, LocalStore):
                store = store.wrapped
            root = str(Path(store.root).resolve()) if isinstance(store, LocalStore) else None
            return root if root in self.roots else None

        def counted_held(store: PrefetchedStore, key: str) -> tuple[bool, bytes | None]:
            known, data = held(store, key)
            root = root_of(store)
            if root is not None and data is not None:
                self.documents[root, key] += 1
            return known, data

        def counted_from_dict(cls: Any, document: dict[str, Any], **kwargs: Any) -> Any:
            attributes = document.get("attributes") or {}
            if "content_fingerprint" in attributes:  # a count array's document
                self.metadata[attributes["content_fingerprint"], tuple(document["shape"])] += 1
            return from_dict(cls, document, **kwargs)

        def counted_array(array: Any, metadata: Any, store_path: Any, *args: Any) -> None:
            root = root_of(store_path.store)
            if root is not None:
                self.arrays[root, store_path.path] += 1
            array_init(array, metadata, store_path, *args)

        def counted_reader(reader: Any, store: Any, path: str, *args: Any, **kwargs: Any) -> None:
            root = root_of(store)
            if root is not None:
                self.readers[root, path] += 1
            reader_init(reader, store, path, *args, **kwargs)

        monkeypatch.setattr(PrefetchedStore, "held", counted_held)
        monkeypatch.setattr(ArrayV3Metadata, "from_dict", classmethod(counted_from_dict))
        monkeypatch.setattr(AsyncArray, "__init__", counted_array)
        monkeypatch.setattr(ShardedReader, "__init__", counted_reader)


def test_an_open_parses_each_source_document_once_and_builds_no_array(
    atlas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per source, an open parses each document it verifies once, and each count
    array's document once into zarr's metadata; it builds no zarr array and no
    shard reader over the counts (a read builds those it uses, once). Before, the
    assay group's document was parsed 3 times and the root's twice, and each of
    ``counts`` and ``countsT`` was built as a zarr array 3 times (verification,
    binding, the composite's chunk reader) and as a shard reader twice."""
    roots = [atlas / f"s{i}.zarr" for i in range(N_SOURCES)]
    counts = ParseCounts(monkeypatch, roots)
    store = cv.open_store(atlas / "atlas.zarr")
    present = [key for key in assay_documents(AssayPaths("RNA")) if "state" not in key]
    for root in counts.roots:
        parsed = {key: n for (where, key), n in counts.documents.items() if where == root}
        assert set(parsed.values()) == {1}, (root, parsed)
        assert {"zarr.json", "RNA/zarr.json", "RNA/counts/zarr.json"} <= set(parsed) <= set(present)
    # counts (20 x 12) and countsT (12 x 20) of every source, once each
    assert len(counts.metadata) == 2 * N_SOURCES
    assert set(counts.metadata.values()) == {1}
    assert not counts.arrays
    assert not counts.readers
    # a read builds the shard readers it uses (one per array read), still no zarr array
    reader = cv.VirtualArrayReader(store)
    assert reader.read().shape == (20 * N_SOURCES, 15)
    reader.read(features=[0])
    assert not counts.arrays
    assert set(counts.readers.values()) == {1}
    assert {root for root, _ in counts.readers} == counts.roots
    assert len(counts.metadata) == 2 * N_SOURCES and set(counts.metadata.values()) == {1}


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (
            lambda doc: doc.update(shape=[19, 12]),
            cv.RecordShapeError,
            r"counts does not agree with its .* record \(shape: record \(20, 12\) but array",
        ),
        (
            lambda doc: doc.update(fill_value=1),
            cv.RecordShapeError,
            "fill",
        ),
        (
            lambda doc: doc["attributes"].update(content_fingerprint="sha256:" + "0" * 64),
            cv.IdentityMismatchError,
            r"s1.zarr: assay 'RNA': countsT is bound to content .* but counts hold sha256:0{64}",
        ),
    ],
    ids=["shape", "fill value", "content fingerprint"],
)
def test_a_source_whose_counts_document_changed_is_refused_from_its_metadata(
    atlas: Path, edit: Any, error: type[Exception], message: str
) -> None:
    """Verification checks each count array on the metadata it parsed (no zarr
    array built): a counts document edited after the composite was made is still
    refused at open, naming what disagrees."""
    path = atlas / "s1.zarr" / "RNA" / "counts" / "zarr.json"
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    with pytest.raises(error, match=message):
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


class InFlight:
    """The most calls of a function running at once, over threads."""

    def __init__(self) -> None:
        self.running = self.most = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.running -= 1


def test_local_sources_are_read_one_at_a_time_unless_their_reads_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Local sources are read one at a time (more readers only contend for the
    interpreter's lock); reads that mostly wait for their files (a network
    filesystem) widen the readers, as an object store's requests overlap.

    Whether a read waited is given here, not timed: on a loaded machine a read
    that computes can look like one that waits (tests assert counts, not time).
    """

    def readers_for(waits: bool) -> tuple[int, int]:
        flight = InFlight()

        def counted(item: int) -> int:
            with flight:
                time.sleep(0.005)  # long enough for readers allowed at once to overlap
            return item

        def told(read: Any, *args: Any) -> tuple[Any, bool]:
            return read(*args), waits

        monkeypatch.setattr(prefetch, "_waited", told)

        async def main() -> int:
            readers = LocalReaders(64)
            items = await asyncio.gather(*(readers.run(counted, i) for i in range(24)))
            assert items == list(range(24))
            return readers.width

        return asyncio.run(main()), flight.most

    assert readers_for(waits=False) == (1, 1)
    width, most = readers_for(waits=True)
    assert width > 1 and most > 1


def test_a_read_that_sleeps_counts_as_waiting() -> None:
    assert prefetch._waited(time.sleep, 0.005) == (None, True)


def test_an_open_of_sources_whose_files_are_slow_reads_them_at_once(
    atlas: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flight, get_sync = InFlight(), LocalStore.get_sync

    def slow(store: LocalStore, key: str, **kwargs: Any) -> Any:
        with flight:
            time.sleep(0.002)
            return get_sync(store, key, **kwargs)

    monkeypatch.setattr(LocalStore, "get_sync", slow)
    store = cv.open_store(atlas / "atlas.zarr")
    assert flight.most > 1
    assert cv.VirtualArrayReader(store).read().shape == (20 * N_SOURCES, 15)
