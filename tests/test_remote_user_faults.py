"""A user's mistakes with S3 locations, against the loopback S3 server: a bucket that
does not exist, and a location whose options are wrong, each named with its own remedy.

What a user sees is the message: the cause (S3's own error code, not the XML
prolog of its answer) and the one remedy that fits it, with the option that
carries that location's settings (in Python, or the command line's flag for
that argument of that command).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from s3_server import S3Server, fsspec_options

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.remote.failures import StoreAccessError

pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def counts() -> sp.csr_array:
    return realistic_counts(40, 12, density=0.3, seed=5)


@pytest.fixture(scope="module")
def stored(s3_server: S3Server, counts: sp.csr_array) -> str:
    """An ordinary store in a bucket of the server."""
    url = f"s3://{s3_server.new_bucket()}/a.zarr"
    cv.write_counts(url, counts, storage_options=s3_server.storage_options())
    return url


def _no_bucket_named(text: str) -> None:
    assert "bucket does not exist" in text and "create the bucket" in text, text
    assert "<?xml" not in text, text  # S3's code, not the prolog of its answer
    assert "credentials" not in text, text  # not the remedy of this cause


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_destination_in_a_missing_bucket_is_named_as_such(
    backend: str, s3_server: S3Server, counts: sp.csr_array, tmp_path: Path
) -> None:
    options = (
        s3_server.storage_options() if backend == "obstore" else fsspec_options(s3_server.endpoint)
    )
    with pytest.raises(OSError) as raised:
        cv.write_counts("s3://no-such-bucket-1/a.zarr", counts, storage_options=options)
    _no_bucket_named(str(raised.value))
    assert "s3://no-such-bucket-1/a.zarr" in str(raised.value)
    local = tmp_path / "a.zarr"
    cv.write_counts(local, counts)
    with pytest.raises(OSError) as raised:
        cv.create_composite("s3://no-such-bucket-1/c.zarr", {"a": local}, storage_options=options)
    _no_bucket_named(str(raised.value))


def test_a_source_in_a_missing_bucket_is_named_as_such(s3_server: S3Server, tmp_path: Path) -> None:
    options = s3_server.storage_options()
    with pytest.raises(OSError) as raised:
        cv.create_composite(
            tmp_path / "c.zarr",
            {"a": "s3://no-such-bucket-2/a.zarr"},
            source_storage_options={"a": options},
        )
    _no_bucket_named(str(raised.value))
    assert "source 'a'" in str(raised.value)
    assert not (tmp_path / "c.zarr").exists()


def test_opening_a_store_in_a_missing_bucket_says_so(
    s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """S3 answers a GET of any key in a bucket that does not exist 404, as for an absent
    key: 'holds no Zarr group' sent the user after the path. An open that finds no root
    document asks one listing, which names the missing bucket."""
    options = s3_server.storage_options()
    url = "s3://no-such-bucket-3/a.zarr"
    with pytest.raises(OSError) as raised:
        cv.open_store(url, storage_options=options)
    _no_bucket_named(str(raised.value))
    with pytest.raises(OSError) as raised:
        cv.mount_datastore(url, tmp_path / "m.zarr", source_storage_options=options)
    _no_bucket_named(str(raised.value))
    assert not (tmp_path / "m.zarr").exists()
    code = main(["info", url, "--storage-options", json.dumps(options)])
    err = capsys.readouterr().err
    assert code == 4 and len(err.strip().splitlines()) == 1, err
    _no_bucket_named(err)
    # a bucket that exists, with nothing at the path: it does not exist, as a local
    # path would not (the same listing tells)
    bucket = s3_server.new_bucket()
    with pytest.raises(ValueError, match=r"a\.zarr does not exist \(nothing is stored there\)"):
        cv.open_store(f"s3://{bucket}/a.zarr", storage_options=options)


@pytest.mark.parametrize(
    ("command", "remote", "flag"),
    [
        # the remote argument of each command, and the flag that carries its options
        (["mount", "REMOTE", "LOCAL"], "SOURCE", "--source-storage-options"),
        (["mount", "LOCAL_STORE", "REMOTE"], "DEST", "--storage-options"),
        (["repack", "LOCAL_STORE", "REMOTE"], "DEST", "--destination-storage-options"),
        (["repack", "REMOTE", "LOCAL"], "SOURCE", "--storage-options"),
        (["composite", "REMOTE", "a=LOCAL_STORE"], "DEST", "--storage-options"),
        (["info", "REMOTE"], "LOCATION", "--storage-options"),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else value,
)
def test_the_command_line_names_the_location_and_the_flag_of_its_options(
    command: list[str],
    remote: str,
    flag: str,
    s3_server: S3Server,
    stored: str,
    counts: sp.csr_array,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local_store = tmp_path / "local.zarr"
    cv.write_counts(local_store, counts)
    url = stored if remote in ("SOURCE", "LOCATION") else f"{stored.rpartition('/')[0]}/new.zarr"
    words = {
        "REMOTE": url,
        "LOCAL": str(tmp_path / "new.zarr"),
        "LOCAL_STORE": str(local_store),
        "a=LOCAL_STORE": f"a={local_store}",
    }
    code = main(
        [
            *(words.get(word, word) for word in command),
            flag,
            json.dumps(s3_server.unreachable_options()),
        ]
    )
    err = capsys.readouterr().err
    assert code == 4, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{url} cannot be" in err, err  # the location, named
    assert f"as {flag} " in err, err  # the flag that carries its options
    others = {"--storage-options", "--source-storage-options", "--destination-storage-options"}
    for other in others - {flag}:
        assert f"as {other}" not in err, err
    assert not (tmp_path / "new.zarr").exists()


def test_a_write_the_server_keeps_failing_is_one_clear_error(
    s3_server: S3Server, counts: sp.csr_array, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A destination whose server answers every chunk write ``500``: the error names the
    destination by its URL, the key, the cause in one line and its remedy, and says the
    destination is unfinished; obstore's multi-line debug dump stays in the cause."""
    from loopback_proxy import LoopbackProxy

    monkeypatch.setenv("CYTEARC_SOURCE_TIMEOUT", "1")
    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        url = f"s3://{s3_server.new_bucket()}/failing.zarr"
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        proxy.fail(10_000, status=500, match="failing.zarr/RNA/counts/c/")
        with pytest.raises(StoreAccessError) as raised:
            cv.write_counts(url, counts, storage_options=options)
        text = str(raised.value)
        assert text.startswith("writing 'RNA/counts/c/") and f" to {url} failed (" in text, text
        assert "\n" not in text and "Debug source" not in text and "S3Store(" not in text, text
        assert "500 Internal Server Error" in text and "CYTEARC_SOURCE_TIMEOUT" in text, text
        assert "unfinished" in text and "overwrite=True" in text, text
        assert raised.value.where == url
        proxy.clear()
        with pytest.raises(cv.IncompleteStoreError):
            cv.open_store(url, storage_options=options)
    finally:
        proxy.close()


