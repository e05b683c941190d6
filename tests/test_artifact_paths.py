"""read_artifact takes artifact paths only: ``{root}/{kind}/{64 hex digits}``.

An audit read ``RNA/artifacts/../artifacts/k/<id>``: the local store followed
the ``..`` and returned an Artifact whose path holds it, and ``..`` steps can
as well reach a group outside the store. ``RNA/artifacts/k`` (a kind group)
was reported as a record with seven missing fields, and ``RNA/counts/c`` as a
never-published artifact. Each is now a ValueError naming the path's form.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cytearc_vfs as cv

PROVENANCE = {"operation": "pca", "parameters": {}, "inputs": {}}


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, str]:
    store = tmp_path / "data.zarr"
    cv.write_counts(store, np.ones((4, 2), dtype=np.uint8))
    with cv.publish_artifact(store, "RNA/artifacts", "pca", provenance=PROVENANCE) as art:
        art.write_array("x", np.ones(4))
    return store, art.artifact_id


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("RNA/artifacts/../artifacts/pca/{id}", "not a valid name"),
        ("../data.zarr/RNA/artifacts/pca/{id}", "not a valid name"),
        ("RNA/./artifacts/pca/{id}", "not a valid name"),
        ("RNA//artifacts/pca/{id}", "not a valid name"),
        ("RNA/artifacts/pca", "64 lowercase hex digits"),
        ("RNA/artifacts/pca/{upper}", "64 lowercase hex digits"),
        ("RNA/counts/pca/{id}", "not an artifact root"),
        ("cellData/artifacts/pca/{id}", "group of the store layout"),
    ],
)
def test_paths_of_another_form_are_refused(
    published: tuple[Path, str], path: str, named: str
) -> None:
    store, artifact_id = published
    given = path.format(id=artifact_id, upper=artifact_id.upper())
    with pytest.raises(ValueError, match=named) as refused:
        cv.read_artifact(store, given)
    assert "{root}/{kind}/{artifact_id}" in str(refused.value)


def test_an_artifact_path_with_surrounding_slashes_is_read(published: tuple[Path, str]) -> None:
    store, artifact_id = published
    path = f"RNA/artifacts/pca/{artifact_id}"
    assert cv.read_artifact(store, f"/{path}/").path == path
