"""Reading counts: the gather reader, its plans, and ``open_store``.

Owns :class:`~cytearc_vfs.VirtualArrayReader` (``reader``), selections
(``selection``), binding and verifying sources (``sources``), count mappings
(``count_mapping``, ``cell_runs``) and their registry (``mapping_providers``:
composites and mounts register there, above this layer), read plans
(``cell_plan``, ``feature_plan``, ``gather``), shard reads and decode threads
(``shard_reader``, ``local_shards``, ``chunk_decoding``, ``strip_assembly``,
``decode_threads``, ``prefetch``), placing values into the output
(``placement``), streams and dask arrays (``blockwise``), read statistics,
and :func:`~cytearc_vfs.open_store` (``opening``).

May import: :mod:`cytearc_vfs.encoding`, :mod:`cytearc_vfs.remote`,
:mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`; never
:mod:`cytearc_vfs.write`.
"""
