"""Copying zarr nodes between stores, values and attributes, in bounded bands.

Used by mounts (cell and feature tables) and repack (whole stores). Arrays
keep their dtype, shape, chunking, sharding, codecs, fill value and
attributes; values move in row bands of about ``band_bytes``.

A group's arrays are copied :data:`ARRAYS_IN_FLIGHT` at a time (each in
bands of ``band_bytes`` divided among them, so the bound stands): from a
remote source, a table's columns are read together instead of one round
trip after another.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr

from .stopping import in_this_work

__all__ = ["copy_array", "copy_group"]

Skip = Callable[[str], bool]
#: Arrays of a group copied at once.
ARRAYS_IN_FLIGHT = 8


def copy_array(
    source: zarr.Array[Any], parent: zarr.Group, name: str, *, band_bytes: int = 64 << 20
) -> zarr.Array[Any]:
    """Copy ``source`` to ``parent[name]`` with its metadata and values."""
    metadata = source.metadata
    kwargs: dict[str, Any] = {
        "shape": source.shape,
        "dtype": source.dtype,
        "attributes": source.attrs.asdict(),
        "fill_value": source.fill_value,
    }
    if metadata.zarr_format == 3:
        kwargs.update(
            chunks=source.chunks,
            shards=source.shards,
            serializer=source.serializer,
            compressors=source.compressors,
            filters=source.filters,
        )
    else:
        kwargs.update(chunks=source.chunks)
    target = parent.create_array(name, **kwargs)
    if source.ndim == 0:
        target[...] = source[...]
        return target
    if not source.size:
        return target
    # Whole shards (or chunks) per band, so no band rewrites another's shard.
    unit = (source.shards or source.chunks)[0]
    row_bytes = max(1, int(np.prod(source.shape[1:])) * source.dtype.itemsize)
    rows = max(unit, (band_bytes // (row_bytes * unit)) * unit)
    for start in range(0, source.shape[0], rows):
        target[start : start + rows] = source[start : start + rows]
    return target


def copy_group(
    source: zarr.Group,
    parent: zarr.Group,
    name: str,
    *,
    skip: Skip | None = None,
    band_bytes: int = 64 << 20,
) -> zarr.Group:
    """Copy ``source`` to ``parent[name]`` recursively; ``skip(path)`` leaves members out.

    ``path`` is the member's path relative to ``source``. Groups are created
    first, then the arrays are copied concurrently.
    """
    target = parent.create_group(name, attributes=source.attrs.asdict())
    arrays: list[tuple[zarr.Array[Any], zarr.Group, str]] = []
    _copy_groups(source, target, "", skip, arrays)
    share = max(1, band_bytes // ARRAYS_IN_FLIGHT)
    with ThreadPoolExecutor(ARRAYS_IN_FLIGHT, thread_name_prefix="cytearc-copy") as pool:
        copies = [
            pool.submit(in_this_work(copy_array), array, into, member, band_bytes=share)
            for array, into, member in arrays
        ]
        try:
            for copied in copies:
                copied.result()
        except BaseException:
            # an interrupt or a failed copy: the copies not yet begun are not begun
            for copy in copies:
                copy.cancel()
            raise
    return target


def _copy_groups(
    source: zarr.Group,
    target: zarr.Group,
    prefix: str,
    skip: Skip | None,
    arrays: list[tuple[zarr.Array[Any], zarr.Group, str]],
) -> None:
    """Create the member groups of ``source`` in ``target``; collect the arrays to copy."""
    for member, node in sorted(source.members(), key=lambda item: item[0]):
        path = f"{prefix}{member}"
        if skip is not None and skip(path):
            continue
        if isinstance(node, zarr.Array):
            arrays.append((node, target, member))
        else:
            child = target.create_group(member, attributes=node.attrs.asdict())
            _copy_groups(node, child, path + "/", skip, arrays)
