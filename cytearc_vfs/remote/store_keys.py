"""Keys of pickled stores that are the same for equal stores.

A process keeps what it opened from a pickled store (a mount it verified)
under a key made from the store's pickle. An ``obstore`` store pickles its
options from a Rust hash map, in another order each time, and zarr's
``ObjectStore`` pickles its obstore store to bytes the same way, so two
pickles of one store differ and a key made from them never matches. Here an
obstore store is keyed by its type and sorted options instead.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from zarr.storage import ObjectStore

__all__ = ["store_key"]


def store_key(value: object) -> bytes:
    """The pickle of ``value`` with every obstore store (inside zarr's
    ``ObjectStore`` too) written by its type and sorted options: equal for
    equal stores. A key only, never unpickled.

    >>> store_key({"a": 1}) == store_key({"a": 1})
    True
    """
    buffer = io.BytesIO()
    _KeyPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


class _KeyPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, ObjectStore):
            return (type(obj), (obj.store, obj.read_only))
        if type(obj).__module__.split(".")[0] == "obstore" and hasattr(obj, "__getnewargs_ex__"):
            args, kwargs = obj.__getnewargs_ex__()
            return (type(obj), (tuple(args), _sorted(kwargs)))
        return NotImplemented


def _sorted(value: Any) -> Any:
    """``value`` with every dict made a tuple of its items sorted by key."""
    if isinstance(value, dict):
        return tuple(sorted((str(key), _sorted(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_sorted(item) for item in value)
    return value
