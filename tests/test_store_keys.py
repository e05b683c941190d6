"""Every store of the package refuses keys that could reach outside it, the same way.

A wide table of escape spellings runs against every store class and every
method that takes a key or prefix, on real directories with a sibling
"victim" directory (and the composite's own sources) that must stay
byte-identical. Then the bypasses an adversarial review found, each by name,
and property tests of the pure functions in ``cytearc_vfs.format.store_keys``.
"""

from __future__ import annotations

import ntpath
import posixpath
import unicodedata
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import obstore
import pytest
import zarr
from conftest import realistic_counts
from cytearc_vfs_adapters.anndata.fetched_once import KeptObjects
from cytearc_vfs_adapters.anndata.remote_metadata import _WalkedMetadata
from cytearc_vfs_adapters.anndata_output import anndata_view
from cytearc_vfs_adapters.backends import SharedClientObjectStore
from hypothesis import given
from store_copies import copy_stores
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.storage import LocalStore
from zarr.testing.store import StoreTests

import cytearc_vfs as cv
from cytearc_vfs.artifacts.artifact_reads import ArtifactReads
from cytearc_vfs.format.key_checked import KeyCheckedWrapperStore
from cytearc_vfs.format.store_keys import (
    KEY_REMEDY,
    check_key,
    check_prefix,
    key_problem,
    protected_by,
)
from cytearc_vfs.read.prefetch import PrefetchedStore
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters
from cytearc_vfs.read.remembered_reads import RememberedReads
from cytearc_vfs.remote.cached_store import CachedSourceStore
from cytearc_vfs.remote.pinned_store import PinnedSourceStore
from cytearc_vfs.remote.source_cache import SourceCache
from cytearc_vfs.write.stopping import FinishingStore
from cytearc_vfs.write.write_behind import WriteBehindStore

PROTO = default_buffer_prototype()
VICTIM = "victim"
PROVENANCE = {"operation": "test.keys", "parameters": {}, "inputs": {}}

# (id, spelling, also refused as a listing prefix). "{victim}" is replaced by
# the absolute path of the victim file. Keys that end in one "/" name a
# directory: refused as keys, fine as prefixes; the empty key is the root.
SPELLINGS: list[tuple[str, str, bool]] = [
    ("dotdot", "..", True),
    ("dotdot-x", "../x", True),
    ("dotdot-victim", f"../{VICTIM}/secret.txt", True),
    ("dotdot-victim-dir", f"../{VICTIM}", True),
    ("source-sibling", "../b.zarr", True),
    ("deep-dotdot", f"a/../../{VICTIM}/secret.txt", True),
    ("inner-dotdot", "RNA/../zarr.json", True),
    ("trailing-dotdot", "RNA/..", True),
    ("absolute-etc", "/etc/hostname", True),
    ("absolute-victim", "{victim}", True),
    ("root-slash", "/", True),
    ("double-leading-slash", "//x", True),
    ("double-inner-slash", "a//b", True),
    ("summaries-double-slash", "RNA//countSummaries/rowSums/zarr.json", True),
    ("dot-root-doc", "./zarr.json", True),
    ("inner-dot", "a/./b", True),
    ("trailing-dot", "RNA/.", True),
    ("three-dots", ".../x", True),
    ("backslash-dotdot", "a\\..\\b", True),
    ("backslash-victim", f"..\\{VICTIM}\\secret.txt", True),
    ("percent-dotdot", f"%2e%2e/{VICTIM}/secret.txt", True),
    ("percent-dotdot-upper", "%2E%2E/x", True),
    ("double-percent-dotdot", "%252e%252e/x", True),
    ("percent-slash", "a%2f..%2fb", True),
    ("percent-nul", "a%00b", True),
    ("nul", "zarr.json\x00.png", True),
    ("newline", "a\nb", True),
    ("tab", "a\tb", True),
    ("del", "a\x7fb", True),
    ("c1-next-line", "a\x85b", True),
    ("drive-absolute", "C:/Windows/win.ini", True),
    ("drive-relative", "c:x", True),
    ("drive-digit", "1:x", True),
    ("dotdot-space", ".. /x", True),
    ("double-trailing-slash", "RNA//", True),
    ("trailing-slash", "zarr.json/", False),
    ("empty", "", False),
]
assert len(SPELLINGS) >= 20

