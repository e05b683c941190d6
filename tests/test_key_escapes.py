"""Key escapes as a fault family: every store, every method, every spelling.

A key or prefix that would leave the store (``..``, absolute paths,
backslashes, URL-encoded dots, control characters...) must be refused with an
exception before any I/O. A call that returns (data, ``None``, a listing,
or a completed write) counts as a wrong value. A sentinel file beside each
store must stay untouched. Figures go to
``$CYTEARC_CONFORMANCE_REPORT/key_escapes.json``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import realistic_counts
from cytearc_vfs_conformance.families import record_family
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.read.prefetch import PrefetchedStore
from cytearc_vfs.read.read_stats import CountingStore, ReadCounters
from cytearc_vfs.remote.cached_store import CachedSourceStore
from cytearc_vfs.remote.source_cache import SourceCache

PROTO = default_buffer_prototype()
SPELLINGS = (
    "../sentinel",
    "a/../../sentinel",
    "/etc/hostname",
    "a//b",
    "./zarr.json",
    "a/./b",
    "..\\sentinel",
    "%2e%2e/sentinel",
    "a/%2E%2E/%2e%2e/sentinel",
    "C:/sentinel",
    "a/\x00b",
    "a/\nb",
    " .. /sentinel",
    "..",
    "/",
)
PREFIXES = ("..", "../", "/", "a/../..", "%2e%2e/")


def _methods(store: Store) -> dict[str, Callable[[str], Awaitable[Any]]]:
    value = PROTO.buffer.from_bytes(b"x")
    return {
        "get": lambda key: store.get(key, PROTO),
        "exists": store.exists,
        "set": lambda key: store.set(key, value),
        "delete": store.delete,
        "get_partial_values": lambda key: store.get_partial_values(PROTO, [(key, None)]),
    }


def _listings(store: Store) -> dict[str, Callable[[str], Awaitable[Any]]]:
    return {
        "list_prefix": lambda prefix: _collect_aiterator(store.list_prefix(prefix)),
        "list_dir": lambda prefix: _collect_aiterator(store.list_dir(prefix)),
        "delete_dir": store.delete_dir,
    }


@pytest.fixture
def stores(tmp_path: Path) -> dict[str, Store]:
    (tmp_path / "sentinel").write_text("outside")
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(tmp_path / f"{name}.zarr", realistic_counts(20, 6, seed=seed))
    cv.create_composite(
        tmp_path / "comp.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}
    )
    cv.mount_datastore(tmp_path / "a.zarr", tmp_path / "tgt.zarr")
    local = LocalStore(tmp_path / "b.zarr", read_only=True)
    return {
        "CompositeStore": cv.open_store(tmp_path / "comp.zarr", mode="r+"),
        "MountStore": cv.open_store(tmp_path / "tgt.zarr", mode="r+"),
        "CachedSourceStore": CachedSourceStore(local, SourceCache(), "b"),
        "CountingStore": CountingStore(local, ReadCounters()),
        "PrefetchedStore": PrefetchedStore(local, {}),
    }


def test_key_escapes_refused(stores: dict[str, Store], tmp_path: Path) -> None:
    """Every escaping key or prefix is refused with an exception, by every store
    and method; nothing outside a store is read, listed or changed."""
    tried, handled = 0, 0
    wrong: list[str] = []
    for name, store in stores.items():
        calls = [(m, f, k) for m, f in _methods(store).items() for k in SPELLINGS]
        calls += [(m, f, p) for m, f in _listings(store).items() for p in PREFIXES]
        for method, call, key in calls:
            tried += 1
            try:
                result = sync(call(key))
            except Exception:  # refused: any exception raised before the I/O
                handled += 1
                continue
            wrong.append(f"{name}.{method}({key!r}) -> {result!r}"[:120])
    record_family(
        "key_escapes",
        tried=tried,
        handled=handled,
        wrong_values=len(wrong),
        details={
            "stores": len(stores),
            "key spellings": len(SPELLINGS),
            "prefix spellings": len(PREFIXES),
            "first wrong": wrong[0] if wrong else "none",
        },
    )
    assert (tmp_path / "sentinel").read_text() == "outside"
    assert wrong == []
