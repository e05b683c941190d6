"""cytearc_vfs: the virtual filesystem and store-adapter layer of CyteArc.

Public names are re-exported here; see ``docs/`` for the concepts. They are
imported on first use (PEP 562), so ``import cytearc_vfs`` and the command
line's ``--help`` do not pay for zarr, pandas and scipy until a name that
needs them is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    IdentityMismatchError,
    IncompleteStoreError,
    NonFiniteArtifactError,
    RecordShapeError,
    UnsupportedSourceError,
    VfsError,
)

if TYPE_CHECKING:
    from .artifacts import find_artifact, list_artifacts, publish_artifact, read_artifact
    from .composite import create_composite
    from .composite_store import CompositeStore
    from .layout import LayoutPolicy
    from .moments import ColumnMoments
    from .mount import mount_datastore
    from .mount_store import MountStore
    from .opening import counts_fingerprint, dataset_fingerprint, open_store
    from .reader import VirtualArrayReader
    from .repack import repack
    from .selection import UnknownIdError
    from .writer import WriteInfo, write_counts

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "ColumnMoments": ".moments",
    "CompositeStore": ".composite_store",
    "LayoutPolicy": ".layout",
    "MountStore": ".mount_store",
    "UnknownIdError": ".selection",
    "VirtualArrayReader": ".reader",
    "WriteInfo": ".writer",
    "counts_fingerprint": ".opening",
    "create_composite": ".composite",
    "dataset_fingerprint": ".opening",
    "find_artifact": ".artifacts",
    "list_artifacts": ".artifacts",
    "mount_datastore": ".mount",
    "open_store": ".opening",
    "publish_artifact": ".artifacts",
    "read_artifact": ".artifacts",
    "repack": ".repack",
    "write_counts": ".writer",
}

__all__ = [
    "ColumnMoments",
    "CompositeStore",
    "IdentityMismatchError",
    "IncompleteStoreError",
    "LayoutPolicy",
    "MountStore",
    "NonFiniteArtifactError",
    "RecordShapeError",
    "UnsupportedSourceError",
    "UnknownIdError",
    "VfsError",
    "VirtualArrayReader",
    "WriteInfo",
    "__version__",
    "counts_fingerprint",
    "create_composite",
    "dataset_fingerprint",
    "find_artifact",
    "list_artifacts",
    "mount_datastore",
    "open_store",
    "publish_artifact",
    "read_artifact",
    "repack",
    "write_counts",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cytearc-vfs")
    except PackageNotFoundError:  # pragma: no cover (a bare checkout on sys.path)
        return "0+unknown"


__version__: str = _version()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cytearc_vfs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
