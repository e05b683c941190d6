"""Where stores live: locations, backends, and the remote shard cache.

Owns turning a location (path, URL, or store) into a zarr store through the
backend registry (``locations``; backends are adapters found by entry
point), timeouts of source reads, pinning remote objects to their ETag
(``pinned_store``), the bounded temp-directory shard cache
(``source_cache``, ``cached_store``), sweeping caches of dead processes
(``cache_owners``), and the messages of backend failures (``failures``), which
show a URL's password as ``***`` (``password_masking``).

May import: :mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`.
"""