# Spelled like an escape, but plain names: a '%' that decodes to a name,
# Unicode look-alikes of '.', dots inside a name, zarr v2 documents.
NAMES = [
    "%41",
    "a%20b",
    "100%",
    "\u2024\u2024/x",
    "\uff0e\uff0e/x",
    "\u2025",
    "...a",
    "a..",
    ".zattrs",
    "a b/c",
    "RNA/counts/c/9999/0",
]


def spelling(raw: str, victim_file: Path) -> str:
    return raw.replace("{victim}", str(victim_file))


# ------------------------------------------------------------------ stores


def snapshot(root: Path) -> dict[str, object]:
    """Every file and directory under ``root``: the victim's files by their
    bytes, the stores' by size and modification time (a write changes it)."""
    state: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_file() and name.startswith(VICTIM):
            state[name] = path.read_bytes()
        elif path.is_file():
            stat = path.stat()
            state[name] = (stat.st_size, stat.st_mtime_ns)
        else:
            state[name] = None
    return state


class World:
    """Real stores side by side in one directory, with a victim beside them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        victim = root / VICTIM
        victim.mkdir()
        (victim / "secret.txt").write_bytes(b"secret")
        (victim / "zarr.json").write_bytes(b'{"victim": true}')
        self.victim_file = victim / "secret.txt"
        a = realistic_counts(40, 12, density=0.2, seed=1)
        b = realistic_counts(30, 12, density=0.2, seed=2)
        cv.write_counts(root / "a.zarr", a)
        cv.write_counts(root / "b.zarr", b)
        source = cv.open_store(root / "a.zarr", mode="r+")
        with cv.publish_artifact(source, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
            art.write_array("data", np.zeros((40, 2)))
        self.source_artifact = art.artifact_id
        cv.create_composite(root / "c.zarr", {"a": root / "a.zarr", "b": root / "b.zarr"})
        cv.mount_datastore(root / "a.zarr", root / "m.zarr")
        (root / "plain.zarr").mkdir()
        (root / "plain.zarr" / "zarr.json").write_bytes(b"{}")
        self.cache = SourceCache(1 << 20)

    @classmethod
    def copied_from(cls, template: World, root: Path) -> World:
        """The stores of ``template`` copied into ``root``: what building them there makes."""
        made = object.__new__(cls)
        made.root = copy_stores(template.root, root)
        made.victim_file = root / VICTIM / "secret.txt"
        made.source_artifact = template.source_artifact
        made.cache = SourceCache(1 << 20)
        return made

    def stores(self) -> dict[str, Store]:
        plain = LocalStore(self.root / "plain.zarr")
        return {
            "composite": cv.open_store(self.root / "c.zarr", mode="r+"),
            "mount": cv.open_store(self.root / "m.zarr", mode="r+"),
            "cached-source": CachedSourceStore(plain, self.cache, "s"),
            "prefetched": PrefetchedStore(plain, {"zarr.json": b"{}"}),
            # anndata ls's walk of a remote container: a listed group's documents
            "walked-metadata": _WalkedMetadata(
                plain, {"zarr.json": b"{}"}, directories={"": ["zarr.json"]}
            ),
            "remembered": RememberedReads(plain),
            # write_counts from remote AnnData: each matrix object fetched once
            "kept-objects": KeptObjects(plain, ["g"]),
            "artifact-reads": ArtifactReads(plain, "g", "g", "plain.zarr"),
            "counting": CountingStore(plain, ReadCounters()),
            "checked-wrapper": KeyCheckedWrapperStore(plain),
            "finishing": FinishingStore(plain),
            "write-behind": WriteBehindStore(plain),
            # over a real source: a chunk missing from an array that is not
            # there reads as the source gone, not as a miss
            "anndata-view": anndata_view(self.root / "a.zarr"),
            # obstore's client over the stores' folder, keys below plain.zarr
            "shared-client": SharedClientObjectStore(
                obstore.store.LocalStore(self.root), "plain.zarr"
            ),
            "pinned-source": PinnedSourceStore(
                LocalStore(self.root / "a.zarr", read_only=True), name="a", where="a.zarr"
            ),
        }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    made = World(tmp_path_factory.mktemp("keys"))
    yield made
    made.cache.close()


@pytest.fixture(scope="module")
def stores(world: World) -> dict[str, Store]:
    return world.stores()


STORE_NAMES = [
    "composite",
    "mount",
    "cached-source",
    "prefetched",
    "walked-metadata",
    "counting",
    "checked-wrapper",
    "finishing",
    "write-behind",
    "pinned-source",
    "anndata-view",
    "shared-client",
    "kept-objects",
]


async def collect(iterator: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in iterator]


async def first_batch(store: Store, key: str) -> Any:
    return await collect(store.get_ranges(key, [RangeByteRequest(0, 1)], prototype=PROTO))


def value() -> Buffer:
    return PROTO.buffer.from_bytes(b"escaped")


# method -> what calling it with a key does; the bool says whether it takes
# a prefix (so "" and one trailing "/" are fine unless it deletes)
KEY_METHODS: dict[str, Callable[[Store, str], Any]] = {
    "get": lambda s, k: s.get(k, PROTO),
    "get-range": lambda s, k: s.get(k, PROTO, RangeByteRequest(0, 4)),
    "get_partial_values": lambda s, k: s.get_partial_values(
        PROTO, [("zarr.json", None), (k, None)]
    ),
    "get_ranges": first_batch,
    "exists": lambda s, k: s.exists(k),
    "getsize": lambda s, k: s.getsize(k),
    "set": lambda s, k: s.set(k, value()),
    "set_if_not_exists": lambda s, k: s.set_if_not_exists(k, value()),
    "delete": lambda s, k: s.delete(k),
}
SYNC_METHODS: dict[str, Callable[[Any, str], Any]] = {
    "get_sync": lambda s, k: s.get_sync(k, prototype=PROTO),
    "set_sync": lambda s, k: s.set_sync(k, value()),
    "delete_sync": lambda s, k: s.delete_sync(k),
}
PREFIX_METHODS: dict[str, Callable[[Store, str], Any]] = {
    "list_prefix": lambda s, p: collect(s.list_prefix(p)),
    "list_dir": lambda s, p: collect(s.list_dir(p)),
    "is_empty": lambda s, p: s.is_empty(p),
    "getsize_prefix": lambda s, p: s.getsize_prefix(p),
    "delete_dir": lambda s, p: s.delete_dir(p),
}


async def call(method: Callable[[Any, str], Any], store: Store, key: str) -> Any:
    result = method(store, key)
    return await result if hasattr(result, "__await__") else result


@pytest.fixture(scope="module")
def before(world: World, stores: dict[str, Store]) -> dict[str, object]:
    return snapshot(world.root)


# stores without *_sync methods
ASYNC_ONLY = ("composite", "mount", "write-behind", "anndata-view", "shared-client")
STORE_METHODS = [
    (store_name, method)
    for store_name in STORE_NAMES
    for method in [*KEY_METHODS, *SYNC_METHODS]
    if method in KEY_METHODS or store_name not in ASYNC_ONLY
]


async def refusal_failures(
    world: World,
    store: Store,
    operation: Callable[[Any, str], Any],
    spellings: list[tuple[str, str, bool]],
    before: dict[str, object],
) -> list[str]:
    """What went wrong for each spelling: not refused or a vague message;
    then whether any file or directory beside or inside the stores changed.

    The spellings run inside one test per store and method; a failure names
    every spelling that failed.
    """
    failures = []
    for name, raw, _ in spellings:
        key = spelling(raw, world.victim_file)
        try:
            result = await call(operation, store, key)
        except ValueError as exc:
            message = str(exc)
            # is_empty names the prefix it lists, which has a '/' appended
            if repr(key)[1:-1] not in message or str(store) not in message:
                failures.append(f"{name}: the message does not name key and store: {message}")
            if "refused" not in message:
                failures.append(f"{name}: the message gives no refusal: {message}")
        else:
            failures.append(f"{name}: not refused, returned {result!r}")
    # once per call of this function: a walk of every store is not cheap
    changed = sorted(set(snapshot(world.root).items()) ^ set(before.items()))
    if changed:
        failures.append(f"files changed: {changed}")
    return failures


def test_every_store_class_is_in_the_table(stores: dict[str, Store]) -> None:
    """A Store subclass added to the package or its adapters without a row here fails."""
    import importlib
    import inspect
    import pkgutil

    import cytearc_vfs_adapters

    found = set()
    for package in (cv, cytearc_vfs_adapters):
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(module_info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Store) and cls.__module__.startswith(package.__name__):
                    found.add(cls)
    tabled = {type(store) for store in stores.values()}
    # bases, run through their subclasses above
    bases = {cls for cls in found if any(issubclass(t, cls) and t is not cls for t in tabled)}
    assert found - tabled - bases == set()


@pytest.mark.parametrize(("store_name", "method"), STORE_METHODS)
async def test_escaping_keys_are_refused_and_nothing_outside_changes(
    world: World, stores: dict[str, Store], before: dict[str, object], store_name: str, method: str
) -> None:
    operation = KEY_METHODS.get(method) or SYNC_METHODS[method]
    assert await refusal_failures(world, stores[store_name], operation, SPELLINGS, before) == []


@pytest.mark.parametrize("store_name", STORE_NAMES)
@pytest.mark.parametrize("method", list(PREFIX_METHODS))
async def test_escaping_prefixes_are_refused_and_nothing_outside_changes(
    world: World, stores: dict[str, Store], before: dict[str, object], store_name: str, method: str
) -> None:
    # "" (the root) and a trailing "/" are fine in a prefix; delete_dir("")
    # is refused by test_deleting_the_root_is_refused
    refused = [s for s in SPELLINGS if s[2]]
    failures = await refusal_failures(
        world, stores[store_name], PREFIX_METHODS[method], refused, before
    )
    assert failures == []


# A backend store may be emptied whole: an unfinished remote destination is
# removed so (cli/interrupts.py); the stores above it refuse that.
@pytest.mark.parametrize("store_name", [name for name in STORE_NAMES if name != "shared-client"])
@pytest.mark.parametrize("call_root_delete", ["delete", "delete_dir", "clear"])
async def test_deleting_the_root_is_refused(
    world: World,
    stores: dict[str, Store],
    before: dict[str, object],
    store_name: str,
    call_root_delete: str,
) -> None:
    store = stores[store_name]
    attempt = store.clear() if call_root_delete == "clear" else getattr(store, call_root_delete)("")
    with pytest.raises(ValueError, match="remove the store's directory yourself"):
        await attempt
    assert snapshot(world.root) == before


@pytest.mark.parametrize("store_name", STORE_NAMES)
async def test_listing_the_root_and_directories_with_or_without_slash_works(
    stores: dict[str, Store], store_name: str
) -> None:
    store = stores[store_name]
    everything = await collect(store.list_prefix(""))
    assert "zarr.json" in everything
    assert "zarr.json" in await collect(store.list_dir(""))
    assert not await store.is_empty("")
    if store_name in ("composite", "mount"):
        assert await collect(store.list_dir("RNA")) == await collect(store.list_dir("RNA/"))
        assert sorted(await collect(store.list_prefix("RNA"))) == sorted(
            await collect(store.list_prefix("RNA/"))
        )


@pytest.mark.parametrize("store_name", STORE_NAMES)
@pytest.mark.parametrize("key", NAMES)
async def test_names_that_only_look_like_escapes_are_plain_misses(
    stores: dict[str, Store], store_name: str, key: str
) -> None:
    # valid keys that are not there stay misses (zarr's contract), not refusals
    store = stores[store_name]
    assert await store.get(key, PROTO) is None
    assert not await store.exists(key)
    assert await collect(store.list_dir(key)) == []


@pytest.mark.parametrize("key", NAMES)
async def test_names_that_only_look_like_escapes_stay_inside(tmp_path: Path, key: str) -> None:
    (tmp_path / "s.zarr").mkdir()
    store = KeyCheckedWrapperStore(LocalStore(tmp_path / "s.zarr"))
    await store.set(key, value())
    assert (tmp_path / "s.zarr" / key).read_bytes() == b"escaped"
    found = await store.get(key, PROTO)
    assert found is not None and found.to_bytes() == b"escaped"
    assert key in await collect(store.list_prefix(""))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


# ----------------------------------------------- the review's bypasses, by name


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Built once and never opened: each test below changes a copy of its own."""
    made = World(tmp_path_factory.mktemp("pristine"))
    yield made
    made.cache.close()


