"""A reusable conformance suite: point it at a store to check the CyteArc contract.

>>> from cytearc_vfs_conformance import check_source_store
>>> findings = check_source_store("pbmc.zarr")  # doctest: +SKIP
>>> [f for f in findings if not f.ok]  # doctest: +SKIP
[]
"""

from __future__ import annotations

from .source_store import Finding, check_source_store

__all__ = ["Finding", "check_source_store"]
