"""zarr's StoreTests, through the conformance harness, for every store of the package.

Each store is built the way zarr's suite builds stores, ``cls(**kwargs)`` and
``await cls.open(**kwargs, read_only=...)``. The package opens its stores
from a location instead (``from_location``, ``open_store``), so the classes
named ``...At`` below are the real stores with only that constructor mapped:
every method under test is the package's own.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import realistic_counts
from cytearc_vfs_conformance.store_tests import (
    CyteArcStoreTests,
    OverlayStoreTests,
    ReadOnlyViewTests,
)
from s3_server import S3Server
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.format.paths import AssayPaths
from cytearc_vfs.format.source_store import verify_assay
from cytearc_vfs.read.prefetch import PrefetchedStore
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters
from cytearc_vfs.read.remembered_reads import RememberedReads
from cytearc_vfs.remote.cached_store import CachedSourceStore
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.remote.pinned_store import PinnedSourceStore
from cytearc_vfs.remote.source_cache import SourceCache
from cytearc_vfs.write.stopping import FinishingStore
from cytearc_vfs.write.write_behind import WriteBehindStore

PROTO = default_buffer_prototype()
PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}


def _off_loop[T](build: Any, *args: Any) -> Any:
    # The package's opens are zarr sync calls, refused on a running event loop
    # (zarr's suite builds stores inside async fixtures): open on a thread.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(build, *args).result()


async def _local_get(root: Path, key: str) -> Buffer:
    value = await LocalStore(root).get(key, prototype=PROTO)
    assert value is not None, key
    return value


# ------------------------------------------------------------------ composite


class CompositeAt(cv.CompositeStore):
    """``CompositeStore.from_location(root)``, callable as ``cls(root, read_only)``."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        mode = "r" if read_only else "r+"
        opened = _off_loop(lambda: cv.CompositeStore.from_location(root, mode=mode))
        # the verified state of a real open; only the way it is called differs
        vars(self).update(vars(opened))
        self.root = root

    @classmethod
    async def open(cls, root: Path, read_only: bool = False) -> CompositeAt:  # type: ignore[override]
        store = cls(root, read_only)
        await store._open()
        return store


@pytest.fixture(scope="module")
def built_composite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("composite")
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(base / f"{name}.zarr", realistic_counts(40, 12, density=0.2, seed=seed))
    cv.create_composite(base / "comp.zarr", {"a": base / "a.zarr", "b": base / "b.zarr"})
    return base / "comp.zarr"


class TestCompositeStoreContract(OverlayStoreTests[CompositeAt, cpu.Buffer]):
    """A real composite of two real sources; each test writes to its own copy."""

    store_cls = CompositeAt
    buffer_cls = cpu.Buffer

    async def set(self, store: CompositeAt, key: str, value: Buffer) -> None:
        await LocalStore(store.root).set(key, value)

    async def get(self, store: CompositeAt, key: str) -> Buffer:
        return await _local_get(store.root, key)

    @pytest.fixture
    def store_kwargs(self, built_composite: Path, tmp_path: Path) -> dict[str, Any]:
        shutil.copytree(built_composite, tmp_path / "comp.zarr")
        return {"root": tmp_path / "comp.zarr"}

    def test_store_repr(self, store: CompositeAt) -> None:
        assert "CompositeStore" in repr(store)

    def test_store_supports_writes(self, store: CompositeAt) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: CompositeAt) -> None:
        assert store.supports_listing

    async def test_protected_areas_refused(self, store: CompositeAt) -> None:
        """Beyond the root record: mappings, summaries and the computed arrays
        refuse writes and deletes, directory deletes included."""
        for key in ("_composite/rowSources/zarr.json", "RNA/countSummaries/rowSums/c/0"):
            with pytest.raises(PermissionError):
                await store.set(key, self.buffer_cls.from_bytes(b"x"))
        for key in ("RNA/counts/zarr.json", "RNA/countsT/c/0/0"):
            with pytest.raises(PermissionError):
                await store.delete(key)
        for prefix in ("_composite", "RNA", "RNA/counts/"):
            with pytest.raises(PermissionError):
                await store.delete_dir(prefix)
        assert await store.exists("RNA/counts/zarr.json")


# ---------------------------------------------------------------------- mount


