"""The ``array`` command: info, resize, promote and recover of any Zarr v3 array."""

from __future__ import annotations

import argparse

from .failures import InputRefusedError
from .outcome import Outcome, plural
from .progress import ProgressBars

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
            f"{plural(resized.moved, 'chunk')} renamed, {resized.dropped} deleted"
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
        f"{plural(promoted.moved, 'chunk')} renamed, bytes unchanged"
    )
    return Outcome(payload, text)
