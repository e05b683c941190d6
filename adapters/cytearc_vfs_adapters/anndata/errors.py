"""The errors of the AnnData element layer."""

from __future__ import annotations

from cytearc_vfs.errors import VfsError

__all__ = ["MalformedElementError", "UnsupportedElementError"]


class MalformedElementError(VfsError, ValueError):
    """An element of an AnnData container does not hold what its encoding promises.

    The message names the element's path inside the container, the encoding
    it was read as, and what is missing or wrong.
    """


class UnsupportedElementError(VfsError, ValueError):
    """An element this layer lists but does not read (an unknown encoding or version)."""
