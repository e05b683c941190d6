"""``artifacts``, ``export`` and a loaded ``to_anndata`` of a store on object storage
read each object once.

``artifacts`` told what the location holds, then opened the store anew with
``open_store``; ``export`` opened the store, then bound a reader and read
the tables, each reading the store's documents on its own. Against a
loopback S3 server, ``artifacts`` of an ordinary store made 34 requests (its
top-level listing and the root document 4 or 5 times each) and ``export``
60 (``cellData/zarr.json`` 5 times). ``artifacts`` now opens the store
through the view its check read (``viewed_for_reading``, ``opened_store``);
``export`` reads the store through one such view for the whole export.

That left one data read twice: the open of a composite or a mount reads its
own ``cellData/ids`` and ``{assay}/featureData/ids`` whole to check their
fingerprints, and the export's tables read the same chunks again (44, 46
and 54 requests for a composite, a mount and a composite of AnnData
sources). The open now hands those chunks on to the tables' read, once
(``RememberedReads.holding``). ``to_anndata(lazy=False)`` read the store
without any such view (60 requests for an ordinary store, its
``cellData/zarr.json`` 5 times); it now reads it as ``export`` does.
Counted at a proxy in front of the server, as
``tests/test_command_reads_once.py`` counts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from anndata_files import write_anndata_zarr
from cli_harness import run_main
from conftest import realistic_counts
from test_anndata_sources import remote_parts, upload
from test_command_reads_once import _stores

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

#: Requests of each call, by kind of store ("anndata": a composite of two AnnData Zarr
#: sources). Before this change: artifacts 34, 32, 44; export 60, 48, 52, then 33,
#: 44, 46, 54 (the ids chunks twice); to_anndata(lazy=False) 60, 48, 52, 58.
EXPECTED = {
    ("ordinary", "artifacts"): 19,
    ("composite", "artifacts"): 24,
    ("mount", "artifacts"): 35,
    ("ordinary", "export"): 33,
    ("composite", "export"): 42,
    ("mount", "export"): 44,
    ("anndata", "export"): 52,
    ("ordinary", "to_anndata"): 33,
    ("composite", "to_anndata"): 42,
    ("mount", "to_anndata"): 44,
    ("anndata", "to_anndata"): 52,
}


def _anndata_composite(s3_server: Any, s3_proxy: Any, tmp_path: Path) -> tuple[str, list[str]]:
    """A composite on S3 of two AnnData Zarr sources on S3 (Zarr v3 CSR, v2 CSC), and
    the flags that read it, through the proxy."""
    from obstore.store import from_url

    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    bucket = s3_server.new_bucket()
    raw = from_url(f"s3://{bucket}", **s3_server.storage_options())
    parts = remote_parts()
    for name, data in parts.items():
        upload(raw, write_anndata_zarr(data, tmp_path / f"{name}.zarr", int(name[1])))
    sources = {name: options for name in parts}
    url = f"s3://{bucket}/c.zarr"
    cv.create_composite(
        url,
        {name: f"s3://{bucket}/{name}.zarr" for name in parts},
        storage_options=options,
        source_storage_options=sources,
    ).close()
    return url, [
        "--storage-options",
        json.dumps(options),
        "--source-storage-options",
        json.dumps(sources),
    ]


def _store(s3_server: Any, s3_proxy: Any, kind: str, tmp_path: Path) -> tuple[str, list[str]]:
    if kind == "anndata":
        return _anndata_composite(s3_server, s3_proxy, tmp_path)
    return _stores(s3_server, s3_proxy, kind)


def _options(flags: list[str]) -> dict[str, Any]:
    """The keywords of the Python calls, from the command's flags."""
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    return {
        "storage_options": json.loads(given["--storage-options"]),
        "source_storage_options": json.loads(given.get("--source-storage-options", "null")),
    }


def _read_again(seen: list[Any]) -> dict[tuple[str, str], int]:
    requests = Counter((s.method, s.path) for s in seen)
    return {key: count for key, count in requests.items() if count > 1}


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        *((kind, "artifacts") for kind in ("ordinary", "composite", "mount")),
        *((kind, "export") for kind in ("ordinary", "composite", "mount", "anndata")),
    ],
)
def test_each_object_is_read_once_a_command(
    s3_server: Any, s3_proxy: Any, kind: str, command: str, tmp_path: Path
) -> None:
    url, flags = _store(s3_server, s3_proxy, kind, tmp_path)
    out = tmp_path / "out.h5ad"
    s3_proxy.take()
    given = [url] if command == "artifacts" else [url, str(out)]
    said = run_main(command, *given, *flags)
    assert said.returncode == 0, said.stderr
    seen = s3_proxy.take()
    # no document, listing or chunk twice: a composite's and a mount's id chunks, read
    # by the open's checks, are the ones the tables read (docs/remote.md)
    assert _read_again(seen) == {}
    assert len(seen) == EXPECTED[kind, command]
    if command == "artifacts":
        assert said.stdout.startswith(f"{url}: ")
    else:
        cells = {"ordinary": 40, "composite": 70, "mount": 40, "anndata": 800}[kind]
        assert said.stdout.startswith(f"exported {cells} cells")
        assert out.is_file()


