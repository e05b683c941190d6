"""Run ``export_anndata`` and kill the process right after its n-th write, for every n.

Used by ``test_export_crash_sweep.py``: ``python export_crash_child.py CONFIG.json``.
The config names the exported store, a folder of points, the Zarr format,
whether an earlier export is replaced, and the kill points. Counted writes:
zarr ``LocalStore`` file writes and deletes, renames, and the atomic
exchange of :mod:`cytearc_vfs_adapters.anndata_output.replacement`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from kill_points import sweep


def main() -> int:
    import anndata  # noqa: F401  (imported before forking: the export imports it lazily)
    import h5py  # noqa: F401
    from cytearc_vfs_adapters.anndata_output import export_anndata, replacement

    config = json.loads(Path(sys.argv[1]).read_text())
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


if __name__ == "__main__":
    sys.exit(main())
