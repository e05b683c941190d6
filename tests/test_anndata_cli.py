"""``cytearc-vfs anndata ls`` and ``cytearc-vfs write`` from AnnData, as users run them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_fixtures import N_OBS, N_VAR, counts, write_legacy, write_modern
from cli_harness import cli_executable, run_in_terminal, run_main

import cytearc_vfs as cv
from cytearc_vfs.inspection.store_kind import classify_location


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process: the executable's own paths (a terminal, a
    reader that leaves early) have tests of their own below."""
    return run_main(*args)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("anndata-cli")
    write_modern(root / "modern.zarr", 3)
    write_legacy(root / "legacy.zarr", 2)
    # CyteArc's table writer asks for categoricals without missing values
    filled = ad.AnnData(X=counts(), layers={"csc": sp.csc_matrix(counts())})
    filled.obs_names = [f"cell{i}" for i in range(N_OBS)]
    filled.write_zarr(root / "filled.zarr")
    write_legacy(root / "filled_legacy.zarr", 2, missing_categories=False)
    return {
        "modern": root / "modern.zarr",
        "legacy": root / "legacy.zarr",
        "filled": root / "filled.zarr",
        "filled_legacy": root / "filled_legacy.zarr",
    }


def test_ls_lists_every_element_with_encoding_version_and_shape(stores: dict[str, Path]) -> None:
    result = run("anndata", "ls", str(stores["modern"]))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"AnnData (Zarr v3), {N_OBS} obs x {N_VAR} var" in lines[0]
    assert "1 awkward array reported, not read" in lines[0]
    table = {line.split()[0]: line for line in lines[1:]}
    assert "csr_matrix 0.1.0" in table["/X"] and f"{N_OBS} x {N_VAR}" in table["/X"]
    assert "csc_matrix 0.1.0" in table["/layers/csc"]
    assert "categorical 0.2.0" in table["/obs/cell_type"]
    assert "nullable-integer 0.1.0" in table["/obs/maybe_int"]
    assert "string 0.2.0" in table["/uns/title"] and "scalar" in table["/uns/title"]
    assert "null 0.1.0" in table["/uns/nothing"]
    assert "awkward-array 0.1.0" in table["/uns/ragged"]
    assert "reported, not read" in table["/uns/ragged"]
    assert not any("legacy" in line for line in lines[1:])


def test_ls_marks_legacy_elements(stores: dict[str, Path]) -> None:
    result = run("anndata", "ls", str(stores["legacy"]))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "AnnData (Zarr v2)" in lines[0] and "26 legacy" in lines[0]
    table = {line.split()[0]: line for line in lines[1:]}
    assert "anndata 0.1.0" in table["/"] and "legacy, inferred" in table["/"]
    assert "dataframe 0.1.0" in table["/obs"] and "legacy" in table["/obs"]
    assert "categorical 0.1.0" in table["/obs/batch"]
    assert "labels at '/obs/__categories/batch'" in table["/obs/batch"]
    assert "/obs/__categories" not in table
    assert "legacy" not in table["/X"]  # anndata 0.7 already stamped sparse matrices


