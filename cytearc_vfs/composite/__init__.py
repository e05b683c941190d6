"""Composite stores: one virtual count matrix over many source stores.

Owns :func:`~cytearc_vfs.create_composite` (``create``), the feature union and
column maps (``columns``, ``maps``), the composite record (``records``), the
store that serves computed chunks to plain zarr (``store``:
:class:`~cytearc_vfs.CompositeStore`), the verification of everything it
serves before it opens (``verification``) and its open-time table checks
(``open_checks``). ``store.open_verified`` is registered as the
``composite`` entry of ``cytearc_vfs.count_mappings``.

May import: :mod:`cytearc_vfs.read`, :mod:`cytearc_vfs.write` and the layers
below them; never :mod:`cytearc_vfs.mount` or :mod:`cytearc_vfs.artifacts`.
"""