@pytest.fixture
def fresh(pristine: World, tmp_path: Path) -> Iterator[World]:
    # a copy, not a new build: each build wrote two stores, a composite, a
    # mount and an artifact (1-1.5 s a test, 23 tests)
    made = World.copied_from(pristine, tmp_path)
    yield made
    made.cache.close()


async def test_composite_delete_of_a_sibling_source_is_refused(fresh: World) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    before = snapshot(fresh.root)
    with pytest.raises(ValueError, match=r"'\.\./b\.zarr'.*walks out"):
        await comp.delete("../b.zarr")
    assert snapshot(fresh.root) == before
    cv.open_store(fresh.root / "c.zarr")  # the source is intact and verifies


async def test_composite_reads_and_writes_outside_are_refused(fresh: World) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    before = snapshot(fresh.root)
    with pytest.raises(ValueError, match="absolute"):
        await comp.get("/etc/hostname", PROTO)
    with pytest.raises(ValueError, match="absolute"):
        await comp.get(str(fresh.victim_file), PROTO)
    with pytest.raises(ValueError, match="walks out"):
        await comp.set("../x", value())
    with pytest.raises(ValueError, match="absolute"):
        await collect(comp.list_dir("/"))
    assert not (fresh.root / "x").exists()
    assert snapshot(fresh.root) == before


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("RNA//countSummaries/rowSums/zarr.json", "empty segment"),
        ("RNA/./countSummaries/rowSums/zarr.json", "names its own directory"),
        ("./zarr.json", "names its own directory"),
        ("_composite//rowSources/zarr.json", "empty segment"),
        ("RNA/counts/./zarr.json", "names its own directory"),
    ],
)
async def test_composite_immutability_cannot_be_bypassed_by_spelling(
    fresh: World, key: str, match: str
) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    before = snapshot(fresh.root)
    with pytest.raises(ValueError, match=match):
        await comp.set(key, PROTO.buffer.from_bytes(b"{}"))
    with pytest.raises(ValueError, match=match):
        await comp.delete(key)
    assert snapshot(fresh.root) == before


