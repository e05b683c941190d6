"""The errors of the AnnData element layer."""

from __future__ import annotations

from cytearc_vfs.errors import RecordShapeError, VfsError
from cytearc_vfs.read.anndata_elements import DAMAGED_ANNDATA_REMEDY

__all__ = ["DAMAGED_REMEDY", "MalformedElementError", "UnsupportedElementError"]

#: What a user does about a container whose stored bytes are damaged (the core's words
#: for a damaged AnnData, so a composite's source and a container say the same).
DAMAGED_REMEDY = DAMAGED_ANNDATA_REMEDY


class MalformedElementError(RecordShapeError):
    """An element of an AnnData container does not hold what its encoding promises.

    The message names the element's path inside the container, the encoding
    it was read as, and what is missing or wrong. A :class:`RecordShapeError`
    (a ``ValueError``): the container is damaged, and fails closed as any other
    stored record that is not what it says (exit 3 on the command line, as a
    composite's refusal of the same source is).
    """


class UnsupportedElementError(VfsError, ValueError):
    """An element this layer lists but does not read (an unknown encoding or version)."""
