"""Every public name of the API page imports from the package root.

The names are copied from the project's public API page (the repository must
not read it at test time). The names of the second round are listed with the
issue that introduced them. A name a later issue introduces goes in a list of
its own as a strict xfail until it lands (see this file's history).
"""

from __future__ import annotations

import importlib

import pytest

import cytearc_vfs as cv

#: Names of the first round and of the issues done so far.
PUBLIC_NAMES = [
    "open_store",
    "write_counts",
    "dataset_fingerprint",
    "counts_fingerprint",
    "create_composite",
    "CompositeStore",
    "VirtualArrayReader",
    "mount_datastore",
    "MountStore",
    "publish_artifact",
    "list_artifacts",
    "VfsError",
    "IdentityMismatchError",
    "IncompleteStoreError",
    "RecordShapeError",
    "UnsupportedSourceError",
    "NonFiniteArtifactError",
    "MissingChunkError",
    "__version__",
]

#: Names of the second round that have landed: (module, name, issue).
LANDED = [
    ("cytearc_vfs.arrays", "read", 17),
    ("cytearc_vfs.arrays", "resize", 17),
    ("cytearc_vfs.arrays", "promote", 17),
    ("cytearc_vfs.arrays", "info", 17),
    ("cytearc_vfs.arrays", "ArrayWriter", 17),
    ("cytearc_vfs_adapters", "create_if_absent", 15),
    ("cytearc_vfs_adapters", "supports_atomic_create", 15),
    ("cytearc_vfs", "to_anndata", 16),
    ("cytearc_vfs", "anndata_view", 16),
]


@pytest.mark.parametrize(("module", "name", "issue"), LANDED)
def test_landed_names(module: str, name: str, issue: int) -> None:
    imported = importlib.import_module(module)
    assert hasattr(imported, name), f"issue {issue}"
    assert name in imported.__all__


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_imports_from_the_root(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from cytearc_vfs import {name}", namespace)
    assert namespace[name] is getattr(cv, name)
    assert name in cv.__all__


def test_errors_have_the_documented_bases() -> None:
    for name in (
        "IdentityMismatchError",
        "IncompleteStoreError",
        "RecordShapeError",
        "UnsupportedSourceError",
        "NonFiniteArtifactError",
        "MissingChunkError",
    ):
        error = getattr(cv, name)
        assert issubclass(error, cv.VfsError) and issubclass(error, ValueError), name


def test_every_root_export_resolves() -> None:
    for name in cv.__all__:
        assert getattr(cv, name) is not None, name
