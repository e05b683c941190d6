"""What a command returns: its JSON payload, its text for people, its exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .failures import ExitCode

__all__ = ["Outcome", "plural"]


@dataclass(slots=True)
class Outcome:
    """What a command did: the JSON payload, the text, and the exit code."""

    payload: dict[str, Any]
    text: str
    code: ExitCode = ExitCode.OK
    destination: str | None = field(default=None)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def plural(count: int, word: str) -> str:
    """``count`` and ``word``, with an ``s`` unless ``count`` is 1.

    >>> plural(1, "chunk"), plural(3, "chunk")
    ('1 chunk', '3 chunks')
    """
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
