"""The conformance suite passes on what write_counts writes, and catches broken stores."""

from __future__ import annotations

from pathlib import Path

import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_conformance import check_source_store
from s3_server import S3Server

import cytearc_vfs as cv


@pytest.mark.parametrize("workspace", [None, "ws"])
def test_written_stores_conform(
    tmp_path: Path, counts: sp.csr_array, workspace: str | None
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts, workspace=workspace)
    cv.write_counts(tmp_path / "adt.zarr", counts, assay="ADT", workspace=workspace)
    for name in ("s.zarr", "adt.zarr"):
        failures = [f for f in check_source_store(tmp_path / name) if not f.ok]
        assert failures == []


@pytest.mark.remote
def test_remote_store_conforms(s3_server: S3Server, counts: sp.csr_array) -> None:
    url = f"s3://{s3_server.new_bucket()}/c.zarr"
    cv.write_counts(url, counts, storage_options=s3_server.storage_options())
    failures = [
        f for f in check_source_store(url, storage_options=s3_server.storage_options()) if not f.ok
    ]
    assert failures == []


def test_broken_values_are_reported(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    counts_array = zarr.open_array(tmp_path / "s.zarr", path="RNA/counts", mode="r+")
    counts_array[0, 0] = counts_array[0, 0] + 1
    failures = {f.check: f.detail for f in check_source_store(tmp_path / "s.zarr") if not f.ok}
    assert "values agree with their records" in failures
    assert "changed after writing" in failures["values agree with their records"]


def test_unopenable_store_is_reported(tmp_path: Path, counts: sp.csr_array) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    zarr.open_group(tmp_path / "s.zarr", mode="a")["RNA"].create_group("state")
    failures = {f.check for f in check_source_store(tmp_path / "s.zarr") if not f.ok}
    assert "open_store verifies" in failures


RULE_TESTS = """
import pytest

@pytest.mark.rule("dtype.checked-cast")
@pytest.mark.parametrize("case", [1, 2])
def test_parametrized(case):
    assert case == 2  # the first case fails, the last passes

@pytest.mark.rule("destination.w-minus")
def test_passing():
    pass

@pytest.mark.rule("layout.batches")
def test_skipping():
    pytest.skip("not here")
"""


def test_rule_outcomes_keep_a_failing_case_and_survive_xdist(tmp_path: Path) -> None:
    """A rule passed when the last of its parametrized cases passed, whatever the
    others did; under pytest-xdist each worker wrote the outcomes file over the
    others', so rules run elsewhere showed "not run". One run under xdist checks
    both: the outcomes are merged in the main process, where the worst case of a
    rule must win."""
    workers = "2"
    import json
    import os
    import subprocess
    import sys

    from cytearc_vfs_conformance.families import ENV
    from cytearc_vfs_conformance.pytest_plugin import OUTCOMES_FILE

    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(
        'pytest_plugins = ["cytearc_vfs_conformance.pytest_plugin"]\n'
    )
    (project / "test_third_party.py").write_text(RULE_TESTS)
    (project / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers],
        cwd=project,
        env={**os.environ, ENV: str(report)},
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # the failing case
    outcomes = json.loads((report / OUTCOMES_FILE).read_text())
    assert {key: value["status"] for key, value in outcomes.items()} == {
        "dtype.checked-cast": "failed",
        "destination.w-minus": "passed",
        "layout.batches": "skipped: Skipped: not here",
    }
    assert outcomes["dtype.checked-cast"]["test"] == "test_third_party.py::test_parametrized[1]"


def test_a_location_that_is_no_store_is_reported_not_raised(tmp_path: Path) -> None:
    """A directory without zarr.json raised zarr's GroupNotFoundError, and a root
    array ContainsArrayError, out of check_source_store instead of failed checks;
    the conventions check passed when there was nothing to check them on."""
    (tmp_path / "empty.zarr").mkdir()
    zarr.create_array(tmp_path / "array.zarr", shape=(3,), dtype="int32")
    for name in ("empty.zarr", "array.zarr", "absent.zarr"):
        findings = {f.check: f for f in check_source_store(tmp_path / name)}
        assert not findings["open_store verifies"].ok
        assert not findings["plain zarr opens the root read-only"].ok
        conventions = findings["conventions the DataStore relies on"]
        assert not conventions.ok and conventions.detail.startswith("not checked: ")
    absent = check_source_store(tmp_path / "absent.zarr")[0]
    assert "absent.zarr does not exist" in absent.detail


def test_report_takes_pytest_arguments_after_the_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented ``report --output other.md --tests DIR -- -x`` was refused
    ("unrecognized arguments: -- -x"), and a --tests directory without the
    rule tests ran pytest with no file: every test under the current directory."""
    from cytearc_vfs_conformance.report import MARKER, main

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as refused:
        main(["report", "--output", str(tmp_path / "no.md"), "--tests", str(empty), "--", "-x"])
    assert refused.value.code == 2
    assert f"--tests {empty}: no test file matches test_rules.py" in capsys.readouterr().err
    assert not (tmp_path / "no.md").exists()

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_rules.py").write_text("def test_one():\n    pass\n")
    page = tmp_path / "page.md"
    code = main(["report", "--output", str(page), "--tests", str(tests), "--", "-x"])
    assert code == 0
    assert MARKER in page.read_text()
