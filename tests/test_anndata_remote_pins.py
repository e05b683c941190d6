"""Chunk objects of a remote AnnData source in Zarr v2 are pinned and cached like v3 shards.

Zarr v2 names chunks ``X/indices/0`` (no ``c/`` segment). The reads of a
composite over a remote AnnData source send every chunk read of its matrix
arrays with ``If-Match`` (an object replaced after the open is refused, never
decoded as the source's counts) and keep the chunks in the bounded shard
cache, in both Zarr formats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_anndata_sources import adata, remote_anndata, write  # noqa: F401  (fixture re-export)

import cytearc_vfs as cv
from cytearc_vfs.errors import IdentityMismatchError

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]


def _chunk_gets(seen: list[Any], source: str) -> list[Any]:
    """The GETs of ``source``'s matrix chunk objects among ``seen``."""
    return [
        request
        for request in seen
        if request.method == "GET"
        and f"/{source}.zarr/X/" in request.path
        and not request.path.split("?")[0].endswith(("zarr.json", ".zarray", ".zattrs"))
    ]


def _opened(remote: dict[str, Any], tmp_path: Path) -> Any:
    location = tmp_path / "c.zarr"
    if not location.exists():
        cv.create_composite(
            location, remote["sources"], source_storage_options=remote["options"]
        ).close()
    return cv.open_store(location, source_storage_options=remote["options"])


def test_every_chunk_read_of_a_remote_anndata_source_is_pinned_and_cached(
    remote_anndata: dict[str, Any],  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    store = _opened(remote_anndata, tmp_path)
    proxy = remote_anndata["proxy"]
    proxy.take()
    reader = store.reader()
    truth = remote_anndata["expected"]
    order = [list(truth.var_names).index(f) for f in reader.feature_ids]
    block = reader.read()
    np.testing.assert_array_equal(block, truth.X.toarray()[:, order].astype(block.dtype))
    first = proxy.take()
    for source in ("r2", "r3"):  # Zarr v2 and v3
        gets = _chunk_gets(first, source)
        assert gets, f"no chunk of {source} was read"
        assert all(request.if_match for request in gets), [r.path for r in gets if not r.if_match]
    # read again: every chunk from the bounded shard cache
    np.testing.assert_array_equal(reader.read(), block)
    again = proxy.take()
    assert _chunk_gets(again, "r2") == [] and _chunk_gets(again, "r3") == []
    store.close()


@pytest.mark.parametrize("source", ["r2", "r3"])
def test_a_remote_anndata_chunk_replaced_after_the_open_is_refused(
    remote_anndata: dict[str, Any],  # noqa: F811
    tmp_path: Path,
    source: str,
) -> None:
    import obstore

    store = _opened(remote_anndata, tmp_path)
    raw = remote_anndata["raw"]
    keys = [
        meta["path"]
        for page in obstore.list(raw, prefix=f"{source}.zarr/X/indices/")
        for meta in page
        if not meta["path"].endswith(("zarr.json", ".zarray", ".zattrs"))
    ]
    assert keys
    for key in keys:  # same size, other bytes: every chunk of the indices
        data = bytes(obstore.get(raw, key).bytes())
        obstore.put(raw, key, data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(IdentityMismatchError, match="changed while this store was open"):
        store.reader().read()
    store.close()


def _sharded_anndata(path: Path) -> Any:
    """An AnnData written by anndata (Zarr v3 CSR) whose ``X/indices`` and ``X/data`` are
    stored as anndata stores large ones: a shard of several inner chunks."""
    import anndata as ad
    import scipy.sparse as sp
    import zarr

    rng = np.random.default_rng(21)
    matrix = sp.random(400, 60, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 9)
    written = ad.AnnData(X=matrix)
    written.obs_names = [f"c{i}" for i in range(400)]
    written.var_names = [f"g{i}" for i in range(60)]
    with ad.settings.override(zarr_write_format=3):
        written.write_zarr(path)
    group = zarr.open_group(path / "X", mode="r+", use_consolidated=False)
    for name in ("indices", "data"):
        values = group[name][...]
        del group[name]
        group.create_array(name, data=values, chunks=(1000,), shards=(8000,))
    return written


def test_inner_chunks_of_a_remote_anndata_shard_are_read_once(
    s3_server: Any, tmp_path: Path
) -> None:
    """A read of a few cells of a sharded Zarr v3 source fetches the shard's index and the
    touched inner chunks' ranges (``get_ranges``). The index was cached, the ranges were
    not: the same read again, or through a new reader of the same open store, sent the
    same ranged GETs each time, where docs/remote.md promises a warm read 0 requests."""
    from loopback_proxy import LoopbackProxy
    from obstore.store import from_url
    from test_anndata_sources import upload

    truth = _sharded_anndata(tmp_path / "s.zarr")
    bucket = s3_server.new_bucket()
    upload(from_url(f"s3://{bucket}", **s3_server.storage_options()), tmp_path / "s.zarr")
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        options = {"s": {**s3_server.storage_options(), "endpoint": proxy.endpoint}}
        location = tmp_path / "c.zarr"
        cv.create_composite(
            location, {"s": f"s3://{bucket}/s.zarr"}, source_storage_options=options
        ).close()
        store = cv.open_store(location, source_storage_options=options)
        reader = store.reader()
        cells = [3, 7, 250]  # a few inner chunks of the shard, not the whole shard
        proxy.take()
        block = reader.read(cells=cells)
        expected = truth.X[cells].toarray().astype(block.dtype)
        np.testing.assert_array_equal(block, expected)
        cold = _chunk_gets(proxy.take(), "s")
        ranged = [r for r in cold if r.range is not None and not r.range.startswith("bytes=-")]
        assert ranged, cold  # inner chunks were read by range
        np.testing.assert_array_equal(reader.read(cells=cells), expected)
        np.testing.assert_array_equal(store.reader().read(cells=cells), expected)
        assert _chunk_gets(proxy.take(), "s") == []
        store.close()
    finally:
        proxy.close()
