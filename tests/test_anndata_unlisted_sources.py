"""A composite over AnnData Zarr sources on S3 with credentials that may read but not
list them (no ``s3:ListBucket``): the loopback S3 server behind a proxy that
answers every listing ``403 Forbidden``, as S3 answers such credentials.

Creating and opening one failed ("listing 'X/' was refused"): the identity of an
AnnData source covers every object under its matrix element and its index
columns, and was taken from a listing. Now a refused listing is replaced by a
``HEAD`` of each metadata document and of every chunk key the element's and the
indexes' grids name, at most ``MAX_IN_FLIGHT`` at once; the tables are read by
path, a level at a time (a dataframe's ``column-order`` names every column:
``test_anndata_unlisted_tables``). The fingerprints
are the listing's own: a composite created either way records the same.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from loopback_proxy import LoopbackProxy
from s3_server import S3Server
from test_anndata_sources import dense, remote_parts, upload, write

import cytearc_vfs as cv
from cytearc_vfs.format.tables import read_table

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]


@pytest.fixture
def sources(s3_server: S3Server, tmp_path: Path) -> Iterator[dict[str, Any]]:
    import anndata as ad
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **direct)
    parts = remote_parts()
    for name, data in parts.items():
        upload(raw, write(data, tmp_path / f"{name}.zarr", int(name[1])))
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    try:
        yield {
            "urls": {name: f"s3://{bucket}/{name}.zarr" for name in parts},
            "direct": {name: direct for name in parts},
            "unlisted": {name: {**direct, "endpoint": proxy.endpoint} for name in parts},
            "expected": ad.concat(list(parts.values()), join="outer"),
            "proxy": proxy,
            "raw": raw,
        }
    finally:
        proxy.close()


def _record(location: Path) -> dict[str, Any]:
    return json.loads((location / "zarr.json").read_text())["attributes"]["composite"]


def _tables(store: Any) -> dict[str, dict[str, list[Any]]]:
    group = zarr.open_group(store, mode="r")
    return {
        path: {name: list(values) for name, values in read_table(group[path]).items()}
        for path in ("cellData", "RNA/featureData")
    }


def test_a_composite_of_anndata_sources_is_created_and_opened_without_list_permission(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    listed, unlisted = tmp_path / "listed.zarr", tmp_path / "unlisted.zarr"
    cv.create_composite(listed, sources["urls"], source_storage_options=sources["direct"]).close()
    proxy = sources["proxy"]
    proxy.take()
    cv.create_composite(
        unlisted, sources["urls"], source_storage_options=sources["unlisted"]
    ).close()
    created = proxy.take()
    listings = sorted(r.path.split("prefix=")[1] for r in created if "list-type" in r.path)
    # refused: the whole source once, remembered after (the tables are read by path
    # without asking for their prefixes' listings)
    assert listings == sorted(f"{name}.zarr%2F" for name in ("r2", "r3"))
    assert any(r.method == "HEAD" for r in created)
    # the identity taken by path is the listing's: the same record, the same tables
    assert _record(unlisted)["sources"] == _record(listed)["sources"]
    opened = cv.open_store(listed, source_storage_options=sources["direct"])
    assert _tables(cv.open_store(unlisted, source_storage_options=sources["unlisted"])) == (
        _tables(opened)
    )
    opened.close()
    proxy.take()
    store = cv.open_store(listed, source_storage_options=sources["unlisted"])
    seen = proxy.take()
    kinds = Counter("LIST" if "list-type" in r.path else r.method for r in seen)
    # one refused listing a source, then a HEAD of each watched object: no byte read
    assert kinds["LIST"] == 2 and set(kinds) == {"LIST", "HEAD"}, kinds
    heads = Counter(r.path for r in seen if r.method == "HEAD")
    assert max(heads.values()) == 1
    reader = store.reader()
    truth = dense(sources["expected"], list(reader.feature_ids))
    np.testing.assert_array_equal(reader.read(), truth)
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], truth)
    assert not [r for r in proxy.take() if "list-type" in r.path]
    store.close()


def test_a_replaced_chunk_is_refused_without_list_permission(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    """The versions by HEAD catch a replaced chunk as the listing did: its digest is
    taken again, and differs."""
    import obstore

    location = tmp_path / "c.zarr"
    cv.create_composite(
        location, sources["urls"], source_storage_options=sources["unlisted"]
    ).close()
    raw = sources["raw"]
    listed = [e["path"] for batch in obstore.list(raw, prefix="r3.zarr/X/data/") for e in batch]
    key = sorted(k for k in listed if "zarr.json" not in k)[0]
    value = bytes(obstore.get(raw, key).bytes())
    obstore.put(raw, key, value[:-1] + bytes([value[-1] ^ 1]))
    with pytest.raises(cv.IdentityMismatchError, match=r"source 'r3' at .*changed"):
        cv.open_store(location, source_storage_options=sources["unlisted"])


def test_an_element_of_too_many_chunks_is_refused_before_its_heads(
    sources: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HEADs that replace a refused listing are bounded.

    A HEAD went to every chunk key the element's grids name, however many: an
    element of 10^6 chunks cost 10^6 requests (a listing: a thousand), and a
    damaged document naming 10^15 chunks built their keys until memory ran out.
    Past ``MAX_UNLISTED_HEADS`` the open is refused before a HEAD is sent,
    naming the count and the remedy (credentials that may list the source)."""
    from cytearc_vfs.read import unlisted_sources

    monkeypatch.setattr(unlisted_sources, "MAX_UNLISTED_HEADS", 3)
    proxy = sources["proxy"]
    proxy.take()
    with pytest.raises(OSError) as refusal:  # a source that cannot be read so
        cv.create_composite(
            tmp_path / "c.zarr", sources["urls"], source_storage_options=sources["unlisted"]
        )
    said = str(refusal.value)
    assert said.count("source 'r") == 1, said  # the source named once
    assert "s3:ListBucket" in said and "source_storage_options=" in said, said
    assert "more than 3" in said and "chunk objects" in said, said
    assert not [r for r in proxy.take() if r.method == "HEAD"]
    assert not (tmp_path / "c.zarr").exists()
