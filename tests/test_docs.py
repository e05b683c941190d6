"""The quickstart's code blocks run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_quickstart_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for code in blocks("quickstart.md", "python"):
        exec(compile(code, "quickstart.md", "exec"), namespace)
    assert (tmp_path / "quickstart.zarr" / "zarr.json").is_file()
    for command in blocks("quickstart.md", "bash")[1].strip().splitlines():
        args = command.split()
        assert args[:2] == ["uv", "run"]
        # the installed entry point, run as uv would run it
        result = subprocess.run(
            [sys.executable, "-m", "cytearc_vfs.cli", *args[3:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            env=os.environ.copy(),
        )
        assert result.returncode == 0, result.stderr


def test_every_doc_link_resolves() -> None:
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text()):
            assert (DOCS / target).is_file(), f"{page.name} links to missing {target}"
