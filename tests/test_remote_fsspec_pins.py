"""Sources read through fsspec's s3fs are pinned as obstore's are.

A composite or mount opened over ``s3://`` sources with
``{"backend": "fsspec"}`` pins each shard object to the ETag its open's
listing shows, and reads it with ``GetObject IfMatch=<ETag>``: an object
replaced afterwards is an ``IdentityMismatchError``, a deleted one a
``SourceGoneError``, never different valid values. Real moto S3 server on loopback,
behind the counting proxy; objects are replaced with s3fs, as another writer
would.
"""

from __future__ import annotations

import pickle
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import s3fs
import zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen
from read_paths import PATHS, Read
from s3_server import S3Server, fsspec_options
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore

import cytearc_vfs as cv
from cytearc_vfs.remote import s3fs_objects
from cytearc_vfs.remote.locations import open_location
from cytearc_vfs.remote.pinned_store import PinnedSourceStore
from cytearc_vfs.remote.s3fs_objects import s3fs_filesystem
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV

pytestmark = pytest.mark.remote

SMALL = cv.LayoutPolicy(8192, 1024)  # 400 x 60 (stored as small ints): several row shards
CELLS = {"a": 400, "b": 300}
FEATURES = 60
FIRST = np.arange(0, 12)  # rows of a's first shard
LATER = np.arange(330, 345)  # rows of a's last shard, not read before
OTHER = np.arange(600, 610)  # rows of b


def counts_of(name: str, seed: int) -> Any:
    return realistic_counts(CELLS[name], FEATURES, density=0.1, seed=seed, dtype="int64")


@dataclass
class Remote:
    """Sources ``a`` and ``b`` in a bucket (or a prefix) of their own and a composite of both."""

    bucket: str
    """The bucket, or a ``bucket/prefix`` in one, where ``a.zarr`` and ``b.zarr`` are."""
    root: Path
    proxy: LoopbackProxy
    server: S3Server
    other: str
    """``bucket/other.zarr`` of :func:`other`."""
    _writer: Any = field(default=None, repr=False)

    @property
    def sources(self) -> dict[str, str]:
        return {name: f"s3://{self.bucket}/{name}.zarr" for name in CELLS}

    @property
    def options(self) -> dict[str, dict[str, Any]]:
        return {name: fsspec_options(self.proxy.endpoint) for name in CELLS}

    def open(self) -> cv.CompositeStore:
        store = cv.open_store(self.root / "comp.zarr", source_storage_options=self.options)
        assert isinstance(store, cv.CompositeStore)
        return store

    def open_mount(self) -> cv.MountStore:
        """A mount of ``a`` made and opened."""
        cv.mount_datastore(
            self.sources["a"], self.root / "mount.zarr", source_storage_options=self.options["a"]
        ).close()
        mount = cv.open_store(self.root / "mount.zarr", source_storage_options=self.options["a"])
        assert isinstance(mount, cv.MountStore)
        return mount

    def filesystem(self) -> Any:
        """An s3fs filesystem of its own, straight to the server (another writer).

        Made once per :class:`Remote`: each new one costs ~0.2 s of CPU (a botocore
        session loading the S3 service model), and a test asked for three or more.
        Its listing cache is dropped at each call, so each call sees the bucket as a
        new filesystem would."""
        if self._writer is None:
            self._writer = s3_server_filesystem(self.server)
        self._writer.invalidate_cache()
        return self._writer

    def shards(self, store: str) -> list[str]:
        """The chunk objects of ``store`` (``a.zarr``, or a ``bucket/name.zarr`` path)."""
        fs = self.filesystem()
        where = store if "/" in store else f"{self.bucket}/{store}"
        found = fs.find(f"{where}/RNA/")
        return sorted(path for path in found if "/c/" in path)


def s3_server_filesystem(server: S3Server) -> Any:
    """An s3fs filesystem of its own, straight to ``server``."""
    return s3fs.S3FileSystem(
        endpoint_url=server.endpoint,
        key="testing-key",
        secret="testing-secret",
        client_kwargs={"region_name": "us-east-1"},
        skip_instance_cache=True,
    )


def expected() -> npt.NDArray[np.int64]:
    return np.vstack([counts_of(name, seed).toarray() for seed, name in enumerate(CELLS)])


