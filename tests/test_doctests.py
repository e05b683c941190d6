"""The examples in the package's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import cytearc_vfs_adapters
import pytest

import cytearc_vfs

# the adapters' examples too: their AnnData output's were never run, and one was wrong
MODULES = sorted(
    info.name
    for package in (cytearc_vfs, cytearc_vfs_adapters)
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
