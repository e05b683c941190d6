"""A user's mistakes with S3 locations, against the loopback S3 server: a bucket that
does not exist, and a location whose options are wrong, each named with its own remedy.

What a user sees is the message: the cause (S3's own error code, not the XML
prolog of its answer) and the one remedy that fits it, with the option that
carries that location's settings (in Python, or the command line's flag for
that argument of that command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from s3_server import S3Server

import cytearc_vfs as cv

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


def fsspec_options(endpoint: str) -> dict[str, Any]:
    """s3fs options for the loopback S3 server at ``endpoint``."""
    return {
        "backend": "fsspec",
        "endpoint_url": endpoint,
        "key": "testing-key",
        "secret": "testing-secret",
        "client_kwargs": {"region_name": "us-east-1"},
    }


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
