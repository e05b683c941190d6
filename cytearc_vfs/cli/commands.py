"""What each ``cytearc-vfs`` command does once its arguments are parsed.

Each command first checks what its locations hold (:mod:`cytearc_vfs.inspection.store_kind`)
and refuses anything that is not the kind of store it needs, naming what it
found and what to run instead. Commands return a JSON-able payload and the
text printed for people; :mod:`cytearc_vfs.cli.main` prints one or the other.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .failures import ExitCode, InputRefusedError
from .progress import ProgressBars

__all__ = ["COMMANDS", "INTERRUPT_NOTES", "Outcome", "parse_sources"]


@dataclass(slots=True)
class Outcome:
    """What a command did: the JSON payload, the text, and the exit code."""

    payload: dict[str, Any]
    text: str
    code: ExitCode = ExitCode.OK
    destination: str | None = field(default=None)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


_IMPORT_HINT = "import it with: cytearc-vfs write {where} OUT.zarr"


def require_store(
    location: str,
    *,
    command: str,
    kinds: Sequence[str],
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Classify ``location`` and refuse it unless it is one of ``kinds``."""
    from ..inspection.store_kind import classify_location

    found = classify_location(location, storage_options=storage_options)
    if found.kind in kinds:
        return found
    wanted = {
        ("ordinary",): "an ordinary CyteArc store",
        ("ordinary", "mount"): "an ordinary CyteArc store or a mount",
        ("ordinary", "composite", "mount"): "a CyteArc store (ordinary, composite or mount)",
    }[tuple(kinds)]
    remedy = {
        "missing": "check the path",
        "h5ad": _IMPORT_HINT.format(where=location),
        "anndata": _IMPORT_HINT.format(where=location),
        "file": "give the directory of a CyteArc store",
        "empty": "give the directory of a CyteArc store, or write one there",
        "directory": "give the directory of a CyteArc store (it holds zarr.json)",
        "zarr-array": "give the store's root directory, not one of its arrays",
        "zarr-group": "write counts into a store with cytearc-vfs write or cytearc_vfs.write_counts",
        "ordinary": "give one of those instead",
        "composite": "composites do not nest, and a composite's counts live in its sources; "
        "give the sources themselves",
        "mount": "mounts do not chain; make it standalone first with: "
        f"cytearc-vfs repack {location} OUT.zarr",
    }[found.kind]
    raise InputRefusedError(f"{found.words}; {command} needs {wanted}: {remedy}")


def _clear_for_overwrite(args: argparse.Namespace) -> None:
    """Make room at ``args.destination`` for a writer that has no overwrite of its own.

    An empty or absent destination needs nothing. With ``overwrite`` a
    composite, an unfinished destination, or a store the writers may replace
    (spec, "Writer destinations") is removed; a mount target is refused,
    because analyses depend on it.
    """
    from ..inspection.store_kind import classify_location
    from ..write.destinations import check_destination
    from .interrupts import DestinationGuard

    destination = args.destination
    guard: DestinationGuard = args.destination_guard
    if not guard.existed:
        return
    if not args.overwrite:
        raise FileExistsError(
            f"destination {guard.where} already holds a store or files; give --overwrite to "
            "replace a CyteArc store this layer wrote, or choose another destination"
        )
    found = classify_location(destination)
    if found.kind == "mount":
        raise FileExistsError(
            f"{found.words}; its analyses depend on it, so --overwrite does not replace it. "
            "Delete it yourself if you mean to"
        )
    if found.kind != "composite":
        check_destination(destination, overwrite=True)
    # from here on the destination is this command's: an interrupt removes it
    guard.existed = False
    guard.discard()


def _check_sources_differ(destination: str, sources: Mapping[str, str]) -> None:
    from ..remote.locations import canonical_location

    target = canonical_location(destination)
    for name, location in sources.items():
        if canonical_location(location) == target:
            raise InputRefusedError(
                f"source {name!r} is the destination {target}; choose another destination"
            )


