"""cytearc_vfs: the virtual filesystem and store-adapter layer of CyteArc.

Public names are re-exported here; see ``docs/`` for the concepts.
"""

from __future__ import annotations

import cytearc_vfs_adapters.backends  # noqa: F401  (fills the backend registry)

from .artifacts import find_artifact, list_artifacts, publish_artifact, read_artifact
from .composite import create_composite
from .composite_store import CompositeStore
from .errors import (
    IdentityMismatchError,
    IncompleteStoreError,
    NonFiniteArtifactError,
    RecordShapeError,
    UnsupportedSourceError,
    VfsError,
)
from .layout import LayoutPolicy
from .moments import ColumnMoments
from .mount import mount_datastore
from .mount_store import MountStore
from .opening import counts_fingerprint, dataset_fingerprint, open_store
from .reader import VirtualArrayReader
from .repack import repack
from .writer import WriteInfo, write_counts

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
    "VfsError",
    "VirtualArrayReader",
    "WriteInfo",
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
