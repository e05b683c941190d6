"""The cytearc-vfs command line: info, verify, demo; text and --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.sparse as sp
import zarr

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def test_info_text_and_json(
    tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str]
) -> None:
    info = cv.write_counts(tmp_path / "s.zarr", counts)
    assert main(["info", str(tmp_path / "s.zarr")]) == 0
    text = capsys.readouterr().out
    assert "300 cells x 120 features" in text
    assert info.dataset_fingerprint in text
    assert main(["info", str(tmp_path / "s.zarr"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["assays"][0]["datasetFingerprint"] == info.dataset_fingerprint
    assert payload["assays"][0]["layout"] == info.layout.to_json()


def test_verify_ok_and_tampered(
    tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str]
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    assert main(["verify", str(tmp_path / "s.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    summaries = zarr.open_array(tmp_path / "s.zarr", path="RNA/countSummaries/rowSums", mode="r+")
    summaries[0] = summaries[0] + 5
    assert main(["verify", str(tmp_path / "s.zarr")]) == 1
    assert "rowSums does not match" in capsys.readouterr().out


def test_errors_exit_2_with_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(tmp_path / "missing.zarr")]) == 2
    assert "missing.zarr does not exist" in capsys.readouterr().err
    assert main(["verify", str(tmp_path), "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False
    assert payload["category"] == "refused"
    assert "empty directory" in payload["message"]


def test_installed_entry_point(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    result = subprocess.run(
        [sys.executable, "-m", "cytearc_vfs.cli", "info", str(tmp_path / "s.zarr")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "RNA (RNA)" in result.stdout


def test_main_stays_the_function_after_a_command_ran(capsys: pytest.CaptureFixture[str]) -> None:
    # the module that runs a command is not named "main": importing it would have
    # replaced the package's function, and `from cytearc_vfs.cli import main` after a
    # first command gave a module
    import cytearc_vfs.cli

    assert main(["--version"]) == 0  # returned, as every status is, not raised
    assert main(["info", "--no-such-option"]) == 2
    assert main(["info", "/nonexistent/a.zarr"]) == 2
    capsys.readouterr()
    from cytearc_vfs.cli import main as again

    assert again is main and callable(cytearc_vfs.cli.main)


def test_composite_info_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import realistic_counts

    cv.write_counts(
        tmp_path / "a.zarr", realistic_counts(40, 10, seed=1), features=[f"g{i}" for i in range(10)]
    )
    cv.write_counts(
        tmp_path / "b.zarr",
        realistic_counts(30, 10, seed=2),
        features=[f"g{i}" for i in range(5, 15)],
    )
    composite = str(tmp_path / "c.zarr")
    assert (
        main(
            [
                "composite",
                composite,
                str(tmp_path / "a.zarr"),
                f"second={tmp_path / 'b.zarr'}",
                "--json",
            ]
        )
        == 0
    )
    created = json.loads(capsys.readouterr().out)
    assert created["shape"] == [70, 15]
    assert created["sources"] == ["a", "second"]
    assert main(["info", composite, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "composite"
    assert main(["verify", composite]) == 0
    assert "OK" in capsys.readouterr().out
    features_file = tmp_path / "features.txt"
    features_file.write_text("g7\ng1\n")
    assert (
        main(
            [
                "composite",
                str(tmp_path / "d.zarr"),
                str(tmp_path / "a.zarr"),
                "--features-file",
                str(features_file),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["shape"] == [40, 2]
    assert main(["composite", str(tmp_path / "e.zarr"), composite]) == 2
    assert "composites do not nest" in capsys.readouterr().err


def test_artifacts_lists_what_was_published(
    tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    info = cv.write_counts(tmp_path / "s.zarr", counts)
    store = cv.open_store(tmp_path / "s.zarr", mode="r+")
    provenance = {
        "operation": "test.means",
        "parameters": {},
        "inputs": {"counts": info.counts_fingerprint},
    }
    with cv.publish_artifact(store, "RNA/artifacts", "means", provenance=provenance) as art:
        art.write_array("mean", np.arange(counts.shape[1], dtype=np.float64))
    assert main(["artifacts", str(tmp_path / "s.zarr")]) == 0
    text = capsys.readouterr().out
    assert "1 complete artifact" in text and f"mean {counts.shape[1]} float64" in text
    assert main(["artifacts", str(tmp_path / "s.zarr"), "--kind", "other", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["artifacts"] == []
    # a misspelt kind listed nothing and said no more: the kinds there are named
    assert main(["artifacts", str(tmp_path / "s.zarr"), "--kind", "mean"]) == 0
    said = capsys.readouterr().out.strip()
    assert said == f"{tmp_path / 's.zarr'}: 0 complete artifacts of kind mean (its kinds: means)"
    assert main(["artifacts", str(tmp_path / "s.zarr"), "--kind", "means"]) == 0
    assert "its kinds" not in capsys.readouterr().out
    assert main(["artifacts", str(tmp_path / "s.zarr"), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["artifacts"]
    assert listed["artifact_id"] == art.artifact_id


def test_cell_and_feature_counts_are_grouped_as_the_other_counts_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'exported 6559 cells x 43105 features (uint16, 6,976,169 stored values)': one line
    grouped one count and not the others; every command's shape now reads 6,559."""
    from conftest import realistic_counts

    counts = realistic_counts(1200, 1500, density=0.01, seed=8)
    cv.write_counts(tmp_path / "s.zarr", counts)
    assert main(["info", str(tmp_path / "s.zarr")]) == 0
    assert "1,200 cells x 1,500 features, " in capsys.readouterr().out
    assert main(["composite", str(tmp_path / "c.zarr"), str(tmp_path / "s.zarr")]) == 0
    assert ": 1,200 cells x 1,500 features (" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "c.zarr")]) == 0
    assert "RNA: 1,200 cells x 1,500 features (" in capsys.readouterr().out
    assert main(["mount", str(tmp_path / "s.zarr"), str(tmp_path / "m.zarr")]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.zarr")]) == 0
    assert "  RNA: 1,200 cells x 1,500 features, " in capsys.readouterr().out
    assert main(["export", str(tmp_path / "c.zarr"), str(tmp_path / "out.h5ad")]) == 0
    assert "exported 1,200 cells x 1,500 features (" in capsys.readouterr().out


def test_the_demo_groups_its_counts_as_the_other_lines_do() -> None:
    """The demo's last step printed 'values=12290800' where every other count line
    groups digits; its ``--json`` record keeps the number."""
    from cytearc_vfs.cli.demo import _step

    said: list[str] = []
    steps: list[dict[str, object]] = []
    with _step(steps, said.append, "cytearc-vfs verify wu2020 (re-read every value)") as rec:
        rec.update(ok=True, values=12290800, shape="200x30727", listed=2)
    assert said[0].endswith("(ok=True, values=12,290,800, shape=200 x 30,727, listed=2)"), said
    assert steps[0]["values"] == 12290800


def test_a_source_whose_assay_is_named_otherwise_gets_a_composite_s_remedy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store written with --assay rna beside one of RNA: the composite's refusal
    said "its assays: ['rna'] (give one of them)", and --assay rna then failed on
    the other source. A composite reads one assay name from every source."""
    from conftest import realistic_counts

    cv.write_counts(tmp_path / "a.zarr", realistic_counts(30, 12, seed=1))
    cv.write_counts(
        tmp_path / "b.zarr", realistic_counts(20, 12, seed=2), assay="rna", assay_type="RNA"
    )
    sources = [str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]
    assert main(["composite", str(tmp_path / "c.zarr"), *sources]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        f"cytearc-vfs composite: source 'b' at {tmp_path / 'b.zarr'} has no assay 'RNA' (its "
        "assays: ['rna']); a composite reads the assay of one name from every source "
        "(--assay RNA): write this source again with that name (cytearc-vfs write IN OUT "
        "--assay RNA), or compose sources whose assays are named alike"
    )
    assert not (tmp_path / "c.zarr").exists()
    with pytest.raises(ValueError, match=r"\(assay='rna'\): .*write_counts\(\.\.\., assay='rna'\)"):
        cv.create_composite(
            tmp_path / "c.zarr", {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}, assay="rna"
        )
    # an ordinary store's own refusal is unchanged: its caller picks the assay
    with pytest.raises(ValueError, match=r"its assays: \['rna'\] \(give one of them\)"):
        cv.VirtualArrayReader(cv.open_store(tmp_path / "b.zarr"), assay="RNA")
