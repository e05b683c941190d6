"""A masked array's mask is never dropped in silence when an artifact is written.

An audit wrote ``np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])`` with
``write_array``: ``np.asarray`` dropped the mask, and the artifact was
published holding ``2.0`` where the producer had marked the value missing.
Streamed bands lost their masks the same way. Both are refused now, naming
the remedy, and nothing is published.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cytearc_vfs as cv

PROVENANCE = {"operation": "score", "parameters": {}, "inputs": {}}
MASKED = np.ma.array([[1.0], [2.0], [3.0]], mask=[[0], [1], [0]])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    location = tmp_path / "data.zarr"
    cv.write_counts(location, np.ones((3, 2), dtype=np.uint8))
    return location


def test_write_array_refuses_a_masked_array(store: Path) -> None:
    with (
        pytest.raises(TypeError, match=r"masked array.*filled\(np\.nan\)"),
        cv.publish_artifact(store, "RNA/artifacts", "scores", provenance=PROVENANCE) as art,
    ):
        art.write_array("score", MASKED, finite=False)
    assert cv.list_artifacts(store, "RNA/artifacts") == []


def test_a_streamed_masked_band_is_refused(store: Path) -> None:
    def stream() -> None:
        with cv.publish_artifact(store, "RNA/artifacts", "scores", provenance=PROVENANCE) as art:
            writer = art.create_array("score", (3, 1), np.float64, finite=False)
            writer.write(MASKED)

    with pytest.raises(TypeError, match="masked array"):
        stream()
    assert cv.list_artifacts(store, "RNA/artifacts") == []


def test_filled_values_are_published_as_given(store: Path) -> None:
    with cv.publish_artifact(store, "RNA/artifacts", "scores", provenance=PROVENANCE) as art:
        art.write_array("score", MASKED.filled(np.nan), finite=False)
    stored = cv.read_artifact(store, art.path).load("score")
    np.testing.assert_array_equal(stored, [[1.0], [np.nan], [3.0]])