@pytest.mark.parametrize(
    ("method", "key"),
    [
        ("delete", "RNA"),
        ("delete", "_composite"),
        ("delete", "RNA/countSummaries"),
        ("delete_dir", "RNA"),
        ("delete_dir", "RNA/"),
        ("delete_dir", "_composite"),
        ("delete_dir", "RNA/countSummaries/rowSums"),
        ("delete_dir", "RNA/counts"),
    ],
)
async def test_composite_deleting_a_protected_path_or_its_ancestor_is_refused(
    fresh: World, method: str, key: str
) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    before = snapshot(fresh.root)
    with pytest.raises(PermissionError, match="cannot delete"):
        await getattr(comp, method)(key)
    assert snapshot(fresh.root) == before


async def test_composite_root_deletes_are_refused(fresh: World) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    before = snapshot(fresh.root)
    for attempt in (comp.delete(""), comp.delete_dir(""), comp.clear()):
        with pytest.raises(ValueError, match="deleting the whole store"):
            await attempt
    with pytest.raises(ValueError, match="deleting the whole store"):
        zarr.open_group(comp, mode="w")  # zarr's overwrite is delete_dir("")
    assert snapshot(fresh.root) == before


async def test_composite_legitimate_deletes_still_work(fresh: World) -> None:
    comp = cv.open_store(fresh.root / "c.zarr", mode="r+")
    cells = zarr.open_group(comp, path="cellData", mode="r+")
    cells.create_array("RNA_nCounts", data=np.zeros(70))
    assert (fresh.root / "c.zarr" / "cellData" / "RNA_nCounts").is_dir()
    del cells["RNA_nCounts"]  # zarr: delete_dir("cellData/RNA_nCounts")
    assert not (fresh.root / "c.zarr" / "cellData" / "RNA_nCounts").exists()
    await comp.set("RNA/featureData/note/zarr.json", PROTO.buffer.from_bytes(b"{}"))
    await comp.delete_dir("RNA/featureData/note/")
    assert not (fresh.root / "c.zarr" / "RNA" / "featureData" / "note").exists()
    cv.open_store(fresh.root / "c.zarr")


