"""Round trips of remote composites and mounts, counted at a proxy in front of a real S3 server.

Open, create and read costs are asserted in requests (never in time): an
open of a composite is one listing per source when the sources did not
change, no Zarr v2 key is ever asked for, and a read fetches a densely
touched shard in one request.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server
from zarr.storage import LocalStore

import cytearc_vfs as cv
from cytearc_vfs.composite.source_seals import SEALS_PATH
from cytearc_vfs.read import range_requests
from cytearc_vfs.read.shard_reader import coalesce_ranges
from cytearc_vfs.remote.locations import open_location

pytestmark = pytest.mark.remote

SMALL = cv.LayoutPolicy(64 * 1024, 4096)
V2_NAMES = {".zgroup", ".zattrs", ".zmetadata", ".zarray"}


@dataclass(frozen=True)
class Request:
    """One request as the proxy saw it, in the store's terms."""

    listing: bool
    key: str
    """The key, or the listing's prefix, relative to the bucket."""
    range: str | None


def requests(seen: list[Seen]) -> list[Request]:
    found = []
    for request in seen:
        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        listing = "list-type" in query
        key = query.get("prefix", [""])[0] if listing else parts.path.split("/", 2)[-1]
        found.append(Request(listing, key, request.range))
    return found


def per_source(found: list[Request]) -> Counter[str]:
    return Counter(request.key.split("/", 1)[0] for request in found)


def assert_no_probes(found: list[Request]) -> None:
    keys = [request.key for request in found if not request.listing]
    assert not [key for key in keys if key.rsplit("/", 1)[-1] in V2_NAMES]
    assert not [key for key in keys if key.endswith("zarr.json/zarr.json")]


@dataclass
class Remote:
    bucket: str
    sources: dict[str, str]
    options: dict[str, Any]
    direct: dict[str, Any]
    expected: np.ndarray
    proxy: LoopbackProxy

    def source_options(self) -> dict[str, dict[str, Any]]:
        return {name: self.options for name in self.sources}

    def take(self) -> list[Request]:
        return requests(self.proxy.take())


@dataclass(frozen=True)
class Sources:
    bucket: str
    sources: dict[str, str]
    expected: np.ndarray


def _write_sources(s3_server: S3Server) -> Sources:
    """Three sources of 2000 cells in a new bucket, written directly (not counted)."""
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    matrices = [realistic_counts(2000, 40, density=0.2, seed=30 + i) for i in range(3)]
    sources = {}
    for index, matrix in enumerate(matrices):
        url = f"s3://{bucket}/s{index}.zarr"
        cv.write_counts(url, matrix, layout=SMALL, storage_options=direct)
        sources[f"s{index}"] = url
    return Sources(bucket, sources, np.vstack([matrix.toarray() for matrix in matrices]))


@pytest.fixture(scope="module")
def shared_sources(s3_server: S3Server) -> Sources:
    """The sources of every test that leaves them as they are: written once per
    module (writing them was most of each test's time). A test that changes a
    source takes ``fresh_remote`` instead."""
    return _write_sources(s3_server)


def _remote(s3_server: S3Server, written: Sources) -> Iterator[Remote]:
    # a proxy of the test's own: its requests alone are counted, and its
    # endpoint (so the clients and stores over it) is new
    proxy = LoopbackProxy(s3_server.endpoint)
    direct = s3_server.storage_options()
    try:
        yield Remote(
            written.bucket,
            written.sources,
            {**direct, "endpoint": proxy.endpoint},
            direct,
            written.expected,
            proxy,
        )
    finally:
        proxy.close()


@pytest.fixture
def remote(s3_server: S3Server, shared_sources: Sources) -> Iterator[Remote]:
    """The module's sources, read (never changed) through a proxy of this test's."""
    yield from _remote(s3_server, shared_sources)


@pytest.fixture
def fresh_remote(s3_server: S3Server) -> Iterator[Remote]:
    """Sources of this test's own, in a bucket of its own: for a test that changes them."""
    yield from _remote(s3_server, _write_sources(s3_server))


@pytest.fixture(scope="module")
def shared_composite(
    s3_server: S3Server, shared_sources: Sources, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A composite of the module's sources, created once (directly: its creation is
    not what a test counts)."""
    location = tmp_path_factory.mktemp("round_trips") / "c.zarr"
    direct = s3_server.storage_options()
    options = {name: direct for name in shared_sources.sources}
    cv.create_composite(location, shared_sources.sources, source_storage_options=options).close()
    return location


@pytest.fixture
def composite(shared_composite: Path, tmp_path: Path) -> Path:
    """A copy of ``shared_composite`` of this test's own (a test may edit its record)."""
    return Path(shutil.copytree(shared_composite, tmp_path / "c.zarr"))


