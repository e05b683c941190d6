"""A composite whose CyteArc sources are on S3 with credentials that may read but
not list (no ``s3:ListBucket``): the loopback S3 server behind a proxy that
answers every listing ``403 Forbidden``, as S3 answers such credentials.

Opening it failed ("reading its listing failed ... may not read or list it"):
each source's open listed the whole source (its documents' versions, the
shards to pin), then its top level. Now a refused listing is read by path:
the documents at their keys, the assays the source declares, and a ``HEAD``
per shard for the pins the listing gave. Creating one still needs the
listing (a table's columns are found only by listing its group), and says so.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from cli_harness import run_main
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server, fsspec_options

import cytearc_vfs as cv
from cytearc_vfs.remote.locations import open_location

pytestmark = pytest.mark.remote

#: Rows per counts shard of the sources (a few shards each, so the pins are counted).
_LAYOUT = cv.LayoutPolicy(4 << 10, 1 << 10)


@dataclass(frozen=True)
class Unlisted:
    """Two S3 sources, a local composite over them, the options that list and the
    ones (through the refusing proxy) that may only read."""

    urls: dict[str, str]
    matrices: dict[str, Any]
    direct: dict[str, Any]
    unlisted: dict[str, Any]
    proxy: LoopbackProxy
    composite: Path

    def sources(self, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {name: options for name in self.urls}


@pytest.fixture
def unlisted(s3_server: S3Server, tmp_path: Path) -> Iterator[Unlisted]:
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    urls = {name: f"s3://{bucket}/{name}.zarr" for name in ("a", "b")}
    matrices = {
        "a": realistic_counts(300, 40, density=0.2, seed=5),
        "b": realistic_counts(200, 40, density=0.2, seed=6),
    }
    for name, url in urls.items():
        cv.write_counts(url, matrices[name], storage_options=direct, layout=_LAYOUT)
    composite = tmp_path / "c.zarr"
    # created with credentials that may list (creation copies the tables)
    cv.create_composite(
        composite, urls, source_storage_options={name: direct for name in urls}
    ).close()
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    try:
        yield Unlisted(
            urls, matrices, direct, {**direct, "endpoint": proxy.endpoint}, proxy, composite
        )
    finally:
        proxy.close()


def _shards(url: str, options: dict[str, Any]) -> list[str]:
    """The shard keys of the counts and countsT of the store at ``url`` (listed directly)."""
    from zarr.core.sync import sync

    store = open_location(url, read_only=True, storage_options=options)

    async def keys() -> list[str]:
        return [key async for key in store.list_prefix("RNA/") if "/c/" in key]

    return sorted(key for key in sync(keys()) if key.split("/")[1] in ("counts", "countsT"))


_SUMMARIES = ("columnPositive/", "rowPositive/", "rowSums/", "")


def _expected(unlisted: Unlisted) -> np.ndarray:
    return np.vstack([unlisted.matrices[name].toarray() for name in ("a", "b")])


def _kinds(seen: list[Seen]) -> Counter[str]:
    def kind(request: Seen) -> str:
        if "list-type" in request.path:
            return "LIST"
        return request.method

    return Counter(kind(request) for request in seen)


def test_a_composite_opens_and_reads_without_list_permission(unlisted: Unlisted) -> None:
    shards = {name: _shards(url, unlisted.direct) for name, url in unlisted.urls.items()}
    assert all(len(keys) >= 3 for keys in shards.values()), shards
    unlisted.proxy.take()
    store = cv.open_store(
        unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
    )
    opened = unlisted.proxy.take()
    kinds = _kinds(opened)
    # one refused listing a source, nothing listed again; a HEAD per shard (the pins
    # a listing gave), the documents by path (one v2 probe: the retired state group)
    assert kinds["LIST"] == 2, opened
    assert kinds["HEAD"] == sum(len(keys) for keys in shards.values()), opened
    heads = sorted(r.path.split("/", 2)[2] for r in opened if r.method == "HEAD")
    assert heads == sorted(f"{n}.zarr/{key}" for n, keys in shards.items() for key in keys)
    gets = Counter(r.path for r in opened if r.method == "GET" and "list-type" not in r.path)
    assert max(gets.values()) == 1, gets  # no document read twice
    documents = sorted(path.split(".zarr/", 1)[1] for path in gets if "/a.zarr/" in path)
    assert documents == [
        *(f"RNA/countSummaries/{name}zarr.json" for name in _SUMMARIES),
        "RNA/counts/zarr.json",
        "RNA/countsT/zarr.json",
        "RNA/featureData/ids/zarr.json",
        "RNA/featureData/zarr.json",
        "RNA/state/.zgroup",  # what the refused listing would have told absent
        "RNA/state/zarr.json",
        "RNA/zarr.json",
        "cellData/ids/zarr.json",
        "cellData/zarr.json",
        "zarr.json",
    ]
    assert kinds["GET"] == 2 * len(documents)
    assert set(kinds) == {"LIST", "GET", "HEAD"}
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], _expected(unlisted))
    reader = store.reader()
    rows = np.array([5, 299, 300, 499])
    np.testing.assert_array_equal(reader[rows, :], _expected(unlisted)[rows])
    read = _kinds(unlisted.proxy.take())
    assert read["LIST"] == 0 and read["HEAD"] == 0, read
    store.close()


def test_a_shard_replaced_after_an_unlisted_open_is_refused(unlisted: Unlisted) -> None:
    """The pins taken by HEAD hold as the listing's did: a shard replaced between the
    open and its first read is refused, never read."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store = cv.open_store(
        unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
    )
    source = open_location(unlisted.urls["a"], read_only=False, storage_options=unlisted.direct)
    key = _shards(unlisted.urls["a"], unlisted.direct)[0]
    value = sync(source.get(key, default_buffer_prototype())).to_bytes()
    sync(source.set(key, default_buffer_prototype().buffer.from_bytes(value + b"\0")))
    with pytest.raises(cv.IdentityMismatchError, match="changed while this store was open"):
        store.reader()[np.arange(3), :]
    store.close()


