"""The spec's rules, as copied into ``rules.json``, and what this layer owns.

``rules.json`` holds every sentence of the spec (CyteArc "Zarr internals")
that says "fails closed", "refuses", "raises", "never", "exactly",
"immutable" or "strict" (``keyword``: ``"keyword"``), and a few sentences of
the storage sections saying "fail closed", "refused" or "rejected"
(``"related"``). Each carries the decision whether the storage layer owns it
and, when it does not, the reason. The file is the repository's copy: tests
and the report never read the spec itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

__all__ = ["Rule", "load_rules"]


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the spec."""

    id: str
    """Short stable id, used by ``@pytest.mark.rule(id)``."""
    sentence: str
    """The spec's sentence, verbatim."""
    keyword: str
    """``"keyword"`` (holds one of the listed words) or ``"related"``."""
    owned: bool
    """Whether the storage layer (this package) owns the rule."""
    reason: str
    """Why the rule is out of scope; empty when owned."""


def load_rules() -> list[Rule]:
    """The rules of ``rules.json``, in the spec's order."""
    text = resources.files(__package__).joinpath("rules.json").read_text(encoding="utf-8")
    return [Rule(**entry) for entry in json.loads(text)["rules"]]