def _create(remote: Remote, tmp_path: Path) -> Path:
    location = tmp_path / "c.zarr"
    cv.create_composite(
        location, remote.sources, source_storage_options=remote.source_options()
    ).close()
    return location


def _open(remote: Remote, location: Path) -> cv.CompositeStore:
    store = cv.open_store(location, source_storage_options=remote.source_options())
    assert isinstance(store, cv.CompositeStore)
    return store


# ---------------------------------------------------------------- opening


def test_an_open_is_one_listing_per_unchanged_source(remote: Remote, composite: Path) -> None:
    location = composite
    remote.take()
    store = _open(remote, location)
    found = remote.take()
    assert per_source(found) == {f"s{i}.zarr": 1 for i in range(3)}  # at most 2 allowed
    assert all(request.listing for request in found)
    np.testing.assert_array_equal(store.reader().read(), remote.expected)
    store.close()


def test_creation_costs_a_bounded_number_of_requests_per_source(
    remote: Remote, tmp_path: Path
) -> None:
    remote.take()
    _create(remote, tmp_path)
    found = remote.take()
    assert_no_probes(found)
    counts = per_source(found)
    # 12 documents and a listing to verify; per table (ids, names, I) 2 column
    # documents (the ids document is one of the 12) and 3 chunks; 3 summary
    # chunks. The store it returns reuses the sources it verified.
    assert set(counts) == {f"s{i}.zarr" for i in range(3)}
    assert max(counts.values()) <= 12 + 1 + 2 * (2 + 3) + 3
    assert sum(request.listing for request in found) == 3


def test_a_changed_source_document_is_fetched_and_checked(
    fresh_remote: Remote, tmp_path: Path
) -> None:
    remote = fresh_remote
    location = _create(remote, tmp_path)
    writable = open_location(remote.sources["s1"], read_only=False, storage_options=remote.direct)
    group = zarr.open_group(writable, path="RNA/countSummaries", mode="r+", zarr_format=3)
    group.attrs["source_fingerprint"] = "sha256:" + "2" * 64
    remote.take()
    with pytest.raises(cv.IdentityMismatchError, match="bound to other counts"):
        _open(remote, location)
    found = remote.take()
    # the changed document alone is fetched: its version is not the sealed one
    changed = [r for r in found if r.key.startswith("s1.zarr") and not r.listing]
    assert [r.key for r in changed] == ["s1.zarr/RNA/countSummaries/zarr.json"]


def test_a_new_assay_in_a_source_is_read_from_the_listing(
    fresh_remote: Remote, tmp_path: Path
) -> None:
    remote = fresh_remote
    location = _create(remote, tmp_path)
    writable = open_location(remote.sources["s2"], read_only=False, storage_options=remote.direct)
    zarr.open_group(writable, mode="r+", zarr_format=3).create_group(
        "ADT", attributes={"cytearc:pending_assay": "write_counts"}
    )
    remote.take()
    with pytest.raises(cv.UnsupportedSourceError, match="pending derived assay"):
        _open(remote, location)
    found = remote.take()
    assert [r.key for r in found if r.key.startswith("s2.zarr") and not r.listing] == [
        "s2.zarr/ADT/zarr.json"
    ]


def test_an_edited_seal_is_refused(remote: Remote, composite: Path) -> None:
    location = composite
    seal = zarr.open_array(LocalStore(location), path=SEALS_PATH, mode="r+", zarr_format=3)
    values = np.asarray(seal[:])
    values[-2] = ord(" ")  # still JSON, another document
    seal[:] = values
    with pytest.raises(cv.IdentityMismatchError, match="sourceSeals has fingerprint"):
        _open(remote, location)


