"""Looking at stores from outside: what a location is, what it holds, deep checks.

Owns classifying a location before opening it (``store_kind``: missing,
h5ad, AnnData, Zarr, composite, mount, CyteArc store), the description
``cytearc-vfs info`` prints (``describe``), and verification that reads every
count value of every orientation (``deep_verify``).

May import: every layer below the command line.
"""