def test_a_changed_source_is_still_refused_without_list_permission(unlisted: Unlisted) -> None:
    """The fingerprints are compared as with a listing: a source written anew is refused."""
    cv.write_counts(
        unlisted.urls["b"],
        realistic_counts(200, 40, density=0.2, seed=7),
        storage_options=unlisted.direct,
        layout=_LAYOUT,
        overwrite=True,
    )
    with pytest.raises(cv.IdentityMismatchError, match=r"source 'b' at .*fingerprint"):
        cv.open_store(
            unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
        )


def test_creating_a_composite_needs_list_permission(unlisted: Unlisted, tmp_path: Path) -> None:
    """A composite copies every column of its sources' tables, which only a listing
    finds: refused before anything is written, naming the permission and the remedy."""
    destination = tmp_path / "new.zarr"
    unlisted.proxy.take()
    with pytest.raises(PermissionError) as refused:
        cv.create_composite(
            destination, unlisted.urls, source_storage_options=unlisted.sources(unlisted.unlisted)
        )
    # refused once the documents show it is a CyteArc store: no shard is asked for
    kinds = _kinds(unlisted.proxy.take())
    assert kinds["LIST"] == 2 and kinds["HEAD"] == 0, kinds
    said = str(refused.value)
    assert said.startswith(f"source 'a' at {unlisted.urls['a']}: its listing was refused")
    assert "s3:ListBucket" in said
    assert "Create the composite with credentials that may also list the source" in said
    assert "source_storage_options={'a': {...}}" in said
    assert not destination.exists()


def test_a_declared_pending_assay_is_found_without_list_permission(unlisted: Unlisted) -> None:
    """A derived assay declares its type when it begins: read at its key, its pending
    group refuses the source as a listing would have found it."""
    source = open_location(unlisted.urls["a"], read_only=False, storage_options=unlisted.direct)
    root = zarr.open_group(source, mode="a", zarr_format=3)
    root.create_group("GS", attributes={"cytearc:pending_assay": "add_grouped_assay"})
    root.attrs["assayTypes"] = {**root.attrs["assayTypes"], "GS": "Assay"}  # type: ignore[dict-item]
    with pytest.raises(cv.UnsupportedSourceError, match=r"pending derived assay \(GS\)"):
        cv.open_store(
            unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
        )