def test_a_seal_copied_from_another_composite_is_refused(remote: Remote, composite: Path) -> None:
    """A seal binds the sources of the record it was written for: one copied
    beside another record (here: its sources renamed) is refused, not read."""
    location = composite
    root = json.loads((location / "zarr.json").read_bytes())
    for source in root["attributes"]["composite"]["sources"]:
        source["location"] += "/"
    (location / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(cv.IdentityMismatchError, match="written for other sources"):
        _open(remote, location)


def test_a_seal_without_its_fingerprints_is_refused(remote: Remote, composite: Path) -> None:
    location = composite
    document = location / SEALS_PATH / "zarr.json"
    array = json.loads(document.read_bytes())
    array["attributes"] = {}
    document.write_text(json.dumps(array))
    with pytest.raises(cv.RecordShapeError, match="sourceSeals"):
        _open(remote, location)


def test_the_record_holds_only_the_fields_of_the_spec(remote: Remote, composite: Path) -> None:
    location = composite
    record = json.loads((location / "zarr.json").read_bytes())["attributes"]["composite"]
    assert set(record) == {"assay", "sources", "arrays", "maps", "complete"}
    assert (location / SEALS_PATH / "zarr.json").exists()


def test_a_composite_without_seals_opens_in_one_round_per_source(
    remote: Remote, composite: Path
) -> None:
    """A composite created before sources were sealed: every document is fetched,
    all in one round with the listing, and still no v2 key."""
    location = composite
    shutil.rmtree(location / SEALS_PATH)
    remote.take()
    store = _open(remote, location)
    found = remote.take()
    assert_no_probes(found)
    counts = per_source(found)
    assert counts == {f"s{i}.zarr": 13 for i in range(3)}  # 12 documents and a listing
    np.testing.assert_array_equal(store.reader().read(), remote.expected)
    store.close()


def test_a_mount_of_a_remote_source_opens_in_one_round(remote: Remote, tmp_path: Path) -> None:
    cv.mount_datastore(
        remote.sources["s0"], tmp_path / "m.zarr", source_storage_options=remote.options
    ).close()
    remote.take()
    mount = cv.open_store(tmp_path / "m.zarr", source_storage_options=remote.options)
    found = remote.take()
    assert_no_probes(found)
    assert len(found) == 13 and sum(r.listing for r in found) == 1  # 12 documents, 1 listing
    np.testing.assert_array_equal(mount.reader().read(), remote.expected[:2000])
    assert not [r for r in remote.take() if r.key.endswith("zarr.json")]  # from the open's
    mount.close()


def test_a_composite_whose_own_store_is_remote(remote: Remote) -> None:
    url = f"s3://{remote.bucket}/composite.zarr"
    created = cv.create_composite(
        url,
        remote.sources,
        storage_options=remote.options,
        source_storage_options=remote.source_options(),
    )
    created.close()
    remote.take()
    store = cv.open_store(
        url, storage_options=remote.options, source_storage_options=remote.source_options()
    )
    found = remote.take()
    assert_no_probes(found)
    assert per_source(found)["s0.zarr"] == 1
    own = [r for r in found if r.key.startswith("composite.zarr")]
    assert len(own) <= 20, own  # see docs/remote.md
    # each document and listing of its own store once: open_store's look at what
    # the store is and the composite's checks share them (the root was read 3 times,
    # the top-level listing and three documents twice: 26 requests)
    documents = [r.key for r in own if r.key.endswith("zarr.json")]
    listings = [r.key for r in own if r.listing]
    assert len(documents) == len(set(documents)) and len(listings) == len(set(listings)), own
    np.testing.assert_array_equal(store.reader().read(), remote.expected)
    remote.take()
    # warm: every later reader of the same open store (a new reader, plain zarr, a
    # subset) is served from memory and the source cache, not one more request each
    # for the composite's feature map
    np.testing.assert_array_equal(store.reader().read(), remote.expected)
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[::7], remote.expected[::7])
    np.testing.assert_array_equal(store.reader().read(None, [3, 1]), remote.expected[:, [3, 1]])
    assert remote.take() == []
    store.close()


def test_a_composite_whose_own_store_is_remote_through_s3fs(remote: Remote) -> None:
    """The same composite opened and read through s3fs (``backend: fsspec``): the same
    values, one listing per source, and the composite's own store in the requests
    docs/remote.md gives (zarr's FsspecStore sizes each whole object with a HEAD first,
    and s3fs answers an absent key with a HEAD and a listing)."""
    url = f"s3://{remote.bucket}/composite-fsspec.zarr"
    cv.create_composite(
        url,
        remote.sources,
        storage_options=remote.direct,
        source_storage_options={name: remote.direct for name in remote.sources},
    ).close()
    fsspec = {
        "backend": "fsspec",
        "endpoint_url": remote.proxy.endpoint,
        "key": remote.direct["access_key_id"],
        "secret": remote.direct["secret_access_key"],
        "client_kwargs": {"region_name": remote.direct["region"]},
    }
    remote.take()
    store = cv.open_store(
        url, storage_options=fsspec, source_storage_options=dict.fromkeys(remote.sources, fsspec)
    )
    found = remote.take()
    assert_no_probes(found)
    assert per_source(found)["s0.zarr"] == 1
    own = [r for r in found if r.key.startswith("composite-fsspec.zarr")]
    assert len(own) <= 40, len(own)  # 38 measured; see docs/remote.md
    np.testing.assert_array_equal(store.reader().read(), remote.expected)
    store.close()


# ---------------------------------------------------------------- reading


def _shard_rows(store: cv.CompositeStore) -> tuple[int, int]:
    counts = store.reader()._mapping.sources[0].counts
    return counts.shards[0], counts.chunks[0]  # type: ignore[index]


