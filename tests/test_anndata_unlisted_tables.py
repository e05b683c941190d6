"""An AnnData Zarr store's tables read from S3 with credentials that may read but not
list it (no ``s3:ListBucket``): the loopback S3 server behind a proxy that answers
every listing ``403 Forbidden``, as S3 answers such credentials.

``cytearc-vfs write`` from such a store, and ``create_composite`` over such
sources, read ``obs`` and ``var`` through the element layer column by column,
one request after another: with 30 columns of mixed encodings (categoricals
with codes and categories, nullable arrays with values and mask), 150
sequential round trips for the tables in Zarr v2 and v3 alike, where the same
store with listing credentials takes two. Now a refused listing sends the tables to a
walk by path, a level at a time (a dataframe's ``column-order`` names every
column, a column's encoding its arrays, an array's grid its chunks): every
object of the tables is requested once, a level's requests at once, and the
results are those of a listed read (the same ``WriteInfo``, the same composite
record).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import zarr
from anndata_files import write_anndata_zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen, sequential_rounds
from s3_server import S3Server
from test_anndata_sources import upload
from zarr.abc.store import Store
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.format.tables import read_table

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]

#: The element paths of the tables an import and a composite read.
_TABLES = ("obs/", "var/")
#: What the proxy adds to every request: requests sent together overlap, so
#: sequential rounds can be counted. 20 ms was within a loaded CI machine's
#: scheduling jitter (a request sent together with others started after one of
#: them ended: one round more, once in five clean-clone runs).
_DELAY = 0.1
#: The root's documents the tables' read asks for, and a node's in each format.
_ROOT = ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")
_NODE = {"v2": (".zarray", ".zgroup", ".zattrs"), "v3": ("zarr.json",)}


def _adata(n_cells: int, prefix: str, seed: int) -> ad.AnnData:
    """An AnnData with 30 ``obs`` columns of mixed encodings and 2 ``var`` columns."""
    rng = np.random.default_rng(seed)
    data = ad.AnnData(X=realistic_counts(n_cells, 25, density=0.2, seed=seed))
    data.obs_names = [f"{prefix}{i}" for i in range(n_cells)]
    data.var_names = [f"g{i}" for i in range(25)]
    obs = data.obs
    missing = rng.random((10, n_cells)) < 0.1
    for i in range(8):  # categorical: codes + categories
        obs[f"cat{i}"] = pd.Categorical(rng.choice(["t", "b", "nk", "mono"], n_cells))
    for i in range(5):  # nullable-integer: values + mask
        values = rng.integers(0, 9, n_cells).astype(object)
        values[missing[i]] = None
        obs[f"int{i}"] = pd.array(values, dtype="Int64")
    for i in range(4):  # nullable-boolean: values + mask
        values = (rng.random(n_cells) < 0.5).astype(object)
        values[missing[5 + i]] = None
        obs[f"bool{i}"] = pd.array(values, dtype="boolean")
    for i in range(2):  # nullable-string-array: values + mask
        obs[f"str{i}"] = pd.array(
            [None if m else f"s{v}" for m, v in zip(missing[9 - i], range(n_cells), strict=True)],
            dtype="string",
        )
    for i in range(6):  # plain arrays
        obs[f"num{i}"] = rng.random(n_cells)
    for i in range(3):
        obs[f"flag{i}"] = rng.random(n_cells) < 0.5
    obs["batch"] = [f"batch{i % 3}" for i in range(n_cells)]  # text: stored categorical
    obs["depth"] = rng.integers(100, 1000, n_cells)
    data.var["symbol"] = [f"S{i}" for i in range(25)]
    data.var["kind"] = pd.Categorical(["a", "b", "c", "d", "e"] * 5)
    assert len(obs.columns) == 30
    return data


@pytest.fixture
def stores(s3_server: S3Server, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A Zarr v2 and a Zarr v3 AnnData store on S3, the options that list and the ones
    (through the refusing proxy) that may only read."""
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **direct)
    parts = {"v2": _adata(400, "a", 1), "v3": _adata(300, "b", 2)}
    locals_ = {}
    for name, data in parts.items():
        locals_[name] = write_anndata_zarr(data, tmp_path / f"{name}.zarr", int(name[1]))
        upload(raw, locals_[name])
    proxy = LoopbackProxy(s3_server.endpoint)
    # a refusal takes a round trip, as S3's does
    proxy.fail(1_000_000, status=403, match="list-type", delayed=True)
    try:
        yield {
            "urls": {name: f"s3://{bucket}/{name}.zarr" for name in parts},
            "local": locals_,
            "parts": parts,
            "direct": direct,
            "unlisted": {**direct, "endpoint": proxy.endpoint},
            "proxy": proxy,
        }
    finally:
        proxy.close()


