"""Typed access to members of a zarr group (arrays and groups by path)."""

from __future__ import annotations

from typing import Any

import zarr

__all__ = ["array_at", "group_at"]


def array_at(group: zarr.Group, path: str) -> zarr.Array[Any]:
    """The array at ``path`` below ``group``; ``TypeError`` if it is a group."""
    node = group[path]
    if not isinstance(node, zarr.Array):
        raise TypeError(f"{path!r} is a group, expected an array")
    return node


def group_at(group: zarr.Group, path: str) -> zarr.Group:
    """The group at ``path`` below ``group``; ``TypeError`` if it is an array."""
    node = group[path]
    if not isinstance(node, zarr.Group):
        raise TypeError(f"{path!r} is an array, expected a group")
    return node
