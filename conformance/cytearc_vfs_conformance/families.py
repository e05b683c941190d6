"""Figures of the test families (crash points, corruptions, key escapes).

A family test that tries many faults records what it tried when the
environment variable ``CYTEARC_CONFORMANCE_REPORT`` names a directory, as one
JSON file per family, ``{directory}/{family}.json``::

    {
      "family": "corruption",       # the file's name without .json
      "tried": 412,                 # cases tried
      "handled": 412,               # cases read as an error or as the original values
      "wrong_values": 0,            # reads that returned other values without an error
      "details": {...}              # optional: per-kind counts, free-form
    }

``tried == handled + wrong_values`` unless a family also counts cases it
could not classify (it says so in ``details``). The report
(``python -m cytearc_vfs_conformance report``) reads every such file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

__all__ = ["ENV", "FamilyFigures", "read_families", "record_family"]

ENV = "CYTEARC_CONFORMANCE_REPORT"


class FamilyFigures(TypedDict, total=False):
    """The JSON shape of one family's figures."""

    family: str
    tried: int
    handled: int
    wrong_values: int
    details: Mapping[str, Any]


def record_family(
    family: str,
    *,
    tried: int,
    handled: int,
    wrong_values: int,
    details: Mapping[str, Any] | None = None,
) -> Path | None:
    """Write ``{family}.json`` into ``$CYTEARC_CONFORMANCE_REPORT``, if it is set.

    Returns the path written, or ``None`` when the variable is unset.
    """
    directory = os.environ.get(ENV)
    if not directory:
        return None
    figures: FamilyFigures = {
        "family": family,
        "tried": tried,
        "handled": handled,
        "wrong_values": wrong_values,
        "details": dict(details or {}),
    }
    path = Path(directory) / f"{family}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_families(directory: Path) -> list[FamilyFigures]:
    """Every family file of ``directory`` (files that are not families are skipped)."""
    found: list[FamilyFigures] = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and {"family", "tried", "handled", "wrong_values"} <= set(data):
            found.append(data)  # type: ignore[arg-type]
    return found