def _table_gets(seen: list[Seen], store: str) -> Counter[str]:
    """The GETs of each key under the tables of the store named ``store``."""
    head = f"/{store}.zarr/"
    keys = (s.path.split(head, 1)[1] for s in seen if s.method == "GET" and head in s.path)
    return Counter(key for key in keys if key.startswith(_TABLES))


def _rounds_of(seen: list[Seen], store: str, gets: Counter[str]) -> int:
    """The sequential rounds of the requests of ``gets`` (keys of the store ``store``)."""
    head = f"/{store}.zarr/"
    return sequential_rounds(
        [s for s in seen if s.method == "GET" and s.path.split(head, 1)[-1] in gets]
    )


def _stored(local: Path) -> set[str]:
    """The keys of the objects under the tables of the local copy of a store."""
    return {
        file.relative_to(local).as_posix()
        for prefix in _TABLES
        for file in (local / prefix).rglob("*")
        if file.is_file()
    }


def _column_key(key: str) -> bool:
    """Whether ``key`` is under a column of a table, other than its index."""
    return key.count("/") > 1 and key.split("/")[1] != "_index"


def _check_table_reads(gets: Counter[str], local: Path, *, columns_only: bool = False) -> None:
    """Every object of the tables requested, once; an absent key requested is a node's
    document of the other kind (v2: ``.zarray`` of a group, ``.zgroup`` of an array) or a
    chunk never written (all fill value)."""
    assert max(gets.values()) == 1, [key for key, n in gets.items() if n > 1]
    stored = {key for key in _stored(local) if _column_key(key) or not columns_only}
    assert stored <= set(gets), sorted(stored - set(gets))[:10]
    for key in set(gets) - stored:
        name = key.rpartition("/")[2]
        assert name in (".zarray", ".zgroup", ".zattrs") or name.isdigit() or "/c/" in key, key


