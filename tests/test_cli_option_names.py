"""Remedies name options as the caller writes them: Python keywords from Python,
``--flags`` from ``cytearc-vfs`` (:mod:`cytearc_vfs.format.option_names`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import realistic_counts

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.format.option_names import (
    command_line_names,
    option_name,
    source_options_example,
)


def test_python_and_command_line_forms() -> None:
    assert option_name("mem_budget") == "mem_budget"
    assert source_options_example("a") == "source_storage_options={'a': {...}}"
    assert source_options_example(None) == "source_storage_options={...}"
    with command_line_names():
        with command_line_names():  # nests
            assert option_name("mem_budget") == "--mem-budget"
        assert source_options_example("a").startswith("""--source-storage-options '{"a": {...}}'""")
        assert source_options_example(None).startswith("--source-storage-options '{...}'")
        assert option_name("layout") == "layout"  # no flag: the keyword
    assert option_name("storage_options") == "storage_options"


def test_mem_budget_remedies_name_the_flag_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = realistic_counts(64, 200_000, seed=3)  # a 2M budget would cut shards to one row
    cv.write_counts(tmp_path / "big.zarr", big)
    with pytest.raises(ValueError, match="give a mem_budget of at least"):
        cv.repack(tmp_path / "big.zarr", tmp_path / "py.zarr", mem_budget="2M")
    argv = ["repack", str(tmp_path / "big.zarr"), str(tmp_path / "cli.zarr"), "--mem-budget", "2M"]
    assert main([*argv, "--json"]) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert "give a --mem-budget of at least" in message
    assert "mem_budget" not in message.replace("--mem-budget", "")
