"""The ``cytearc-vfs`` command line: demo, info, verify."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .errors import VfsError
from .locations import describe_location, open_location
from .progress import progress_bars

__all__ = ["main"]


def _print(payload: Any, *, as_json: bool, text: str) -> None:
    if as_json:
        json.dump(payload, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(text)


def _cmd_info(args: argparse.Namespace) -> int:
    from .inspect_store import describe_store

    where = describe_location(args.location)
    store = open_location(args.location, read_only=True)
    description = describe_store(store, where=where)
    lines = [f"{where}: {description['kind']} CyteArc store (Zarr v{description['zarrFormat']})"]
    for assay in description["assays"]:
        scope = f"{assay['workspace']}/" if assay["workspace"] else ""
        layout = assay["layout"]
        lines.append(
            f"  {scope}{assay['assay']} ({assay['assayType']}): {assay['shape'][0]} cells x "
            f"{assay['shape'][1]} features, {assay['dtype']}, countsT: {'yes' if assay['countsT'] else 'no'}"
        )
        lines.append(
            f"    layout unitBytes={layout['unitBytes']} chunkBytes={layout['chunkBytes']} "
            f"counts chunks {layout['counts']['chunks']} shards {layout['counts']['shards']}"
        )
        lines.append(f"    dataset {assay['datasetFingerprint']}")
        lines.append(f"    counts  {assay['countsFingerprint']}")
    for pending in description["pendingAssays"]:
        lines.append(f"  pending (unfinished) assay at {pending}")
    _print(description, as_json=args.json, text="\n".join(lines))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .deep_verify import deep_verify

    where = describe_location(args.location)
    store = open_location(args.location, read_only=True)
    with progress_bars(enabled=None if not args.json else False) as bars:
        reports = deep_verify(store, where=where, progress=bars)
    ok = all(report.ok for report in reports)
    payload = {
        "location": where,
        "ok": ok,
        "assays": [
            {
                "assay": r.label,
                "ok": r.ok,
                "problems": r.problems,
                "checkedValues": r.checked_values,
            }
            for r in reports
        ],
    }
    lines = [f"{where}: {'OK' if ok else 'PROBLEMS FOUND'}"]
    for report in reports:
        lines.append(
            f"  {report.label}: {'ok' if report.ok else 'FAILED'} ({report.checked_values} values read)"
        )
        lines.extend(f"    - {problem}" for problem in report.problems)
    _print(payload, as_json=args.json, text="\n".join(lines))
    return 0 if ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    with progress_bars(enabled=None if not args.json else False) as bars:
        steps = run_demo(args.directory, progress=bars, say=None if args.json else print)
    if args.json:
        _print(steps, as_json=True, text="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(prog="cytearc-vfs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="write real datasets to a temporary folder and read them back"
    )
    demo.add_argument(
        "--directory", help="keep the demo's stores here instead of a temporary folder"
    )
    info = sub.add_parser("info", help="describe a store (verifies its metadata)")
    info.add_argument("location")
    verify = sub.add_parser("verify", help="re-read every value and check it against the records")
    verify.add_argument("location")
    for command in (demo, info, verify):
        command.add_argument("--json", action="store_true", help="machine-readable output")
    demo.set_defaults(run=_cmd_demo)
    info.set_defaults(run=_cmd_info)
    verify.set_defaults(run=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cytearc-vfs``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except (VfsError, ValueError, FileExistsError, PermissionError, OSError) as exc:
        if getattr(args, "json", False):
            _print({"error": type(exc).__name__, "message": str(exc)}, as_json=True, text="")
        print(f"cytearc-vfs {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
