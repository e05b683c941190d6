"""The ``array`` command: info, resize, promote and recover of any Zarr v3 array."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from .failures import InputRefusedError
from .outcome import Outcome, plural
from .progress import ProgressBars

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from ..arrays.consolidated import ConsolidationReport

__all__ = ["cmd_array"]


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


def _legacy_kind(store: Store, path: str) -> str | None:
    """``array`` or ``group`` for a Zarr v2 node at ``path`` (no ``zarr.json``), else ``None``."""
    from ..format.store_io import get_json

    prefix = f"{path}/" if path else ""
    for name, kind in ((".zarray", "array"), (".zgroup", "group")):
        if get_json(store, prefix + name) is not None:
            return kind
    return None


def _consolidation_text(change: ConsolidationReport) -> str:
    """What became of the consolidated metadata above the array, for the report's text."""
    text = ""
    if change.reconsolidated:
        text += (
            f"; consolidated metadata of {', '.join(change.reconsolidated)} removed while it "
            "ran (it would have hidden the change from zarr) and consolidated again"
        )
    for group, reason in change.not_reconsolidated:
        text += (
            f"; consolidated metadata of {group} removed while it ran, NOT consolidated again "
            f"({reason}): the group is valid without it; once no other operation below it is "
            f"unfinished, run zarr.consolidate_metadata(store, path={group.strip('/')!r})"
        )
    return text


def _consolidation_payload(change: ConsolidationReport) -> dict[str, object]:
    return {
        "unconsolidated": list(change.unconsolidated),
        "reconsolidated": list(change.reconsolidated),
        "notReconsolidated": [
            {"group": group, "reason": reason} for group, reason in change.not_reconsolidated
        ],
    }


def _not_stored(store: Store, path: str, location: str) -> str:
    """The remedy for a path with no node: "check the path", or, for the count arrays of
    a composite or a mount (``info`` lists them, and they are not stored there), why."""

    from ..composite.records import COMPOSITE_ATTR
    from ..format.store_io import get_json
    from ..mount.records import MATRIX_SOURCE_ATTR

    if path.rpartition("/")[2] not in ("counts", "countsT"):
        return "check the path"
    root = get_json(store, "zarr.json", where=location)
    attributes = root.get("attributes", {}) if isinstance(root, dict) else {}
    if COMPOSITE_ATTR in attributes:
        kind, origin = "a composite", "computed from its sources when read"
    elif MATRIX_SOURCE_ATTR in attributes:
        kind, origin = "a mounted target", "its source's, read through"
    else:
        return "check the path"
    return (
        f"{location} is {kind}, whose count arrays are not stored in it ({origin}); "
        f"cytearc-vfs info {shlex.quote(location)} describes them, and zarr reads them "
        "from cv.open_store(LOCATION)"
    )


def array_interrupt_note(args: argparse.Namespace) -> str:
    """What an interrupted ``array`` command leaves, with the command that finishes it.

    >>> array_interrupt_note(argparse.Namespace(array_command="resize", location="a b.zarr",
    ...                                         path="x"))
    "a resize under way is journaled: if the array reports an unfinished operation, finish it with: cytearc-vfs array recover 'a b.zarr' x"
    """

    action = getattr(args, "array_command", None)
    if action not in ("resize", "promote", "recover"):
        return "nothing was written"
    path = (getattr(args, "path", "") or "").strip("/") or "/"
    command = f"cytearc-vfs array recover {shlex.quote(args.location)} {shlex.quote(path)}"
    if action == "recover":
        return f"the recovery resumes where it stopped: run {command} again"
    return (
        f"a {action} under way is journaled: if the array reports an unfinished "
        f"operation, finish it with: {command}"
    )


def _require_local_store(location: str, action: str) -> None:
    """Refuse a local ``location`` that is no directory: a missing one (which a
    writable store would create, and leave behind), a file or an ``.h5ad``."""
    from ..inspection.store_kind import classify_location
    from ..remote.locations import local_path

    path = local_path(location)
    if path is None or path.is_dir():
        return
    found = classify_location(location)
    remedy = {
        "missing": "check the path",
        "h5ad": f"cytearc-vfs anndata ls {shlex.quote(location)} lists its elements",
    }.get(found.kind, "give the directory of a Zarr store")
    raise InputRefusedError(f"{found.words}; array {action} needs a Zarr store: {remedy}")


