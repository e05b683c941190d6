"""What each ``cytearc-vfs`` command does once its arguments are parsed.

Each command first checks what its locations hold (:mod:`cytearc_vfs.inspection.store_kind`)
and refuses anything that is not the kind of store it needs, naming what it
found and what to run instead. Commands return a JSON-able payload and the
text printed for people; :mod:`cytearc_vfs.cli.running` prints one or the other.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .anndata_command import checked_anndata_input, cmd_anndata
from .array_command import array_interrupt_note, cmd_array
from .artifacts_command import cmd_artifacts
from .failures import ExitCode, InputRefusedError
from .info_command import cmd_info
from .inputs import (
    check_sources_differ,
    json_option,
    local_store_options,
    mem_budget_option,
    opened_for_reading,
    parse_sources,
    per_source_options,
    read_named_file,
    refuse_options_by_name,
    refuse_unused_source_options,
    require_store,
)
from .outcome import Outcome, plural
from .progress import ProgressBars
from .serving import cmd_mount_fs, cmd_serve

__all__ = ["COMMANDS", "DESTINATION_OPTIONS", "INTERRUPT_NOTES", "Outcome", "parse_sources"]


def _checked_overwrite(
    args: argparse.Namespace, storage_options: Mapping[str, Any] | None = None
) -> bool:
    """Whether the writer may replace ``args.destination``: the ``overwrite`` to pass it.

    An empty or absent destination needs nothing. With ``--overwrite`` a composite,
    an unfinished destination, or a store the writers may replace (spec, "Writer
    destinations") is replaced; a mount target is refused, as analyses depend on it.
    Nothing is removed here: the writer removes the old destination after it has
    checked its inputs (run it inside :func:`composites_replaceable`, as ``write``
    runs write_counts), so a refused command leaves the destination as it was.
    """
    from ..inspection.store_kind import classify_location
    from ..write.destination_checks import check_destination, composites_replaceable

    destination = args.destination
    if not args.destination_guard.existed:
        return False
    # what --overwrite would refuse is refused first, with its own reason: the
    # message never suggests --overwrite where it would not be accepted
    found = classify_location(destination, storage_options=storage_options)
    if found.kind == "mount":
        raise FileExistsError(
            f"{found.words}; its analyses depend on it, so --overwrite does not replace it. "
            "Choose another destination, or delete it yourself if you mean to"
        )
    with composites_replaceable():
        check_destination(destination, overwrite=True, storage_options=storage_options)
    if not args.overwrite:
        raise FileExistsError(
            f"{found.words}; give --overwrite to replace it, or choose another destination"
        )
    return True


def _read_lines(path: str, *, what: str, form: str) -> list[str]:
    """The ids of the file ``path`` given to ``what`` (written ``form``), one a line."""
    text = read_named_file(path, what=form, wanted="a text file with one id per line")
    ids = [line.strip() for line in text.splitlines() if line.strip()]
    seen: set[str] = set()
    for found in ids:
        if found in seen:
            # the library says "repeats rows" of cells[NAME], the Python form, with no id
            raise InputRefusedError(
                f"{form} lists {found!r} twice; list each id once (sort -u FILE removes repeats)"
            )
        seen.add(found)
    if not ids:
        # an empty file (a grep that matched nothing) made a composite of no cells or features
        raise InputRefusedError(
            f"{what} file {path} lists no ids (it is empty or blank); give a text file with "
            "one id per line"
        )
    return ids


def _cell_ids(entries: Sequence[str], sources: Mapping[str, str]) -> dict[str, list[str]] | None:
    """``--cells NAME=FILE`` arguments as the cell ids to keep, per source."""
    if not entries:
        return None
    chosen: dict[str, list[str]] = {}
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep or name not in sources:
            raise InputRefusedError(
                f"--cells {entry!r} must be NAME=FILE with NAME one of the sources "
                f"({', '.join(sources)})"
            )
        if name in chosen:
            # the second file replaced the first, silently
            raise InputRefusedError(
                f"--cells gives source {name!r} two FILEs; give one file holding every id "
                "to keep (cat them into one)"
            )
        chosen[name] = _read_lines(path, what="--cells", form=f"--cells {shlex.quote(name)}=FILE")
    return chosen


def cmd_verify(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``verify LOCATION``."""
    from ..inspection.deep_verify import deep_verify

    store, where, source_options = opened_for_reading(args, command="verify")
    reports = deep_verify(store, where=where, progress=bars, source_storage_options=source_options)
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
    if not reports:
        lines.append("  no assays to verify")
    for report in reports:
        lines.append(
            f"  {report.label}: {'ok' if report.ok else 'FAILED'} "
            f"({report.checked_values:,} values read)"
        )
        lines.extend(f"    - {problem}" for problem in report.problems)
    return Outcome(payload, "\n".join(lines), ExitCode.OK if ok else ExitCode.PROBLEMS)


def cmd_write(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``write INPUT DEST``."""
    from ..remote.locations import given_location
    from ..write.destination_checks import composites_replaceable
    from ..write.writer import write_counts
    from .not_imported import not_counts_line, not_imported_line, not_listed_line

    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    refuse_options_by_name(source_options, command="write")
    source = checked_anndata_input(args.input, args.layer, source_options)
    started = time.perf_counter()
    with composites_replaceable():  # --overwrite replaces one, as composite does
        info = write_counts(
            args.destination,
            source,
            assay=args.assay,
            assay_type=args.assay_type,
            workspace=args.workspace,
            layer=args.layer,
            mem_budget=mem_budget_option(args.mem_budget),
            overwrite=args.overwrite,
            progress=bars,
            fill_missing=args.fill_missing,
            make_unique=args.make_unique,
            storage_options=storage_options,
            source_storage_options=source_options,
        )
    seconds = time.perf_counter() - started
    payload = {
        "location": str(info.location),
        "assay": info.assay,
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "datasetFingerprint": info.dataset_fingerprint,
        "countsFingerprint": info.counts_fingerprint,
        # null: the AnnData's elements could not be listed (not: nothing left out)
        "notImported": None if info.not_imported is None else list(info.not_imported),
        "seconds": round(seconds, 3),
    }
    if info.not_imported is None:
        bars.write_line(not_listed_line("write", args.input))
    elif info.not_imported:  # on stderr, piped or not: what stayed behind, and how to keep it
        bars.write_line(not_imported_line("write", args.input, info.not_imported))
    matrix = "X" if args.layer is None else f"layer {args.layer}"
    not_counts = not_counts_line(
        "write", args.input, matrix, str(info.dtype), info.not_imported or ()
    )
    if not_counts is not None:
        bars.write_line(not_counts)
    text = (
        f"wrote {info.shape[0]:,} cells x {info.shape[1]:,} features ({info.dtype}) of {args.input} "
        f"to {given_location(args.destination)} in {seconds:.2f} s; dataset "
        f"{info.dataset_fingerprint}"
    )
    return Outcome(payload, text)


def _per_source(
    values: list[str], sources: Mapping[str, Any], *, option: str, what: str
) -> dict[str, str]:
    """``--layer NAME=LAYER`` / ``--workspace NAME=WS`` options as a mapping by source."""
    chosen: dict[str, str] = {}
    for value in values:
        name, separator, choice = value.partition("=")
        if not separator or name not in sources:
            raise InputRefusedError(
                f"{option} {value!r} must be NAME={what} with NAME one of the sources "
                f"{list(sources)}"
            )
        if not choice:
            raise InputRefusedError(
                f"{option} {value!r} gives no {what}; write {option} {name}={what}, or leave "
                f"{option} out for source {name!r}"
            )
        if name in chosen:
            # the last one was taken, silently
            raise InputRefusedError(
                f"{option} gives source {name!r} a {what} twice ({chosen[name]!r} and "
                f"{choice!r}); give one"
            )
        chosen[name] = choice
    return chosen


def cmd_composite(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``composite DEST [NAME=]SOURCE...``."""
    from ..composite.create import create_composite
    from ..remote.locations import describe_location
    from ..write.destination_checks import composites_replaceable

    sources = parse_sources(args.sources)
    from ..remote.locations import local_path

    for name, location in sources.items():
        # Local sources are classified up front (a few file reads) for a
        # refusal in the user's terms; a remote source would pay its round
        # trips twice, so create_composite's own binding refuses it instead.
        if local_path(location) is not None:
            require_store(
                location, command=f"composite (source {name})", kinds=("ordinary", "anndata")
            )
    check_sources_differ(args.destination, sources)
    layers = _per_source(args.layer, sources, option="--layer", what="LAYER")
    workspaces = _per_source(args.workspace, sources, option="--workspace", what="WS")
    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = per_source_options(args.source_storage_options, list(sources))
    budget = mem_budget_option(args.mem_budget)
    if args.features is not None and args.features_file is not None:
        # one of them was dropped, silently: the file won
        raise InputRefusedError(
            f"--features {args.features} and --features-file both choose the features; give "
            "one of them (--features-file FILE is --features @FILE)"
        )
    choice: str = "union" if args.features is None else args.features
    features: str | list[str] = choice
    if args.features_file is not None:
        features = _read_lines(
            args.features_file, what="--features-file", form="--features-file FILE"
        )
    elif choice.startswith("@"):
        features = _read_lines(choice[1:], what="--features", form="--features @FILE")
    elif choice not in ("union", "intersection"):
        raise InputRefusedError(
            f"--features {choice!r} is not union, intersection or @FILE (a file of "
            "feature ids, one per line)"
        )
    cells = _cell_ids(args.cells, sources)
    overwrite = _checked_overwrite(args, storage_options)
    started = time.perf_counter()
    with composites_replaceable():
        store = create_composite(
            args.destination,
            sources,
            assay=args.assay,
            features=features,
            cells=cells,
            source_workspaces=workspaces,
            source_layers=layers,
            source_storage_options=source_options,
            storage_options=storage_options,
            mem_budget=budget,
            progress=bars,
            overwrite=overwrite,
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
        f"composite of {plural(len(sources), 'source')} at {payload['location']}: "
        f"{reader.shape[0]:,} cells x {reader.shape[1]:,} features ({reader.dtype}), created in "
        f"{seconds:.2f} s; no counts copied"
    )
    return Outcome(payload, text)


def cmd_mount(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``mount SOURCE DEST``."""
    from ..mount.create import mount_datastore
    from ..remote.locations import describe_location
    from ..write.destination_checks import composites_replaceable

    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    require_store(
        args.source,
        command="mount (source)",
        kinds=("ordinary",),
        storage_options=source_options,
    )
    check_sources_differ(args.destination, args.source)
    overwrite = _checked_overwrite(args, storage_options)
    started = time.perf_counter()
    with composites_replaceable():
        store = mount_datastore(
            args.source,
            args.destination,
            workspace=args.workspace,
            assays=args.assay or None,
            source_storage_options=source_options,
            storage_options=storage_options,
            overwrite=overwrite,
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
        f"mounted {record.location} at {payload['location']} (assays "
        f"{', '.join(payload['assays'])}) in {seconds:.2f} s; analyses write to the target, "
        "source artifacts read through"
    )
    return Outcome(payload, text)


def cmd_repack(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``repack SOURCE DEST``."""
    from ..mount.repack import repack
    from ..remote.locations import describe_location
    from ..write.destination_checks import composites_replaceable

    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    destination_options = json_option(
        args.destination_storage_options, "--destination-storage-options"
    )
    budget = mem_budget_option(args.mem_budget)
    if args.data_only:
        from ..inspection.store_kind import classify_location

        found = classify_location(args.source, storage_options=storage_options)
        if found.kind in ("missing", "h5ad", "file", "empty", "directory", "zarr-array", "anndata"):
            raise InputRefusedError(
                f"{found.words}; repack --data-only rewrites a CyteArc store that does not "
                "open (its counts and tables must be there)"
            )
    else:
        found = require_store(
            args.source,
            command="repack",
            kinds=("ordinary", "mount"),
            storage_options=storage_options,
        )
    refuse_unused_source_options(found.kind, source_options, where=describe_location(args.source))
    check_sources_differ(args.destination, args.source)
    overwrite = _checked_overwrite(args, destination_options)
    started = time.perf_counter()
    with composites_replaceable():
        repack(
            args.source,
            args.destination,
            data_only=args.data_only,
            mem_budget=budget,
            storage_options=storage_options,
            source_storage_options=source_options,
            destination_storage_options=destination_options,
            progress=bars,
            overwrite=overwrite,
        )
    seconds = time.perf_counter() - started
    payload = {
        "source": describe_location(args.source),
        "location": describe_location(args.destination),
        "dataOnly": args.data_only,
        "seconds": round(seconds, 3),
    }
    text = (
        f"repacked {payload['source']} into {payload['location']} in {seconds:.2f} s "
        "(standalone, verified)"
    )
    return Outcome(payload, text)


def cmd_export(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``export STORE OUT``: an AnnData .zarr or .h5ad, streamed."""
    from cytearc_vfs_adapters.anndata_output.export import export_anndata, export_format
    from cytearc_vfs_adapters.anndata_output.export_budget import EXPORT_BUDGET

    from ..remote.locations import given_location, local_path

    try:
        kind = export_format(args.destination)
    except ValueError as exc:
        raise InputRefusedError(str(exc)) from exc
    if kind == "h5ad" and args.zarr_format is not None:
        raise InputRefusedError(
            f"--zarr-format {args.zarr_format} applies to a .zarr OUT only, and "
            f"{args.destination} is an .h5ad (HDF5): leave the option out, or export to a .zarr"
        )
    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    if local_path(args.location) is not None:
        found = require_store(
            args.location, command="export", kinds=("ordinary", "composite", "mount")
        )
        if storage_options:
            raise InputRefusedError(local_store_options(found.where, found.kind))
        refuse_unused_source_options(found.kind, source_options, where=found.where)
    budget = mem_budget_option(args.mem_budget)
    info = export_anndata(
        args.location,
        args.destination,
        args.assay,
        overwrite=args.overwrite,
        workspace=args.workspace,
        storage_options=storage_options,
        source_storage_options=source_options,
        mem_budget=EXPORT_BUDGET if budget is None else budget,
        zarr_format=3 if args.zarr_format is None else args.zarr_format,
        progress=bars,
    )
    payload = {
        "location": info.location,
        "format": info.format,
        "assay": info.assay,
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "nnz": info.nnz,
        "bands": info.bands,
        "bandCells": info.band_cells,
        "membershipColumn": info.membership,
        "seconds": round(info.seconds, 3),
    }
    membership = (
        f"; membership column {info.membership} declared"
        if info.membership
        else "; every cell measured (no membership column)"
    )
    text = (
        f"exported {info.shape[0]:,} cells x {info.shape[1]:,} features ({info.dtype}, "
        f"{info.nnz:,} stored values) of assay {info.assay} to {given_location(args.destination)} "
        f"({info.format}) in {info.seconds:.2f} s, {plural(info.bands, 'band')}{membership}"
    )
    return Outcome(payload, text)


def cmd_demo(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``demo [--directory DIR]``."""
    from .demo import run_demo

    say = None if args.json else print
    started = time.perf_counter()
    location, steps = run_demo(args.directory, progress=bars, say=say)
    payload = {
        "directory": location,
        "kept": args.directory is not None,
        "steps": steps,
        "seconds": round(time.perf_counter() - started, 3),
    }
    # the steps were printed as they ran
    return Outcome(payload, "")


#: What an interrupt leaves behind, for commands that create no destination (in
#: words, or from the command's arguments).
INTERRUPT_NOTES: dict[str, str | Callable[[argparse.Namespace], str]] = {
    "export": "nothing was written: an export is written under a temporary name beside OUT "
    "(removed now) and renamed into place only when complete",
    "array": array_interrupt_note,
    "demo": lambda args: _demo_note(args.directory),
}


def _demo_note(directory: str | None) -> str:
    from .demo import interrupt_note  # numpy and zarr: not for every command's start

    return interrupt_note(directory)


#: Command -> the flag holding the backend options of the destination it creates
#: (the interrupt guard looks at, and removes, a remote destination with them).
DESTINATION_OPTIONS = {
    "composite": "--storage-options",
    "mount": "--storage-options",
    "write": "--storage-options",
    "repack": "--destination-storage-options",
}

#: Command name -> (function, names of the arguments that are destinations it creates).
COMMANDS: dict[str, tuple[Callable[[argparse.Namespace, ProgressBars], Outcome], str | None]] = {
    "demo": (cmd_demo, None),
    "info": (cmd_info, None),
    "verify": (cmd_verify, None),
    "write": (cmd_write, "destination"),
    "composite": (cmd_composite, "destination"),
    "mount": (cmd_mount, "destination"),
    "repack": (cmd_repack, "destination"),
    "artifacts": (cmd_artifacts, None),
    "export": (cmd_export, None),
    "serve": (cmd_serve, None),
    "array": (cmd_array, None),
    "mount-fs": (cmd_mount_fs, None),
    "anndata": (cmd_anndata, None),
}
