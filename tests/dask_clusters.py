"""A small real dask.distributed cluster for tests: two worker processes, one thread each."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def process_cluster(**options: Any) -> Iterator[Any]:
    """A ``distributed.Client`` of a ``LocalCluster`` of 2 worker processes (1 thread
    each), closed on exit; ``options`` go to ``LocalCluster`` (``env``,
    ``local_directory``...). Skips the test without ``distributed``."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            # a free port, not 8787: another test worker may hold it (the scheduler's
            # HTTP server listens even without a dashboard, and falls back noisily)
            dashboard_address="127.0.0.1:0",
            **options,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