def cmd_array(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``array info | resize | promote | recover LOCATION [PATH]``."""
    import zarr

    from ..arrays import hierarchy, info, recover
    from ..arrays.documents import MARKER_FIELD
    from ..arrays.promotion import promote_array
    from ..arrays.resizing import resize_array
    from ..arrays.summary import unfinished_below
    from ..errors import IncompleteStoreError, RecordShapeError
    from ..format.store_contents import list_root_once
    from ..format.store_io import get_json
    from ..remote.locations import describe_location, open_location
    from .inputs import json_option

    action, path = args.array_command, args.path.strip("/")
    where = f"{describe_location(args.location)} {path or '/'}"
    options = json_option(args.storage_options, "--storage-options")
    _require_local_store(args.location, action)
    store = open_location(args.location, read_only=action == "info", storage_options=options)
    node = "zarr.json" if not path else f"{path}/zarr.json"
    document = get_json(store, node, where=where)
    if document is None:
        legacy = _legacy_kind(store, path)
        # an object store: a missing bucket raises its own error here, and a location
        # under which nothing is stored does not exist (it is no node's absence)
        if legacy is None and list_root_once(store) is False:
            raise InputRefusedError(
                f"{describe_location(args.location)} does not exist (nothing is stored there); "
                f"array {action} needs a Zarr store: check the path"
            )
        if legacy is None:
            raise FileNotFoundError(
                f"{where}: no Zarr node here (no {node}, .zarray or .zgroup); "
                + _not_stored(store, path, args.location)
            )
        if action == "info" and legacy == "group":
            tree = hierarchy(zarr.open_group(store, path=path, mode="r", zarr_format=2))
            return Outcome({"location": where, "hierarchy": tree.to_dict()}, str(tree))
        if action == "info":
            summary = info(zarr.open_array(store, path=path, mode="r", zarr_format=2))
            return Outcome({"location": where, "array": summary.to_dict()}, str(summary))
        if action == "recover":
            return Outcome({"location": where, "finished": False}, f"{where}: nothing to finish")
        raise InputRefusedError(
            f"{where} is a Zarr v2 {legacy}; array {action} works on Zarr v3 arrays: convert it "
            "first (for example by copying it with zarr-python 3)"
        )
    is_group = isinstance(document, dict) and document.get("node_type") == "group"
    if action == "info" and is_group:
        tree = hierarchy(zarr.open_group(store, path=path, mode="r"))
        return Outcome({"location": where, "hierarchy": tree.to_dict()}, str(tree))
    if action == "recover" and is_group:
        # recover finishes one array; "nothing to finish" here hid the arrays below
        unfinished = unfinished_below(store, path)
        if unfinished:
            commands = "; ".join(
                f"cytearc-vfs array recover {shlex.quote(args.location)} {shlex.quote(name)}"
                for name in unfinished
            )
            raise InputRefusedError(
                f"{where} is a group; array recover finishes one array, and "
                f"{plural(len(unfinished), 'array')} below this group "
                f"{'has' if len(unfinished) == 1 else 'have'} an unfinished resize or promote: "
                f"{', '.join(unfinished)}. If no other process is changing them, finish each "
                f"with: {commands}"
            )
        return Outcome(
            {"location": where, "finished": False},
            f"{where}: a group with no unfinished array below it; nothing to finish",
        )
    if action == "recover":
        finished = recover(store, path)
        text = f"{where}: " + (
            "finished the interrupted operation" if finished else "nothing to finish"
        )
        return Outcome({"location": where, "finished": finished}, text)
    if is_group:
        raise InputRefusedError(
            f"{where} is a group, not an array; give the path of an array in it "
            f"(cytearc-vfs array info {shlex.quote(args.location)} {shlex.quote(path or '/')} lists them)"
        )
    if isinstance(document, dict) and MARKER_FIELD in document:
        # no recovery here: the operation may be another process's, still running
        raise IncompleteStoreError(
            f"{where}: an array operation is under way or was interrupted; if no other "
            f"process is changing the array, finish it with: cytearc-vfs array recover "
            f"{args.location} {path or '/'}"
        )
    try:
        array = zarr.open_array(store, path=path, mode="r" if action == "info" else "r+")
    except (ValueError, TypeError, KeyError) as exc:
        # zarr's own words name neither the array nor the file
        raise RecordShapeError(
            f"{where}: {node} is not a valid Zarr v3 array document ({exc}); restore it "
            "from a copy, or write the array again"
        ) from exc
    if action == "info":
        summary = info(array)
        return Outcome({"location": where, "array": summary.to_dict()}, str(summary))
    # resize_array and promote_array refuse a journal without a marker (an
    # operation that has just started) themselves
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
            **_consolidation_payload(resized),
        }
        text = (
            f"resized {where}: {resized.shape_before} -> {resized.shape_after} (low "
            f"{list(resized.low)} in whole chunks, high {list(resized.high)}); "
            f"{plural(resized.moved, 'chunk')} renamed, {resized.dropped} deleted"
        ) + _consolidation_text(resized)
        return Outcome(payload, text)
    promoted = promote_array(array, args.dimension, args.length, name=args.name)
    payload = {
        "location": where,
        "shapeBefore": list(promoted.shape_before),
        "shapeAfter": list(promoted.shape_after),
        "renamed": promoted.moved,
        "staged": promoted.staged,
        **_consolidation_payload(promoted),
    }
    text = (
        f"promoted {where}: {promoted.shape_before} -> {promoted.shape_after}; "
        f"{plural(promoted.moved, 'chunk')} renamed, bytes unchanged"
    ) + _consolidation_text(promoted)
    return Outcome(payload, text)