def test_the_composite_command_says_the_listing_it_needs(
    unlisted: Unlisted, tmp_path: Path
) -> None:
    destination = tmp_path / "cli.zarr"
    options = json.dumps(unlisted.sources(unlisted.unlisted))
    said = run_main(
        "composite",
        str(destination),
        *(f"{name}={url}" for name, url in unlisted.urls.items()),
        "--source-storage-options",
        options,
    )
    assert said.returncode == 2, said.stderr
    assert "s3:ListBucket" in said.stderr
    assert "--source-storage-options" in said.stderr
    assert not destination.exists()


def test_through_s3fs_too(unlisted: Unlisted) -> None:
    """Sources opened through s3fs (``{"backend": "fsspec"}``), whose refused listing is
    its ``PermissionError``: read by path the same way, HeadObject for the pins."""
    options = fsspec_options(unlisted.proxy.endpoint)
    shards = sum(len(_shards(url, unlisted.direct)) for url in unlisted.urls.values())
    unlisted.proxy.take()
    store = cv.open_store(unlisted.composite, source_storage_options=unlisted.sources(options))
    kinds = _kinds(unlisted.proxy.take())
    assert kinds["LIST"] == 2 and kinds["HEAD"] == shards, kinds
    np.testing.assert_array_equal(store.reader().read(), _expected(unlisted))
    assert _kinds(unlisted.proxy.take())["LIST"] == 0
    store.close()


def test_verify_says_which_source_it_must_list(unlisted: Unlisted) -> None:
    """``verify`` compares each source's shards with its shard table, from a listing:
    refused naming the source, the permission and the option a shell user gives (the
    backend's words named its bucket and --storage-options)."""
    options = json.dumps(unlisted.sources(unlisted.unlisted))
    said = run_main("verify", str(unlisted.composite), "--source-storage-options", options)
    assert said.returncode == 2, said.stderr
    assert f"source 'a' at {unlisted.urls['a']}: listing 'RNA/counts/c/' was refused (the " in (
        said.stderr
    )
    assert "s3:ListBucket" in said.stderr
    assert """as --source-storage-options '{"a": {...}}'""" in said.stderr


def test_too_many_shards_are_refused_before_their_heads(
    unlisted: Unlisted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pins' HEADs are bounded: past ``MAX_UNLISTED_HEADS`` shards the open is
    refused, naming the count and the remedy, before a HEAD is sent."""
    from cytearc_vfs.read import unlisted_sources

    monkeypatch.setattr(unlisted_sources, "MAX_UNLISTED_HEADS", 2)
    unlisted.proxy.take()
    with pytest.raises(
        OSError, match=r"(?s)^source 'a'.*s3:ListBucket.*7 chunk objects.*more than 2"
    ):
        cv.open_store(
            unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
        )
    assert not [r for r in unlisted.proxy.take() if r.method == "HEAD"]


def test_a_huge_grid_is_counted_not_listed() -> None:
    """A document naming 10^15 chunks (damaged, or a huge array) is refused at once:
    its keys are never built."""
    from zarr.storage import MemoryStore

    from cytearc_vfs.read.unlisted_sources import bounded_grid_keys
    from cytearc_vfs.remote.pinned_store import PinnedSourceStore

    pinned = PinnedSourceStore(MemoryStore(), name="a", where="s3://b/a.zarr")
    pinned.listing_refused = PermissionError("403 Forbidden")
    huge = {"zarr_format": 2, "shape": [10**15], "chunks": [1]}
    with pytest.raises(PermissionError, match=r"1,000,000,000,000,000 chunk objects"):
        bounded_grid_keys(pinned, [("X/data", huge, "X/data/.zarray")])


def test_absent_keys_answered_403_as_s3_answers_them(unlisted: Unlisted) -> None:
    """What AWS S3 answers credentials that may read but not list: a listing, and also
    a GetObject or HeadObject of a key that does not exist, are ``403 AccessDenied``
    (only a caller allowed to list is told ``404``). The loopback server answers
    ``404``; the proxy rewrites it as S3 would. The open failed on the retired state
    group's absent documents ("may not read or list it"); a document answered 403 is
    now absent (shards: ``tests/test_unlisted_absent_keys.py``)."""
    unlisted.proxy.absent_forbidden = True
    store = cv.open_store(
        unlisted.composite, source_storage_options=unlisted.sources(unlisted.unlisted)
    )
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], _expected(unlisted))
    store.close()
