"""How count values become bytes in a shard, and the compiled loops.

Owns the shard encoding of count arrays (``shard_encoding``: Zarr's
``sharding_indexed`` format, each inner chunk of the portable layout one zstd
frame with its content checksum, readable by every Zarr v3 implementation),
the row-frame encoding of the chunks of stores written before issue 14
(``row_frames``: several zstd frames and an index per chunk, still read, and
written only for tests), and the optional C kernels (``_kernels``) the gather
reader uses to read row frames and place values.

May import: :mod:`cytearc_vfs.format` and :mod:`cytearc_vfs.errors`.
"""
