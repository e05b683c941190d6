"""``python -m cytearc_vfs_conformance report [--output docs/conformance.md]``."""

from __future__ import annotations

from .report import main

raise SystemExit(main())