def test_a_dense_read_is_one_request_per_touched_shard(remote: Remote, composite: Path) -> None:
    store = _open(remote, composite)
    shard_rows, _ = _shard_rows(store)
    cells = np.arange(0, 6000, 2)  # every chunk of every shard of every source
    remote.take()
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(cells, None), remote.expected[cells])
    found = remote.take()
    shards = -(-2000 // shard_rows)
    assert len(found) == 3 * shards and all(r.range is None for r in found)  # no index request
    store.close()


def test_neighbouring_chunks_of_a_sparse_read_share_one_request(
    remote: Remote, composite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(range_requests, "SMALL_SHARD_BYTES", 0)  # the ranged path
    store = _open(remote, composite)
    shard_rows, chunk_rows = _shard_rows(store)
    assert shard_rows >= 4 * chunk_rows, "the test needs shards of several chunks"
    cells = np.array([0, chunk_rows])  # two neighbouring chunks of the first shard of s0
    remote.take()
    np.testing.assert_array_equal(store.reader().read(cells, None), remote.expected[cells])
    found = remote.take()
    assert [r.range is not None and r.range.startswith("bytes=-") for r in found] == [True, False]
    assert found[1].range is not None  # one range for both chunks
    store.close()


def test_a_small_shard_is_one_request_whatever_a_read_touches(
    remote: Remote, composite: Path
) -> None:
    """A shard the table records as small is fetched whole: one round trip, not
    its index's and its chunks'."""
    store = _open(remote, composite)
    shard_rows, _ = _shard_rows(store)
    cells = np.array([0, 2000 + shard_rows])  # one cell in each of two shards
    remote.take()
    np.testing.assert_array_equal(store.reader().read(cells, None), remote.expected[cells])
    found = remote.take()
    assert len(found) == 2 and all(r.range is None for r in found)
    store.close()


def test_scattered_cells_cost_one_request_per_touched_shard(
    remote: Remote, composite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cells far apart in a shard: their chunks are fetched in one range request
    (the gaps cost less than another round trip), after the index."""
    monkeypatch.setattr(range_requests, "SMALL_SHARD_BYTES", 0)  # the ranged path
    store = _open(remote, composite)
    shard_rows, chunk_rows = _shard_rows(store)
    assert shard_rows >= 8 * chunk_rows, "the test needs shards of several chunks"
    cells = np.arange(0, 6000, 4 * chunk_rows)  # every 4th chunk: a sparse read
    remote.take()
    np.testing.assert_array_equal(store.reader().read(cells, None), remote.expected[cells])
    found = remote.take()
    touched = {(int(cell) // 2000, int(cell) % 2000 // shard_rows) for cell in cells}
    ranged = [r for r in found if r.range is not None and not r.range.startswith("bytes=-")]
    assert len(ranged) == len(touched)  # one per touched shard, beside its index suffix
    assert len(found) == 2 * len(touched)
    store.close()


def test_a_sparse_read_makes_the_requests_of_a_dense_one(
    remote: Remote, composite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_sparse`` over remote CyteArc sources (strips made CSR as they are
    decoded) equals ``read`` and fetches the same ranges (each from a fresh open:
    the source cache would answer the second)."""
    monkeypatch.setattr(range_requests, "SMALL_SHARD_BYTES", 0)  # the ranged path
    location = composite
    rng = np.random.default_rng(3)
    for cells in (np.sort(rng.choice(6000, 300, replace=False)), np.arange(1500, 4500)):
        found = []
        for sparse in (False, True):
            store = _open(remote, location)
            reader = store.reader()
            remote.take()
            block = reader.read_sparse(cells, None).toarray() if sparse else reader.read(cells)
            found.append(sorted((r.key, r.range or "") for r in remote.take()))
            np.testing.assert_array_equal(block, remote.expected[cells])
            store.close()
        assert found[0] == found[1] and found[0]


@pytest.mark.parametrize(
    ("offsets", "sizes", "expected"),
    [
        ([], [], []),
        ([0], [10], [(0, 10, [0])]),
        ([0, 10, 20], [10, 10, 10], [(0, 30, [0, 1, 2])]),  # adjacent
        ([0, 110], [100, 100], [(0, 210, [0, 1])]),  # 210 <= 1.25 * 200
        ([0, 160], [100, 100], [(0, 100, [0]), (160, 260, [1])]),  # 260 > 250
        ([500, 0, 250], [100, 100, 100], [(0, 100, [1]), (250, 350, [2]), (500, 600, [0])]),
        ([0, 100, 1000, 1010], [100, 100, 10, 10], [(0, 200, [0, 1]), (1000, 1020, [2, 3])]),
    ],
)
def test_coalesced_requests_carry_at_most_1_25x_the_bytes_needed(
    offsets: list[int], sizes: list[int], expected: list[tuple[int, int, list[int]]]
) -> None:
    runs = coalesce_ranges(offsets, sizes)
    assert runs == expected
    for start, stop, members in runs:
        assert stop - start <= 1.25 * sum(sizes[i] for i in members)
