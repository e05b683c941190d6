"""Names too long for a file system are refused before an artifact is begun.

An audit published an artifact whose kind had 300 characters: the local
store failed mid-publication with a bare ``OSError: [Errno 36] File name too
long`` and logged a false warning that an incomplete group "may stay"; an
array name of 300 characters failed the same way inside the block, and on
S3 both were accepted, giving a store that cannot be copied to a folder.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_harness import tree_digest

import cytearc_vfs as cv

PROVENANCE = {"operation": "normalize", "parameters": {}, "inputs": {}}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    location = tmp_path / "data.zarr"
    cv.write_counts(location, np.random.default_rng(0).poisson(1.0, (20, 5)))
    return location


def _publish(store: Any, *, kind: str = "pca", name: str = "x") -> str:
    with cv.publish_artifact(store, "RNA/artifacts", kind, provenance=PROVENANCE) as art:
        art.write_array(name, np.arange(20.0))
    return art.path


def test_long_kind_is_refused_before_anything_is_written(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = tree_digest(store)
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="300 characters long"):
        _publish(store, kind="k" * 300)
    assert tree_digest(store) == before
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_long_array_name_is_refused_and_nothing_published(store: Path) -> None:
    with pytest.raises(ValueError, match="at most 255"):
        _publish(store, name="n" * 256)
    assert cv.list_artifacts(store, "RNA/artifacts") == []


def test_names_of_the_longest_length_are_published_and_read_back(store: Path) -> None:
    path = _publish(store, kind="k" * 255, name="n" * 255)
    (art,) = cv.list_artifacts(store, "RNA/artifacts")
    assert art.path == path
    np.testing.assert_array_equal(art.load("n" * 255), np.arange(20.0))


def test_long_names_are_refused_on_object_stores_too(s3_server: Any) -> None:
    options = s3_server.storage_options()
    url = f"s3://{s3_server.new_bucket()}/data.zarr"
    cv.write_counts(url, np.ones((20, 5), dtype=np.uint8), storage_options=options)
    store = cv.open_store(url, mode="r+", storage_options=options)
    with pytest.raises(ValueError, match="300 characters long"):
        _publish(store, kind="k" * 300)
    with pytest.raises(ValueError, match="300 characters long"):
        _publish(store, name="n" * 300)
    assert cv.list_artifacts(store, "RNA/artifacts") == []
