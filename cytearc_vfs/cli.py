"""The ``cytearc-vfs`` command line: demo, info, verify, composite, mount, repack."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
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
    if description["kind"] == "composite":
        lines = [
            f"{where}: composite of {len(description['sources'])} sources, assay {description['assay']}: "
            f"{description['shape'][0]} cells x {description['shape'][1]} features ({description['dtype']}), "
            f"virtual arrays {', '.join(description['arrays'])}"
        ]
        lines += [f"  source {s['name']}: {s['location']}" for s in description["sources"]]
        _print(description, as_json=args.json, text="\n".join(lines))
        return 0
    if description["kind"] == "mount":
        record = description["matrixSource"]
        lines = [
            f"{where}: mounted target of {record['location']}"
            + (f" (workspace {record['workspace']})" if record["workspace"] else "")
        ]
        lines += [
            f"  {name}: dataset {entry['datasetFingerprint']}, countsT required: {entry['requiresTranspose']}"
            for name, entry in record["assays"].items()
        ]
        _print(description, as_json=args.json, text="\n".join(lines))
        return 0
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


def _parse_sources(values: list[str]) -> dict[str, str]:
    sources: dict[str, str] = {}
    for value in values:
        name, sep, location = value.partition("=")
        if not sep:
            location = value
            name = Path(value.rstrip("/")).name.split(".")[0] or "source"
        if name in sources:
            raise ValueError(
                f"source name {name!r} is given twice; write NAME=LOCATION to name sources"
            )
        sources[name] = location
    return sources


def _cmd_composite(args: argparse.Namespace) -> int:
    from .composite import create_composite

    sources = _parse_sources(args.sources)
    features: str | list[str] = args.features
    if args.features_file:
        features = [
            line.strip()
            for line in Path(args.features_file).read_text().splitlines()
            if line.strip()
        ]
    with progress_bars(enabled=None if not args.json else False) as bars:
        started = time.perf_counter()
        store = create_composite(
            args.destination, sources, assay=args.assay, features=features, progress=bars
        )
        seconds = time.perf_counter() - started
    reader = store.reader()
    payload = {
        "location": describe_location(args.destination),
        "assay": args.assay,
        "sources": list(sources),
        "shape": list(reader.shape),
        "dtype": str(reader.dtype),
        "seconds": round(seconds, 3),
    }
    text = (
        f"composite of {len(sources)} sources at {payload['location']}: {reader.shape[0]} cells x "
        f"{reader.shape[1]} features ({reader.dtype}), created in {seconds:.2f} s; no counts copied"
    )
    _print(payload, as_json=args.json, text=text)
    return 0


def _cmd_mount(args: argparse.Namespace) -> int:
    from .mount import mount_datastore

    started = time.perf_counter()
    store = mount_datastore(
        args.source, args.destination, workspace=args.workspace, assays=args.assay or None
    )
    seconds = time.perf_counter() - started
    record = store.record
    payload = {
        "location": describe_location(args.destination),
        "source": record.location,
        "workspace": record.workspace,
        "assays": sorted(record.assays),
        "seconds": round(seconds, 3),
    }
    text = (
        f"mounted {record.location} at {payload['location']} (assays {', '.join(payload['assays'])}) in "
        f"{seconds:.2f} s; analyses write to the target, source artifacts read through"
    )
    _print(payload, as_json=args.json, text=text)
    return 0


def _cmd_repack(args: argparse.Namespace) -> int:
    from .repack import repack

    started = time.perf_counter()
    repack(args.source, args.destination, data_only=args.data_only, mem_budget=args.mem_budget)
    seconds = time.perf_counter() - started
    payload = {
        "source": describe_location(args.source),
        "location": describe_location(args.destination),
        "dataOnly": args.data_only,
        "seconds": round(seconds, 3),
    }
    text = f"repacked {payload['source']} into {payload['location']} in {seconds:.2f} s (standalone, verified)"
    _print(payload, as_json=args.json, text=text)
    return 0


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
    composite = sub.add_parser(
        "composite", help="create a composite (virtual counts) of source stores"
    )
    composite.add_argument("destination")
    composite.add_argument("sources", nargs="+", metavar="[NAME=]SOURCE")
    composite.add_argument("--assay", default="RNA")
    composite.add_argument("--features", default="union", choices=["union", "intersection"])
    composite.add_argument(
        "--features-file", help="explicit feature ids, one per line (overrides --features)"
    )
    composite.set_defaults(run=_cmd_composite)
    mount = sub.add_parser("mount", help="mount a read-only source under a writable target")
    mount.add_argument("source")
    mount.add_argument("destination")
    mount.add_argument("--workspace")
    mount.add_argument("--assay", action="append", help="mount only this assay (repeatable)")
    mount.set_defaults(run=_cmd_mount)
    repack_parser = sub.add_parser(
        "repack", help="rewrite a store or a mount as a standalone store"
    )
    repack_parser.add_argument("source")
    repack_parser.add_argument("destination")
    repack_parser.add_argument(
        "--data-only",
        action="store_true",
        help="rewrite counts and tables of a store that does not open",
    )
    repack_parser.add_argument("--mem-budget", default=None)
    repack_parser.set_defaults(run=_cmd_repack)
    for command in (demo, info, verify, composite, mount, repack_parser):
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