@pytest.fixture(scope="module")
def built_mount(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("mount")
    cv.write_counts(base / "src.zarr", realistic_counts(50, 14, density=0.2, seed=3))
    source = cv.open_store(base / "src.zarr", mode="r+")
    with cv.publish_artifact(source, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("data", np.arange(100, dtype=np.float64).reshape(50, 2))
    cv.mount_datastore(base / "src.zarr", base / "tgt.zarr")
    return base / "src.zarr", base / "tgt.zarr"


class TestMountStoreOverlayContract(OverlayStoreTests[cv.MountStore, cpu.Buffer]):
    """A real mounted target (its record, tables) over a source holding an
    artifact that shows through; tests/test_mount_store.py runs the suite on
    an empty target."""

    store_cls = cv.MountStore
    buffer_cls = cpu.Buffer

    async def set(self, store: cv.MountStore, key: str, value: Buffer) -> None:
        await LocalStore(store.target.root).set(key, value)  # type: ignore[attr-defined]

    async def get(self, store: cv.MountStore, key: str) -> Buffer:
        return await _local_get(store.target.root, key)  # type: ignore[attr-defined]

    @pytest.fixture
    def store_kwargs(self, built_mount: tuple[Path, Path], tmp_path: Path) -> dict[str, Any]:
        source_path, target_path = built_mount
        shutil.copytree(target_path, tmp_path / "tgt.zarr")
        source = LocalStore(source_path, read_only=True)
        mount = cv.MountStore.from_location(target_path)
        return {
            "target": LocalStore(tmp_path / "tgt.zarr"),
            "source": source,
            "record": mount.record,
            "infos": {"RNA": verify_assay(source, AssayPaths("RNA"), where="src")},
        }

    def test_store_repr(self, store: cv.MountStore) -> None:
        assert "MountStore" in repr(store)

    def test_store_supports_writes(self, store: cv.MountStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: cv.MountStore) -> None:
        assert store.supports_listing

    async def test_source_artifact_refused(self, store: cv.MountStore) -> None:
        """Writing or deleting inside the source's artifact group raises
        PermissionError; the group still lists through the mount."""
        ids = [n async for n in store.list_dir("RNA/artifacts/pca") if n != "zarr.json"]
        assert len(ids) == 1
        key = f"RNA/artifacts/pca/{ids[0]}/data/zarr.json"
        with pytest.raises(PermissionError):
            await store.set(key, self.buffer_cls.from_bytes(b"{}"))
        with pytest.raises(PermissionError):
            await store.delete(key)
        assert await store.exists(key)


# ------------------------------------------------------- read-only source views


class _OpensAtRoot:
    """zarr's ``await cls.open(**kwargs, read_only=...)`` for a view built as ``cls(root, read_only)``."""

    @classmethod
    async def open(cls, root: Path, read_only: bool = True) -> Any:
        store: Any = cls(root, read_only)  # type: ignore[call-arg]
        await store._open()
        return store


class CountedAt(_OpensAtRoot, CountingStore):  # type: ignore[misc]
    """``CountingStore`` over a local directory, callable as zarr's suite calls it."""

    def __init__(self, root: Path, read_only: bool = True) -> None:
        super().__init__(LocalStore(root, read_only=read_only), ReadCounters())
        self.root = root

    def _with_store(self, store: Store) -> CountedAt:
        clone = object.__new__(type(self))
        CountingStore.__init__(clone, store, self.counters)
        clone.root = self.root
        return clone


class PrefetchedAt(_OpensAtRoot, PrefetchedStore):  # type: ignore[misc]
    """``PrefetchedStore`` over a local directory: the documents of a source's
    open (absent here) are fetched at construction, as ``prefetched`` does;
    zarr's suite never writes those keys."""

    DOCUMENTS = (".zgroup", ".zattrs", ".zmetadata", "RNA/zarr.json")

    def __init__(self, root: Path, read_only: bool = True) -> None:
        inner = LocalStore(root, read_only=read_only)
        super().__init__(inner, dict.fromkeys(self.DOCUMENTS))
        self.root = root

    def _with_store(self, store: Store) -> PrefetchedAt:
        clone = object.__new__(type(self))
        PrefetchedStore.__init__(clone, store, self._documents)
        clone.root = self.root
        return clone


class _LocalViewTests:
    """Helpers and fixtures shared by the views of a local directory."""

    buffer_cls = cpu.Buffer

    async def set(self, store: Any, key: str, value: Buffer) -> None:
        await LocalStore(store.root).set(key, value)

    async def get(self, store: Any, key: str) -> Buffer:
        return await _local_get(store.root, key)

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        (tmp_path / "viewed").mkdir()
        return {"root": tmp_path / "viewed"}

    def test_store_supports_writes(self, store: Any) -> None:
        # zarr's flag says what the class can do; read_only says what this one may
        assert store.read_only

    def test_store_supports_listing(self, store: Any) -> None:
        assert store.supports_listing


class TestCountingStoreContract(_LocalViewTests, ReadOnlyViewTests[CountedAt, cpu.Buffer]):
    """The read counter the gather reader wraps each source in."""

    store_cls = CountedAt

    def test_store_repr(self, store: CountedAt) -> None:
        assert "CountedAt" in repr(store) or "WrapperStore" in repr(store)

    async def test_reads_are_counted(self, store: CountedAt) -> None:
        """Every fetch that reaches the source is counted, ranged reads included."""
        await self.set(store, "c/0", self.buffer_cls.from_bytes(b"abcdef"))
        await store.get("c/0", prototype=PROTO)
        async for _ in store.get_ranges("c/0", [None], prototype=PROTO):
            pass
        assert store.counters.snapshot().requests == 2


class TestPrefetchedStoreContract(_LocalViewTests, ReadOnlyViewTests[PrefetchedAt, cpu.Buffer]):
    """The view that serves an open's metadata documents from one concurrent fetch."""

    store_cls = PrefetchedAt

    def test_store_repr(self, store: PrefetchedAt) -> None:
        assert "PrefetchedAt" in repr(store) or "WrapperStore" in repr(store)


async def test_remembered_reads_read_each_document_and_listing_once(tmp_path: Path) -> None:
    """The view an open's checks read through is a snapshot by design, so zarr's
    suite for live views does not apply: each document and listing is read once,
    anything else passes through, and the store's own mode is kept."""
    local = LocalStore(tmp_path)
    store = RememberedReads(local)
    assert "RememberedReads" in repr(store) and not store.read_only
    await local.set("a/zarr.json", cpu.Buffer.from_bytes(b"{}"))
    assert (await store.get("a/zarr.json", prototype=PROTO)).to_bytes() == b"{}"
    assert [name async for name in store.list_dir("")] == ["a"]
    # changed underneath: the open saw one state of its documents
    await local.set("a/zarr.json", cpu.Buffer.from_bytes(b"[]"))
    await local.set("b/zarr.json", cpu.Buffer.from_bytes(b"{}"))
    assert (await store.get("a/zarr.json", prototype=PROTO)).to_bytes() == b"{}"
    assert [name async for name in store.list_dir("")] == ["a"]
    # anything else passes through, ranged reads of documents included
    await local.set("a/c/0", cpu.Buffer.from_bytes(b"x"))
    assert (await store.get("a/c/0", prototype=PROTO)).to_bytes() == b"x"
    ranged = await store.get("a/zarr.json", prototype=PROTO, byte_range=RangeByteRequest(0, 1))
    assert ranged is not None and ranged.to_bytes() == b"["


# ------------------------------------------------------- the remote source cache


class CachedAt(CachedSourceStore):
    """``CachedSourceStore`` over a loopback-S3 source, callable as zarr's suite calls it."""

    def __init__(self, url: str, options: dict[str, Any], read_only: bool = True) -> None:
        inner = open_location(url, read_only=read_only, storage_options=options)
        super().__init__(inner, SourceCache(), "source")
        self.url, self.options = url, options

    def _with_store(self, store: Store) -> CachedAt:
        clone = object.__new__(type(self))
        CachedSourceStore.__init__(clone, store, self.cache, "source")
        clone.url, clone.options = self.url, self.options
        return clone

    @classmethod
    async def open(  # type: ignore[override]
        cls, url: str, options: dict[str, Any], read_only: bool = True
    ) -> CachedAt:
        store = cls(url, options, read_only)
        await store._open()
        return store


@pytest.mark.remote
class TestCachedSourceStoreContract(ReadOnlyViewTests[CachedAt, cpu.Buffer]):
    """The remote source cache over a real S3 API server on loopback."""

    store_cls = CachedAt
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, s3_server: S3Server) -> dict[str, Any]:
        url = f"s3://{s3_server.new_bucket()}/source.zarr"
        return {"url": url, "options": s3_server.storage_options()}

    def _writer(self, store: CachedAt) -> Store:
        return open_location(store.url, read_only=False, storage_options=store.options)

    async def set(self, store: CachedAt, key: str, value: Buffer) -> None:
        await self._writer(store).set(key, value)

    async def get(self, store: CachedAt, key: str) -> Buffer:
        value = await self._writer(store).get(key, prototype=PROTO)
        assert value is not None
        return value

    def test_store_repr(self, store: CachedAt) -> None:
        assert "CachedAt" in repr(store) or "WrapperStore" in repr(store)

    def test_store_supports_writes(self, store: CachedAt) -> None:
        assert store.read_only

    def test_store_supports_listing(self, store: CachedAt) -> None:
        assert store.supports_listing

    async def test_serializable_store(self, store: CachedAt) -> None:
        """A cache is a directory of this process: by design a pickled cached
        source unpickles as the plain source store (a dask worker makes its own
        cache), which reads the same bytes."""
        await self.set(store, "c/0", self.buffer_cls.from_bytes(b"\x01\x02"))
        import pickle

        copy = pickle.loads(pickle.dumps(store))
        assert copy == store.wrapped
        got = await copy.get("c/0", prototype=PROTO)
        assert got is not None and got.to_bytes() == b"\x01\x02"

    async def test_cached_reads_equal_source_reads(self, store: CachedAt) -> None:
        """A whole shard, its suffix and its ranges read the same bytes cached and
        uncached, and the second whole read is a cache hit."""
        data = bytes(range(256)) * 8
        await self.set(store, "a/c/0/0", self.buffer_cls.from_bytes(data))
        for _ in range(2):
            whole = await store.get("a/c/0/0", prototype=PROTO)
            assert whole is not None and whole.to_bytes() == data
        from zarr.abc.store import SuffixByteRequest

        suffix = await store.get("a/c/0/0", prototype=PROTO, byte_range=SuffixByteRequest(16))
        assert suffix is not None and suffix.to_bytes() == data[-16:]
        ranged = await store.get("a/c/0/0", prototype=PROTO, byte_range=RangeByteRequest(5, 9))
        assert ranged is not None and ranged.to_bytes() == data[5:9]
        assert store.cache.info().hits >= 1


class PinnedAt(PinnedSourceStore):
    """``PinnedSourceStore`` over a loopback-S3 source, callable as zarr's suite calls it."""

    def __init__(self, url: str, options: dict[str, Any], read_only: bool = True) -> None:
        inner = open_location(url, read_only=read_only, storage_options=options)
        super().__init__(inner, name="source", where=url)
        self.url, self.options = url, options

    def _with_store(self, store: Store) -> PinnedAt:
        clone = object.__new__(type(self))
        PinnedSourceStore.__init__(clone, store, name="source", where=self.url, pins=self.pins)
        clone.url, clone.options = self.url, self.options
        return clone

    @classmethod
    async def open(  # type: ignore[override]
        cls, url: str, options: dict[str, Any], read_only: bool = True
    ) -> PinnedAt:
        store = cls(url, options, read_only)
        await store._open()
        return store


@pytest.mark.remote
class TestPinnedSourceStoreContract(ReadOnlyViewTests[PinnedAt, cpu.Buffer]):
    """The pinned read path of remote sources over a real S3 API server on loopback."""

    store_cls = PinnedAt
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, s3_server: S3Server) -> dict[str, Any]:
        url = f"s3://{s3_server.new_bucket()}/source.zarr"
        return {"url": url, "options": s3_server.storage_options()}

    def _writer(self, store: PinnedAt) -> Store:
        return open_location(store.url, read_only=False, storage_options=store.options)

    async def set(self, store: PinnedAt, key: str, value: Buffer) -> None:
        await self._writer(store).set(key, value)

    async def get(self, store: PinnedAt, key: str) -> Buffer:
        value = await self._writer(store).get(key, prototype=PROTO)
        assert value is not None
        return value

    def test_store_repr(self, store: PinnedAt) -> None:
        assert "PinnedAt" in repr(store) or "WrapperStore" in repr(store)

    def test_store_supports_writes(self, store: PinnedAt) -> None:
        assert store.read_only

    def test_store_supports_listing(self, store: PinnedAt) -> None:
        assert store.supports_listing

    async def test_serializable_store(self, store: PinnedAt) -> None:
        """Pins belong to one open store: a pickled copy (a dask worker's) pins
        what it reads there, and reads the same bytes."""
        await self.set(store, "c/0", self.buffer_cls.from_bytes(b"\x01\x02"))
        import pickle

        copy = pickle.loads(pickle.dumps(store))
        assert isinstance(copy, PinnedSourceStore)
        got = await copy.get("c/0", prototype=PROTO)
        assert got is not None and got.to_bytes() == b"\x01\x02"


