"""Consolidated metadata above an array that a resize or promote changes.

zarr opens a group whose ``zarr.json`` holds consolidated metadata from
that copy of its members' documents, without reading their own
``zarr.json``. Through such a group zarr would read an array that a resize
or promote is moving with its old document, past the marker that makes
readers refuse it (half-moved chunks, read as valid), and read it with the
old shape once the operation is done (shifted values, no error). So before
the operation writes anything, the consolidated metadata of every group
above the array is removed (one write per group that holds any); zarr then
reads each member's own document. Nothing needs recovering: without it a
store is as valid as with it. ``zarr.consolidate_metadata`` consolidates
again once the operation is done.
"""

from __future__ import annotations

from collections.abc import Mapping

from zarr.abc.store import Store
from zarr.core.sync import sync

from .documents import dumps
from .key_moves import mover_for

__all__ = ["unconsolidate_above"]


def _consolidated(document: object) -> bool:
    """Whether a group's ``zarr.json`` holds consolidated metadata.

    >>> _consolidated({"node_type": "group", "consolidated_metadata": {"metadata": {}}})
    True
    >>> _consolidated({"node_type": "group", "consolidated_metadata": None})
    False
    """
    return (
        isinstance(document, Mapping)
        and document.get("node_type") == "group"
        and document.get("consolidated_metadata") is not None
    )


def unconsolidate_above(store: Store, ancestors: Mapping[str, object]) -> tuple[str, ...]:
    """Remove the consolidated metadata of the groups in ``ancestors`` that hold any.

    ``ancestors`` maps each group above the array (``""`` for the root) to
    its ``zarr.json`` as read. Returns the groups changed (``"/"`` for the root).
    """
    changed: list[str] = []
    mover = mover_for(store)
    for group, document in ancestors.items():
        if not _consolidated(document):
            continue
        assert isinstance(document, Mapping)
        plain = {name: value for name, value in document.items() if name != "consolidated_metadata"}
        sync(mover.set(f"{group}/zarr.json" if group else "zarr.json", dumps(plain)))
        changed.append(group or "/")
    return tuple(changed)
