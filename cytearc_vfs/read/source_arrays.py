"""A bound source's count arrays, built from the metadata its verification parsed, when used.

Opening a composite binds every source, and a composite of many small
sources spends most of its open on per-array Python work, not on I/O:
parsing each count array's ``zarr.json`` into zarr's metadata (about 0.2 ms
an array) and building zarr arrays (a codec pipeline each, with several
reads of zarr's configuration) and shard readers over it. That work was
done again at every step: the verification built an array to check, the
binding another, and each reader (the composite's own chunk reader, every
``store.reader()``) two more per source, with a shard reader beside each.

:class:`CountArrays` holds what the verification parsed, once: each array's
metadata and recorded shard table. A zarr array and a shard reader are
built from them on first use (the shard reader reads most sources, so the
zarr array is usually never built), and :meth:`CountArrays.on` moves them
to another store without parsing anything again. Building is pure
computation (no I/O, no call into zarr's event loop), so it may happen
inside a read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.array_spec import ArrayConfig
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import StorePath

from ..format.shard_tables import ShardTable
from .opened_files import OpenedSource
from .shard_reader import ShardedReader, fast_reader_from

__all__ = ["CountArrays", "array_config"]


def array_config() -> ArrayConfig:
    """zarr's array configuration as it is now (``zarr.config``'s ``array.*``), read once.

    zarr reads it key by key for every array built without one; an open
    reads it once and gives it to every array of every source.
    """
    return ArrayConfig.from_dict({})


@dataclass(frozen=True, slots=True)
class CountArrays:
    """The verified count arrays (``counts``, perhaps ``countsT``) of one source on ``store``."""

    store: Store
    """The (counting) store the arrays read."""
    metadata: Mapping[str, ArrayV3Metadata]
    """Each array's verified metadata, by path."""
    tables: Mapping[str, ShardTable | None]
    """Each array's recorded shard table, by path (``None``: none recorded)."""
    where: str
    """The source's description, for the shard readers' errors."""
    opened: OpenedSource | None
    """What the open found of a local source's files (see :mod:`.opened_files`)."""
    config: ArrayConfig
    """zarr's array configuration, read once for the open (see :func:`array_config`)."""
    _built: dict[tuple[str, str], Any] = field(default_factory=dict, compare=False, repr=False)

    def on(self, store: Store) -> CountArrays:
        """The same arrays read through ``store``: nothing parsed again, nothing built yet."""
        return CountArrays(store, self.metadata, self.tables, self.where, self.opened, self.config)

    def array(self, path: str) -> AsyncArray[Any]:
        """The zarr array at ``path``, built on first use."""
        built = self._built.get(("array", path))
        if built is None:
            array = AsyncArray(self.metadata[path], StorePath(self.store, path), self.config)
            # two threads may build it at once: both then keep the first one stored
            built = self._built.setdefault(("array", path), array)
        return built  # type: ignore[no-any-return]

    def fast(self, path: str) -> ShardedReader | None:
        """The shard reader of ``path`` (``None``: a layout it does not read), built on first
        use; it keeps the shard indexes it reads."""
        key = ("fast", path)
        if key not in self._built:
            reader = fast_reader_from(
                self.metadata[path],
                self.store,
                path,
                self.tables.get(path),
                where=self.where,
                opened=self.opened,
            )
            self._built.setdefault(key, reader)
        return self._built[key]  # type: ignore[no-any-return]
