"""Run one writer and kill the process right after its n-th store write.

Used by ``test_crash_sweep.py`` through :func:`kill_points.reports`: one
JSON config per line of stdin, each naming the writer, its inputs, a
destination folder and the kill points. This script imports the package
once, then for each sweep :func:`kill_points.sweep` forks one child per kill
point, which counts every file write and delete that zarr's ``LocalStore``
makes and sends itself SIGKILL right after the n-th. A point past the writer's last write lets the writer finish: the
child exits 0 and the script reports ``finished``.

Each point prints one JSON line: ``{"point": n, "outcome": "killed" |
"finished", "writes": count}`` (the count is known only for a finished run).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from kill_points import serve_sweeps, sweep

import cytearc_vfs as cv


def _counts(work: Path) -> sp.csr_array:
    return sp.csr_array(sp.load_npz(work / "counts.npz"))


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


def run_writer(writer: str, work: Path, destination: Path, *, overwrite: bool) -> None:
    """Run ``writer`` on the inputs in ``work``, writing ``destination``."""
    # the first run passes no overwrite, as a user would; a rerun passes it
    again: dict[str, Any] = {"overwrite": True} if overwrite else {}
    if writer == "write_counts_anndata":
        # an AnnData Zarr store's raw counts: its obs columns and raw/var become the tables
        cv.write_counts(destination, work / "adata.zarr", layer="raw/X", **again)
    elif writer in ("write_counts", "write_counts_overwrite", "write_counts_workspace"):
        counts = _counts(work)
        cv.write_counts(
            destination,
            counts,
            cells=_ids("cell", counts.shape[0]),
            features=_ids("gene", counts.shape[1]),
            layout=(8192, 2048),
            overwrite=True if writer == "write_counts_overwrite" else overwrite,
            workspace=WORKSPACES.get(writer),
        )
    elif writer == "repack":
        cv.repack(work / "src_a.zarr", destination, **again)
    elif writer == "repack_row_framed":
        # counts written as before issue 14: repack rewrites them, not copies them
        cv.repack(work / "src_rf.zarr", destination, **again)
    elif writer == "repack_data_only":
        cv.repack(work / "src_a.zarr", destination, data_only=True, **again)
    elif writer == "repack_mount":
        cv.repack(work / "mount.zarr", destination, **again)
    elif writer == "create_composite":
        cv.create_composite(
            destination,
            {"a": work / "src_a.zarr", "b": work / "src_b.zarr"},
            **again,
        )
    elif writer == "create_composite_overwrite":
        # the command line's composite --overwrite: a composite of one source replaces one of two
        from cytearc_vfs.write.destination_checks import composites_replaceable

        with composites_replaceable():
            cv.create_composite(destination, {"a": work / "src_a.zarr"}, overwrite=True)
    elif writer == "mount_datastore":
        cv.mount_datastore(work / "src_a.zarr", destination, **again)
    elif writer in ARTIFACT_KINDS:
        # a MountStore for a mount, a CompositeStore (writing to its backing) for a composite
        store = cv.open_store(destination, mode="r+")
        values = np.load(work / "artifact.npy")
        with cv.publish_artifact(
            store,
            "RNA/artifacts",
            ARTIFACT_KINDS[writer],
            provenance=json.loads(ARTIFACT_PROVENANCE),
        ) as art:
            art.write_array("embedding", values)
            art.write_array("loadings", values[: values.shape[0] // 2] * 2)
    else:
        raise ValueError(f"unknown writer {writer!r}")


#: Writers that write the workspace layout, and its workspace.
WORKSPACES = {"write_counts_workspace": "ws1"}

#: The artifact publications swept, and the kind each publishes. Through a mount the
#: kind is one the mounted source holds and the target lacks: the mount first copies
#: the source's kind document into the target (``MountStore._hold_parent_documents``).
ARTIFACT_KINDS = {
    "publish_artifact": "reduction",
    "publish_artifact_mount": "pca",
    "publish_artifact_composite": "reduction",
}

ARTIFACT_PROVENANCE = json.dumps(
    {"operation": "test.crash_sweep", "parameters": {"k": 3}, "inputs": {}}
)


def _prepare(writer: str, work: Path, destination: Path) -> None:
    """Give writers that add to an existing store their starting store."""
    template = {
        "write_counts_overwrite": work / "existing.zarr",
        "publish_artifact": work / "src_a.zarr",
        "publish_artifact_mount": work / "mount.zarr",
        "publish_artifact_composite": work / "composite.zarr",
        "create_composite_overwrite": work / "composite.zarr",
    }.get(writer)
    if template is not None:
        shutil.copytree(template, destination)


def _preload() -> None:
    """Import everything the writers import lazily, once, before forking.

    No zarr call is made here: zarr starts its event-loop thread on first
    use, and a thread does not survive a fork.
    """
    import anndata  # noqa: F401  (the writers check for AnnData input)

    for name in (
        "write_counts",
        "repack",
        "create_composite",
        "mount_datastore",
        "publish_artifact",
        "CompositeStore",
        "MountStore",
        "VirtualArrayReader",
    ):
        getattr(cv, name)


def run_sweep(config: dict[str, Any]) -> int:
    """One sweep: the config names the writer, its inputs, the folder and the points."""
    writer, work, out = config["writer"], Path(config["work"]), Path(config["out"])

    def prepare(point: int) -> Path:
        destination = out / f"{point:04d}.zarr"
        _prepare(writer, work, destination)
        return destination

    def operate(destination: Path) -> None:
        run_writer(writer, work, destination, overwrite=False)

    return sweep(config["points"], prepare, operate)


def main() -> int:
    _preload()
    return serve_sweeps(run_sweep)


if __name__ == "__main__":
    sys.exit(main())
