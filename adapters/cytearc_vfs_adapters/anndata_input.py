"""AnnData as input to ``write_counts``: its ``X`` or a layer, with ``obs`` and ``var``.

Registered as the ``anndata`` entry of the core's ``cytearc_vfs.count_sources``
group (see :mod:`cytearc_vfs.write.count_source`). anndata is the optional
extra ``cytearc-vfs[anndata]``: an AnnData can only exist where anndata was
imported, so this adapter looks for the module instead of importing it, and
scipy or numpy input never pays for importing anndata.
"""

from __future__ import annotations

import sys
from typing import Any

from cytearc_vfs.write.count_source import CountInput

__all__ = ["count_input"]


def count_input(counts: Any, layer: str | None) -> CountInput | None:
    """The counts of an ``anndata.AnnData`` (``X``, or ``layer``), or ``None`` for anything else."""
    anndata = sys.modules.get("anndata")
    if anndata is None or not isinstance(counts, anndata.AnnData):
        return None
    if layer is None:
        matrix = counts.X
        if matrix is None:
            raise ValueError("the AnnData has no X; pass layer= naming the layer with counts")
    else:
        if layer not in counts.layers:
            # recent anndata lists X among the layers under the key None
            names = sorted(name for name in counts.layers if isinstance(name, str))
            raise KeyError(
                f"the AnnData has no layer {layer!r}; its layers are {names} (or pass no "
                "layer= to write X)"
            )
        matrix = counts.layers[layer]
    return CountInput(matrix, counts.obs, counts.var)
