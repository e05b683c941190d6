"""Errors of the real-data fetcher and loaders."""

from __future__ import annotations

from ..errors import VfsError

__all__ = ["ChecksumMismatchError", "CountsError", "DataFetchError"]


class DataFetchError(VfsError, RuntimeError):
    """A pinned data set could not be downloaded or extracted."""


class ChecksumMismatchError(DataFetchError):
    """A freshly downloaded archive or member differs from its pinned sha256.

    Attributes name the data set and both digests so callers need not parse the
    message.
    """

    def __init__(self, message: str, *, name: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.name = name
        self.expected = expected
        self.actual = actual


class CountsError(VfsError, ValueError):
    """A data set's values are not the non-negative integer counts it should hold."""
