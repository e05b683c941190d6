"""Composites over sources read through fsspec (s3fs), behind a loopback proxy that fails.

obstore bounds its own retries by ``CYTEARC_SOURCE_TIMEOUT``; s3fs retries a
hung server or a lasting 503 for minutes, so the source's read path bounds
each request itself. Counted in requests the proxy saw, not in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from cli_harness import cli_executable
from conftest import realistic_counts
from loopback_proxy import LoopbackProxy
from s3_server import S3Server, fsspec_options

import cytearc_vfs as cv
from cytearc_vfs.remote.source_cache import CACHE_ENV
from cytearc_vfs.remote.timeouts import TIMEOUT_ENV

pytestmark = pytest.mark.remote

SMALL = cv.LayoutPolicy(64 * 1024, 4096)


Composite = tuple[Path, dict[str, str], np.ndarray]


def _composite(tmp_path: Path, s3_server: S3Server, cells: int, genes: int) -> Composite:
    """A composite of two S3 sources of ``cells`` x ``genes`` and ``cells // 2`` x
    ``genes``; its location, sources and expected values."""
    bucket = s3_server.new_bucket()
    direct = s3_server.storage_options()
    a = realistic_counts(cells, genes, density=0.2, seed=31)
    b = realistic_counts(cells // 2, genes, density=0.2, seed=32)
    features = [f"g{i}" for i in range(genes)]
    sources = {"a": f"s3://{bucket}/a.zarr", "b": f"s3://{bucket}/b.zarr"}
    for name, counts in (("a", a), ("b", b)):
        cv.write_counts(
            sources[name], counts, features=features, layout=SMALL, storage_options=direct
        )
    location = tmp_path / "c.zarr"
    options = {name: direct for name in sources}
    cv.create_composite(location, sources, source_storage_options=options).close()
    return location, sources, np.vstack([a.toarray(), b.toarray()])


@pytest.fixture(scope="module")
def shared_composite(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Composite:
    """A small composite: a shard per source array. Made once for the module: the
    tests open and read it (each through a proxy of its own), none changes it."""
    return _composite(tmp_path_factory.mktemp("fsspec_faults"), s3_server, 600, 40)


@pytest.fixture
def composite(shared_composite: Composite, monkeypatch: pytest.MonkeyPatch) -> Composite:
    """``shared_composite``, opened with the default cache budget."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    return shared_composite


def _shard_gets(proxy: LoopbackProxy) -> Counter[str]:
    return Counter(seen.path for seen in proxy.take() if "/c/" in seen.path)


#: The source timeout of these tests. Their stores open (and the command's first reads
#: go) through it too, and a first request also starts s3fs's client: at 3 s that
#: alone ran out on a loaded CI machine, before any fault, and failed at zarr.json.
LIMIT = 6


@pytest.mark.parametrize("fault", ["hang", "503"])
def test_an_fsspec_source_read_fails_within_the_timeout(
    composite: Composite,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    location, sources, _ = composite
    monkeypatch.setenv(TIMEOUT_ENV, str(LIMIT))
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        options = {name: fsspec_options(proxy.endpoint) for name in sources}
        store = cv.open_store(location, source_storage_options=options)
        proxy.take()
        if fault == "hang":
            proxy.hang = True
        else:
            proxy.fail(10_000, status=503, match="/c/")
        # a hung server is cut at the limit; a lasting 503 ends at the limit or, when
        # botocore's own few retries end first (a loaded machine), with the 503
        ended = TIMEOUT_ENV if fault == "hang" else f"({TIMEOUT_ENV}|Service Unavailable)"
        with pytest.raises(OSError, match=rf"source '[ab]' at s3://.*{ended}") as info:
            store.reader().read()
        if fault == "hang":
            assert f"no answer within CYTEARC_SOURCE_TIMEOUT={LIMIT} seconds" in str(info.value)
        gets = _shard_gets(proxy)
        # each shard asked a bounded number of times within the limit, not retried for
        # minutes (before: 124 requests to a hung server in 430 s, a 503 retried for
        # 45 s). A pinned read is one GetObject (no HEAD first, whose bodiless 503 s3fs
        # does not retry itself): s3fs retries a throttled GET (SlowDown) 5 times, each
        # through botocore's own attempts (at most 5), so at most 25
        assert gets and max(gets.values()) <= 25, gets
        store.close()
    finally:
        proxy.close()


def test_a_lasting_failure_of_an_fsspec_source_is_one_line_of_the_command_line(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """Requests in flight when the first fails are cancelled and awaited: none is left to
    fail again unseen and print "Exception ignored in: <coroutine ...>" at exit (before:
    a traceback for each of a scan's shards, ~360 lines)."""
    location, sources, _ = _composite(tmp_path, s3_server, 3000, 400)  # shards: many
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        options = {name: fsspec_options(proxy.endpoint) for name in sources}
        proxy.fail(10_000, status=503, match="/c/")
        run = subprocess.run(
            [
                cli_executable(),
                "verify",
                str(location),
                "--source-storage-options",
                json.dumps(options),
            ],
            env={**os.environ, TIMEOUT_ENV: str(LIMIT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        proxy.close()
    assert run.returncode not in (0, 1), run.stderr  # an error, not a verification finding
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[:3000]
    assert lines[0].startswith("cytearc-vfs verify: source '")
    assert "RNA/counts" in lines[0]