@pytest.mark.parametrize("fmt", ["v2", "v3"])
def test_write_from_an_unlisted_store_reads_its_tables_in_a_few_rounds(
    stores: dict[str, Any], tmp_path: Path, fmt: str
) -> None:
    url, proxy = stores["urls"][fmt], stores["proxy"]
    listed = cv.write_counts(
        tmp_path / "listed.zarr", url, source_storage_options=stores["direct"], fill_missing=True
    )
    proxy.delay = _DELAY
    proxy.take()
    unlisted = cv.write_counts(
        tmp_path / "unlisted.zarr",
        url,
        source_storage_options=stores["unlisted"],
        fill_missing=True,
    )
    seen = proxy.take()
    rounds = sequential_rounds(seen)
    # the same store written: every field but where, how long and what a listing tells
    # (not_imported is None: the store's elements cannot be listed)
    assert unlisted.not_imported is None
    for field in ("shape", "dtype", "layout", "content_fingerprint", "dataset_fingerprint"):
        assert getattr(unlisted, field) == getattr(listed, field), field
    loaded = cv.write_counts(tmp_path / "loaded.zarr", stores["parts"][fmt], fill_missing=True)
    assert unlisted.dataset_fingerprint == loaded.dataset_fingerprint
    _same_tables(tmp_path / "listed.zarr", tmp_path / "unlisted.zarr", ("cellData",))
    # the tables a level at a time (obs and var, their columns, the columns' arrays,
    # those arrays' chunks; a level of more than MAX_IN_FLIGHT requests takes two):
    # 150 rounds before in either format, 7-8 (v2) and 4-5 (v3) now
    gets = _table_gets(seen, fmt)
    assert _rounds_of(seen, fmt, gets) <= 10, _rounds_of(seen, fmt, gets)
    assert rounds <= 30, rounds  # 167 (v2) and 169 (v3) before, 21-23 now
    # 368 and 177 before; then 344 and 169, the matrix's chunks fetched 2-4 times each
    # (tests/test_anndata_write_fetches_once.py): each once now
    assert len(seen) <= {"v2": 340, "v3": 162}[fmt], len(seen)
    matrix = Counter(s.path for s in seen if s.method == "GET" and f"/{fmt}.zarr/X/" in s.path)
    assert set(matrix.values()) == {1}, matrix
    _check_table_reads(gets, stores["local"][fmt])
    # the root's documents ride beside the refused listings of the tables' prefixes:
    # the groups obs and var are asked in the second round, not the third
    prefixes = {f"prefix={fmt}.zarr%2F{p}" for p in ("obs%2F", "var%2F", "uns%2Fcytearc%2F")}
    documents = {*_ROOT, *(f"{group}/{name}" for group in ("obs", "var") for name in _NODE[fmt])}
    first = [
        s
        for s in seen
        if any(s.path.endswith(prefix) for prefix in prefixes)
        or (s.method == "GET" and s.path.split(f"/{fmt}.zarr/", 1)[-1] in documents)
    ]
    assert len(first) == 3 + len(_ROOT) + 2 * len(_NODE[fmt]) and sequential_rounds(first) == 2


def _same_tables(one: Path, other: Path, tables: tuple[str, ...]) -> None:
    """The tables of the stores at ``one`` and ``other`` hold the same columns, values and
    categories (their documents' attributes included)."""
    for table in tables:
        read = [read_table(zarr.open_group(where, mode="r")[table]) for where in (one, other)]
        pd.testing.assert_frame_equal(read[0], read[1])
        documents = [
            json.loads((where / table / "zarr.json").read_text()) for where in (one, other)
        ]
        assert documents[0] == documents[1]
        assert len(read[0].columns) >= 2


def _record(location: Path) -> dict[str, Any]:
    return json.loads((location / "zarr.json").read_text())["attributes"]["composite"]


def test_a_composite_over_unlisted_sources_reads_their_tables_in_a_few_rounds(
    stores: dict[str, Any], tmp_path: Path
) -> None:
    urls, proxy = stores["urls"], stores["proxy"]
    listed, unlisted = tmp_path / "listed.zarr", tmp_path / "unlisted.zarr"
    cv.create_composite(
        listed, urls, source_storage_options={name: stores["direct"] for name in urls}
    ).close()
    proxy.delay = _DELAY
    proxy.take()
    cv.create_composite(
        unlisted, urls, source_storage_options={name: stores["unlisted"] for name in urls}
    ).close()
    seen = proxy.take()
    rounds = sequential_rounds(seen)
    # the same record (fingerprints, versions by HEAD), the same tables
    assert _record(unlisted) == _record(listed)
    _same_tables(listed, unlisted, ("cellData", "RNA/featureData"))
    # the identity's check reads the dataframes' documents and index columns too,
    # before the tables
    gets = {
        name: Counter({k: n for k, n in _table_gets(seen, name).items() if _column_key(k)})
        for name in urls
    }
    # their columns a level at a time: 130 rounds before (the two sources' tables are
    # read at once), 6-7 (v2) and 3 (v3) now
    for name in urls:
        assert _rounds_of(seen, name, gets[name]) <= 10, (name, _rounds_of(seen, name, gets[name]))
        _check_table_reads(gets[name], stores["local"][name], columns_only=True)
    assert rounds <= 40, rounds  # 177 before, 31-32 now
    assert len(seen) <= 647, len(seen)  # 661 before
    # one refused listing a source (remembered: the tables' prefixes are not asked)
    listings = [s.path for s in seen if "list-type" in s.path]
    assert len(listings) == 2, listings


