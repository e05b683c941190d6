"""How count values become bytes in a shard, and the compiled loops.

Owns the row-frame encoding of count chunks (``row_frames``: zstd frames with
content checksums, readable by every Zarr v3 implementation), the shard
codec configuration (``shard_encoding``), and the optional C kernels
(``_kernels``) the gather reader uses to place values.

May import: :mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`.
"""