def test_every_store_class_has_a_contract_test() -> None:
    """A Store subclass added to the package without a StoreTests class here fails."""
    import importlib
    import inspect
    import pkgutil

    import cytearc_vfs

    found = set()
    for module_info in pkgutil.walk_packages(cytearc_vfs.__path__, "cytearc_vfs."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Store) and cls.__module__.startswith("cytearc_vfs"):
                found.add(cls.__name__)
    covered = {
        "CompositeStore",
        "MountStore",
        "CachedSourceStore",
        "CountingStore",
        "PrefetchedStore",
        "RememberedReads",  # a snapshot by design: its own test above
        # a miss raises once the artifact is gone, by design: test_artifact_reading.py
        "ArtifactReads",
        "PinnedSourceStore",
        "WriteBehindStore",
        "FinishingStore",
        # the bases, run through the stores above and in test_store_keys.py
        "SourceReadWrapper",
        "KeyCheckedStore",
        "KeyCheckedWrapperStore",
    }
    assert found, "no store classes found"
    assert found <= covered, f"stores without a contract test: {sorted(found - covered)}"


# ------------------------------------------------------------------ write-behind


class WriteBehindAt(WriteBehindStore):
    """``WriteBehindStore(LocalStore(root))``, callable as ``cls(root, read_only)``.

    The tree is not known here (``absent_unless_written=False``): the suite
    writes keys behind the store's back, which a writer's destination never
    has (tests/test_write_behind.py covers that mode).
    """

    def __init__(self, root: Path, read_only: bool = False) -> None:
        super().__init__(LocalStore(root, read_only=read_only), read_only=read_only)
        self.root = root

    def _view(self, read_only: bool) -> WriteBehindAt:
        view = type(self)(self.root, read_only)
        view._writes = self._writes
        return view

    def __getstate__(self) -> dict[str, Any]:
        super().__getstate__()  # refuses while writes are in flight
        return {"root": self.root, "read_only": self.read_only}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["read_only"])  # type: ignore[misc]

    @classmethod
    async def open(cls, root: Path, read_only: bool = False) -> WriteBehindAt:  # type: ignore[override]
        store = cls(root, read_only=read_only)
        await store._open()
        return store