class _Unlisted(WrapperStore[Store]):
    """A real store whose listings are refused, as S3 refuses credentials without
    ``s3:ListBucket``; it counts the keys read."""

    def __init__(self, store: Store, read: Counter[str]) -> None:
        super().__init__(store)
        self.read = read

    def _with_store(self, store: Store) -> _Unlisted:
        return _Unlisted(store, self.read)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.read[key] += 1
        return await self._store.get(key, prototype, byte_range)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        raise PermissionError(f"listing {prefix!r} was refused")
        yield ""  # an async generator

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        raise PermissionError(f"listing {prefix!r} was refused")
        yield ""


@pytest.mark.parametrize(
    "kind", ["modern-v2", "modern-v3", "legacy-v2-relative", "legacy-v3-absolute"]
)
def test_the_walk_by_path_fetches_every_object_the_reader_reads(tmp_path: Path, kind: str) -> None:
    """Every encoding of a column is walked: a legacy 0.1.0 dataframe's labels in
    ``__categories`` (named as its columns), nullable strings, categoricals; the
    reader then reads nothing more, and reads what it reads from a listed store."""
    from anndata_fixtures import write_legacy, write_modern
    from cytearc_vfs_adapters.anndata.source_tables import source_tables
    from zarr.core.sync import sync

    from cytearc_vfs.composite.anndata_columns import tables_prefetched

    path = tmp_path / "a.zarr"
    style, fmt, *how = kind.split("-")
    if style == "modern":
        write_modern(path, int(fmt[1]), awkward=False)
    else:
        write_legacy(path, int(fmt[1]), absolute=how == ["absolute"], missing_categories=False)
    read: Counter[str] = Counter()
    view = sync(tables_prefetched(_Unlisted(LocalStore(path, read_only=True), read), "var"))
    walked = Counter(read)
    assert walked and max(walked.values()) == 1, walked.most_common(3)
    if style == "legacy":  # the labels, under the names of the columns
        assert {"obs/__categories/cell_type", "obs/__categories/batch"} <= {
            key.rpartition("/")[0] for key in walked
        }
    tables = source_tables(view, "var")
    later = read - walked
    if style == "modern":
        assert not later, later  # the reader's every read was fetched
    else:
        # but for the probes of a legacy dataframe without encoding attributes (var),
        # classified by its structure: a group holding codes? values?
        assert {key.rpartition("/")[0] for key in later} <= {"var/codes", "var/values"}, later
        assert not any((path / key).exists() for key in later)
    listed = source_tables(LocalStore(path, read_only=True), "var")
    pd.testing.assert_frame_equal(tables.obs, listed.obs)
    pd.testing.assert_frame_equal(tables.var, listed.var)
    assert tables.skipped == listed.skipped
    assert len(tables.obs.columns) >= 3


def test_a_declared_membership_without_list_access_is_refused_naming_the_listing(
    stores: dict[str, Any], s3_server: S3Server, tmp_path: Path
) -> None:
    """``uns["cytearc"]["assayMembership"]`` is a mapping: only a listing names its
    members. Without list access the import says so, and writes nothing."""
    from obstore.store import from_url

    data = _adata(100, "m", 5)
    data.uns["cytearc"] = {"assayMembership": {"RNA": "flag0"}}
    local = write_anndata_zarr(data, tmp_path / "m.zarr", 3)
    bucket = stores["urls"]["v3"].split("/")[2]
    upload(from_url(f"s3://{bucket}", **stores["direct"]), local)
    destination = tmp_path / "out.zarr"
    with pytest.raises(
        PermissionError, match=r"listing 'uns/cytearc/assayMembership/?' was refused"
    ):
        cv.write_counts(
            destination,
            f"s3://{bucket}/m.zarr",
            source_storage_options=stores["unlisted"],
            fill_missing=True,
        )
    assert not destination.exists()
