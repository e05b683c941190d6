"""A store on a static web server (``python -m http.server``) is refused for what the
server lacks, never as damaged or failing.

Such a server answers WebDAV ``PROPFIND`` with ``501`` and a ranged ``GET`` with
the whole file. Before, the first was told "the server kept answering 501 to
every retry ... check the server (its logs, its health)", and the second, for an
AnnData Zarr v3 store (anndata shards its arrays), "its index is 135 bytes, not
20; the shard is damaged (restore the source)". Neither is the remedy: the
server has to list and honour byte ranges.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cli_harness import run_main
from zarr.storage import FsspecStore

import cytearc_vfs as cv

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[str]:
    """The URL of ``tmp_path`` served by the standard library's static file server."""
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _anndata_v3(path: Path) -> Path:
    counts = sp.random(50, 20, density=0.3, format="csr", dtype=np.float32, random_state=0)
    counts.data[:] = 3
    data = ad.AnnData(
        X=counts,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(50)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(20)]),
    )
    return write_anndata_zarr(data, path, 3)


def test_a_server_ignoring_byte_ranges_is_named_not_the_store_damaged(
    tmp_path: Path, static_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cytearc_vfs_adapters.anndata import fetched_once

    local = _anndata_v3(tmp_path / "a.zarr")
    store = FsspecStore.from_url(f"{static_server}/a.zarr", read_only=True)
    # a write fetches each chunk object whole once (anndata/fetched_once.py): no byte
    # range is asked, so such a server serves it
    cv.write_counts(tmp_path / "whole.zarr", store)
    written = zarr.open_array(cv.open_store(tmp_path / "whole.zarr"), path="RNA/counts")
    np.testing.assert_array_equal(written[:], ad.read_zarr(local).X.toarray())
    # a shard too large to fetch whole is read by range: the server is named
    monkeypatch.setattr(fetched_once, "KEPT_SHARD_BYTES", 0)
    with pytest.raises(cv.SourceUnavailableError) as raised:
        cv.write_counts(tmp_path / "out.zarr", store)
    said = str(raised.value)
    assert "element X: shard X/indptr/c/0" in said
    assert "ignores byte ranges (HTTP Range requests)" in said
    assert "serve the store with a server that honours them" in said
    assert "damaged" not in said
    assert not (tmp_path / "out.zarr").exists()


def test_a_server_that_cannot_list_is_named_at_the_command_line(
    tmp_path: Path, static_server: str
) -> None:
    _anndata_v3(tmp_path / "a.zarr")
    for args in (
        ["write", f"{static_server}/a.zarr", str(tmp_path / "out.zarr")],
        ["composite", str(tmp_path / "c.zarr"), f"a={static_server}/a.zarr"],
    ):
        done = run_main(*args)
        assert done.returncode == 4, done.stderr
        assert "the web server does not list directories (it answered WebDAV PROPFIND with " in (
            done.stderr
        )
        assert "serve the directory with a server that lists, such as cytearc-vfs serve" in (
            done.stderr
        )
        assert "check the server (its logs, its health)" not in done.stderr
    assert not (tmp_path / "out.zarr").exists()
    assert not (tmp_path / "c.zarr").exists()