def write(server: S3Server, url: str, matrix: Any) -> None:
    features = [f"g{i}" for i in range(FEATURES)]
    cv.write_counts(
        url, matrix, features=features, layout=SMALL, storage_options=server.storage_options()
    )


@pytest.fixture(scope="module")
def other(s3_server: S3Server) -> str:
    """The store ``other`` (``a``'s shape, other values), written once for the module:
    the replacement tests copy its shards over ``a``'s."""
    bucket = s3_server.new_bucket()
    write(s3_server, f"s3://{bucket}/other.zarr", counts_of("a", 9))
    return f"{bucket}/other.zarr"


def written(server: S3Server) -> str:
    """A new bucket with sources ``a`` and ``b`` written."""
    bucket = server.new_bucket()
    for seed, name in enumerate(CELLS):
        write(server, f"s3://{bucket}/{name}.zarr", counts_of(name, seed))
    return bucket


@pytest.fixture(scope="module")
def originals(s3_server: S3Server) -> str:
    """Sources ``a`` and ``b`` written once for the module; no test changes them."""
    return written(s3_server)


def copied(server: S3Server, originals: str) -> str:
    """The objects of ``originals`` copied by the server (CopyObject, no bytes through
    the test) under a prefix of their own: a ``bucket/prefix`` where :class:`Remote`
    takes a bucket."""
    import obstore
    from obstore.store import from_url

    bucket = from_url(f"s3://{originals}", **server.storage_options())
    prefix = uuid.uuid4().hex[:12]
    for page in obstore.list(bucket, prefix=""):
        for meta in page:
            if not meta["path"].startswith(("a.zarr/", "b.zarr/")):
                continue
            obstore.copy(bucket, meta["path"], f"{prefix}/{meta['path']}")
    return f"{originals}/{prefix}"


def made(root: Path, bucket: str, server: S3Server, proxy: LoopbackProxy, other: str) -> Remote:
    """The composite of ``bucket``'s sources in ``root``, its requests taken."""
    remote = Remote(bucket, root, proxy, server, other)
    cv.create_composite(
        root / "comp.zarr", remote.sources, source_storage_options=remote.options
    ).close()
    assert len([key for key in remote.shards("a.zarr") if "/counts/c/" in key]) > 2
    proxy.take()
    return remote


@pytest.fixture
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # no source cache: every read reaches the server (a cached shard is served for
    # the version the open pinned, test_the_cache_serves_only_the_pinned_version)
    monkeypatch.setenv(CACHE_ENV, "0")
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)


@pytest.fixture(scope="module")
def shared(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server, originals: str, other: str
) -> Iterator[Remote]:
    """Sources and a composite of them made once for the module: for the tests that
    change nothing."""
    proxy = LoopbackProxy(s3_server.endpoint)
    root = tmp_path_factory.mktemp("shared")
    try:
        yield made(root, originals, s3_server, proxy, other)
    finally:
        proxy.close()


@pytest.fixture
def unchanged(shared: Remote, no_cache: None) -> Remote:
    """:func:`shared`, its proxy's requests taken: sources no test changes."""
    shared.proxy.take()
    return shared


@pytest.fixture
def remote(
    tmp_path: Path,
    s3_server: S3Server,
    s3_proxy: LoopbackProxy,
    originals: str,
    other: str,
    no_cache: None,
) -> Remote:
    """Sources of the test's own (copies of :func:`originals`) and a composite of
    them: the test may change them."""
    return made(tmp_path, copied(s3_server, originals), s3_server, s3_proxy, other)


# ------------------------------------------------------------- replacing


def replace_with_other(remote: Remote) -> None:
    """a's shard objects overwritten with those of ``other`` (other values, other sizes)."""
    fs = remote.filesystem()
    changed = 0
    for path in remote.shards(remote.other):
        target = path.replace(remote.other, f"{remote.bucket}/a.zarr", 1)
        before = fs.size(target) if fs.exists(target) else None
        data = fs.cat_file(path)
        fs.pipe_file(target, data)
        changed += before != len(data)
    assert changed  # some shard has another size now


