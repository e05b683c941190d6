"""``python -m cytearc_vfs.realdata describe | fetch NAME... | all | path NAME``."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