def parse_sources(values: Sequence[str]) -> dict[str, str]:
    """``NAME=LOCATION`` or ``LOCATION`` arguments as an ordered name -> location mapping."""
    from ..composite.create import source_name_of

    sources: dict[str, str] = {}
    for value in values:
        name, sep, location = value.partition("=")
        if not sep or "/" in name or ":" in name:
            # no NAME= (an "=" inside a path or URL is part of it)
            location = value
            name = source_name_of(value)
        if name in sources:
            raise InputRefusedError(
                f"two sources are named {name!r}; name them with NAME=LOCATION "
                f"(e.g. {name}_1={location})"
            )
        sources[name] = location
    return sources


def _read_lines(path: str, *, what: str) -> list[str]:
    file = Path(path)
    if not file.is_file():
        raise InputRefusedError(
            f"{what} file {path} does not exist; give a text file with one id per line"
        )
    return [line.strip() for line in file.read_text().splitlines() if line.strip()]


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
        chosen[name] = _read_lines(path, what="--cells")
    return chosen


def cmd_info(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``info LOCATION``."""
    from ..inspection.describe import describe_store
    from ..remote.locations import describe_location, open_location

    require_store(args.location, command="info", kinds=("ordinary", "composite", "mount"))
    where = describe_location(args.location)
    description = describe_store(open_location(args.location, read_only=True), where=where)
    if description["kind"] == "composite":
        shape = description["shape"]
        lines = [
            f"{where}: composite of {_plural(len(description['sources']), 'source')}, assay "
            f"{description['assay']}: {shape[0]} cells x {shape[1]} features "
            f"({description['dtype']}), virtual arrays {', '.join(description['arrays'])}"
        ]
        lines += [f"  source {s['name']}: {s['location']}" for s in description["sources"]]
        return Outcome(description, "\n".join(lines))
    if description["kind"] == "mount":
        record = description["matrixSource"]
        lines = [
            f"{where}: mounted target of {record['location']}"
            + (f" (workspace {record['workspace']})" if record["workspace"] else "")
        ]
        lines += [
            f"  {name}: dataset {entry['datasetFingerprint']}, "
            + ("needs the source's countsT" if entry["requiresTranspose"] else "counts only")
            for name, entry in record["assays"].items()
        ]
        return Outcome(description, "\n".join(lines))
    lines = [f"{where}: ordinary CyteArc store (Zarr v{description['zarrFormat']})"]
    for assay in description["assays"]:
        scope = f"{assay['workspace']}/" if assay["workspace"] else ""
        layout = assay["layout"]
        lines.append(
            f"  {scope}{assay['assay']} ({assay['assayType']}): {assay['shape'][0]} cells x "
            f"{assay['shape'][1]} features, {assay['dtype']}, countsT: "
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
    return Outcome(description, "\n".join(lines))


def cmd_verify(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``verify LOCATION``."""
    from ..inspection.deep_verify import deep_verify
    from ..remote.locations import describe_location, open_location

    require_store(args.location, command="verify", kinds=("ordinary", "composite", "mount"))
    where = describe_location(args.location)
    store = open_location(args.location, read_only=True)
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
    if not reports:
        lines.append("  no assays to verify")
    for report in reports:
        lines.append(
            f"  {report.label}: {'ok' if report.ok else 'FAILED'} "
            f"({report.checked_values:,} values read)"
        )
        lines.extend(f"    - {problem}" for problem in report.problems)
    return Outcome(payload, "\n".join(lines), ExitCode.OK if ok else ExitCode.PROBLEMS)


def _anndata_input(location: str, layer: str | None) -> str:
    """Check that ``location`` is an AnnData container holding ``layer``; the writer then
    streams it band by band (``X`` is never loaded)."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer, NotAnnDataError

    from ..inspection.store_kind import classify_location

    found = classify_location(location)
    # a root without attributes may be AnnData of anndata 0.7: the container decides
    if found.kind not in ("h5ad", "anndata", "zarr-group"):
        remedy = (
            "it already is one: copy it with cytearc-vfs repack"
            if found.is_cytearc
            else "give an .h5ad file or an AnnData Zarr store"
        )
        raise InputRefusedError(f"{found.words}; write imports AnnData: {remedy}")
    try:
        container = AnnDataContainer.open(location)
    except NotAnnDataError as exc:
        raise InputRefusedError(str(exc)) from exc
    try:
        layers = container.layers()
    finally:
        container.close()
    if layer is not None and layer not in layers:
        raise InputRefusedError(
            f"{found.where} has no layer {layer!r}; its layers are: "
            f"{', '.join(layers) or 'none'} (leave out --layer to use X)"
        )
    return location


def cmd_write(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``write INPUT DEST``."""
    from ..write.writer import write_counts

    source = _anndata_input(args.input, args.layer)
    started = time.perf_counter()
    info = write_counts(
        args.destination,
        source,
        assay=args.assay,
        assay_type=args.assay_type,
        workspace=args.workspace,
        layer=args.layer,
        mem_budget=args.mem_budget,
        overwrite=args.overwrite,
        progress=bars,
    )
    seconds = time.perf_counter() - started
    payload = {
        "location": str(info.location),
        "assay": info.assay,
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "datasetFingerprint": info.dataset_fingerprint,
        "countsFingerprint": info.counts_fingerprint,
        "seconds": round(seconds, 3),
    }
    text = (
        f"wrote {info.shape[0]} cells x {info.shape[1]} features ({info.dtype}) of "
        f"{args.input} to {info.location} in {seconds:.2f} s; dataset "
        f"{info.dataset_fingerprint}"
    )
    return Outcome(payload, text)


def cmd_composite(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``composite DEST [NAME=]SOURCE...``."""
    from ..composite.create import create_composite
    from ..remote.locations import describe_location

    sources = parse_sources(args.sources)
    from ..remote.locations import local_path

    for name, location in sources.items():
        # Local sources are classified up front (a few file reads) for a
        # refusal in the user's terms; a remote source would pay its round
        # trips twice, so create_composite's own binding refuses it instead.
        if local_path(location) is not None:
            require_store(location, command=f"composite (source {name})", kinds=("ordinary",))
    _check_sources_differ(args.destination, sources)
    choice: str = args.features
    features: str | list[str] = choice
    if args.features_file:
        features = _read_lines(args.features_file, what="--features-file")
    elif choice.startswith("@"):
        features = _read_lines(choice[1:], what="--features")
    elif choice not in ("union", "intersection"):
        raise InputRefusedError(
            f"--features {choice!r} is not union, intersection or @FILE (a file of "
            "feature ids, one per line)"
        )
    cells = _cell_ids(args.cells, sources)
    _clear_for_overwrite(args)
    started = time.perf_counter()
    store = create_composite(
        args.destination,
        sources,
        assay=args.assay,
        features=features,
        cells=cells,
        mem_budget=args.mem_budget,
        progress=bars,
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
        f"composite of {_plural(len(sources), 'source')} at {payload['location']}: "
        f"{reader.shape[0]} cells x {reader.shape[1]} features ({reader.dtype}), created in "
        f"{seconds:.2f} s; no counts copied"
    )
    return Outcome(payload, text)


def cmd_mount(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``mount SOURCE DEST``."""
    from ..mount.create import mount_datastore
    from ..remote.locations import describe_location

    require_store(args.source, command="mount (source)", kinds=("ordinary",))
    _check_sources_differ(args.destination, {"source": args.source})
    _clear_for_overwrite(args)
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
        f"mounted {record.location} at {payload['location']} (assays "
        f"{', '.join(payload['assays'])}) in {seconds:.2f} s; analyses write to the target, "
        "source artifacts read through"
    )
    return Outcome(payload, text)


def cmd_repack(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``repack SOURCE DEST``."""
    from ..mount.repack import repack
    from ..remote.locations import describe_location

    if args.data_only:
        from ..inspection.store_kind import classify_location

        found = classify_location(args.source)
        if found.kind in ("missing", "h5ad", "file", "empty", "directory", "zarr-array", "anndata"):
            raise InputRefusedError(
                f"{found.words}; repack --data-only rewrites a CyteArc store that does not "
                "open (its counts and tables must be there)"
            )
    else:
        require_store(args.source, command="repack", kinds=("ordinary", "mount"))
    _check_sources_differ(args.destination, {"source": args.source})
    _clear_for_overwrite(args)
    started = time.perf_counter()
    repack(
        args.source,
        args.destination,
        data_only=args.data_only,
        mem_budget=args.mem_budget,
        progress=bars,
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


def cmd_artifacts(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``artifacts LOCATION``."""
    from ..artifacts.catalog import describe_artifacts
    from ..remote.locations import describe_location

    require_store(args.location, command="artifacts", kinds=("ordinary", "composite", "mount"))
    where = describe_location(args.location)
    found = describe_artifacts(args.location)
    if args.kind:
        found = [entry for entry in found if entry["kind"] == args.kind]
    lines = [
        f"{where}: {_plural(len(found), 'complete artifact')}"
        + (f" of kind {args.kind}" if args.kind else "")
    ]
    for entry in found:
        if entry["arrays"] is None:
            arrays = f"arrays unreadable ({entry['error']})"
        else:
            arrays = (
                ", ".join(
                    f"{a['name']} {'x'.join(map(str, a['shape']))} {a['dtype']}"
                    for a in entry["arrays"]
                )
                or "no arrays"
            )
        lines.append(f"  {entry['path']} ({entry['kind']}, {entry['created_at']}): {arrays}")
    return Outcome({"location": where, "artifacts": found}, "\n".join(lines))


def _json_option(value: str | None, option: str) -> dict[str, Any] | None:
    """A JSON object given inline or as ``@FILE``; the message never echoes it (credentials)."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        source = Path(value[1:])
        if not source.is_file():
            raise InputRefusedError(f"{option} file {source} does not exist; give a JSON file")
        text = source.read_text()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputRefusedError(
            f"{option} is not JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); give a "
            "JSON object, or @FILE naming a file that holds one"
        ) from None
    if not isinstance(parsed, dict):
        raise InputRefusedError(f"{option} must be a JSON object, not {type(parsed).__name__}")
    return parsed


def cmd_serve(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``serve LOCATION [--host H] [--port N]``: until SIGINT or SIGTERM."""
    import logging
    import sys

    from cytearc_vfs_adapters.serve.server import ServeOptions, StoreServer

    from ..read.opening import open_store
    from ..remote.locations import describe_location, local_path
    from .interrupts import Interrupted, begin_cleanup

    if not 0 <= args.port <= 65535:
        raise InputRefusedError(
            f"--port {args.port} is not a port (0 to 65535; 0 picks a free one)"
        )
    storage_options = _json_option(args.storage_options, "--storage-options")
    source_options = _json_option(args.source_storage_options, "--source-storage-options")
    if local_path(args.location) is not None:
        # a remote location is refused by open_store itself (it may need the options above)
        require_store(args.location, command="serve", kinds=("ordinary", "composite", "mount"))
    where = describe_location(args.location)
    store = open_store(
        args.location,
        mode="r",
        storage_options=storage_options,
        source_storage_options=source_options,
    )
    # Errors met while serving go on: one line each on stderr, in the command's voice.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("cytearc-vfs serve: %(message)s"))
    server_log = logging.getLogger("cytearc_vfs_adapters.serve")
    server_log.addHandler(handler)
    try:
        server = StoreServer.start(
            store,
            host=args.host,
            port=args.port,
            options=ServeOptions(allow_origin=args.allow_origin),
        )
        try:
            print(f"serving {server.url}", flush=True)
            if not server.loopback:
                print(
                    f"cytearc-vfs serve: warning: {server.host} is not a loopback address: anyone "
                    f"who reaches this machine on port {server.port} reads {where}, with no "
                    "authentication and no encryption; where you can, serve on 127.0.0.1 and "
                    "reach it through a tunnel (ssh -L)",
                    file=sys.stderr,
                    flush=True,
                )
            server.wait()
        except Interrupted:
            begin_cleanup()  # a second signal must not cut the shutdown short
            server.close()
            raise
        finally:
            server.close()
    finally:
        server_log.removeHandler(handler)
        store.close()
    stats = server.stats()
    payload = {"location": where, "url": server.url, "requests": stats.requests}
    return Outcome(payload, f"stopped serving {where} ({_plural(stats.requests, 'request')})")


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


def _changes(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise InputRefusedError(
            f"{option} {text!r} is not comma-separated integers (write {option}=-2,0 for "
            "negative values)"
        ) from None


def cmd_array(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``array info | resize | promote | recover LOCATION PATH``."""
    import zarr

    from ..arrays import hierarchy, info, recover
    from ..arrays.promotion import promote_array
    from ..arrays.resizing import resize_array
    from ..format.store_io import get_json
    from ..remote.locations import describe_location, open_location

    action, path = args.array_command, args.path.strip("/")
    where = f"{describe_location(args.location)} {path or '/'}"
    store = open_location(args.location, read_only=action == "info")
    node = "zarr.json" if not path else f"{path}/zarr.json"
    document = get_json(store, node, where=where)
    if document is None:
        raise FileNotFoundError(f"{where}: no Zarr v3 node here (no {node}); check the path")
    if action == "info":
        if isinstance(document, dict) and document.get("node_type") == "group":
            tree = hierarchy(zarr.open_group(store, path=path, mode="r"))
            return Outcome({"location": where, "hierarchy": tree.to_dict()}, str(tree))
        if isinstance(document, dict) and "cytearc_unfinished_operation" in document:
            from ..errors import IncompleteStoreError

            raise IncompleteStoreError(
                f"{where}: an array operation did not finish; finish it with: cytearc-vfs "
                f"array recover {args.location} {path}"
            )
        summary = info(zarr.open_array(store, path=path, mode="r"))
        return Outcome({"location": where, "array": summary.to_dict()}, str(summary))
    if action == "recover":
        finished = recover(store, path)
        text = f"{where}: " + (
            "finished the interrupted operation" if finished else "nothing to finish"
        )
        return Outcome({"location": where, "finished": finished}, text)
    recover(store, path)  # an interrupted operation first: the array opens only then
    array = zarr.open_array(store, path=path, mode="r+")
    if action == "resize":
        resized = resize_array(array, _changes(args.low, "--low"), _changes(args.high, "--high"))
        payload = {
            "location": where,
            "shapeBefore": list(resized.shape_before),
            "shapeAfter": list(resized.shape_after),
            "lowApplied": list(resized.low),
            "high": list(resized.high),
            "renamed": resized.moved,
            "deleted": resized.dropped,
            "edgeChunksRead": resized.edge_chunks,
        }
        text = (
            f"resized {where}: {resized.shape_before} -> {resized.shape_after} (low "
            f"{list(resized.low)} in whole chunks, high {list(resized.high)}); "
            f"{_plural(resized.moved, 'chunk')} renamed, {resized.dropped} deleted"
        )
        return Outcome(payload, text)
    promoted = promote_array(array, args.dimension, args.length)
    payload = {
        "location": where,
        "shapeBefore": list(promoted.shape_before),
        "shapeAfter": list(promoted.shape_after),
        "renamed": promoted.moved,
        "staged": promoted.staged,
    }
    text = (
        f"promoted {where}: {promoted.shape_before} -> {promoted.shape_after}; "
        f"{_plural(promoted.moved, 'chunk')} renamed, bytes unchanged"
    )
    return Outcome(payload, text)


def _check_mountpoint(mountpoint: str) -> None:
    from cytearc_vfs_adapters.fuse.mounting import is_mounted

    path = Path(mountpoint)
    if not path.exists():
        raise FileNotFoundError(
            f"mount point {mountpoint} does not exist; create the directory first (mkdir {mountpoint})"
        )
    if not path.is_dir():
        raise NotADirectoryError(f"mount point {mountpoint} is not a directory; give a directory")
    if is_mounted(path):
        raise InputRefusedError(
            f"{path.resolve()} is a mount point already; unmount it first "
            f"(fusermount3 -u {mountpoint}) or choose another directory"
        )


def cmd_mount_fs(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``mount-fs LOCATION MOUNTPOINT``: serve until SIGINT, SIGTERM or an unmount."""
    import signal
    import sys

    from cytearc_vfs_adapters.fuse.mounting import FuseMount, check_fuse
    from cytearc_vfs_adapters.fuse.tree import StoreTree

    from ..read.opening import open_store
    from ..remote.locations import describe_location
    from .interrupts import Interrupted, also_interrupted_by, begin_cleanup

    storage_options = _json_option(args.storage_options, "--storage-options")
    source_options = _json_option(args.source_storage_options, "--source-storage-options")
    require_store(
        args.location,
        command="mount-fs",
        kinds=("ordinary", "composite", "mount"),
        storage_options=storage_options,
    )
    _check_mountpoint(args.mountpoint)
    binding = check_fuse()
    where = describe_location(args.location)
    store = open_store(
        args.location,
        mode="r",
        storage_options=storage_options,
        source_storage_options=source_options,
    )
    mounted = FuseMount(StoreTree(store), args.mountpoint, allow_other=args.allow_other)
    started = time.perf_counter()
    ended = "unmounted from elsewhere"
    # SIGHUP (the terminal closed) stops it like SIGINT and SIGTERM; left to
    # libfuse, its handler would mark the session ended without waking it
    try:
        with also_interrupted_by(signal.SIGHUP):
            try:
                mounted.start(binding)
                # the first line, flushed at once: scripts wait for it before reading
                print(
                    f"mounted {where} at {mounted.mountpoint}",
                    file=sys.stderr if args.json else sys.stdout,
                    flush=True,
                )
                mounted.wait()
            except Interrupted as interrupt:
                # the way this command is meant to end: unmount, report, exit 0
                begin_cleanup()
                ended = signal.Signals(interrupt.signum).name
            finally:
                done = mounted.stop()
    finally:
        store.close()
    if mounted.failure is not None:
        raise OSError(
            f"the file system at {mounted.mountpoint} stopped with an error "
            f"({type(mounted.failure).__name__}: {mounted.failure}); {done}"
        )
    seconds = time.perf_counter() - started
    payload = {
        "location": where,
        "mountpoint": mounted.mountpoint,
        "ended": ended,
        "unmount": done,
        "computedChunks": mounted.operations.computed_values,
        "seconds": round(seconds, 3),
    }
    text = (
        f"{done} {mounted.mountpoint} ({ended}) after {seconds:.1f} s; "
        f"{_plural(mounted.operations.computed_values, 'value')} computed for reading"
    )
    return Outcome(payload, text)


def _shape_text(shape: Sequence[int] | None) -> str:
    if shape is None:
        return ""
    return " x ".join(str(n) for n in shape) if shape else "scalar"


def cmd_anndata(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``anndata ls PATH``: every element of an AnnData container."""
    from cytearc_vfs_adapters.anndata import AnnDataContainer, NotAnnDataError

    try:
        container = AnnDataContainer.open(
            args.location,
            storage_options=_json_option(args.storage_options, "--storage-options"),
        )
    except NotAnnDataError as exc:
        raise InputRefusedError(str(exc)) from exc
    try:
        elements = container.elements()
        shape = container.shape
        storage = f"Zarr v{container.zarr_format}" if container.storage == "zarr" else "HDF5 (h5ad)"
        where = container.where
    finally:
        container.close()
    legacy = sum(1 for element in elements if element.legacy)
    awkward = sum(1 for element in elements if element.encoding_type == "awkward-array")
    unread = sum(1 for element in elements if element.note.startswith("not read"))
    payload = {
        "location": where,
        "storage": container.storage,
        "zarrFormat": container.zarr_format,
        "shape": list(shape),
        "elements": [element.to_dict() for element in elements],
        "legacyElements": legacy,
        "awkwardArrays": awkward,
        "unreadableElements": unread,
    }
    extras = [f"{legacy} legacy"]
    if awkward:
        extras.append(f"{_plural(awkward, 'awkward array')} reported, not read")
    if unread:
        extras.append(f"{unread} not readable here")
    lines = [
        f"{where}: AnnData ({storage}), {shape[0]} obs x {shape[1]} var, "
        f"{_plural(len(elements), 'element')} ({', '.join(extras)})"
    ]
    rows = [
        (
            "/" + element.path,
            f"{element.encoding_type} {element.encoding_version}",
            _shape_text(element.shape),
            ("legacy" + ("" if element.declared else ", inferred")) if element.legacy else "",
            element.note,
        )
        for element in elements
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        lines.append("  " + "  ".join(cells).rstrip())
    return Outcome(payload, "\n".join(lines))


#: What an interrupt leaves behind, for commands that create no destination.
INTERRUPT_NOTES = {
    "array": "a resize or promote under way is journaled: the next cytearc-vfs array command "
    "on that array (or cytearc-vfs array recover) finishes it",
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
    "serve": (cmd_serve, None),
    "array": (cmd_array, None),
    "mount-fs": (cmd_mount_fs, None),
    "anndata": (cmd_anndata, None),
}