def test_a_server_that_keeps_answering_500_is_not_told_to_wait_longer(
    s3_server: S3Server, counts: sp.csr_array
) -> None:
    """Every retry answered ``500``, the retries spent before the time limit: the
    remedy was "allow slower requests with CYTEARC_SOURCE_TIMEOUT", as for a busy
    server, where the server fails at the request and more time changes nothing."""
    from datetime import timedelta

    from loopback_proxy import LoopbackProxy

    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        url = f"s3://{s3_server.new_bucket()}/broken.zarr"
        cv.write_counts(url, counts, storage_options=s3_server.storage_options())
        options = {
            **s3_server.storage_options(),
            "endpoint": proxy.endpoint,
            "retry_config": {"max_retries": 1, "retry_timeout": timedelta(seconds=30)},
        }
        proxy.fail(10_000, status=500, match="broken.zarr/zarr.json")
        with pytest.raises(StoreAccessError) as raised:
            cv.open_store(url, storage_options=options)
        text = str(raised.value)
        assert "kept answering 500 to every retry" in text, text
        assert "CYTEARC_SOURCE_TIMEOUT" not in text, text
    finally:
        proxy.close()


def test_a_refused_write_names_the_destination_by_its_url(
    s3_server: S3Server, counts: sp.csr_array
) -> None:
    """A 403 on the chunk writes (credentials that may read but not write): the error
    names the destination as the caller wrote it, never the client's own description
    (``object_store://S3Store(bucket=...)/...``), and the remedy once."""
    from loopback_proxy import LoopbackProxy

    proxy = LoopbackProxy(s3_server.endpoint)
    try:
        bucket = s3_server.new_bucket()
        url = f"s3://{bucket}/denied.zarr"
        options = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
        proxy.fail(10_000, status=403, match="denied.zarr/RNA/counts/c/")
        with pytest.raises(OSError) as raised:
            cv.write_counts(url, counts, storage_options=options)
        text = str(raised.value)
        assert isinstance(raised.value.__cause__, PermissionError)
        assert url in text and "object_store://" not in text and "S3Store(" not in text, text
        assert text.count("credentials with write access") == 1, text
        assert "unfinished" in text and "overwrite=True" in text, text
    finally:
        proxy.close()