def test_ls_json(stores: dict[str, Path]) -> None:
    result = run("anndata", "ls", str(stores["modern"]), "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["zarrFormat"] == 3 and payload["shape"] == [N_OBS, N_VAR]
    assert payload["awkwardArrays"] == 1 and payload["legacyElements"] == 0
    by_path = {element["path"]: element for element in payload["elements"]}
    assert by_path["/X"] == {
        "path": "/X",
        "encodingType": "csr_matrix",
        "encodingVersion": "0.1.0",
        "shape": [N_OBS, N_VAR],
        "legacy": False,
        "declared": True,
        "note": "",
        "damaged": False,
    }
    assert payload["damagedElements"] == 0


def test_ls_of_an_h5ad_file(tmp_path: Path) -> None:
    import anndata as ad
    from anndata_fixtures import modern_adata

    with ad.settings.override(allow_write_nullable_strings=True):
        modern_adata().write_h5ad(tmp_path / "a.h5ad")
    result = run("anndata", "ls", str(tmp_path / "a.h5ad"))
    assert result.returncode == 0, result.stderr
    assert "AnnData (HDF5 (h5ad))" in result.stdout
    assert "/layers/csc" in result.stdout


def test_ls_refuses_what_is_not_anndata(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "c.zarr", sp.csr_array(np.eye(3, dtype=np.int32)))
    refused = run("anndata", "ls", str(tmp_path / "c.zarr"))
    assert refused.returncode == 2
    assert "c.zarr is not an AnnData container" in refused.stderr
    assert "it is a CyteArc store" in refused.stderr and "cytearc-vfs export" in refused.stderr
    assert "Traceback" not in refused.stderr
    array = run("anndata", "ls", str(tmp_path / "c.zarr" / "RNA" / "counts"))
    assert array.returncode == 2 and "is a Zarr array, not a group" in array.stderr
    missing = run("anndata", "ls", str(tmp_path / "none.zarr"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_paths_are_shown_as_typed_but_normalized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'../x' was shown as '/cwd/../x': absolute, but not the path a user would type."""
    cv.write_counts(tmp_path / "c.zarr", sp.csr_array(np.eye(3, dtype=np.int32)))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    refused = run("anndata", "ls", "../c.zarr")
    assert f"{tmp_path / 'c.zarr'} is not an AnnData container" in refused.stderr
    assert "/.." not in refused.stderr
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'none.zarr'} does not exist"):
        cv.open_store("../work/../none.zarr")
    # through a symlink, '..' is the link target's parent: named as the place opened
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    (tmp_path / "work" / "link").symlink_to(tmp_path / "deep" / "inner")
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'work'}/link/../none.zarr does"):
        cv.open_store("link/../none.zarr")


def test_ls_names_a_file_that_is_not_hdf5(tmp_path: Path) -> None:
    (tmp_path / "truncated.h5ad").write_bytes(b"")
    refused = run("anndata", "ls", str(tmp_path / "truncated.h5ad"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "truncated.h5ad is a file but not an HDF5 file" in refused.stderr


@pytest.mark.parametrize("damage", ["truncated", "damaged"])
def test_an_h5ad_file_hdf5_cannot_open_is_named_as_damaged(tmp_path: Path, damage: str) -> None:
    """It starts with the HDF5 signature but is cut short (an interrupted copy) or its
    superblock is damaged: refused as damaged (exit 3, as docs/cli.md says of a store
    that fails closed; it exited 2, as a refused command line does) naming the file
    and the remedy, not a system failure (exit 4) with HDF5's message alone; nothing
    is written."""
    from anndata_fixtures import modern_adata

    whole = tmp_path / "whole.h5ad"
    with ad.settings.override(allow_write_nullable_strings=True):
        modern_adata().write_h5ad(whole)
    data = bytearray(whole.read_bytes())
    if damage == "truncated":
        data = data[:5000]
    else:
        data[8:40] = b"\xff" * 32  # the superblock, after the signature
    bad = tmp_path / f"{damage}.h5ad"
    bad.write_bytes(bytes(data))
    for args in (["anndata", "ls", str(bad)], ["write", str(bad), str(tmp_path / "w.zarr")]):
        refused = run(*args, "--json")
        assert refused.returncode == 3, refused.stderr
        answer = json.loads(refused.stdout)
        assert answer["category"] == "damaged" and answer["error"] == "MalformedElementError"
        assert answer["message"].startswith(
            f"{bad} is an HDF5 file that cannot be opened: it is {damage} (HDF5: "
        )
        assert "restore it from a copy" in answer["message"]
    assert not (tmp_path / "w.zarr").exists()


def test_ls_into_a_reader_that_leaves_early(stores: dict[str, Path]) -> None:
    """`cytearc-vfs anndata ls X | head -1`: no BrokenPipeError traceback."""
    with subprocess.Popen(
        [cli_executable(), "anndata", "ls", str(stores["modern"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # the reader is gone before the listing is printed
        errors = child.stderr.read().decode()
        assert child.wait(timeout=300) == 0
    assert "Traceback" not in errors and "BrokenPipe" not in errors


def test_ls_in_a_terminal(stores: dict[str, Path]) -> None:
    terminal = run_in_terminal(["anndata", "ls", str(stores["legacy"])])
    assert terminal.returncode == 0, terminal.output
    assert "Traceback" not in terminal.output
    assert "dataframe 0.1.0" in terminal.output and "legacy, inferred" in terminal.output


def test_write_streams_a_legacy_store_and_a_layer(stores: dict[str, Path], tmp_path: Path) -> None:
    legacy = run("write", str(stores["filled_legacy"]), str(tmp_path / "legacy_out.zarr"))
    assert legacy.returncode == 0, legacy.stderr
    reader = cv.VirtualArrayReader(tmp_path / "legacy_out.zarr")
    np.testing.assert_array_equal(reader.read(), counts().toarray())
    assert list(reader.cell_ids) == [f"cell{i}" for i in range(N_OBS)]
    layered = run("write", str(stores["filled"]), str(tmp_path / "csc_out.zarr"), "--layer", "csc")
    assert layered.returncode == 0, layered.stderr
    np.testing.assert_array_equal(
        cv.VirtualArrayReader(tmp_path / "csc_out.zarr").read(), counts().toarray()
    )
    unknown = run("write", str(stores["modern"]), str(tmp_path / "x.zarr"), "--layer", "spliced")
    assert unknown.returncode == 2
    assert "has no layer 'spliced'; its layers are: csc" in unknown.stderr
    assert not (tmp_path / "x.zarr").exists()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_anndata_0_7_store_is_classified_as_anndata(tmp_path: Path, zarr_format: int) -> None:
    """anndata 0.7 wrote no root attributes: the store is recognised by its
    obs, var and X, so commands name it as an AnnData store with its remedy."""
    path = tmp_path / "legacy.zarr"
    write_legacy(path, zarr_format)
    assert classify_location(path).kind == "anndata"
    plain = zarr.open_group(tmp_path / "plain.zarr", mode="w", zarr_format=zarr_format)
    plain.create_group("obs")
    assert classify_location(tmp_path / "plain.zarr").kind == "zarr-group"


def test_write_fills_missing_values_of_the_real_wu2020_file_when_asked(tmp_path: Path) -> None:
    """scirpy's Wu 2020 file as published: 45 obs columns, 6 categoricals with missing
    values. Refused by default, naming --fill-missing; written with it, the rule's way."""
    from cytearc_vfs.format.tables import read_table
    from cytearc_vfs.realdata.fetching import fetch

    path = fetch("wu2020")
    refused = run("write", str(path), str(tmp_path / "refused.zarr"))
    assert refused.returncode == 2
    assert "--fill-missing" in refused.stderr and "missing values" in refused.stderr
    assert not (tmp_path / "refused.zarr").exists()
    written = run("write", str(path), str(tmp_path / "wu.zarr"), "--fill-missing")
    assert written.returncode == 0, written.stderr
    obs = ad.read_h5ad(path).obs
    cells = read_table(zarr.open_group(cv.open_store(tmp_path / "wu.zarr"), mode="r")["cellData"])
    assert cells.index.tolist() == obs.index.tolist()
    with_missing = [name for name in obs.columns if obs[name].isna().any()]
    assert with_missing
    for name in obs.columns:
        ours, theirs = cells[name], obs[name]
        if isinstance(theirs.dtype, pd.CategoricalDtype) and theirs.isna().any():
            assert ours.cat.categories.tolist() == [*theirs.cat.categories.tolist(), ""]
            assert ours.astype(str).tolist() == theirs.astype(object).fillna("").tolist()
        elif isinstance(theirs.dtype, pd.CategoricalDtype):
            assert ours.tolist() == theirs.tolist()
        else:
            np.testing.assert_array_equal(ours.to_numpy(), theirs.to_numpy())


@pytest.mark.remote
@pytest.mark.parametrize("kind", ["modern", "legacy"])
def test_ls_on_object_storage_reads_the_metadata_a_level_at_a_time(
    kind: str, stores: dict[str, Path], s3_server: Any, s3_proxy: Any
) -> None:
    """``anndata ls`` of a container in S3 read each element's documents one after
    another through zarr (and a Zarr v2 node's three documents at each of several
    opens): Wu 2020's 60 elements took 137 round trips, 7.5 s at 25 ms a request. The
    documents are fetched a level of the tree at a time now, each once; the listing is
    the same as the local one."""
    from loopback_proxy import sequential_rounds
    from obstore.store import from_url
    from test_anndata_sources import upload

    bucket = s3_server.new_bucket()
    upload(from_url(f"s3://{bucket}", **s3_server.storage_options()), stores[kind])
    options = json.dumps({**s3_server.storage_options(), "endpoint": s3_proxy.endpoint})
    s3_proxy.delay = 0.02  # a round trip: requests sent together overlap, as on a network
    s3_proxy.take()
    remote = run(
        "anndata",
        "ls",
        f"s3://{bucket}/{stores[kind].name}",
        "--json",
        "--storage-options",
        options,
    )
    seen = s3_proxy.take()
    local = run("anndata", "ls", str(stores[kind]), "--json")
    assert remote.returncode == local.returncode == 0, remote.stderr
    remote_elements = json.loads(remote.stdout)["elements"]
    assert remote_elements == json.loads(local.stdout)["elements"]
    gets = [r.path for r in seen if r.method == "GET" and "list-type" not in r.path]
    assert len(gets) == len(set(gets)), "a document was fetched twice"
    # the depth of the tree, not the number of its elements (tens here)
    assert len(remote_elements) > 20 and sequential_rounds(seen) <= 14, sequential_rounds(seen)
