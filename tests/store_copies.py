"""Copies of stores built once, for tests that change their own copy.

Composites and mounts record their sources by absolute location, so a copy
of a directory holding both a composite (or mount) and its sources has those
locations rewritten to the copied sources: the copy is then what building
the same stores in the new directory makes, at the cost of a file copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_stores(template: Path, destination: Path) -> Path:
    """Copy ``template`` to ``destination`` (which must not exist, or be an
    empty directory), pointing every recorded location under ``template`` at
    the copy. Returns ``destination``."""
    shutil.copytree(template, destination, dirs_exist_ok=True)
    old, new = f'"{template}/', f'"{destination}/'
    for document in destination.rglob("zarr.json"):
        text = document.read_text()
        if old in text:
            document.write_text(text.replace(old, new))
    return destination