@pytest.mark.parametrize("kind", ["ordinary", "composite", "mount", "anndata"])
def test_a_loaded_to_anndata_reads_each_object_once(
    s3_server: Any, s3_proxy: Any, kind: str, tmp_path: Path
) -> None:
    url, flags = _store(s3_server, s3_proxy, kind, tmp_path)
    options = _options(flags)
    s3_proxy.take()
    loaded = cv.to_anndata(url, lazy=False, **options)
    seen = s3_proxy.take()
    assert _read_again(seen) == {}
    assert len(seen) == EXPECTED[kind, "to_anndata"]
    # the same AnnData a lazy one (a store kept open, read anew) computes
    lazy = cv.to_anndata(url, **options)
    np.testing.assert_array_equal(loaded.X.toarray(), lazy.X.compute().toarray())
    assert loaded.obs.equals(lazy.obs) and loaded.var.equals(lazy.var)
    assert loaded.uns == lazy.uns


@pytest.mark.parametrize("kind", ["composite", "mount"])
def test_the_tables_get_the_ids_the_open_checked_once(
    s3_server: Any, s3_proxy: Any, kind: str, tmp_path: Path
) -> None:
    """The open hands its ids chunks to the tables' read: the tables hold the ids the
    open verified, even where the store changed since, and the chunks are not kept
    after that read (the next one fetches them)."""
    import zarr
    from cytearc_vfs_adapters.anndata_output.conversion import read_frames
    from cytearc_vfs_adapters.anndata_output.opened import open_assay

    from cytearc_vfs.remote.locations import open_location

    url, flags = _store(s3_server, s3_proxy, kind, tmp_path)
    options = _options(flags)
    opened = open_assay(url, once=True, **options)
    try:
        own = open_location(url, read_only=False, storage_options=options["storage_options"])
        ids = zarr.open_array(own, path="cellData/ids", mode="r+")
        verified = np.asarray(ids[:]).astype(str)
        features = np.asarray(zarr.open_array(own, path="RNA/featureData/ids")[:]).astype(str)
        ids[:] = np.array([f"other{i}" for i in range(len(verified))], dtype=ids.dtype)
        s3_proxy.take()
        obs, var, _ = read_frames(opened)
        chunks = [s.path for s in s3_proxy.take() if "/ids/c/" in s.path]
        assert chunks == []
        assert obs.index.tolist() == verified.tolist()
        assert var.index.tolist() == features.tolist()
        read_frames(opened)
        chunks = [s.path for s in s3_proxy.take() if "/ids/c/" in s.path]
        assert sorted(chunk.rsplit(".zarr/", 1)[1] for chunk in chunks) == [
            "RNA/featureData/ids/c/0",
            "cellData/ids/c/0",
        ]
    finally:
        opened.store.close()


@pytest.mark.parametrize("call", ["export", "to_anndata"])
def test_bands_of_cells_read_each_shard_once(
    s3_server: Any, s3_proxy: Any, call: str, tmp_path: Path
) -> None:
    """Bands of an ordinary store end on its counts' shard boundaries.

    A band ending inside a shard left the next band to fetch that shard again
    (its index and chunks, or the whole of it): in bands of 6,666 cells over
    shards of 216 cells, the 6 shards cut by a band were fetched twice. The
    bands now end on a shard boundary (6,480 cells), each shard read by one.
    """
    import anndata as ad
    import scipy.sparse as sp
    from cytearc_vfs_adapters.anndata_output.conversion import cell_bands
    from cytearc_vfs_adapters.anndata_output.export import export_anndata
    from cytearc_vfs_adapters.anndata_output.loading import loaded_counts
    from cytearc_vfs_adapters.anndata_output.opened import open_assay

    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    url = f"s3://{s3_server.new_bucket()}/a.zarr"
    counts = realistic_counts(40_000, 300, density=0.05, seed=5)
    # shards of 216 cells (8 chunks of 27); bands of 2 MB dense, 6,666 cells
    cv.write_counts(url, counts, storage_options=options, layout=("64K", "8K"))
    s3_proxy.take()
    if call == "export":
        out = tmp_path / "out.h5ad"
        info = export_anndata(url, out, band_bytes=2_000_000, storage_options=options)
        assert (info.bands, info.band_cells) == (7, 6480)
        read = ad.read_h5ad(out).X
    else:
        # as to_anndata(lazy=False) reads
        opened = open_assay(url, once=True, storage_options=options)
        read = loaded_counts(opened, cell_bands(opened, band_bytes=2_000_000))
    seen = s3_proxy.take()
    assert _read_again(seen) == {}
    assert len(seen) == {"export": 218, "to_anndata": 206}[call]  # no tables read here
    assert (sp.csr_matrix(read) != sp.csr_matrix(counts)).nnz == 0
