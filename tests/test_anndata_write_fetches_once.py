"""``write_counts`` from an AnnData Zarr store on object storage fetches each chunk of
the matrix once.

The write reads the matrix several times: the stored-chunk check reads
``indptr``, the value scan reads every band before the destination exists,
the write pass reads them again (and each further feature group of
``countsT`` once more), two bands sharing a chunk each fetch it, and a band
reading part of a shard fetches its index first. On the loopback S3 server,
a 600 x 40 ``X`` in chunks of 500 entries (v2: 5 chunks of ``data``; v3: 2
shards) or of 100 x 20 values, written in two bands of rows, was fetched:

- v2 CSR: ``data`` and ``indices`` chunks 2-3 times each, ``indptr`` 3 times;
- v3 CSR: ``data`` and ``indices`` shards 5 times, ``indptr`` 4 times;
- v2 CSC: ``indices`` 2 times, ``indptr`` 4 times; v3 CSC: 2 to 5 times;
- v2 dense: every chunk 2-3 times; v3 dense: each shard 8 to 12 times.

Now the matrix's chunk objects are fetched whole once and kept in a temporary
directory for the write (``anndata/fetched_once.py``), removed after it:
each once, and the store written is the one a local copy writes.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server
from test_anndata_sources import upload

import cytearc_vfs as cv

pytestmark = [
    pytest.mark.remote,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"),
]

_CELLS, _GENES = 600, 40
#: count shards of 408 rows: two bands of the 600 cells
_LAYOUT = ("16K", "4K")
_DOCUMENTS = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def _anndata_store(path: Path, fmt: int, kind: str) -> Path:
    """An AnnData Zarr store whose ``X`` (CSR, CSC or dense) spans several chunks."""
    counts = realistic_counts(_CELLS, _GENES, density=0.1, seed=3)
    data = ad.AnnData(X=sp.csr_matrix(counts))
    data.obs_names = [f"c{i}" for i in range(_CELLS)]
    data.var_names = [f"g{i}" for i in range(_GENES)]
    matrix: Any = {
        "csr": sp.csr_matrix(counts),
        "csc": sp.csc_matrix(counts),
        "dense": np.asarray(sp.csr_matrix(counts).todense()),
    }[kind]
    chunks = (100, 20) if kind == "dense" else (500,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = ad.settings.zarr_write_format
        ad.settings.zarr_write_format = fmt
        try:
            data.write_zarr(path)
            root = zarr.open_group(path, mode="a", use_consolidated=False)
            del root["X"]
            ad.io.write_elem(root, "X", matrix, dataset_kwargs={"chunks": chunks})
            zarr.consolidate_metadata(path)
        finally:
            ad.settings.zarr_write_format = previous
    return path


def _chunks(local: Path) -> set[str]:
    """The chunk objects of ``X`` in the local copy of a store."""
    return {
        file.relative_to(local).as_posix()
        for file in (local / "X").rglob("*")
        if file.is_file() and not file.name.endswith(_DOCUMENTS)
    }


def _gets(seen: list[Seen]) -> Counter[str]:
    return Counter(
        s.path.split("/x.zarr/", 1)[1] for s in seen if s.method == "GET" and "/x.zarr/" in s.path
    )


def _on_s3(s3_server: S3Server, local: Path) -> str:
    from obstore.store import from_url

    bucket = s3_server.new_bucket()
    upload(from_url(f"s3://{bucket}", **s3_server.storage_options()), local)
    return f"s3://{bucket}/{local.name}"


@pytest.fixture
def spill_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the write's temporary directories go (to see that none is left)."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("kind", ["csr", "csc", "dense"])
def test_each_chunk_of_the_matrix_is_fetched_once(
    s3_server: S3Server, s3_proxy: Any, spill_dir: Path, tmp_path: Path, fmt: int, kind: str
) -> None:
    local = _anndata_store(tmp_path / "x.zarr", fmt, kind)
    url = _on_s3(s3_server, local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    s3_proxy.take()
    info = cv.write_counts(
        tmp_path / "out.zarr", url, source_storage_options=options, layout=_LAYOUT
    )
    gets = _gets(s3_proxy.take())
    assert info.layout.counts.shards[0] == 408  # two bands
    chunks = _chunks(local)
    assert len(chunks) >= 3
    assert {key: n for key, n in gets.items() if key.startswith("X/")} == {
        **{key: 1 for key in chunks},
        **{key: 1 for key in gets if key.startswith("X/") and key.endswith(_DOCUMENTS)},
    }
    # nothing else twice either
    assert {key: n for key, n in gets.items() if n > 1} == {}
    # the store a local copy writes, and no kept object left behind
    same = cv.write_counts(tmp_path / "same.zarr", local, layout=_LAYOUT)
    assert info.dataset_fingerprint == same.dataset_fingerprint
    assert list(spill_dir.iterdir()) == []


def test_without_list_access_each_chunk_is_fetched_once(
    s3_server: S3Server, spill_dir: Path, tmp_path: Path
) -> None:
    """Credentials that may read but not list (the proxy answers every listing 403): the
    chunks' presence is asked by ``exists``, their values fetched once."""
    local = _anndata_store(tmp_path / "x.zarr", 3, "csr")
    url = _on_s3(s3_server, local)
    proxy = LoopbackProxy(s3_server.endpoint)
    proxy.fail(1_000_000, status=403, match="list-type")
    try:
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        info = cv.write_counts(
            tmp_path / "out.zarr", url, source_storage_options=options, layout=_LAYOUT
        )
        gets = _gets(proxy.take())
    finally:
        proxy.close()
    # before: data and indices shards 5 times, indptr 4
    assert {key: gets[key] for key in _chunks(local)} == dict.fromkeys(_chunks(local), 1)
    same = cv.write_counts(tmp_path / "same.zarr", local, layout=_LAYOUT)
    assert info.dataset_fingerprint == same.dataset_fingerprint
    assert list(spill_dir.iterdir()) == []


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_missing_chunk_is_still_refused_before_anything_is_written(
    s3_server: S3Server, spill_dir: Path, tmp_path: Path, fmt: int
) -> None:
    import obstore
    from obstore.store import from_url

    local = _anndata_store(tmp_path / "x.zarr", fmt, "csr")
    url = _on_s3(s3_server, local)
    bucket = url.split("/")[2]
    missing = sorted(key for key in _chunks(local) if key.startswith("X/indices/"))[-1]
    obstore.delete(from_url(f"s3://{bucket}", **s3_server.storage_options()), f"x.zarr/{missing}")
    out = tmp_path / "out.zarr"
    with pytest.raises(cv.MissingChunkError, match=f"lacks the chunk '{missing}'"):
        cv.write_counts(
            out, url, source_storage_options=s3_server.storage_options(), layout=_LAYOUT
        )
    assert not out.exists()
    assert list(spill_dir.iterdir()) == []


