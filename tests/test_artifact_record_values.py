"""A record whose values JSON cannot hold is malformed, and hides no other artifact.

An audit edited one artifact's record to hold ``NaN`` in its provenance (as
Python's ``json`` and zarr's attribute writer both emit): ``list_artifacts``
returned it as valid, then ``find_artifact`` raised ``ValueError`` for the
whole root, so the one broken child hid the healthy artifact with the same
provenance, and ``describe_artifacts`` returned dicts that are not JSON. The
spec's records hold canonical JSON values (no NaN or infinity) and an
operation that is a non-empty string; a record that does not is malformed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cytearc_vfs as cv
from cytearc_vfs.artifacts.catalog import describe_artifacts
from cytearc_vfs.errors import RecordShapeError

ROOT = "RNA/artifacts"
PROVENANCE = {"operation": "normalize", "parameters": {"a": 1}, "inputs": {}}


def _edit(document: dict[str, Any], where: str, value: Any) -> None:
    attributes = document["attributes"]
    if where == "parameters":
        attributes["provenance"]["parameters"]["b"] = value
    elif where == "inputs":
        attributes["provenance"]["inputs"]["counts"] = [value]
    elif where == "execution_options":
        attributes["execution_options"]["workers"] = value
    else:
        attributes["provenance"]["operation"] = value


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("parameters", float("nan")),
        ("inputs", float("inf")),
        ("execution_options", float("-inf")),
        ("operation", ""),
    ],
)
def test_a_record_with_values_json_lacks_is_skipped_and_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str, value: Any
) -> None:
    store = tmp_path / "data.zarr"
    cv.write_counts(store, np.ones((5, 3), dtype=np.uint8))
    paths = []
    for _ in range(2):
        with cv.publish_artifact(store, ROOT, "pca", provenance=PROVENANCE) as art:
            art.write_array("x", np.ones((5, 2)))
        paths.append(art.path)
    broken, healthy = paths
    document_path = store / broken / "zarr.json"
    document = json.loads(document_path.read_text())
    _edit(document, where, value)
    document_path.write_text(json.dumps(document))  # NaN and Infinity, as Python writes them

    with caplog.at_level(logging.WARNING):
        listed = cv.list_artifacts(store, ROOT)
    assert [art.path for art in listed] == [healthy]
    assert any(broken in record.getMessage() for record in caplog.records)
    found = cv.find_artifact(store, ROOT, "pca", PROVENANCE)
    assert found is not None and found.path == healthy
    with pytest.raises(RecordShapeError, match=where):
        cv.read_artifact(store, broken)
    described = describe_artifacts(store)
    assert [entry["path"] for entry in described] == [healthy]
    json.dumps(described, allow_nan=False)


@pytest.mark.parametrize("created", [2**63, 10**30])
def test_a_creation_time_beyond_int64_is_malformed_and_hides_nothing(
    tmp_path: Path, created: int
) -> None:
    store = tmp_path / "data.zarr"
    cv.write_counts(store, np.ones((5, 3), dtype=np.uint8))
    paths = []
    for _ in range(2):
        with cv.publish_artifact(store, ROOT, "pca", provenance=PROVENANCE) as art:
            art.write_array("x", np.ones((5, 2)))
        paths.append(art.path)
    broken, healthy = paths
    document_path = store / broken / "zarr.json"
    document = json.loads(document_path.read_text())
    document["attributes"]["created_at_ns"] = created
    document_path.write_text(json.dumps(document))

    assert [art.path for art in cv.list_artifacts(store, ROOT)] == [healthy]
    assert [entry["path"] for entry in describe_artifacts(store)] == [healthy]
    with pytest.raises(RecordShapeError, match="created_at_ns"):
        cv.read_artifact(store, broken)
