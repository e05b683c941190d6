"""``python -m cytearc_vfs.cli``: the same as ``cytearc-vfs``."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
