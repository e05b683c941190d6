"""Operations on one Zarr v3 array that never re-encode its chunks.

Owns what the R zarr package's array offers beyond zarr-python, 0-based:
reading with missing values (``reading``, selections in ``selection``),
buffered writes with stale chunks (``buffered_writes``), resizing at both
ends (``resizing``) and promoting a dimension (``promotion``, with the codec
argument in ``axis_insertion``) by renaming chunks (``key_moves``, keys read
strictly by :mod:`cytearc_vfs.format.chunk_keys`), all-or-nothing through a journal with
recovery (``journal``, the documents beside ``zarr.json`` in
``documents``), the refusal of arrays a CyteArc store's records describe
(``store_records``), the removal of consolidated metadata that would hide
a change from zarr and its restoration once done (``consolidated``), and
summaries (``summary``). ``docs/arrays.md`` has the
conventions, the byte-order argument, the journal and the limits.

May import: :mod:`cytearc_vfs.remote`, :mod:`cytearc_vfs.encoding`,
:mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`; independent of
:mod:`cytearc_vfs.read` and :mod:`cytearc_vfs.write`.
"""

from __future__ import annotations

from .buffered_writes import ArrayWriter
from .journal import recover
from .promotion import promote
from .reading import read
from .resizing import resize
from .summary import ArrayInfo, HierarchyNode, hierarchy, info

__all__ = [
    "ArrayInfo",
    "ArrayWriter",
    "HierarchyNode",
    "hierarchy",
    "info",
    "promote",
    "read",
    "recover",
    "resize",
]
