"""``python -m cytearc_vfs_conformance check LOCATION``: the store checks from a shell.

Prints one line per check and exits 1 when any failed, so a writer's CI can
run the checks on the stores it produced without writing Python.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from .source_store import check_source_store

__all__ = ["main"]


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def main(argv: Sequence[str]) -> int:
    """Check the store at the location; 0 when every check passed, 1 otherwise."""
    parser = argparse.ArgumentParser(
        prog="python -m cytearc_vfs_conformance check",
        description="Check a CyteArc store (ordinary, composite or mount) against the contract.",
    )
    parser.add_argument("location", help="a path or URL")
    parser.add_argument(
        "--storage-options", type=_json_object, default=None, help="JSON object for the store"
    )
    parser.add_argument(
        "--source-storage-options",
        type=_json_object,
        default=None,
        help="JSON object: a composite's options by source name, or a mount source's options",
    )
    parser.add_argument("--no-deep", action="store_true", help="do not read every value")
    args = parser.parse_args(list(argv))
    findings = check_source_store(
        args.location,
        storage_options=args.storage_options,
        source_storage_options=args.source_storage_options,
        deep=not args.no_deep,
    )
    for finding in findings:
        detail = f": {finding.detail}" if finding.detail else ""
        print(f"{'ok  ' if finding.ok else 'FAIL'} {finding.check}{detail}")
    failed = sum(not finding.ok for finding in findings)
    print(f"{len(findings) - failed} passed, {failed} failed")
    return 1 if failed else 0