async def test_mount_list_prefix_outside_is_refused(fresh: World) -> None:
    mount = cv.open_store(fresh.root / "m.zarr", mode="r+")
    for prefix in ("..", "../", "../a.zarr", "RNA/../.."):
        with pytest.raises(ValueError, match="walks out"):
            await collect(mount.list_prefix(prefix))
        with pytest.raises(ValueError, match="walks out"):
            await collect(mount.list_dir(prefix))


async def test_mount_root_deletes_are_refused_and_matrix_source_stays(fresh: World) -> None:
    mount = cv.open_store(fresh.root / "m.zarr", mode="r+")
    before = snapshot(fresh.root)
    for attempt in (mount.delete(""), mount.delete_dir(""), mount.delete_dir("/"), mount.clear()):
        with pytest.raises(ValueError, match=r"deleting the whole store|absolute"):
            await attempt
    assert snapshot(fresh.root) == before
    assert isinstance(cv.open_store(fresh.root / "m.zarr"), cv.MountStore)


async def test_mount_delete_dir_over_a_source_group_deletes_nothing(fresh: World) -> None:
    mount = cv.open_store(fresh.root / "m.zarr", mode="r+")
    with cv.publish_artifact(
        mount, "RNA/artifacts", "pca", provenance={**PROVENANCE, "parameters": {"k": 1}}
    ) as mine:
        mine.write_array("data", np.ones((40, 1)))
    before = snapshot(fresh.root)
    for prefix in (
        "RNA/artifacts/pca",
        "RNA/artifacts",
        f"RNA/artifacts/pca/{fresh.source_artifact}",
    ):
        with pytest.raises(PermissionError, match="belongs to the mounted source"):
            await mount.delete_dir(prefix)
    assert snapshot(fresh.root) == before
    # the target's own artifact can go, and then reads as gone
    await mount.delete_dir(f"RNA/artifacts/pca/{mine.artifact_id}")
    assert not await mount.exists(f"RNA/artifacts/pca/{mine.artifact_id}/zarr.json")
    ids = {a.artifact_id for a in cv.list_artifacts(mount, "RNA/artifacts")}
    assert ids == {fresh.source_artifact}