class TestWriteBehindStoreContract(CyteArcStoreTests[WriteBehindAt, cpu.Buffer]):
    """zarr's suite through a destination's write-behind store: every write
    is flushed before the suite reads the directory underneath."""

    store_cls = WriteBehindAt
    buffer_cls = cpu.Buffer

    async def set(self, store: WriteBehindAt, key: str, value: Buffer) -> None:
        await LocalStore(store.root).set(key, value)

    async def get(self, store: WriteBehindAt, key: str) -> Buffer:
        await store.flush()
        return await _local_get(store.root, key)

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        (tmp_path / "dest").mkdir(exist_ok=True)
        return {"root": tmp_path / "dest"}

    def test_store_repr(self, store: WriteBehindAt) -> None:
        assert "WriteBehindStore" in repr(store)

    def test_store_supports_writes(self, store: WriteBehindAt) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: WriteBehindAt) -> None:
        assert store.supports_listing


# ------------------------------------------------------------------ finishing


class FinishingAt(FinishingStore):
    """``FinishingStore(LocalStore(root))``, callable as ``cls(root, read_only)``."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        super().__init__(LocalStore(root, read_only=read_only))
        self.root = root

    def _with_store(self, store: Store) -> FinishingAt:
        # the same (possibly opened) LocalStore, as zarr's wrappers do
        clone = object.__new__(type(self))
        FinishingStore.__init__(clone, store)
        clone.root = self.root
        return clone

    @classmethod
    async def open(cls, root: Path, read_only: bool = False) -> FinishingAt:  # type: ignore[override]
        store = cls(root, read_only=read_only)
        await store._open()
        return store


class TestFinishingStoreContract(CyteArcStoreTests[FinishingAt, cpu.Buffer]):
    """zarr's suite through the store a writer writes directly (the AnnData
    export, an artifact group): its writes wait for the write they sent."""

    store_cls = FinishingAt
    buffer_cls = cpu.Buffer

    async def set(self, store: FinishingAt, key: str, value: Buffer) -> None:
        await LocalStore(store.root).set(key, value)

    async def get(self, store: FinishingAt, key: str) -> Buffer:
        return await _local_get(store.root, key)

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        (tmp_path / "dest").mkdir(exist_ok=True)
        return {"root": tmp_path / "dest"}

    def test_store_repr(self, store: FinishingAt) -> None:
        assert "FinishingStore" in repr(store)

    def test_store_supports_writes(self, store: FinishingAt) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: FinishingAt) -> None:
        assert store.supports_listing
