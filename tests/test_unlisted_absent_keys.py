"""Sources on S3 read with credentials that may read but not list (no
``s3:ListBucket``), answered as AWS answers them: ``403 AccessDenied`` for a
listing and also for a GetObject or HeadObject of a key that does not exist
(only a caller that may list is told ``404``; the proxy rewrites the loopback
server's ``404`` so, ``LoopbackProxy.absent_forbidden``).

Opening a composite or a mount over such a source failed: the open asks for
keys that are usually absent (the retired ``state`` group's documents, a
``HEAD`` of each shard the grid names, and ``write_counts`` leaves out a shard
of zeros), and each ``403`` refused it as unreadable. Now a document answered
``403`` is absent, and a shard answered ``403`` is absent only where the
source's own summaries prove it holds zeros; one that holds values by them is
refused (forbidden or lost), never read as zeros.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server, fsspec_options
from zarr.core.buffer import default_buffer_prototype as prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.format.chunk_keys import grid_keys
from cytearc_vfs.remote.locations import open_location

pytestmark = pytest.mark.remote

#: 100 cells a shard of counts (300 x 40), 12 features a shard of countsT.
_LAYOUT = cv.LayoutPolicy(4 << 10, 1 << 10)
#: Shards write_counts leaves out of source "a": counts' first (cells 0-99 hold no
#: value) and countsT's last (features 36-39 hold none).
_ABSENT = ("RNA/counts/c/0/0", "RNA/countsT/c/3/0")


def _with_zeros(seed: int) -> sp.csr_array:
    matrix = realistic_counts(300, 40, density=0.2, seed=seed).tolil()
    matrix[:100, :] = 0
    matrix[:, 36:] = 0
    found = sp.csr_array(matrix.tocsr())
    found.eliminate_zeros()
    return found


@dataclass(frozen=True)
class Sources:
    """Source "a" with shards of zeros left out, "b" with every shard written, behind
    a proxy that refuses listings and answers an absent key 403."""

    urls: dict[str, str]
    matrices: dict[str, sp.csr_array]
    direct: dict[str, Any]
    unlisted: dict[str, Any]
    proxy: LoopbackProxy

    def options(self, options: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        return {name: options or self.unlisted for name in self.urls}

    def expected(self) -> np.ndarray:
        return np.vstack([self.matrices[name].toarray() for name in ("a", "b")])


@pytest.fixture
def sources(s3_server: S3Server) -> Iterator[Sources]:
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    urls = {name: f"s3://{bucket}/{name}.zarr" for name in ("a", "b")}
    matrices = {"a": _with_zeros(5), "b": realistic_counts(200, 40, density=0.2, seed=6)}
    for name, url in urls.items():
        cv.write_counts(url, matrices[name], storage_options=direct, layout=_LAYOUT)
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    proxy.absent_forbidden = True
    try:
        yield Sources(urls, matrices, direct, {**direct, "endpoint": proxy.endpoint}, proxy)
    finally:
        proxy.close()


@pytest.fixture
def composite(sources: Sources, tmp_path: Path) -> Path:
    path = tmp_path / "c.zarr"
    # created with credentials that may list (creation copies the tables)
    cv.create_composite(
        path, sources.urls, source_storage_options=sources.options(sources.direct)
    ).close()
    return path


def _kinds(seen: list[Seen]) -> Counter[str]:
    return Counter("LIST" if "list-type" in r.path else r.method for r in seen)


def _keys(seen: list[Seen], method: str) -> list[str]:
    """``bucket``-relative keys (``a.zarr/RNA/...``) of the requests of ``method``."""
    return sorted(
        r.path.split("?")[0].split("/", 2)[2]
        for r in seen
        if r.method == method and "list-type" not in r.path
    )


def _grid(sources: Sources, name: str) -> list[str]:
    """Every shard key the grids of ``name``'s counts and countsT name, stored or not."""
    store = open_location(sources.urls[name], read_only=True, storage_options=sources.direct)
    keys = []
    for path in ("RNA/counts", "RNA/countsT"):
        document = json.loads(sync(store.get(f"{path}/zarr.json", prototype())).to_bytes())
        keys += grid_keys(path, document, where=name)
    return keys


def test_the_absent_shards_are_the_ones_write_counts_left_out(sources: Sources) -> None:
    """The premise: the shards of zeros are absent, the others stored."""
    store = open_location(sources.urls["a"], read_only=True, storage_options=sources.direct)
    for key in _grid(sources, "a"):
        assert sync(store.exists(key)) is (key not in _ABSENT), key


