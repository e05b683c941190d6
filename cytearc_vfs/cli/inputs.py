"""Checks of what a command is given: the kind of store at a location, JSON options."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .failures import InputRefusedError

__all__ = [
    "check_sources_differ",
    "USEFUL_MEM_BUDGET",
    "json_option",
    "local_store_options",
    "mem_budget_option",
    "opened_for_reading",
    "refuse_options_by_name",
    "viewed_for_reading",
    "parse_sources",
    "per_source_options",
    "read_named_file",
    "refuse_unused_source_options",
    "require_store",
]

_IMPORT_HINT = "import it with: cytearc-vfs write {where} OUT.zarr"  # where: a shell word


def require_store(
    location: str,
    *,
    command: str,
    kinds: Sequence[str],
    storage_options: Mapping[str, Any] | None = None,
    through: Callable[[Any], Any] | None = None,
) -> Any:
    """Classify ``location`` and refuse it unless it is one of ``kinds`` (``through``:
    as :func:`~cytearc_vfs.inspection.store_kind.classify_location` takes it)."""
    from ..inspection.store_kind import classify_location

    found = classify_location(location, storage_options=storage_options, through=through)
    if found.kind in kinds:
        return found
    wanted = {
        ("ordinary",): "an ordinary CyteArc store",
        ("ordinary", "anndata"): "an ordinary CyteArc store or an AnnData Zarr store",
        ("ordinary", "mount"): "an ordinary CyteArc store or a mount",
        ("ordinary", "composite", "mount"): "a CyteArc store (ordinary, composite or mount)",
    }[tuple(kinds)]
    remedy = {
        "missing": "check the path",
        "h5ad": _anndata_remedy(location, command, zarr=False),
        "anndata": _anndata_remedy(location, command, zarr=True),
        "file": "give the directory of a CyteArc store",
        "empty": "give the directory of a CyteArc store, or write one there",
        "directory": "give the directory of a CyteArc store (it holds zarr.json)",
        "zarr-array": "give the store's root directory, not one of its arrays",
        "zarr-group": "write counts into a store with cytearc-vfs write or cytearc_vfs.write_counts",
        "ordinary": "give one of those instead",
        "composite": "composites do not nest, and a composite's counts live in its sources; "
        "give the sources themselves",
        "mount": "mounts do not chain; make it standalone first with: "
        f"cytearc-vfs repack {shlex.quote(location)} OUT.zarr",
    }[found.kind]
    raise InputRefusedError(f"{found.words}; {command} needs {wanted}: {remedy}")


def _anndata_remedy(location: str, command: str, *, zarr: bool) -> str:
    """What to do with an AnnData given to ``command``, which takes CyteArc stores.

    Importing it always works; where the command would show or give counts,
    an AnnData Zarr store needs no copy: a composite over it alone is a
    CyteArc store that reads its counts in place.
    """
    imported = _IMPORT_HINT.format(where=shlex.quote(location))
    if command in ("info", "verify"):
        return f"cytearc-vfs anndata ls {shlex.quote(location)} lists its elements; or {imported}"
    if zarr and command in ("serve", "mount-fs", "export"):
        return (
            f"compose it without copying its counts, with: cytearc-vfs composite DEST.zarr "
            f"{shlex.quote(f'NAME={location}')}, and give DEST.zarr to {command}; or {imported}"
        )
    if not zarr and command.startswith("composite"):
        # the Zarr copy of an .h5ad is a source as it is; the import is a copy too, but
        # one that leaves the AnnData's other elements behind
        return (
            f"{imported}; or write it as an AnnData Zarr store that a composite reads where "
            f"it is: anndata.read_h5ad({location!r}).write_zarr('OUT.zarr')"
        )
    return imported


def json_option(value: str | None, option: str) -> dict[str, Any] | None:
    """A JSON object given inline or as ``@FILE``; the message never echoes it (credentials)."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        text = read_named_file(
            value[1:], what=f"{option} @FILE", wanted="a file holding a JSON object"
        )
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


#: Option keys whose values are JSON objects themselves (obstore's, fsspec's): options
#: holding one are a location's own, not a mapping by source name.
_OBJECT_VALUED_OPTIONS = frozenset(
    {
        "client_options",
        "retry_config",
        "client_kwargs",
        "config_kwargs",
        "s3_additional_kwargs",
        "headers",
    }
)


