"""A read-only FUSE file system over any store this layer opens (``cytearc-vfs mount-fs``).

Owns the mapping of a zarr ``Store`` onto a directory tree (key prefixes are
directories, keys are files), the sizes it reports without computing virtual
chunks, and mounting and unmounting it with libfuse 3 through ``mfusepy``
(the ``cytearc-vfs[fuse]`` extra). May import the layers below the tools
(``composite``, ``mount``, ``read`` and down); nothing imports it but the
command line, which does so lazily, so importing the core never loads the
binding.
"""
