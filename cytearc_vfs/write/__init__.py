"""Writing source stores: ``write_counts`` and safe destinations.

Owns :func:`~cytearc_vfs.write_counts` (``writer``), count sources read in
canonical CSR row bands (``count_source``; AnnData input comes from the
adapters through the ``cytearc_vfs.count_sources`` registry), creating and
finishing destinations with their pending markers (``destinations``), the
write-behind store a destination is written through (``write_behind``:
concurrent writes, the commit last), copying store keys (``copying``), and
the writer a pending marker names when one writer runs another (``writer_name``).

May import: :mod:`cytearc_vfs.encoding`, :mod:`cytearc_vfs.remote`,
:mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`; never
:mod:`cytearc_vfs.read`.
"""
