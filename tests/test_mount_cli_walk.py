"""A mount walked on the command line as a user walks it (info, and what the
docs promise each command shows for a mount)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def test_info_of_a_mount_gives_each_mounted_assays_shape_and_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cli.md: info gives kind, assays, shapes, dtypes...; for a mount it gave the
    fingerprints alone, so the shape of the counts a user analyses was not shown."""
    source, target = tmp_path / "src.zarr", tmp_path / "mine.zarr"
    dtype = cv.write_counts(source, realistic_counts(30, 8, density=0.3, seed=2)).dtype
    cv.mount_datastore(source, target).close()
    assert main(["info", str(target)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{target}: mounted target of {source}"
    assert lines[1].startswith(f"  RNA: 30 cells x 8 features, {dtype}, dataset sha256:")
    assert main(["info", str(target), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["assays"] == [
        {"assay": "RNA", "workspace": None, "shape": [30, 8], "dtype": str(dtype)}
    ]
    assert payload["matrixSource"]["location"] == str(source)
