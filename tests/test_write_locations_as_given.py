"""``cytearc-vfs write`` names its input and destination as they were typed.

``cd /tmp/w && cytearc-vfs write a.zarr out.zarr`` said "to /tmp/w/out.zarr", a
second run "destination /tmp/w/out.zarr already holds 27 key(s)", and a store
given inside another "below the Zarr node '/tmp/w/a.zarr'"; ``info nothere.zarr``
said "/tmp/w/nothere.zarr does not exist". ``export`` already names OUT as typed
(test_anndata_export_cli.py); ``--json``'s ``location`` stays absolute, for
programs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata_files import write_anndata_zarr
from cli_harness import run_main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def test_write_names_its_locations_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    counts = sp.random(40, 12, density=0.3, format="csr", dtype=np.float32, random_state=1)
    counts.data[:] = 2
    data = ad.AnnData(
        X=counts,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(40)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(12)]),
    )
    write_anndata_zarr(data, work / "a.zarr", 3)
    (work / "afile").write_text("not a folder")
    monkeypatch.chdir(work)
    said: list[str] = []

    def run(*args: str) -> str:
        done = run_main(*args)
        said.append(done.stdout + done.stderr)
        return done.stdout + done.stderr

    assert " of a.zarr to out.zarr in " in run("write", "a.zarr", "out.zarr")
    assert "destination out.zarr already holds " in run("write", "a.zarr", "out.zarr")
    assert "destination ./out.zarr already holds " in run("write", "a.zarr", "./out.zarr")
    inside = run("write", "a.zarr", "a.zarr/sub/x.zarr")
    assert "is below the Zarr node 'a.zarr' (it holds zarr.json)" in inside, inside
    assert "destination afile/x.zarr cannot be written" in run("write", "a.zarr", "afile/x.zarr")
    assert "nothere.zarr does not exist" in run("info", "nothere.zarr")
    for message in said:
        assert str(work) not in message and "file://" not in message, message
    shutil.rmtree(work / "out.zarr")
    as_json = json.loads(run_main("write", "a.zarr", "out.zarr", "--json").stdout)
    assert as_json["location"] == str(work / "out.zarr")
