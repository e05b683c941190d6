"""AnnData inputs that cannot be imported or composed, refused by name before anything is
written: a root that is not a readable ``anndata`` group (another encoding-type, an
unknown version, a root array), and a count matrix the container lacks (a missing
layer, no ``X``, no ``raw/X``).

Each store is written by anndata, then its root attributes edited with zarr, as a
tool that wrote another element at the root (or a future anndata) would leave it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cli_harness import run_main

import cytearc_vfs as cv
from cytearc_vfs.errors import UnsupportedSourceError, VfsError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def small(*, x: bool = True) -> ad.AnnData:
    """3 cells x 4 genes of whole counts, in X (or only in the layer ``counts``)."""
    counts = sp.csr_matrix(np.arange(12, dtype=np.float32).reshape(3, 4))
    if x:
        data = ad.AnnData(X=counts, layers={"counts": counts.copy()})
    else:
        data = ad.AnnData(layers={"counts": counts.copy()}, shape=(3, 4))
    data.obs_names = ["c0", "c1", "c2"]
    data.var_names = ["g0", "g1", "g2", "g3"]
    return data


def foreign_root(path: Path, zarr_format: int, kind: str) -> Path:
    """An AnnData store whose root declares ``kind`` instead of ``anndata`` 0.1.0."""
    write_anndata_zarr(small(), path, zarr_format)
    if kind == "root-array":
        shutil.rmtree(path)
        zarr.create_array(
            path,
            shape=(3,),
            dtype="int32",
            zarr_format=zarr_format,  # type: ignore[arg-type]
            attributes={"encoding-type": "array", "encoding-version": "0.2.0"},
        )
        return path
    attributes = {
        "dict": {"encoding-type": "dict", "encoding-version": "0.1.0"},
        "unknown-type": {"encoding-type": "frob", "encoding-version": "0.1.0"},
        "future-anndata": {"encoding-type": "anndata", "encoding-version": "0.2.0"},
        "unversioned-anndata": {"encoding-type": "anndata"},
    }[kind]
    group = zarr.open_group(path, mode="r+")
    group.attrs.clear()
    group.attrs.update(attributes)
    return path


WHAT = {
    "dict": r"a Zarr group with encoding-type 'dict' and encoding-version '0\.1\.0'",
    "unknown-type": r"a Zarr group with encoding-type 'frob' and encoding-version '0\.1\.0'",
    "future-anndata": r"a Zarr group with encoding-type 'anndata' and encoding-version '0\.2\.0'",
    "unversioned-anndata": r"a Zarr group with encoding-type 'anndata' and no encoding-version",
    "root-array": r"a Zarr array with encoding-type 'array' and encoding-version '0\.2\.0'",
}
SPEC = (
    r"Only an AnnData container is read as an AnnData source: a Zarr group with "
    r"encoding-type 'anndata' and encoding-version '0\.1\.0'"
)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", list(WHAT))
def test_a_source_whose_root_is_not_a_readable_anndata_is_named(
    tmp_path: Path, zarr_format: int, kind: str
) -> None:
    """Before: "assay 'RNA' does not exist" (taken for a CyteArc store), or the
    unknown anndata version composed as if it were 0.1.0."""
    source = foreign_root(tmp_path / "a.zarr", zarr_format, kind)
    remedy = (
        r"anndata\.read_zarr\(OLD\)\.write_zarr\(NEW\)"
        if "anndata" in kind
        else r"give the location of the AnnData's root"
    )
    with pytest.raises(
        UnsupportedSourceError,
        match=rf"a\.zarr is not an AnnData store .*: its root is "
        rf"{WHAT[kind]}\. {SPEC}.*{remedy}",
    ) as caught:
        cv.create_composite(tmp_path / "c.zarr", {"a": source})
    assert "does not exist" not in str(caught.value)
    assert not (tmp_path / "c.zarr").exists()


def test_the_command_line_names_the_root_too(tmp_path: Path) -> None:
    source = foreign_root(tmp_path / "a.zarr", 3, "dict")
    done = run_main("composite", str(tmp_path / "c.zarr"), f"a={source}")
    assert done.returncode == 2, done.stderr
    assert "its root is a Zarr group with encoding-type 'dict'" in done.stderr
    assert "assay" not in done.stderr
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("kind", ["future-anndata", "unversioned-anndata"])
def test_an_unknown_anndata_version_is_not_imported_as_if_known(tmp_path: Path, kind: str) -> None:
    """Before: write_counts and ``cytearc-vfs write`` read it as anndata 0.1.0."""
    source = foreign_root(tmp_path / "a.zarr", 3, kind)
    with pytest.raises(
        cv.VfsError,
        match=r"a\.zarr cannot be imported: its root is an AnnData of .*which this reader does "
        r"not know \(it reads anndata 0\.1\.0\).*Nothing was written",
    ):
        cv.write_counts(tmp_path / "out.zarr", str(source))
    assert not (tmp_path / "out.zarr").exists()
    done = run_main("write", str(source), str(tmp_path / "out.zarr"))
    assert done.returncode == 2, done.stderr
    assert "cannot be imported: its root is an AnnData of" in done.stderr
    assert not (tmp_path / "out.zarr").exists()
    # listing such a container still shows what it is
    listed = run_main("anndata", "ls", str(source))
    assert "not read" in listed.stdout, listed.stderr


# ------------------------------------------------------------ missing count matrices


def containers(tmp_path: Path, data: ad.AnnData) -> list[Path]:
    zarr_path = write_anndata_zarr(data, tmp_path / "a.zarr", 3)
    data.write_h5ad(tmp_path / "a.h5ad")
    return [zarr_path, tmp_path / "a.h5ad"]


CASES: list[tuple[bool, Any, str]] = [
    (True, "spliced", r"has no layer 'spliced'; its layers are \['counts'\] \(or give no layer"),
    (True, "raw/X", r"has no raw counts \(no 'raw/X'.*its layers are \['counts'\]"),
    (True, "a/b", r"has no layer 'a/b'; its layers are \['counts'\]"),
    (False, None, r"has no X; name the layer holding the counts \(its layers are \['counts'\]\)"),
]


@pytest.mark.parametrize(("x", "layer", "said"), CASES)
def test_a_missing_count_matrix_is_the_packages_refusal(
    tmp_path: Path, x: bool, layer: Any, said: str
) -> None:
    """Before: a bare ``KeyError`` whose text came quoted."""
    for location in containers(tmp_path, small(x=x)):
        destination = tmp_path / f"out-{location.suffix[1:]}.zarr"
        with pytest.raises(VfsError, match=rf"^{re.escape(str(location))} {said}") as caught:
            cv.write_counts(destination, str(location), layer=layer)
        # the package's error, which callers catching the builtins still catch
        assert isinstance(caught.value, UnsupportedSourceError)
        assert isinstance(caught.value, KeyError) and isinstance(caught.value, ValueError)
        assert str(caught.value) == caught.value.args[0]  # not KeyError's quoted text
        assert not destination.exists()


def test_a_missing_count_matrix_of_an_anndata_in_memory_is_the_same_refusal(
    tmp_path: Path,
) -> None:
    for data, layer, said in [
        (small(), "spliced", "has no layer 'spliced'"),
        (small(), "raw/X", "has no raw counts"),
        (small(x=False), None, "has no X"),
    ]:
        with pytest.raises(UnsupportedSourceError, match=said) as caught:
            cv.write_counts(tmp_path / "out.zarr", data, layer=layer)
        assert isinstance(caught.value, KeyError)
        assert not (tmp_path / "out.zarr").exists()