def replace_same_size(remote: Remote) -> None:
    """Every shard object of ``a`` written again with one byte changed: the same size."""
    fs = remote.filesystem()
    for path in remote.shards("a.zarr"):
        data = bytearray(fs.cat_file(path))
        data[len(data) // 3] ^= 0xFF
        fs.pipe_file(path, bytes(data))
        assert fs.size(path) == len(data)


def delete_shards(remote: Remote) -> None:
    fs = remote.filesystem()
    fs.rm(remote.shards("a.zarr"))


REPLACEMENTS = {"other size": replace_with_other, "same size": replace_same_size}


def refused(read: Callable[[], Any], remote: Remote, *, who: str = "source 'a'") -> None:
    with pytest.raises(cv.IdentityMismatchError) as caught:
        read()
    message = str(caught.value)
    assert f"{who} at s3://{remote.bucket}/a.zarr: RNA/counts" in message
    assert "changed while this store was open" in message
    assert "Restore the source and reopen" in message


def _opened_reads(remote: Remote, first_read: bool) -> tuple[list[Any], dict[str, Read]]:
    """A store opened for each read path (each its own state), and each path's reads;
    with ``first_read``, each has read rows of a's first shard already."""
    stores = [remote.open() for _ in PATHS]
    reads = {name: path(store) for (name, path), store in zip(PATHS.items(), stores, strict=True)}
    if first_read:
        for read in reads.values():
            np.testing.assert_array_equal(read(FIRST), expected()[FIRST])
    return stores, reads


@pytest.mark.parametrize("first_read", [False, True], ids=["before a read", "after a read"])
@pytest.mark.parametrize("replace", REPLACEMENTS.values(), ids=REPLACEMENTS.keys())
def test_an_object_replaced_after_the_open_is_refused(
    remote: Remote, replace: Callable[[Remote], None], first_read: bool
) -> None:
    """Through the gather reader and plain zarr (read_paths), each from a store of its own."""
    stores, reads = _opened_reads(remote, first_read)
    replace(remote)
    for read in reads.values():
        refused(lambda read=read: read(FIRST), remote)
        refused(lambda read=read: read(LATER), remote)
    # the other source still reads through the gather reader (plain zarr's chunk
    # spans both sources)
    np.testing.assert_array_equal(reads["gather reader"](OTHER), expected()[OTHER])
    for store in stores:
        store.close()


@pytest.mark.parametrize("first_read", [False, True], ids=["before a read", "after a read"])
def test_a_deleted_object_is_a_source_gone_error(remote: Remote, first_read: bool) -> None:
    stores, reads = _opened_reads(remote, first_read)
    delete_shards(remote)
    for read in reads.values():
        for rows in (FIRST, LATER):
            with pytest.raises(
                cv.SourceGoneError,
                match=rf"source 'a' at s3://{remote.bucket}/a\.zarr: .*"
                r"no longer exists",
            ) as caught:
                read(rows)
            assert isinstance(caught.value, FileNotFoundError)
    for store in stores:
        store.close()


def test_a_mount_of_an_s3fs_source_is_pinned(remote: Remote) -> None:
    mount = remote.open_mount()
    reader = mount.reader()
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    replace_with_other(remote)
    for rows in (FIRST, LATER):
        refused(lambda rows=rows: reader.read(cells=rows), remote, who="the mount's source")
    mount.close()


def test_a_pickled_composite_reopens_and_still_pins(remote: Remote) -> None:
    copy = pickle.loads(pickle.dumps(remote.open()))
    reader = copy.reader()
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    replace_same_size(remote)
    refused(lambda: reader.read(cells=FIRST), remote)
    refused(lambda: reader.read(cells=LATER), remote)
    copy.close()


def test_the_cache_serves_only_the_pinned_version(
    remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, "64M")
    store = remote.open()
    reader = store.reader()
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    replace_with_other(remote)
    # the shard cached at the pinned version: the values the open verified
    np.testing.assert_array_equal(reader.read(cells=FIRST), expected()[FIRST])
    refused(lambda: reader.read(cells=LATER), remote)  # a shard not cached: the server
    store.close()


# ---------------------------------------------------- unchanged sources


def shard_requests(seen: list[Seen]) -> list[Seen]:
    return [request for request in seen if "/c/" in request.path]


def test_an_unchanged_source_reads_exactly_with_conditional_requests(unchanged: Remote) -> None:
    store = unchanged.open()
    reader = store.reader()
    assert isinstance(reader, cv.VirtualArrayReader)
    unchanged.proxy.take()
    rows = np.arange(0, 700, 3)
    np.testing.assert_array_equal(reader.read(cells=rows), expected()[rows])
    first = unchanged.proxy.take()
    # one GetObject per fetch the reader counted, no HEAD, and each conditional: the
    # open pinned every shard from its listing
    assert len(first) == reader.stats.requests
    assert {seen.method for seen in first} == {"GET"}
    assert first and all(seen.if_match for seen in first)
    store.close()


def _zarr_reads(store: Any, proxy: LoopbackProxy) -> tuple[list[Any], list[Seen]]:
    """Values and requests of reads through zarr's sharding codec: whole arrays, one
    row, a few scattered rows (index suffixes, inner-chunk ranges, whole shards)."""
    proxy.take()
    values = []
    for path in ("RNA/counts", "RNA/countsT"):
        array = zarr.open_array(store, path=path, mode="r", zarr_format=3)
        values += [array[:], array[5], array.oindex[[1, 30, 59], :]]
    return values, shard_requests(proxy.take())


def test_zarr_reads_send_what_fsspec_sends_with_if_match(unchanged: Remote) -> None:
    options = fsspec_options(unchanged.proxy.endpoint)
    url = unchanged.sources["a"]
    plain = open_location(url, read_only=True, storage_options=options)
    assert isinstance(plain, FsspecStore)
    pinned = PinnedSourceStore(
        open_location(url, read_only=True, storage_options=options), name="a", where=url
    )
    assert sync(pinned.pin_listing("RNA/counts")) > 0
    assert sync(pinned.pin_listing("RNA/countsT")) > 0
    expected_values, plain_seen = _zarr_reads(plain, unchanged.proxy)
    values, pinned_seen = _zarr_reads(pinned, unchanged.proxy)
    for got, want in zip(values, expected_values, strict=True):
        np.testing.assert_array_equal(got, want)
    plain_gets = [seen for seen in plain_seen if seen.method == "GET"]
    # the same GETs, with the same ranges, no more; each conditional. FsspecStore
    # also sends a HEAD before each whole-object GET (s3fs sizes it first): gone
    assert sorted((s.path, str(s.range)) for s in pinned_seen) == sorted(
        (s.path, str(s.range)) for s in plain_gets
    )
    assert len(pinned_seen) <= len(plain_seen)
    assert all(seen.method == "GET" and seen.if_match for seen in pinned_seen)


REQUESTS: dict[str, ByteRequest | None] = {
    "whole": None,
    "range": RangeByteRequest(10, 500),
    "offset": OffsetByteRequest(100),
    "suffix": SuffixByteRequest(64),
    "suffix past the start": SuffixByteRequest(10**9),
    "suffix of nothing": SuffixByteRequest(0),
    "offset past the end": OffsetByteRequest(10**9),
    "range past the end": RangeByteRequest(10**9, 10**9 + 5),
}


@pytest.mark.parametrize("byte_range", REQUESTS.values(), ids=REQUESTS.keys())
def test_every_byte_request_gives_fsspec_store_bytes(
    unchanged: Remote, byte_range: ByteRequest | None
) -> None:
    options = fsspec_options(unchanged.proxy.endpoint)
    url = unchanged.sources["a"]
    plain = open_location(url, read_only=True, storage_options=options)
    pinned = PinnedSourceStore(
        open_location(url, read_only=True, storage_options=options), name="a", where=url
    )
    sync(pinned.pin_listing("RNA/counts"))
    prototype = default_buffer_prototype()
    key = "RNA/counts/c/0/0"
    want = sync(plain.get(key, prototype, byte_range))
    unchanged.proxy.take()
    got = sync(pinned.get(key, prototype, byte_range))
    assert want is not None and got is not None
    assert got.to_bytes() == want.to_bytes()
    seen = unchanged.proxy.take()
    assert len(seen) == 1 and seen[0].if_match  # one conditional GetObject
    # an absent chunk is absent, as it is through FsspecStore
    assert sync(plain.get("RNA/counts/c/99/0", prototype, byte_range)) is None


def test_metadata_keys_are_read_as_fsspec_reads_them(unchanged: Remote) -> None:
    options = fsspec_options(unchanged.proxy.endpoint)
    url = unchanged.sources["a"]
    plain = open_location(url, read_only=True, storage_options=options)
    pinned = PinnedSourceStore(
        open_location(url, read_only=True, storage_options=options), name="a", where=url
    )
    prototype = default_buffer_prototype()
    for key in ("zarr.json", "RNA/counts/zarr.json"):
        got, want = sync(pinned.get(key, prototype)), sync(plain.get(key, prototype))
        assert got is not None and want is not None and got.to_bytes() == want.to_bytes()
        assert pinned.token(key) is None  # not a chunk: not pinned
    assert sync(pinned.get("absent.json", prototype)) is None


# ------------------------------------------------------------ the open


def test_an_open_through_s3fs_costs_one_listing_per_source(unchanged: Remote) -> None:
    """Creation seals each source's documents with the ETag of the GetObject that read
    them (as through obstore); the open's listing shows them unchanged, so it fetches
    none and pins every shard: before, 12 documents, absent-key probes and HEADs."""
    store = unchanged.open()
    opened = unchanged.proxy.take()
    shown = [(seen.method, seen.path) for seen in opened]
    assert len(opened) == len(CELLS), shown
    assert all(seen.method == "GET" and "list-type=2" in seen.path for seen in opened), shown
    np.testing.assert_array_equal(store.reader().read(), expected())
    store.close()


def test_the_request_counts_of_docs_remote_md(
    tmp_path: Path,
    s3_server: S3Server,
    s3_proxy: LoopbackProxy,
    originals: str,
    other: str,
    no_cache: None,
) -> None:
    """The "now" column of docs/remote.md's table of requests through s3fs."""
    remote = Remote(copied(s3_server, originals), tmp_path, s3_proxy, s3_server, other)
    s3_proxy.take()
    cv.create_composite(
        tmp_path / "comp.zarr", remote.sources, source_storage_options=remote.options
    ).close()
    created = s3_proxy.take()
    listings = [seen for seen in created if "list-type=2" in seen.path]
    assert len(created) == 60 and len(listings) == 2
    assert sum(seen.method == "HEAD" for seen in created) == 8
    store = remote.open()
    assert len(s3_proxy.take()) == 2  # a listing per source
    np.testing.assert_array_equal(store.reader().read(), expected())
    assert len(s3_proxy.take()) == 6  # a GetObject per shard, each whole
    store.close()
    remote.open_mount().close()
    s3_proxy.take()
    mount = cv.open_store(tmp_path / "mount.zarr", source_storage_options=remote.options["a"])
    assert len(s3_proxy.take()) == 13  # 12 documents, 1 listing
    np.testing.assert_array_equal(mount.reader().read(), expected()[: CELLS["a"]])
    assert len(s3_proxy.take()) == 3
    mount.close()


def test_a_changed_document_is_fetched_again_at_open(remote: Remote) -> None:
    fs = remote.filesystem()
    path = f"{remote.bucket}/a.zarr/RNA/zarr.json"
    fs.pipe_file(path, fs.cat_file(path) + b" ")  # the same document, another object
    store = remote.open()
    opened = remote.proxy.take()
    gets = [seen.path for seen in opened if "list-type" not in seen.path]
    assert len(opened) == len(CELLS) + 1 and gets[0].endswith("/a.zarr/RNA/zarr.json"), gets
    np.testing.assert_array_equal(store.reader().read(cells=FIRST), expected()[FIRST])
    store.close()


# ----------------------------------------------------- other backends


def test_only_s3fs_pins(tmp_path: Path) -> None:
    local = FsspecStore.from_url(f"file://{tmp_path}")
    assert s3fs_filesystem(local) is None
    memory = FsspecStore.from_url("memory://pins")
    assert s3fs_filesystem(memory) is None
    assert PinnedSourceStore(memory, name="m", where="memory://pins")._s3fs is None


def test_an_s3fs_without_the_calls_pins_nothing_and_says_so(unchanged: Remote) -> None:
    class Older(s3fs.S3FileSystem):  # an s3fs release that renamed its private call
        _call_s3 = None

    fs = Older(
        endpoint_url=unchanged.server.endpoint,
        key="testing-key",
        secret="testing-secret",
        client_kwargs={"region_name": "us-east-1"},
        skip_instance_cache=True,
        asynchronous=True,
    )
    store = FsspecStore(fs, path=f"{unchanged.bucket}/a.zarr", read_only=True)
    with pytest.warns(RuntimeWarning, match=r"_call_s3.*obstore"):
        assert s3fs_filesystem(store) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert s3fs_filesystem(store) is None  # warned once per class
    assert Older in s3fs_objects._WARNED
