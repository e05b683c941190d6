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
    DestinationBusyError,
    IdentityMismatchError,
    IncompleteStoreError,
    MissingChunkError,
    NonFiniteArtifactError,
    RecordShapeError,
    SourceGoneError,
    SourceUnavailableError,
    UnsupportedSourceError,
    VfsError,
    VfsWarning,
)

if TYPE_CHECKING:
    from cytearc_vfs_adapters.anndata_output import anndata_view, to_anndata

    from .artifacts.arrays import Artifact
    from .artifacts.catalog import (
        describe_artifacts,
        find_artifact,
        list_artifacts,
        publish_artifact,
        read_artifact,
    )
    from .artifacts.incomplete import (
        IncompleteArtifact,
        list_incomplete_artifacts,
        remove_incomplete_artifact,
    )
    from .artifacts.moments import ColumnMoments
    from .artifacts.records import ArtifactRecord
    from .composite.create import create_composite
    from .composite.store import CompositeStore
    from .format.layout import LayoutPolicy
    from .mount.create import mount_datastore
    from .mount.repack import repack
    from .mount.store import MountStore
    from .read.opening import counts_fingerprint, dataset_fingerprint, open_store
    from .read.reader import VirtualArrayReader
    from .read.selection import UnknownIdError
    from .write.writer import WriteInfo, write_counts

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "Artifact": ".artifacts.arrays",
    "ArtifactRecord": ".artifacts.records",
    "describe_artifacts": ".artifacts.catalog",
    "ColumnMoments": ".artifacts.moments",
    "CompositeStore": ".composite.store",
    "IncompleteArtifact": ".artifacts.incomplete",
    "LayoutPolicy": ".format.layout",
    "MountStore": ".mount.store",
    "UnknownIdError": ".read.selection",
    "VirtualArrayReader": ".read.reader",
    "WriteInfo": ".write.writer",
    # AnnData output is an adapter (cytearc_vfs_adapters ships in the same wheel)
    "anndata_view": "cytearc_vfs_adapters.anndata_output",
    "counts_fingerprint": ".read.opening",
    "create_composite": ".composite.create",
    "dataset_fingerprint": ".read.opening",
    "find_artifact": ".artifacts.catalog",
    "list_artifacts": ".artifacts.catalog",
    "list_incomplete_artifacts": ".artifacts.incomplete",
    "mount_datastore": ".mount.create",
    "open_store": ".read.opening",
    "publish_artifact": ".artifacts.catalog",
    "read_artifact": ".artifacts.catalog",
    "remove_incomplete_artifact": ".artifacts.incomplete",
    "repack": ".mount.repack",
    "to_anndata": "cytearc_vfs_adapters.anndata_output",
    "write_counts": ".write.writer",
}

__all__ = [
    "Artifact",
    "ArtifactRecord",
    "ColumnMoments",
    "CompositeStore",
    "DestinationBusyError",
    "IdentityMismatchError",
    "IncompleteArtifact",
    "IncompleteStoreError",
    "LayoutPolicy",
    "MissingChunkError",
    "MountStore",
    "NonFiniteArtifactError",
    "RecordShapeError",
    "SourceGoneError",
    "SourceUnavailableError",
    "UnsupportedSourceError",
    "UnknownIdError",
    "VfsError",
    "VfsWarning",
    "VirtualArrayReader",
    "WriteInfo",
    "__version__",
    "anndata_view",
    "counts_fingerprint",
    "create_composite",
    "dataset_fingerprint",
    "describe_artifacts",
    "find_artifact",
    "list_artifacts",
    "list_incomplete_artifacts",
    "mount_datastore",
    "open_store",
    "publish_artifact",
    "read_artifact",
    "remove_incomplete_artifact",
    "repack",
    "to_anndata",
    "write_counts",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cytearc-vfs")
    except PackageNotFoundError:  # pragma: no cover (a bare checkout on sys.path)
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # on first use: importlib.metadata is slow to import, and the command
        # line imports this package before it can catch Ctrl-C
        value = globals()["__version__"] = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cytearc_vfs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
