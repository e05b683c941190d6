"""Adapters from cytearc_vfs to the outside: storage backends and AnnData."""

from __future__ import annotations

from .backends import register_all

__all__ = ["register_all"]
