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
