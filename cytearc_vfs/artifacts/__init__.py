"""Analysis artifacts: publication, listing, reading, column moments.

Owns :func:`~cytearc_vfs.publish_artifact` and the readers
(``catalog``), the strict artifact record (``records``), the artifact roots
of a store's layout (``roots``), writers that publish with one metadata
write (``writers``) and the values an array's dtype can hold (``values``),
lazily opened arrays (``arrays``: :class:`~cytearc_vfs.Artifact`), unpublished
groups (``incomplete``), how many artifacts each root holds (``tally``, what
``cytearc-vfs info`` shows), and column moments (``moments``).

May import: :mod:`cytearc_vfs.read`, :mod:`cytearc_vfs.write` and the layers
below them; never :mod:`cytearc_vfs.composite` or :mod:`cytearc_vfs.mount`
(a mount is an ordinary writable store to an artifact).
"""