def test_shards_too_large_to_keep_are_read_by_range(
    s3_server: S3Server,
    s3_proxy: Any,
    spill_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard over ``KEPT_SHARD_BYTES`` decoded is not fetched whole: its inner chunks
    are read by range as before (a band sharing it reads them again), its index once
    (before: once for each band and pass reading part of the shard, 4 times for
    ``X/c/0/0``)."""
    from cytearc_vfs_adapters.anndata import fetched_once

    local = _anndata_store(tmp_path / "x.zarr", 3, "dense")
    url = _on_s3(s3_server, local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    monkeypatch.setattr(fetched_once, "KEPT_SHARD_BYTES", 1024)
    s3_proxy.take()
    info = cv.write_counts(
        tmp_path / "out.zarr", url, source_storage_options=options, layout=_LAYOUT
    )
    seen = s3_proxy.take()
    gets = _gets(seen)
    assert all(gets[key] > 1 for key in _chunks(local))
    indexes = Counter(
        s.path.split("/x.zarr/", 1)[1]
        for s in seen
        if s.method == "GET" and "/x.zarr/X/c/" in s.path and (s.range or "").startswith("bytes=-")
    )
    assert indexes == dict.fromkeys(_chunks(local), 1)
    same = cv.write_counts(tmp_path / "same.zarr", local, layout=_LAYOUT)
    assert info.dataset_fingerprint == same.dataset_fingerprint
    assert list(spill_dir.iterdir()) == []


def test_an_opened_container_written_twice_fetches_each_chunk_once_a_write(
    s3_server: S3Server, s3_proxy: Any, spill_dir: Path, tmp_path: Path
) -> None:
    """An opened container's matrix element is the same for both writes: the first
    write's kept objects are removed when it ends, the second keeps its own."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer

    local = _anndata_store(tmp_path / "x.zarr", 2, "csc")
    url = _on_s3(s3_server, local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    container = AnnDataContainer.open(url, storage_options=options)
    written = []
    for name in ("one", "two"):
        s3_proxy.take()
        written.append(cv.write_counts(tmp_path / f"{name}.zarr", container, layout=_LAYOUT))
        gets = _gets(s3_proxy.take())
        assert {key: gets[key] for key in _chunks(local)} == dict.fromkeys(_chunks(local), 1)
        assert list(spill_dir.iterdir()) == []
    assert written[0].dataset_fingerprint == written[1].dataset_fingerprint
    # read after the writes, it reads the store again
    band = container.matrix().row_band(0, 10)
    assert band.shape == (10, _GENES)


def test_a_full_temporary_directory_stops_the_keeping_not_the_write(
    s3_server: S3Server,
    s3_proxy: Any,
    spill_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept copies are a saving: a temporary directory without room (``ENOSPC`` on
    the first copy) makes the write read its chunks from the store again, as before,
    and the store written is the same."""
    import errno

    from cytearc_vfs_adapters.anndata import fetched_once

    class FullDisk(zarr.storage.LocalStore):
        async def set(self, key: str, value: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetched_once, "LocalStore", FullDisk)
    local = _anndata_store(tmp_path / "x.zarr", 3, "csr")
    url = _on_s3(s3_server, local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    s3_proxy.take()
    info = cv.write_counts(
        tmp_path / "out.zarr", url, source_storage_options=options, layout=_LAYOUT
    )
    gets = _gets(s3_proxy.take())
    # nothing kept: some chunk read more than once, as without keeping
    assert any(gets[key] > 1 for key in _chunks(local))
    same = cv.write_counts(tmp_path / "same.zarr", local, layout=_LAYOUT)
    assert info.dataset_fingerprint == same.dataset_fingerprint
    assert list(spill_dir.iterdir()) == []


def test_the_kept_objects_of_a_killed_write_are_swept_by_the_next(
    s3_server: S3Server, s3_proxy: Any, spill_dir: Path, tmp_path: Path
) -> None:
    """The kept objects live in an owned source cache directory: one left by a process
    that ended without its cleanup (killed mid-write) is removed when the next write
    keeps objects, as the remote shard cache's are."""
    import subprocess
    import sys

    from cytearc_vfs.remote.cache_owners import CACHE_PREFIX, OWNER_FILE

    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tempfile\n"
            "from cytearc_vfs.remote.cache_owners import CACHE_PREFIX, write_owner\n"
            "d = tempfile.mkdtemp(prefix=CACHE_PREFIX)\n"
            "open(d + '/X', 'w').write('kept')\n"
            "write_owner(d)\n"
            "print(d)\n",
        ],
        env={**os.environ, "TMPDIR": str(spill_dir)},
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = Path(made.stdout.strip())
    assert orphan.is_dir() and (orphan / OWNER_FILE).is_file()
    local = _anndata_store(tmp_path / "x.zarr", 3, "csr")
    url = _on_s3(s3_server, local)
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    cv.write_counts(tmp_path / "out.zarr", url, source_storage_options=options)
    assert not orphan.exists()
    assert not [p for p in spill_dir.iterdir() if p.name.startswith(CACHE_PREFIX)]
