"""One claimer of the atomic-claim race, run in a worker process (tests/test_atomic_create.py).

Importable by the pool's children; opens its own store (as a separate
machine would), waits for the common start time, then claims.
"""

from __future__ import annotations

import time
from typing import Any

#: modules a forkserver loads once, so each claimer starts in milliseconds
PRELOAD = ["cytearc_vfs", "cytearc_vfs_adapters", "zarr", "obstore", "s3fs", "gcsfs"]


def claim(
    location: str, options: dict[str, Any] | None, key: str, value: bytes, start: float
) -> bool:
    """Open ``location`` writable, wait until ``start`` (``time.time()``), claim ``key``."""
    from cytearc_vfs_adapters import create_if_absent

    from cytearc_vfs.remote.locations import open_location

    store = open_location(location, read_only=False, storage_options=options)
    while time.time() < start:
        time.sleep(0.0005)
    return create_if_absent(store, key, value)
