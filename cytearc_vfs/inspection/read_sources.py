"""The stores that an opened store reads besides itself."""

from __future__ import annotations

from ..composite.store import CompositeStore
from ..mount.store import MountStore

__all__ = ["stores_read_by"]


def stores_read_by(store: object) -> dict[str, str]:
    """A composite's sources and a mount's source, by a name for messages.

    What writes must stay out of (an export into a composite's source would
    change it) and what a FUSE mount point must not lie in. An ordinary store
    reads nothing else: ``{}``.
    """
    viewed = getattr(store, "viewed_store", None)
    if viewed is not None and viewed is not store:
        # a store presenting another (the AnnData view of cytearc_vfs_adapters)
        # reads what that one reads
        return stores_read_by(viewed)
    if isinstance(store, CompositeStore):
        return {f"source {source.name!r}": source.location for source in store.record.sources}
    if isinstance(store, MountStore):
        return {"the mount's source": store.record.location}
    return {}
