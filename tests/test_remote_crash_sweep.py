"""Crash safety of writers into S3: killed after each answered write, the next open refuses.

``test_crash_sweep.py`` kills writers after each file write of a local
destination. Into an object store the writes are requests, answered one by
one and in no fixed order before the commit (``write/write_behind.py``),
and an overwrite deletes objects by listing instead of removing a directory.
Here a child (``s3_crash_child.py``) writes to the loopback S3 server (a new
destination, and over a complete store) and
sends itself SIGKILL right after its n-th answered ``set`` or ``delete``,
at the first and last :data:`EDGE` writes and every :data:`STRIDE`-th
between. Each destination must then either open complete and read exactly
the input, or be refused by ``cv.open_store`` with ``IncompleteStoreError``
naming the writer and the remedy, be accepted by
``check_destination(overwrite=True)`` and be replaced by a rerun with
``overwrite=True`` (the first and last refused ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from kill_points import reports, strided
from s3_crash_child import run_writer
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.write.destination_checks import check_destination

pytestmark = pytest.mark.remote

CHILD = Path(__file__).with_name("s3_crash_child.py")
SHAPE = (240, 90)
EDGE, STRIDE = 4, 5
#: A kill point past any writer's last write: the run that counts the writes.
NEVER = 1_000_000


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("s3_crash")
    counts = realistic_counts(*SHAPE, density=0.08, seed=11)
    sp.save_npz(root / "counts.npz", sp.csr_matrix(counts))
    cv.write_counts(root / "src_a.zarr", counts, layout=(8192, 2048))
    return root, counts.toarray()


def _existing(url: str, options: dict[str, Any]) -> None:
    """A complete store at ``url``, other counts than the writer's: an overwrite replaces it."""
    cv.write_counts(url, realistic_counts(50, 20, seed=13), storage_options=options)


def _sweep(config: dict[str, Any], points: list[int]) -> list[dict[str, Any]]:
    return list(reports(CHILD, {**config, "points": points}))


@pytest.mark.parametrize("writer", ["write_counts", "write_counts_overwrite", "repack"])
def test_killed_after_each_answered_write(
    writer: str, work: tuple[Path, np.ndarray], s3_server: S3Server
) -> None:
    root, expected = work
    options = s3_server.storage_options()
    base = f"s3://{s3_server.new_bucket()}/{writer}"
    config = {"writer": writer, "work": str(root), "options": options, "base": base}
    if writer == "write_counts_overwrite":  # over a complete store, deleted by listing
        _existing(f"{base}/{NEVER:04d}.zarr", options)
    counted = _sweep(config, [NEVER])
    (writes,) = [line["s3_writes"] for line in counted if "s3_writes" in line]
    assert writes >= 10
    points = strided(writes, EDGE, STRIDE)
    if writer == "write_counts_overwrite":
        for point in points:
            _existing(f"{base}/{point:04d}.zarr", options)
    refused: list[str] = []
    opened = 0
    for line in _sweep(config, points):
        if "s3_writes" in line or line.get("outcome") == "finished":
            continue
        assert line.get("outcome") == "killed", line
        url = f"{base}/{line['point']:04d}.zarr"
        try:
            store = cv.open_store(url, storage_options=options)
        except cv.IncompleteStoreError as exc:
            message = str(exc)
            name = writer.removesuffix("_overwrite")
            assert name in message and "overwrite=True" in message, message
            assert check_destination(url, overwrite=True, storage_options=options) == "w"
            refused.append(url)
            continue
        reader = cv.VirtualArrayReader(store)
        assert np.array_equal(reader.read(), expected), f"point {line['point']}: wrong values"
        opened += 1
    print(
        f"\ns3 crash sweep {writer}: {len(points)} points of {writes} writes, "
        f"{len(refused)} refused, {opened} opened correct"
    )
    assert len(refused) + opened == len(points)
    assert opened >= 1  # killed after the commit, the last write, the store is complete
    for url in {refused[0], refused[-1]}:
        run_writer(writer, root, url, options, overwrite=True)
        reader = cv.VirtualArrayReader(url, storage_options=options)
        assert np.array_equal(reader.read(), expected), url
