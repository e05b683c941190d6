"""The on-disk contract of CyteArc stores, and the checks that enforce it.

Owns what a store holds and how it is read back: the strict attribute
records (``records``), the paths of an assay (``paths``), the count layout
(``layout``) and dtype (``count_dtype``), fingerprints, cell and feature
tables, metadata reads (``nodes``, ``store_io``), the one key check of every
store (``store_keys``, ``key_checked``), identity checks and the verification
of an ordinary store (``source_store``: ``verify_store``, pending markers),
and the refusal of an assay a store does not hold (``missing_assay``).

May import: :mod:`cytearc_vfs.errors` only. Everything else builds on it.
"""
