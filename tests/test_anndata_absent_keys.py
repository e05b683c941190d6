"""AnnData sources on S3 read with credentials that may read but not list (no
``s3:ListBucket``), answered as AWS answers them: ``403 AccessDenied`` for a
listing and also for a GetObject or HeadObject of a key that does not exist
(``LoopbackProxy.absent_forbidden``).

The identity of such a source is taken by a ``HEAD`` of each watched document
and chunk key, and most of those documents are absent (a v3 store has no
``.zattrs``; zarr writes no chunk of zeros): each ``403`` refused the open as
unreadable. Now a document answered ``403`` is absent where it was read as
absent (recorded absent, at an open), and a chunk where the composite's record
of the source's objects says it was absent at creation; one recorded present
is refused (forbidden or replaced), never read as zeros.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server
from test_anndata_sources import adata, remote_parts, upload, write

import cytearc_vfs as cv

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]

#: Dense X of 300 cells in blocks of 50: cells 0-99 hold no count, so zarr writes
#: neither of their chunks.
_ABSENT = ("d3.zarr/X/c/0/0", "d3.zarr/X/c/1/0")


def _dense_with_zeros(tmp_path: Path) -> tuple[Path, np.ndarray]:
    import anndata as ad

    data = adata(300, [f"G{i}" for i in range(40)], "d", seed=21, encoding="dense")
    data.X[:100] = 0
    path = tmp_path / "d3.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = ad.settings.zarr_write_format
        ad.settings.zarr_write_format = 3
        try:
            data.write_zarr(path, chunks=(50, 40))
        finally:
            ad.settings.zarr_write_format = previous
    return path, np.asarray(data.X)


@pytest.fixture
def sources(s3_server: S3Server, tmp_path: Path) -> Iterator[dict[str, Any]]:
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    raw = from_url(f"s3://{bucket}", **direct)
    local, values = _dense_with_zeros(tmp_path)
    upload(raw, local)
    parts = remote_parts()
    for name, data in parts.items():
        upload(raw, write(data, tmp_path / f"{name}.zarr", int(name[1])))
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    proxy.absent_forbidden = True
    try:
        yield {
            "bucket": bucket,
            "direct": direct,
            "unlisted": {**direct, "endpoint": proxy.endpoint},
            "values": values,
            "local": local,
            "parts": parts,
            "proxy": proxy,
        }
    finally:
        proxy.close()


def _kinds(seen: list[Seen]) -> Counter[str]:
    return Counter("LIST" if "list-type" in r.path else r.method for r in seen)


def _asked(seen: list[Seen], keys: tuple[str, ...]) -> list[Seen]:
    return [r for r in seen if any(r.path.split("?")[0].endswith(key) for key in keys)]


def test_the_zero_chunks_were_never_written(sources: dict[str, Any]) -> None:
    for key in _ABSENT:
        assert not (sources["local"].parent / key).exists(), key
    assert (sources["local"] / "X/c/2/0").exists()


def test_a_composite_opens_with_absent_keys_answered_403(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{sources['bucket']}/d3.zarr"
    location = tmp_path / "c.zarr"
    # created with credentials that may list: the record knows which chunks are absent
    cv.create_composite(location, {"d": url}, source_storage_options={"d": sources["direct"]})
    proxy = sources["proxy"]
    proxy.take()
    store = cv.open_store(location, source_storage_options={"d": sources["unlisted"]})
    opened = proxy.take()
    kinds = _kinds(opened)
    # the refused listing and a HEAD of each watched key, the absent ones among them
    # (answered 403): the record stands, no byte is read
    assert set(kinds) == {"LIST", "HEAD"} and kinds["LIST"] == 1, kinds
    assert len(_asked(opened, _ABSENT)) == 2
    heads = Counter(r.path for r in opened if r.method == "HEAD")
    assert max(heads.values()) == 1
    np.testing.assert_array_equal(store.reader().read(), sources["values"])
    counts = zarr.open_array(store, path="RNA/counts", mode="r")
    np.testing.assert_array_equal(counts[:], sources["values"])
    # the chunks proved absent are not asked for again
    assert not _asked(proxy.take(), _ABSENT)
    store.close()


def test_a_recorded_chunk_answered_403_is_refused(sources: dict[str, Any], tmp_path: Path) -> None:
    """A chunk the composite recorded present, now answered 403 (forbidden, or deleted
    and so answered): refused naming it and both remedies, never zeros."""
    url = f"s3://{sources['bucket']}/d3.zarr"
    location = tmp_path / "c.zarr"
    cv.create_composite(location, {"d": url}, source_storage_options={"d": sources["direct"]})
    sources["proxy"].fail(1_000_000, status=403, match="d3.zarr/X/c/3/0")
    with pytest.raises(cv.SourceUnavailableError) as refused:
        cv.open_store(location, source_storage_options={"d": sources["unlisted"]})
    said = str(refused.value)
    assert "X/c/3/0 was answered 403 Forbidden" in said, said
    assert "credentials without s3:ListBucket" in said
    assert "the composite recorded this object present when it was created" in said
    assert "grant s3:ListBucket (read-only)" in said and "check that object's permissions" in said


def test_creating_over_an_absent_chunk_answered_403_is_refused(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    """At creation nothing records which chunks are absent: a chunk answered 403 is
    refused, with the remedy (credentials that may list)."""
    url = f"s3://{sources['bucket']}/d3.zarr"
    location = tmp_path / "c.zarr"
    with pytest.raises(cv.SourceUnavailableError) as refused:
        cv.create_composite(location, {"d": url}, source_storage_options={"d": sources["unlisted"]})
    said = str(refused.value)
    # the first of the absent chunks answered (X's, or the all-False mask of an index)
    assert " was answered 403 Forbidden; S3 answers 403 for a missing object" in said, said
    assert "no record of this AnnData source's objects proves it absent" in said
    assert "grant s3:ListBucket (read-only)" in said
    assert not location.exists()


def test_sparse_sources_open_with_absent_keys_answered_403(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    """Sources of zarr v3 CSR and v2 CSC with obs and var columns: their absent
    watched documents (a v3 store has no ``.zattrs``) and absent chunks (the all-False
    mask of a nullable index) are answered 403, and recorded absent."""
    import anndata as ad

    urls = {name: f"s3://{sources['bucket']}/{name}.zarr" for name in ("r3", "r2")}
    location = tmp_path / "c.zarr"
    direct = {name: sources["direct"] for name in urls}
    cv.create_composite(location, urls, source_storage_options=direct).close()
    proxy = sources["proxy"]
    proxy.take()
    store = cv.open_store(location, source_storage_options={n: sources["unlisted"] for n in urls})
    kinds = _kinds(proxy.take())
    assert set(kinds) == {"LIST", "HEAD"} and kinds["LIST"] == 2, kinds
    reader = store.reader()
    expected = ad.concat(list(sources["parts"].values()), join="outer")
    x = expected[:, list(reader.feature_ids)].X
    np.testing.assert_array_equal(reader.read(), x.toarray())
    store.close()


def test_a_recorded_document_answered_403_is_refused(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    """A watched document the composite recorded present, now answered 403: refused
    (a document read as absent would change how the source is read)."""
    url = f"s3://{sources['bucket']}/d3.zarr"
    location = tmp_path / "c.zarr"
    cv.create_composite(location, {"d": url}, source_storage_options={"d": sources["direct"]})
    sources["proxy"].fail(1_000_000, status=403, match="d3.zarr/obs/zarr.json")
    with pytest.raises(cv.SourceUnavailableError) as refused:
        cv.open_store(location, source_storage_options={"d": sources["unlisted"]})
    said = str(refused.value)
    assert "obs/zarr.json was answered 403 Forbidden" in said, said
    assert "this metadata document was read there" in said
