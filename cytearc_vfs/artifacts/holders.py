"""Which store of a mount holds an artifact: found by resolution, never recorded.

The spec ("Mounted targets") keeps every record free of locations: nothing in
the target says which store holds an artifact. A listing through a mount can
still tell, by asking the mount's own resolution (rule 2: the target's group
when the target holds its ``zarr.json``, else the source's) when it lists.
Through any other store an artifact is simply that store's own.

The artifacts layer does not import the mount package (they are siblings);
a mount is recognised by the two things it offers, :class:`LayeredStore`.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from zarr.abc.store import Store
from zarr.core.sync import sync

from ..format.paths import join

__all__ = ["HeldBy", "LayeredStore", "held_by", "shadows_source"]

#: The store of a mount that serves an artifact: its writable target or its source.
HeldBy = Literal["target", "source"]


@runtime_checkable
class LayeredStore(Protocol):
    """A store over a writable target and a read-only source (a mount)."""

    async def owner_of(self, key: str) -> tuple[Store, bool]:
        """The store that serves ``key`` now, and whether it is the source."""
        ...

    @property
    def source(self) -> Store:
        """The read-only source, as the mount reads it."""
        ...


def held_by(store: Store, group_key: str) -> HeldBy | None:
    """Which store of the mount ``store`` serves the artifact group at ``group_key``.

    ``None`` when ``store`` is no mount: the artifact is the store's own. The
    mount remembers each group's holder once it has read the group's
    ``zarr.json``, so after reading the record this costs no request.
    """
    if not isinstance(store, LayeredStore):
        return None
    _, from_source = sync(store.owner_of(join(group_key, "zarr.json")))
    return "source" if from_source else "target"


def shadows_source(store: Store, group_key: str) -> bool:
    """Whether the target's group at ``group_key`` hides a source group at the same path.

    Artifact ids are random, so only a copy between the two stores (an
    outside edit) makes one: the target's copy is what the mount reads.
    Costs one ``exists`` of the source; ``False`` for a store that is no
    mount or a group the source serves.
    """
    if held_by(store, group_key) != "target":
        return False
    assert isinstance(store, LayeredStore)
    return bool(sync(store.source.exists(join(group_key, "zarr.json"))))