def test_a_composite_opens_with_absent_keys_answered_403(sources: Sources, composite: Path) -> None:
    sources.proxy.take()
    store = cv.open_store(composite, source_storage_options=sources.options())
    opened = sources.proxy.take()
    kinds = _kinds(opened)
    # a HEAD per shard of the grids, two of "a"'s answered 403; the 14 documents of
    # each source by path (2 answered 403: the retired state group), and "a"'s two
    # positive-count summaries, read once, only for the source with a 403
    grids = _grid(sources, "a") + _grid(sources, "b")
    assert kinds == {"LIST": 2, "HEAD": len(grids), "GET": 2 * 14 + 2}, opened
    assert _keys(opened, "HEAD") == sorted(
        f"{name}.zarr/{key}" for name in ("a", "b") for key in _grid(sources, name)
    )
    gets = _keys(opened, "GET")
    assert len(set(gets)) == len(gets), gets  # nothing read twice
    summaries = [key for key in gets if "/countSummaries/" in key and "/c/" in key]
    assert summaries == [
        "a.zarr/RNA/countSummaries/columnPositive/c/0",
        "a.zarr/RNA/countSummaries/rowPositive/c/0",
    ]
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], sources.expected())
    rows = np.array([0, 99, 100, 299, 300, 499])
    np.testing.assert_array_equal(store.reader()[rows, :], sources.expected()[rows])
    np.testing.assert_array_equal(store.reader().read(), sources.expected())
    read = sources.proxy.take()
    # the shards proved absent are never asked for again
    assert not [r for r in read if any(f"/a.zarr/{key}" in r.path for key in _ABSENT)], read
    assert _kinds(read)["LIST"] == 0 and _kinds(read)["HEAD"] == 0
    # a copy in another process opens again (the same proof) and reads the same
    copy = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(copy.reader().read(), sources.expected())
    again = sources.proxy.take()
    assert not [
        r for r in again if r.method == "GET" and any(f"/a.zarr/{k}" in r.path for k in _ABSENT)
    ]
    copy.close()
    store.close()


def test_through_s3fs_too(sources: Sources, composite: Path) -> None:
    options = fsspec_options(sources.proxy.endpoint)
    sources.proxy.take()
    store = cv.open_store(composite, source_storage_options=sources.options(options))
    grids = _grid(sources, "a") + _grid(sources, "b")
    assert _kinds(sources.proxy.take())["HEAD"] == len(grids)
    np.testing.assert_array_equal(store.reader().read(), sources.expected())
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], sources.expected())
    store.close()


def test_a_forbidden_shard_that_holds_values_is_refused(sources: Sources, composite: Path) -> None:
    """A shard that exists and holds values, forbidden to these credentials (S3's same
    403): the summaries say it holds values, so the open is refused, naming it and
    both remedies; no value of any shard was read."""
    forbidden = "a.zarr/RNA/counts/c/1/0"
    sources.proxy.fail(1_000_000, status=403, match=forbidden)
    sources.proxy.take()
    with pytest.raises(cv.SourceUnavailableError) as refused:
        cv.open_store(composite, source_storage_options=sources.options())
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"source 'a' at {sources.urls['a']} cannot be read: RNA/counts/c/1/0 ")
    assert "RNA/counts/c/1/0 was answered 403 Forbidden; S3 answers 403 for a missing" in said
    assert "credentials without s3:ListBucket" in said
    assert "summaries" in said and "holds values" in said
    assert "grant s3:ListBucket (read-only) on the store's prefix" in said
    assert "check that object's permissions" in said
    assert "may not read" not in said
    opened = sources.proxy.take()
    assert not [k for k in _keys(opened, "GET") if "/counts" in k and "/c/" in k], opened


def test_a_forbidden_summary_is_refused_not_read_as_zeros(
    sources: Sources, composite: Path
) -> None:
    """The proof's own records answered 403: refused with the accurate cause."""
    sources.proxy.fail(1_000_000, status=403, match="a.zarr/RNA/countSummaries/rowPositive/c/")
    with pytest.raises(cv.SourceUnavailableError) as refused:
        cv.open_store(composite, source_storage_options=sources.options())
    said = str(refused.value)
    assert "RNA/countSummaries/rowPositive/c/0 was answered 403" in said, said
    assert "nothing the store records proves it absent" in said
    assert "may not read" not in said


def test_a_mount_opens_with_absent_keys_answered_403(sources: Sources, tmp_path: Path) -> None:
    target = tmp_path / "mine.zarr"
    url = sources.urls["a"]
    cv.mount_datastore(url, target, source_storage_options=sources.direct).close()
    sources.proxy.take()
    mount = cv.open_store(target, source_storage_options=sources.unlisted)
    opened = sources.proxy.take()
    # the one refused listing, the 14 documents, 2 summaries, a HEAD per shard
    grid = _grid(sources, "a")
    assert _kinds(opened) == {"LIST": 1, "GET": 16, "HEAD": len(grid)}, opened
    expected = sources.matrices["a"].toarray()
    np.testing.assert_array_equal(mount.reader().read(), expected)
    rows, columns = np.array([0, 99, 100, 299]), np.array([0, 35, 36, 39])
    np.testing.assert_array_equal(mount.reader()[rows, :], expected[rows])
    np.testing.assert_array_equal(mount.reader()[:, columns], expected[:, columns])
    read = sources.proxy.take()
    assert not [r for r in read if any(f"/a.zarr/{key}" in r.path for key in _ABSENT)], read
    mount.close()


def test_the_proved_absent_keys_travel_with_a_pickled_source_store() -> None:
    """A source store pickled on its own (not reopened) keeps what its open proved:
    asked again there, such a key would be answered 403."""
    from zarr.storage import MemoryStore

    from cytearc_vfs.remote.pinned_store import PinnedSourceStore

    backend = MemoryStore()
    # a value there is never read: the proof says zeros (and where the backend
    # answers 403, it is never asked)
    sync(backend.set("RNA/counts/c/0/0", prototype().buffer.from_bytes(b"x")))
    pinned = PinnedSourceStore(backend, name="a", where="s3://b/a.zarr")
    pinned.pins.mark_absent(["RNA/counts/c/0/0"])
    copy = pickle.loads(pickle.dumps(pinned))
    assert copy.pins.absent("RNA/counts/c/0/0")
    assert sync(copy.get("RNA/counts/c/0/0", prototype())) is None