def refuse_options_by_name(options: Mapping[str, Any] | None, *, command: str) -> None:
    """Refuse ``--source-storage-options`` given by source name (``{"wu": {...}}``, as
    ``composite`` takes them) to ``command``, which reads one source and takes that
    source's options themselves (``{...}``): the backend said only "Configuration key
    'wu' is not valid". The message names the keys, never the values (credentials)."""
    if not options or options.keys() & _OBJECT_VALUED_OPTIONS:
        return
    if all(isinstance(value, dict) for value in options.values()):
        names = ", ".join(repr(name) for name in options)
        raise InputRefusedError(
            f"--source-storage-options maps {names} to options, as composite takes them by "
            f"source name; {command} reads one source and takes its options themselves: "
            "give the inner object, --source-storage-options '{...}' (or @FILE holding it)"
        )


def read_named_file(path: str, *, what: str, wanted: str) -> str:
    """The text of the file ``path`` that ``what`` (``--cells NAME=FILE``) names, refused in one line
    saying what it is instead (missing, a directory, no name, not UTF-8 text).

    Not only regular files: a shell gives ``--storage-options @<(pass show s3)``
    or ``--features-file <(grep ...)`` as ``/dev/fd/N``, a pipe, which is read
    as it is. The text is never shown (it may hold credentials).
    """
    from ..remote.locations import expand_home

    remedy = f"give {wanted}"
    if not path:
        raise InputRefusedError(f"{what} names no file; {remedy}")
    file = Path(expand_home(path))
    if file.is_dir():
        raise InputRefusedError(f"{what}: {file} is a directory, not a file; {remedy}")
    if not file.exists():
        raise InputRefusedError(f"{what}: {file} does not exist; {remedy}")
    try:
        with file.open("rb") as opened:
            data = opened.read()
    except OSError as exc:
        raise InputRefusedError(
            f"{what}: {file} cannot be read ({exc.strerror or type(exc).__name__}); {remedy}"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputRefusedError(
            f"{what}: {file} is not UTF-8 text (is it the file you meant?); {remedy}"
        ) from None


def per_source_options(value: str | None, sources: Sequence[str]) -> dict[str, Any] | None:
    """``--source-storage-options`` of a new composite: one JSON object per source name."""
    parsed = json_option(value, "--source-storage-options")
    if parsed is None:
        return None
    for name, options in parsed.items():
        if name not in sources:
            raise InputRefusedError(
                f"--source-storage-options names {name!r}, which is not one of the sources "
                f"({', '.join(sources)}); key the options by source name: "
                '{"NAME": {...}}'
            )
        if not isinstance(options, dict):
            # only the key is named: the value may be a credential
            raise InputRefusedError(
                f"--source-storage-options entry {name!r} must be a JSON object of backend "
                f"options, not {type(options).__name__}"
            )
    return parsed


def refuse_unused_source_options(
    kind: str, options: Mapping[str, Any] | None, *, where: str
) -> None:
    """Refuse ``--source-storage-options`` for an ordinary store, which has no sources to use them."""
    if options is not None and kind == "ordinary":
        raise InputRefusedError(
            f"{where} is an ordinary store: --source-storage-options apply to a composite's "
            "or a mount's sources only; give the store's own options with --storage-options"
        )


#: The smallest ``--mem-budget`` worth giving: smaller budgets work only for tiny data,
#: in bands so small that per-band overheads dominate.
USEFUL_MEM_BUDGET = "1M"


def mem_budget_option(value: str | None) -> int | None:
    """``--mem-budget`` in bytes (``None`` when not given); zero and negative budgets refused.

    A positive budget too small for the data is left to the command, which
    names the budget it needs.
    """
    if value is None:
        return None
    from ..format.sizes import parse_size

    shown = value.strip()
    remedy = (
        f"give a positive size; the smallest useful budget is about {USEFUL_MEM_BUDGET} "
        "(such as 512M or 2G), and a budget too small for the data is refused with the "
        "budget it needs"
    )
    try:
        budget = parse_size(shown.removeprefix("-"), what="--mem-budget")
    except ValueError:
        raise InputRefusedError(
            f"--mem-budget {shown!r} is not a size; write bytes (1048576) or a number with a "
            "unit: K, M, G, T (binary, so 1M = 1048576 bytes)"
        ) from None
    if shown.startswith("-") and budget:
        raise InputRefusedError(f"--mem-budget {shown} is negative; {remedy}")
    if budget <= 0:
        raise InputRefusedError(f"--mem-budget {shown} leaves no working memory; {remedy}")
    return budget


def parse_sources(values: Sequence[str]) -> dict[str, str]:
    """``NAME=LOCATION`` or ``LOCATION`` arguments as an ordered name -> location mapping."""
    from ..composite.create import source_name_of
    from ..format.paths import check_name

    sources: dict[str, str] = {}
    for value in values:
        name, sep, location = value.partition("=")
        if not sep or "/" in name or ":" in name:
            # no NAME= (an "=" inside a path or URL is part of it)
            location = value
            name = source_name_of(value)
            try:
                check_name(name, what="source name")
            except ValueError as exc:
                # the user never typed this name: say where it came from and how to give one
                # the example is quoted as a shell needs it: "my data.zarr" is one argument
                raise InputRefusedError(
                    f"{exc}; it is the name of source {value}, taken from its directory "
                    f"name; name the source yourself with NAME=LOCATION (e.g. "
                    f"{shlex.quote(f'source_{len(sources) + 1}={value}')})"
                ) from exc
        if name in sources:
            raise InputRefusedError(
                f"two sources are named {name!r}; name them with NAME=LOCATION "
                f"(e.g. {shlex.quote(f'{name}_1={location}')})"
            )
        sources[name] = location
    return sources


def checked_for_reading(
    args: argparse.Namespace, *, command: str
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """``args.location`` checked to be a CyteArc store: its name, its
    ``--storage-options`` and the ``--source-storage-options`` of what it reads."""
    return _checked(args, command=command, through=None)


def _checked(
    args: argparse.Namespace, *, command: str, through: Callable[[Any], Any] | None
) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    from ..remote.locations import describe_location, local_path

    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    where = describe_location(args.location)
    kinds = ("ordinary", "composite", "mount")
    if storage_options and local_path(args.location) is not None:
        # the sources' options given to the local store's flag: say where they go
        found = require_store(args.location, command=command, kinds=kinds)
        raise InputRefusedError(local_store_options(where, found.kind))
    found = require_store(
        args.location,
        command=command,
        kinds=kinds,
        storage_options=storage_options,
        through=through,
    )
    refuse_unused_source_options(found.kind, source_options, where=where)
    return where, storage_options, source_options


def opened_for_reading(
    args: argparse.Namespace, *, command: str
) -> tuple[Any, str, dict[str, Any] | None]:
    """``args.location`` checked (:func:`checked_for_reading`) and opened read-only
    with ``--storage-options``; with its name and the ``--source-storage-options``.

    The store is a view for this command only that reads each metadata document
    and listing once (:class:`~cytearc_vfs.read.remembered_reads.RememberedReads`):
    what the check read to tell the kind, the description or verification takes
    from it, where on object storage each was a request again (the root document
    three times). The view is dropped with the command, so nothing read is kept
    for another.
    """
    view, where, _, source_options = viewed_for_reading(args, command=command)
    return view, where, source_options


def viewed_for_reading(
    args: argparse.Namespace, *, command: str
) -> tuple[Any, str, dict[str, Any] | None, dict[str, Any] | None]:
    """:func:`opened_for_reading`'s view, name and ``--source-storage-options``, and
    the ``--storage-options`` (each option parsed once: ``@FILE`` may be a pipe)."""
    from ..read.remembered_reads import RememberedReads
    from ..remote.locations import open_location

    views: list[Any] = []

    def remembered(store: Any) -> Any:
        views.append(RememberedReads(store))
        return views[-1]

    where, storage_options, source_options = _checked(args, command=command, through=remembered)
    if not views:  # classified without reading it (never for a store it accepts)
        remembered(open_location(args.location, read_only=True, storage_options=storage_options))
    return views[-1], where, storage_options, source_options


def local_store_options(where: str, kind: str) -> str:
    """The refusal of ``--storage-options`` for the local store at ``where`` (a ``kind``)."""
    said = (
        f"--storage-options were given for {where}, a local path, which takes none (they "
        "are the backend options of a remote LOCATION: s3://, gs://, az://, http://); "
    )
    if kind == "composite":
        return said + (
            "a composite's sources take theirs as --source-storage-options "
            "'{\"NAME\": {...}}' (JSON, or @FILE holding it), one entry per remote source: "
            "give them there and leave --storage-options out"
        )
    if kind == "mount":
        return said + (
            "a mount's source takes its own as --source-storage-options '{...}' (JSON, or "
            "@FILE holding it): give them there and leave --storage-options out"
        )
    return said + "leave them out"


def check_sources_differ(destination: str, sources: Mapping[str, str] | str) -> None:
    """Refuse a source that is the destination (``sources`` by name, or one unnamed)."""
    from ..remote.locations import canonical_location

    target = canonical_location(destination)
    if isinstance(sources, str):  # a mount's or repack's: "source 'source'" said nothing
        named = {"the source": sources}
    else:
        named = {f"source {name!r}": location for name, location in sources.items()}
    for which, location in named.items():
        if canonical_location(location) == target:
            raise InputRefusedError(
                f"{which} is the destination {target}; choose another destination"
            )
