"""The ``artifacts`` command: list a store's artifacts, or its unpublished groups
(``--incomplete``), and remove one of those (``--remove-incomplete PATH``)."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from ..errors import SourceUnavailableError
from .failures import InputRefusedError, classify_failure
from .inputs import checked_for_reading, viewed_for_reading
from .outcome import Outcome, plural
from .progress import ProgressBars

if TYPE_CHECKING:
    from ..artifacts.incomplete import IncompleteArtifact

__all__ = ["cmd_artifacts"]


def cmd_artifacts(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``artifacts LOCATION [--kind K] [--incomplete | --remove-incomplete PATH]``."""
    if args.incomplete and args.remove_incomplete is not None:
        raise InputRefusedError(
            "--incomplete lists the unpublished groups and --remove-incomplete removes one: "
            "give one of them"
        )
    if args.remove_incomplete is not None and args.kind:
        raise InputRefusedError("--kind filters a listing; --remove-incomplete takes a path alone")
    if args.kind is not None:
        from ..format.paths import check_name

        # no artifact has a kind that is no name: listing none of them said nothing wrong
        try:
            check_name(args.kind, what="--kind")
        except ValueError as exc:
            raise InputRefusedError(f"{exc} (a kind such as pca or normalized)") from None
    if args.incomplete or args.remove_incomplete is not None:
        where, storage_options, _ = checked_for_reading(args, command="artifacts")
        return _incomplete(args, where, storage_options)
    # the listing reads through the view the check read the location through: each
    # document and listing once for the command (on object storage, one request each)
    view, where, storage_options, source_options = viewed_for_reading(args, command="artifacts")
    return _complete(args, view, where, storage_options, source_options, bars)


def _complete(
    args: argparse.Namespace,
    view: Any,
    where: str,
    storage_options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
    bars: ProgressBars,
) -> Outcome:
    from ..artifacts.catalog import describe_artifacts
    from ..mount.store import MountStore
    from ..read.opening import opened_store

    try:
        store = opened_store(view, where=where, source_storage_options=source_options)
    except SourceUnavailableError as exc:
        # a mount whose source is gone or unreadable: its own artifacts are still
        # there, and are listed as such, never as the whole listing
        return _target_alone(args, where, storage_options, exc, bars)
    # a mount's listing says which of its stores holds each artifact (the mount
    # resolves it now: no record says it), and which source it is mounted from
    mount_source = store.record.location if isinstance(store, MountStore) else None
    try:
        found = describe_artifacts(store, where=where)
    finally:
        store.close()  # a remote source's cache directory goes with it
    others = ""
    if args.kind:
        kinds = sorted({str(entry["kind"]) for entry in found})
        found = [entry for entry in found if entry["kind"] == args.kind]
        if not found and kinds:
            # a misspelt kind (gene_mean for gene_means) listed nothing and said no more
            others = f" (its kinds: {', '.join(kinds)})"
    lines = [
        f"{where}: {plural(len(found), 'complete artifact')}"
        + (f" of kind {args.kind}" if args.kind else "")
        + others
        + _held_summary(found, mount_source)
    ]
    lines += _entry_lines(found)
    return Outcome(
        {
            "location": where,
            "mount_source": mount_source,
            "complete": True,
            "source_error": None,
            "artifacts": found,
        },
        "\n".join(lines),
    )


