"""The conformance suite passes on what write_counts writes, and catches broken stores."""

from __future__ import annotations

from pathlib import Path

import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_conformance import check_source_store
from s3_server import S3Server

import cytearc_vfs as cv


@pytest.mark.parametrize("workspace", [None, "ws"])
def test_written_stores_conform(
    tmp_path: Path, counts: sp.csr_array, workspace: str | None
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts, workspace=workspace)
    cv.write_counts(tmp_path / "adt.zarr", counts, assay="ADT", workspace=workspace)
    for name in ("s.zarr", "adt.zarr"):
        failures = [f for f in check_source_store(tmp_path / name) if not f.ok]
        assert failures == []


@pytest.mark.remote
def test_remote_store_conforms(s3_server: S3Server, counts: sp.csr_array) -> None:
    url = f"s3://{s3_server.new_bucket()}/c.zarr"
    cv.write_counts(url, counts, storage_options=s3_server.storage_options())
    failures = [
        f for f in check_source_store(url, storage_options=s3_server.storage_options()) if not f.ok
    ]
    assert failures == []


def test_broken_values_are_reported(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    counts_array = zarr.open_array(tmp_path / "s.zarr", path="RNA/counts", mode="r+")
    counts_array[0, 0] = counts_array[0, 0] + 1
    failures = {f.check: f.detail for f in check_source_store(tmp_path / "s.zarr") if not f.ok}
    assert "values agree with their records" in failures
    assert "changed after writing" in failures["values agree with their records"]


def test_unopenable_store_is_reported(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    zarr.open_group(tmp_path / "s.zarr", mode="a")["RNA"].create_group("state")
    failures = {f.check for f in check_source_store(tmp_path / "s.zarr") if not f.ok}
    assert "open_store verifies" in failures
