"""A destination is judged where its data lands, not by the text of its path.

An audit found three ways the "no store inside a store" rule of the spec's
"Writer destinations" went wrong, because only the lexical parents of the
given path were examined: a symbolic link into a store let ``write_counts``
write a whole store inside it; a dangling link there failed with a bare
``[Errno 17] File exists``; and ``store.zarr/../new.zarr``, a sibling of the
store, was refused as if it were inside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from cli_harness import tree_digest

import cytearc_vfs as cv

COUNTS = np.random.default_rng(0).poisson(1.0, (30, 8))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    location = tmp_path / "source.zarr"
    cv.write_counts(location, COUNTS)
    return location


def test_link_to_a_folder_inside_a_store_is_refused(source: Path, tmp_path: Path) -> None:
    (source / "inner").mkdir()
    link = tmp_path / "link.zarr"
    os.symlink(source / "inner", link)
    before = tree_digest(source)
    with pytest.raises(ValueError, match=r"below the Zarr node .*source\.zarr") as refused:
        cv.write_counts(link, COUNTS)
    assert "resolves to" in str(refused.value)
    assert tree_digest(source) == before
    assert list((source / "inner").iterdir()) == []


def test_dangling_link_into_a_store_is_refused_clearly(source: Path, tmp_path: Path) -> None:
    link = tmp_path / "dangling.zarr"
    os.symlink(source / "not-yet", link)
    before = tree_digest(source)
    with pytest.raises(ValueError, match="below the Zarr node"):
        cv.write_counts(link, COUNTS)
    assert tree_digest(source) == before


def test_parent_steps_are_followed_before_the_check(source: Path, tmp_path: Path) -> None:
    sibling = source / ".." / "sibling.zarr"
    info = cv.write_counts(sibling, COUNTS)
    assert (tmp_path / "sibling.zarr" / "zarr.json").is_file()
    assert not (source / "sibling.zarr").exists()
    assert info.shape == COUNTS.shape


def test_dangling_link_elsewhere_is_refused_clearly(tmp_path: Path) -> None:
    link = tmp_path / "dangling.zarr"
    os.symlink(tmp_path / "nowhere" / "x.zarr", link)
    with pytest.raises(FileExistsError, match=r"symbolic link to .*which does not exist"):
        cv.write_counts(link, COUNTS)
    assert not (tmp_path / "nowhere").exists()