# ------------------------------------------------------- the pure functions

_ALPHABET = st.sampled_from(
    [
        *("a", "b", "C", ":", ".", "..", "/", "\\", "%", "%2e", "%2E", "%25", "%2f", "%00"),
        *("\x00", "\n", "\x7f", "\x85", " ", "%20", "\uff0e", "\u2024", "zarr.json", "c", "0"),
    ]
)
key_like = st.one_of(st.lists(_ALPHABET, max_size=12).map("".join), st.text(max_size=20))
plain_segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\\%"),
    min_size=1,
    max_size=8,
).filter(lambda s: s.strip(". ") != "")
valid_keys = (
    st.lists(plain_segment, min_size=1, max_size=5)
    .map("/".join)
    .filter(lambda k: key_problem(k) is None)
)


def fully_decoded(key: str) -> str:
    from urllib.parse import unquote

    for _ in range(8):
        key, previous = unquote(key), key
        if key == previous:
            break
    return key


def reference_is_valid(key: str) -> bool:
    """An independent statement of the rule, segment by segment."""
    if key == "" or (len(key) >= 2 and key[1] == ":" and key[0] != "/"):
        return False
    for segment in key.split("/"):
        decoded = fully_decoded(segment)
        for text in (segment, decoded):
            if text == "" or set(text) <= {".", " "}:
                return False
            if any(c == "\\" or unicodedata.category(c) == "Cc" for c in text):
                return False
        if "/" in decoded:
            return False
    return True


