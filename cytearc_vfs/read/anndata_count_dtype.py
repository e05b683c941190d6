"""The dtype an AnnData source's counts are read as, scanned once at creation.

Integer counts are read in their dtype and boolean ones (presence) as
``uint8``. Float counts (anndata's usual ``float32``) are accepted when every
stored value is a finite, non-negative whole number: creation scans them in
blocks of whole chunks, within the creation's memory budget, and reads them
as the narrowest unsigned dtype that holds the largest. Any other value is
refused naming the remedy (a raw-counts layer, or the store's ``raw/X``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from zarr.abc.store import Store
from zarr.core.array import AsyncArray

from ..errors import UnsupportedSourceError
from ..format.count_dtype import ValueRange, resolve_count_dtype, scan_values
from ..format.option_names import callers_form, source_option_given
from .anndata_elements import RAW_COUNTS, Documents, MatrixElement, holds_node, layer_names

__all__ = ["SCAN_BLOCK", "scan_cost", "scan_count_dtype", "scan_rows"]

# Values scanned per block when checking float counts at creation.
SCAN_BLOCK = 1 << 23
# Bytes a scanned float value costs beside its own: its decoded chunk before
# the block is assembled, its encoded bytes, its floor and two masks.
_SCAN_EXTRA_BYTES = 26


def scan_rows(values: AsyncArray[Any], scan_bytes: int | None) -> int:
    """Rows of ``values`` (``data`` or dense ``X``) scanned per block within ``scan_bytes``.

    Whole chunks at a time (a block that cut a chunk would decode it twice),
    at least one.
    """
    row_values = max(1, int(np.prod(values.shape[1:], dtype=np.int64)))
    if scan_bytes is None:
        return max(1, SCAN_BLOCK // row_values)
    chunk = max(1, values.chunks[0])
    value_bytes = values.dtype.itemsize + _SCAN_EXTRA_BYTES
    # no larger than the block scanned without a budget: a larger one only
    # holds more memory (a 2 GiB budget would scan a source in 1 GiB blocks)
    within = min(scan_bytes, SCAN_BLOCK * value_bytes)
    return max(chunk, within // (row_values * value_bytes) // chunk * chunk)


def scan_cost(values: AsyncArray[Any], rows: int) -> int:
    """Bytes of scanning ``rows`` rows of ``values`` at once (0 for integer values, not scanned)."""
    if values.dtype.kind != "f":
        return 0
    row_values = max(1, int(np.prod(values.shape[1:], dtype=np.int64)))
    return rows * row_values * (values.dtype.itemsize + _SCAN_EXTRA_BYTES)


async def scan_count_dtype(
    arrays: dict[str, AsyncArray[Any]],
    element: MatrixElement,
    documents: Documents,
    backend: Store,
    *,
    name: str,
    where: str,
    scan_bytes: int | None,
) -> np.dtype:
    """The dtype the element's values are read as; float values must all be whole counts."""
    values = arrays["dense"] if element.encoding == "array" else arrays["data"]
    dtype = np.dtype(values.dtype)
    if dtype.kind in "iu":
        return dtype
    if dtype.kind == "b":  # presence counts: 0 and 1, as write_counts stores them
        return np.dtype(np.uint8)
    if dtype.kind != "f":
        raise UnsupportedSourceError(
            f"source {name!r} at {where}: {element.path} holds {dtype} values, not counts; "
            "give a layer of integer counts with source_layers"
        )
    scanned: ValueRange | None = None
    step = scan_rows(values, scan_bytes)
    for start in range(0, values.shape[0], step):
        block = np.asarray(await values.getitem(slice(start, start + step)))
        part = scan_values(block, where=f"{element.path} of source {name!r}")
        scanned = part if scanned is None else scanned.merge(part)
        if not scanned.integral or scanned.minimum < 0:
            break
    if scanned is None or (scanned.integral and scanned.minimum >= 0):
        return resolve_count_dtype(scanned) if scanned is not None else np.dtype(np.uint8)
    what = "fractional" if not scanned.integral else "negative"
    raise UnsupportedSourceError(
        f"source {name!r} at {where}: {element.path} holds {what} {dtype} values; a composite "
        f"composes whole non-negative counts. {await _counts_remedy(element, documents, backend, name)}"
    )


async def _counts_remedy(
    element: MatrixElement, documents: Documents, backend: Store, name: str
) -> str:
    """Where else the store may hold its counts, from what it holds: raw/X (normalized
    values in X beside the raw counts, as every CELLxGENE file has them), its layers."""
    held = (
        []
        if element.path == RAW_COUNTS or not await holds_node(documents, RAW_COUNTS)
        else [RAW_COUNTS]
    )
    held += [layer for layer in await layer_names(backend) if element.path != f"layers/{layer}"]
    imported = "import counts from elsewhere with " + callers_form(
        "cv.write_counts", "cytearc-vfs write"
    )
    if not held:
        return f"The store holds no raw/X or other layer to take them from: {imported}"
    first = held[0]
    return (
        f"Give the one of {', '.join(map(repr, held))} that holds its raw counts, with "
        f"{source_option_given('source_layers', name, first)}, or {imported}"
    )
