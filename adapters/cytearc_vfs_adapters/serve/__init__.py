"""Serving a store over HTTP: ``cytearc-vfs serve`` and :class:`StoreServer`.

Owns the read-only HTTP/1.1 server over any store this layer opens (ordinary,
composite, mount, remote through its cache), so that clients of other
languages (tensorstore, zarrita, R) read a composite's computed chunks as
plain Zarr v3 over HTTP: the server (``server``), its options and stats
(``options``), its listening socket (``sockets``), request heads
(``protocol``), request targets to checked store keys (``targets``),
byte ranges (``ranges``), validators (``validators``: ``ETag`` and
``Last-Modified`` per store kind) and conditional requests (``conditions``),
answers and error statuses (``answers``), the answers of keys (``values``)
and of directories (``directories``: listings and ``PROPFIND``) and the
bodies of directory listings, HTML for fsspec, WebDAV multistatus for
obstore, JSON (``listings``). The store it answers from is a
:class:`~cytearc_vfs_adapters.served_store.ServedStore`, reopened when a
source is restored. ``docs/serve.md`` states what is answered.

May import: every layer below the command line except :mod:`cytearc_vfs.inspection`
and :mod:`cytearc_vfs.realdata` (its siblings); it needs only :mod:`cytearc_vfs.format`
(the key rule), :mod:`cytearc_vfs.errors` and zarr.
"""

from .server import ServeOptions, ServeStats, StoreServer

__all__ = ["ServeOptions", "ServeStats", "StoreServer"]
