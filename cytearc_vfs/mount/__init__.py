"""Mounts, and repack: a writable target over a read-only source.

Owns :func:`~cytearc_vfs.mount_datastore` (``create``), the mount record
(``records``), namespace resolution (``resolution``), the read-through store
with union listings (``store``: :class:`~cytearc_vfs.MountStore`), its
open-time checks (``open_checks``), and :func:`~cytearc_vfs.repack`
(``repack``), which rewrites a store or materializes a mount into new
shards. ``store.open_verified`` is registered as the ``matrixSource`` entry
of ``cytearc_vfs.count_mappings``.

May import: :mod:`cytearc_vfs.read`, :mod:`cytearc_vfs.write` and the layers
below them; never :mod:`cytearc_vfs.composite` or
:mod:`cytearc_vfs.artifacts`.
"""