@given(key_like)
def test_key_problem_agrees_with_the_reference(key: str) -> None:
    assert (key_problem(key) is None) == reference_is_valid(key)


@given(key_like)
def test_valid_keys_never_leave_the_root_on_any_platform_or_url(key: str) -> None:
    if key_problem(key) is not None:
        with pytest.raises(ValueError, match=KEY_REMEDY):
            check_key(key, op="get", where="s")
        return
    assert check_key(key, op="get", where="s") == key
    for text in (key, fully_decoded(key)):
        assert posixpath.normpath(posixpath.join("/root", text)) == "/root/" + text
        inside = ntpath.normpath(ntpath.join("C:\\root", text))
        assert inside.startswith("C:\\root\\")


@given(valid_keys)
def test_valid_keys_are_valid_prefixes_with_or_without_slash(key: str) -> None:
    for op in ("list_prefix", "list_dir", "delete_dir"):
        assert check_prefix(key, op=op, where="s") == key
        assert check_prefix(key + "/", op=op, where="s") == key + "/"
    assert check_prefix("", op="list_dir", where="s") == ""
    with pytest.raises(ValueError, match="deleting the whole store"):
        check_prefix("", op="delete_dir", where="s")
    with pytest.raises(ValueError, match="refused"):
        check_prefix(key + "//", op="list_dir", where="s")


@given(valid_keys, valid_keys)
def test_protected_by_matches_path_segments(key: str, path: str) -> None:
    inside = key == path or key.startswith(path + "/")
    ancestor = path.startswith(key + "/")
    assert (protected_by(key, [path], deleting=False) == path) == inside
    assert (protected_by(key, [path], deleting=True) == path) == (inside or ancestor)
    assert protected_by(key + "/", [path], deleting=True) == protected_by(
        key, [path], deleting=True
    )
    assert protected_by("", [path], deleting=True) == path


# ------------------------------------------- nothing zarr sends is refused


class LocalChecked(KeyCheckedWrapperStore):
    """The checked wrapper over a LocalStore, built from what StoreTests passes."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        super().__init__(LocalStore(root, read_only=read_only))
        self.root = root

    def _with_store(self, store: Store) -> LocalChecked:
        # the same (possibly opened) LocalStore, as zarr's wrappers do
        clone = object.__new__(type(self))
        KeyCheckedWrapperStore.__init__(clone, store)
        clone.root = self.root
        return clone

    @classmethod
    async def open(cls, root: Path, read_only: bool = False) -> LocalChecked:  # type: ignore[override]
        store = cls(root, read_only=read_only)
        await store._open()
        return store


class TestKeyCheckedWrapperContract(StoreTests[LocalChecked, cpu.Buffer]):
    """zarr's own store test-suite through the key checks: every key and
    prefix it sends (with and without trailing '/', the root) passes."""

    store_cls = LocalChecked
    buffer_cls = cpu.Buffer

    async def set(self, store: LocalChecked, key: str, value: Buffer) -> None:
        await LocalStore(store.root).set(key, value)

    async def get(self, store: LocalChecked, key: str) -> Buffer:
        value = await LocalStore(store.root).get(key, prototype=PROTO)
        assert value is not None
        return value

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        # made first: the suite also opens it read-only, which needs it to exist
        (tmp_path / "inner").mkdir(exist_ok=True)
        return {"root": tmp_path / "inner"}

    def test_store_repr(self, store: LocalChecked) -> None:
        assert "WrapperStore" in repr(store)

    def test_store_supports_writes(self, store: LocalChecked) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: LocalChecked) -> None:
        assert store.supports_listing

    async def test_clear(self, store: LocalChecked) -> None:
        # clear() is delete_dir(""): refused by every store of the package
        await self.set(store, "key", self.buffer_cls.from_bytes(b"something"))
        with pytest.raises(ValueError, match="deleting the whole store"):
            await store.clear()
        assert await store.exists("key")
