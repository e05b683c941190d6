"""Keys of obstore-backed zarr stores whose client is shared by several stores.

Building an obstore client costs milliseconds of CPU (each loads its TLS
roots and makes its own connection pool), so a composite of hundreds of
sources in one bucket would spend most of its open building clients. The
backends therefore open a URL as an ``ObjectStore`` over one client per
bucket and options, whose keys carry the URL's path: such a store says so
with a ``key_prefix`` attribute. Code that calls obstore directly with a zarr
store's client (listings with versions, conditional reads) maps keys here.

>>> from types import SimpleNamespace
>>> shared = SimpleNamespace(key_prefix="atlas/a.zarr")
>>> object_key(shared, "RNA/zarr.json"), listing_prefix(shared, "")
('atlas/a.zarr/RNA/zarr.json', 'atlas/a.zarr')
>>> store_key(shared, "atlas/a.zarr/RNA/zarr.json")
'RNA/zarr.json'
>>> object_key(SimpleNamespace(), "zarr.json"), listing_prefix(SimpleNamespace(), "")
('zarr.json', None)
"""

from __future__ import annotations

from typing import Any

__all__ = ["KEY_PREFIX_ATTR", "key_prefix", "listing_prefix", "object_key", "store_key"]

#: Attribute of a store whose client's keys start with a prefix.
KEY_PREFIX_ATTR = "key_prefix"


def key_prefix(store: Any) -> str:
    """The prefix of ``store``'s client keys (``""`` for a client of its own)."""
    prefix = getattr(store, KEY_PREFIX_ATTR, "")
    return prefix.strip("/") if isinstance(prefix, str) else ""


def object_key(store: Any, key: str) -> str:
    """The client's key of the store's ``key``."""
    prefix = key_prefix(store)
    return f"{prefix}/{key}" if prefix and key else prefix or key


def listing_prefix(store: Any, prefix: str) -> str | None:
    """The client's listing prefix of the store's ``prefix`` (``None``: everything)."""
    full = object_key(store, prefix.strip("/"))
    return full or None


def store_key(store: Any, path: str) -> str:
    """The store's key of a path its client listed."""
    prefix = key_prefix(store)
    return path[len(prefix) + 1 :] if prefix and path.startswith(prefix + "/") else path
