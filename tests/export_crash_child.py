"""Run ``export_anndata`` and kill the process right after its n-th write, for every n.

Used by ``test_export_crash_sweep.py`` through :func:`kill_points.reports`, one
JSON config per line of stdin. Each config names the exported store, a folder of points, the Zarr format,
whether an earlier export is replaced, and the kill points. Counted writes:
zarr ``LocalStore`` file writes and deletes, renames, and the atomic
exchange of :mod:`cytearc_vfs_adapters.anndata_output.replacement`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from kill_points import serve_sweeps, sweep


def run_sweep(config: dict[str, Any]) -> int:
    """One sweep of the export the config describes."""
    from cytearc_vfs_adapters.anndata_output import export_anndata, replacement

    store, out, name = config["store"], Path(config["out"]), config["name"]
    previous = config.get("previous")

    def prepare(point: int) -> Path:
        folder = out / f"{point:04d}"
        folder.mkdir(parents=True)
        if previous is not None:
            copy = shutil.copytree if Path(previous).is_dir() else shutil.copy
            copy(previous, folder / name)
        return folder / name

    def operate(destination: Path) -> None:
        export_anndata(
            store,
            destination,
            overwrite=previous is not None,
            band_bytes=config["band_bytes"],
            zarr_format=config["zarr_format"],
        )

    also = [(os, "rename"), (os, "replace"), (replacement, "_exchange")]
    return sweep(config["points"], prepare, operate, *also)


def main() -> int:
    import anndata  # noqa: F401  (imported before forking: the export imports it lazily)
    import cytearc_vfs_adapters.anndata_output  # noqa: F401
    import h5py  # noqa: F401

    return serve_sweeps(run_sweep)


if __name__ == "__main__":
    sys.exit(main())
