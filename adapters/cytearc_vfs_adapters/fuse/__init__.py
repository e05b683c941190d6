"""A read-only FUSE file system over any store this layer opens (``cytearc-vfs mount-fs``).

Owns the mapping of a zarr ``Store`` onto a directory tree (key prefixes are
directories, keys are files), the sizes it reports without computing virtual
chunks, and mounting and unmounting it with libfuse 3 through ``mfusepy``
(the ``cytearc-vfs[fuse]`` extra). May import the layers below the tools
(``composite``, ``mount``, ``read`` and down) and, beside it, what the HTTP
server shares with it: a key's validators and times (``serve.validators``,
so a file's time in the mount is the server's ``Last-Modified``) and the
reopening store (``served_store``); nothing imports it but the
command line, which does so lazily, so importing the core never loads the
binding.
"""