def test_anndata_ls_names_a_missing_bucket_and_a_mistyped_store(
    s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cytearc-vfs anndata ls`` said "holds no Zarr group at its root; give an AnnData
    Zarr store (a directory with .zgroup or zarr.json)" for a bucket that does not exist
    and for a store name that holds nothing, where ``info`` and ``write`` name the bucket
    or say the location does not exist."""
    options = ["--storage-options", json.dumps(s3_server.storage_options())]
    code = main(["anndata", "ls", "s3://no-such-bucket-4/a.zarr", *options])
    err = capsys.readouterr().err
    assert code == 4 and len(err.strip().splitlines()) == 1, err
    _no_bucket_named(err)
    missing = f"s3://{s3_server.new_bucket()}/a-typo.zarr"
    code = main(["anndata", "ls", missing, *options])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{missing} does not exist (nothing is stored there); check the path" in err, err
    assert "directory" not in err, err
    # in Python the missing bucket is the package's error naming it, not obstore's own
    from cytearc_vfs_adapters.anndata import AnnDataContainer

    with pytest.raises(StoreAccessError) as raised:
        AnnDataContainer.open(
            "s3://no-such-bucket-4/a.zarr", storage_options=s3_server.storage_options()
        )
    _no_bucket_named(str(raised.value))


@pytest.mark.parametrize("command", ["write", "composite"])
def test_a_remote_destination_left_untouched_is_not_said_removed(
    command: str,
    s3_server: S3Server,
    counts: sp.csr_array,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A command refused before it wrote anything to an S3 destination ended its line
    with "removed the unfinished destination s3://..., so running the command again
    needs no --overwrite", as if it had written and deleted a store there; a local
    destination said nothing, which is what happened."""
    import anndata
    import pandas as pd

    bucket = s3_server.new_bucket()
    destination = f"s3://{bucket}/out.zarr"
    local = tmp_path / "a.zarr"
    options = ["--storage-options", json.dumps(s3_server.storage_options())]
    if command == "write":
        adata = anndata.AnnData(X=sp.csr_matrix(counts.astype("float32")))
        adata.obs["kind"] = pd.Categorical(["x", None] * 20)  # missing values: refused
        adata.write_zarr(local)
        argv = ["write", str(local), destination, *options]
    else:
        cv.write_counts(local, counts)
        # options for a source that is not one: refused before any source is read
        argv = [
            "composite",
            destination,
            f"a={local}",
            *options,
            "--source-storage-options",
            '{"b": {}}',
        ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "removed" not in err and "--overwrite" not in err, err
    from zarr.core.sync import sync

    from cytearc_vfs.remote.locations import open_location

    store = open_location(destination, read_only=True, storage_options=s3_server.storage_options())

    async def listed() -> list[str]:
        return [key async for key in store.list()]

    assert sync(listed()) == []


def test_a_server_lost_during_a_write_is_reported_in_one_line(
    s3_server: S3Server,
    s3_proxy: Any,
    counts: sp.csr_array,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The S3 server died while ``cytearc-vfs write IN s3://lab/out.zarr`` stored its
    chunks: the write failed, and so did removing the unfinished destination, whose
    error was quoted whole: obstore's 30-line debug dump (``Debug source: Generic {
    ... }``) in the middle of the error line. The cleanup's failure is its first line,
    and the destination is named as the one to delete; the remedy of the write's own
    failure names the destination's reachability, not a source's."""
    from cli_harness import write_h5ad

    source = tmp_path / "in.h5ad"
    write_h5ad(source, sp.csr_array(counts))
    bucket = s3_server.new_bucket()
    destination = f"s3://{bucket}/out.zarr"
    options = {
        **s3_server.storage_options(),
        "endpoint": s3_proxy.endpoint,
        "retry_config": {"max_retries": 1},
    }
    # from the first chunk written on, the server answers nothing (it died)
    s3_proxy.on(1, lambda: s3_proxy.drop(10**6), methods="PUT")
    code = main(["write", str(source), destination, "--storage-options", json.dumps(options)])
    err = capsys.readouterr().err
    assert code == 4, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Debug source" not in err and "RetryError" not in err, err
    assert f"delete {destination} yourself" in err, err
    assert "source" not in err.split(";")[1], err


def test_verify_of_a_source_whose_server_is_lost_is_a_failure_not_a_finding(
    s3_server: S3Server,
    s3_proxy: Any,
    counts: sp.csr_array,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The S3 server of a composite's source died during ``cytearc-vfs verify``: the
    report said "PROBLEMS FOUND ... the virtual counts could not be read
    (SourceUnavailableError ...); a source is damaged (the source findings below name
    it)", exit 1, though nothing is damaged and no finding followed. A source that
    cannot be reached is the environment's failure (exit 4), said as the open says it."""
    import anndata
    from obstore.store import from_url
    from test_anndata_sources import upload

    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/a.zarr"
    # an AnnData source: verify reads it through the virtual counts only
    anndata.AnnData(X=sp.csr_matrix(counts.astype("float32"))).write_zarr(tmp_path / "a.zarr")
    upload(from_url(f"s3://{bucket}", **s3_server.storage_options()), tmp_path / "a.zarr")
    options = {
        "a": {
            **s3_server.storage_options(),
            "endpoint": s3_proxy.endpoint,
            "retry_config": {"max_retries": 1},
        },
    }
    composite = tmp_path / "c.zarr"
    cv.create_composite(composite, {"a": url}, source_storage_options=options).close()
    s3_proxy.drop(10**6, match="/c/")  # every chunk request from now: the server is gone
    code = main(["verify", str(composite), "--source-storage-options", json.dumps(options)])
    captured = capsys.readouterr()
    assert code == 4, captured
    assert "PROBLEMS FOUND" not in captured.out and "damaged" not in captured.err, captured
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert "source 'a'" in captured.err and "--source-storage-options" in captured.err
