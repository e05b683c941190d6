"""The ``info`` command: what a store holds, in words or as the JSON of
:func:`~cytearc_vfs.inspection.describe.describe_store`."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from .inputs import opened_for_reading
from .outcome import Outcome, plural
from .progress import ProgressBars

__all__ = ["cmd_info"]


def cmd_info(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``info LOCATION``."""
    from ..inspection.describe import describe_store

    store, where, source_options = opened_for_reading(args, command="info")
    description = describe_store(store, where=where, source_storage_options=source_options)
    if description["kind"] == "composite":
        lines = _composite_lines(description, where)
    elif description["kind"] == "mount":
        lines = _mount_lines(description, where)
    else:
        lines = _ordinary_lines(description, where)
    lines += _artifact_lines(description, args.location)
    return Outcome(description, "\n".join(lines))


def _composite_lines(description: dict[str, Any], where: str) -> list[str]:
    shape = description["shape"]
    lines = [
        f"{where}: composite of {plural(len(description['sources']), 'source')}, assay "
        f"{description['assay']}: {shape[0]:,} cells x {shape[1]:,} features "
        f"({description['dtype']}), virtual arrays {', '.join(description['arrays'])}"
    ]
    lines += [f"  source {s['name']}: {s['location']}" for s in description["sources"]]
    return lines


def _mount_lines(description: dict[str, Any], where: str) -> list[str]:
    record = description["matrixSource"]
    lines = [
        f"{where}: mounted target of {record['location']}"
        + (f" (workspace {record['workspace']})" if record["workspace"] else "")
    ]
    shapes = {a["assay"]: a for a in description["assays"]}
    lines += [
        f"  {name}: {shapes[name]['shape'][0]:,} cells x {shapes[name]['shape'][1]:,} features, "
        f"{shapes[name]['dtype']}, dataset {entry['datasetFingerprint']}, "
        + ("needs the source's countsT" if entry["requiresTranspose"] else "counts only")
        for name, entry in record["assays"].items()
    ]
    return lines


def _ordinary_lines(description: dict[str, Any], where: str) -> list[str]:
    lines = [f"{where}: ordinary CyteArc store (Zarr v{description['zarrFormat']})"]
    for assay in description["assays"]:
        scope = f"{assay['workspace']}/" if assay["workspace"] else ""
        layout = assay["layout"]
        lines.append(
            f"  {scope}{assay['assay']} ({assay['assayType']}): {assay['shape'][0]:,} cells x "
            f"{assay['shape'][1]:,} features, {assay['dtype']}, countsT: "
            f"{'yes' if assay['countsT'] else 'no'}"
        )
        lines.append(
            f"    layout unitBytes={layout['unitBytes']} chunkBytes={layout['chunkBytes']} "
            f"counts chunks {layout['counts']['chunks']} shards {layout['counts']['shards']}"
        )
        lines.append(f"    dataset {assay['datasetFingerprint']}")
        lines.append(f"    counts  {assay['countsFingerprint']}")
    for pending in description["pendingAssays"]:
        lines.append(
            f"  unfinished assay at {pending} (its write did not finish; it does not open). "
            "Write the store again with --overwrite"
        )
    if not description["assays"] and not description["pendingAssays"]:
        lines.append("  no assays")
    return lines


def _artifact_lines(description: dict[str, Any], location: str) -> list[str]:
    """The artifacts of each root, one line, and a second for its unpublished or
    unreadable groups with the command that shows them; a mount's marked with the
    store that holds them, as ``cytearc-vfs artifacts`` marks them."""
    tallies = description["artifacts"]
    if tallies is None:
        return ["  artifacts: not counted (the store cannot list its keys)"]
    held = [
        tally
        for tally in tallies
        if tally["complete"] or tally["incomplete"] or tally["unreadable"]
    ]
    if not held:
        return ["  no artifacts"]
    listed = f"cytearc-vfs artifacts {shlex.quote(location)}"
    lines = [f"  artifacts ({listed} lists them):"]
    for tally in held:
        holder = "" if tally["heldBy"] is None else f"{tally['heldBy']:<7}"
        kinds = tally["complete"]
        counts = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
        lines.append(
            f"    {holder}{tally['root']}: {sum(kinds.values())} complete"
            + (f" ({counts})" if counts else "")
        )
        # a mount's path lists its target's own groups; the source's are the source's
        where = location if tally["heldBy"] != "source" else description["matrixSource"]["location"]
        others = []
        if tally["incomplete"]:
            others.append(
                f"{plural(tally['incomplete'], 'unpublished group')} "
                f"(cytearc-vfs artifacts {shlex.quote(where)} --incomplete lists "
                + ("it)" if tally["incomplete"] == 1 else "them)")
            )
        if tally["unreadable"]:
            one = tally["unreadable"] == 1
            others.append(
                f"{plural(tally['unreadable'], 'unreadable group')} "
                + ("(its record is malformed; " if one else "(their records are malformed; ")
                + f"cytearc-vfs artifacts {shlex.quote(where)} names "
                + ("it)" if one else "each)")
            )
        if others:
            lines.append(f"    {' ' * len(holder)}  and {'; '.join(others)}")
    return lines
