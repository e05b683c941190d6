"""A source whose summary chunk was lost is refused by create_composite.

zarr reads a missing chunk as zeros; a composite would publish those zeros
as its cells' totals. The summaries' own consistency names the damage.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.errors import RecordShapeError


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("summaries")
    cv.write_counts(root / "a.zarr", realistic_counts(300, 80, seed=3))
    return root / "a.zarr"


@pytest.mark.parametrize("summary", ["rowSums", "rowPositive", "columnPositive"])
def test_a_lost_summary_chunk_is_refused_naming_the_source(
    pristine: Path, tmp_path: Path, summary: str
) -> None:
    source = tmp_path / "a.zarr"
    shutil.copytree(pristine, source)
    shutil.rmtree(source / "RNA" / "countSummaries" / summary / "c")
    assert cv.open_store(source)  # opening reads no summary values
    with pytest.raises(RecordShapeError, match="contradict each other") as refused:
        cv.create_composite(tmp_path / "comp.zarr", {"damaged": source})
    assert "'damaged'" in str(refused.value) and "verify" in str(refused.value)
    assert not (tmp_path / "comp.zarr").exists()


def test_intact_summaries_pass_and_are_published(pristine: Path, tmp_path: Path) -> None:
    with pytest.warns(cv.VfsWarning, match="the same store"):  # its cells twice, as meant
        composite = cv.create_composite(tmp_path / "comp.zarr", {"a": pristine, "b": pristine})
    import zarr

    row_sums = zarr.open_array(composite, path="RNA/countSummaries/rowSums", mode="r")[:]
    source = zarr.open_array(cv.open_store(pristine), path="RNA/countSummaries/rowSums")[:]
    np.testing.assert_array_equal(row_sums, np.concatenate([source, source]))