def _target_alone(
    args: argparse.Namespace,
    where: str,
    storage_options: dict[str, Any] | None,
    failure: SourceUnavailableError,
    bars: ProgressBars,
) -> Outcome:
    """The listing of a mount whose source cannot be read: the target's own artifacts,
    marked, and on stderr why the source's are missing and how to get them back (the
    line the failure alone printed); its exit code, 4 (the list is not the store's whole
    listing)."""
    # a store that is no mount (a composite's source gone) has none of its own apart
    from ..artifacts.catalog import describe_artifacts
    from ..format.store_io import get_json
    from ..mount.records import MATRIX_SOURCE_ATTR, MountRecord
    from ..remote.locations import open_location

    target = open_location(args.location, read_only=True, storage_options=storage_options)
    document = get_json(target, "zarr.json", where=where)
    attrs = document.get("attributes", {}) if isinstance(document, dict) else {}
    if not isinstance(attrs, dict) or MATRIX_SOURCE_ATTR not in attrs:
        raise failure
    record = MountRecord.from_json(attrs[MATRIX_SOURCE_ATTR], where=f"{where} matrixSource")
    # the target read as it is: its own artifacts alone, as zarr.open_group reads them
    found = describe_artifacts(target, where=where)
    if args.kind:
        found = [entry for entry in found if entry["kind"] == args.kind]
    for entry in found:
        # held by the target; whether the source holds the same path cannot be asked
        entry.update(held_by="target", shadows=None)
    said = classify_failure(failure)
    lines = [
        f"{where}: {plural(len(found), 'complete artifact')}"
        + (f" of kind {args.kind}" if args.kind else "")
        + f" of the target alone (mount of {record.location}: the source's artifacts are "
        "not listed, it cannot be read; this list is incomplete)"
    ]
    lines += _entry_lines(found)
    bars.write_line(f"cytearc-vfs artifacts: {said.message}")
    return Outcome(
        {
            "location": where,
            "mount_source": record.location,
            "complete": False,
            "source_error": {"error": type(failure).__name__, "message": said.message},
            "artifacts": found,
        },
        "\n".join(lines),
        said.code,
    )


def _entry_lines(found: list[dict[str, Any]]) -> list[str]:
    """One line per described artifact: holder, path, kind, creation, arrays."""
    lines = []
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
        lines.append(
            f"  {_holder(entry)}{entry['path']} ({entry['kind']}, {entry['created_at']}"
            f"{_shadows(entry)}): {arrays}"
        )
    return lines


def _held_summary(found: list[dict[str, Any]], mount_source: str | None) -> str:
    """`` (mount of SOURCE: N held by the source, M by the target)``, or nothing."""
    if mount_source is None:
        return ""
    in_source = sum(entry["held_by"] == "source" for entry in found)
    shadowing = sum(bool(entry["shadows"]) for entry in found)
    return (
        f" (mount of {mount_source}: {in_source} held by the source, "
        f"{len(found) - in_source} by the target"
        + (f", {shadowing} of them shadowing the source's copy" if shadowing else "")
        + ")"
    )


def _holder(entry: dict[str, Any]) -> str:
    """The column that names the store of a mount holding the artifact, or nothing."""
    if entry["held_by"] is None:
        return ""
    return f"{entry['held_by']:<7}"


def _shadows(entry: dict[str, Any]) -> str:
    """A target artifact that hides the source's group at the same path says so."""
    return ", shadows the source's copy" if entry["shadows"] else ""


def _entry(group: IncompleteArtifact) -> dict[str, Any]:
    return {
        "path": group.path,
        "kind": group.kind,
        "created_at": group.created_at,
        "created_at_ns": group.created_at_ns,
        "cytearc_version": group.cytearc_version,
    }


def _incomplete(
    args: argparse.Namespace, where: str, storage_options: dict[str, Any] | None
) -> Outcome:
    from ..artifacts.incomplete import list_incomplete_artifacts, remove_incomplete_artifact
    from ..remote.locations import open_location

    if args.remove_incomplete is not None:
        store = open_location(args.location, read_only=False, storage_options=storage_options)
        removed = remove_incomplete_artifact(store, args.remove_incomplete)
        return Outcome(
            {"location": where, "removed": _entry(removed)},
            f"{where}: removed the unpublished artifact group {removed.path} "
            f"({removed.kind}, created {removed.created_at})",
        )
    store = open_location(args.location, read_only=True, storage_options=storage_options)
    found = list_incomplete_artifacts(store, kind=args.kind or None)
    lines = [
        f"{where}: {plural(len(found), 'unpublished artifact group')}"
        + (f" of kind {args.kind}" if args.kind else "")
    ]
    lines += [f"  {group.path} ({group.kind}, created {group.created_at})" for group in found]
    if found:
        lines.append(
            "Each is still being written, or its producer died before publishing. Once you "
            "know its producer has stopped, remove it with: cytearc-vfs artifacts "
            f"{shlex.quote(args.location)} --remove-incomplete PATH"
        )
    return Outcome({"location": where, "incomplete": [_entry(g) for g in found]}, "\n".join(lines))
