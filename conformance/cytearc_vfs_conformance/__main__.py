"""``python -m cytearc_vfs_conformance report [--output docs/conformance.md]`` writes the
rules page; ``python -m cytearc_vfs_conformance check LOCATION`` checks a store."""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["check"]:
    from .check_cli import main as check

    raise SystemExit(check(sys.argv[2:]))

from .report import main

raise SystemExit(main())
