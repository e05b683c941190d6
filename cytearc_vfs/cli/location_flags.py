"""Which flag carries the backend options of each location a command names.

A command reads or creates up to two locations, and each takes its options
from its own flag (``docs/cli.md``, "Remote locations"): ``mount SOURCE
DEST`` reads SOURCE with ``--source-storage-options`` and creates DEST with
``--storage-options``; ``repack SOURCE DEST`` reads SOURCE with
``--storage-options`` and creates DEST with ``--destination-storage-options``.
An error about a location that cannot be reached names that location's flag
as the remedy, never another's.
"""

from __future__ import annotations

import argparse

from ..format.option_names import command_line_names, source_options_example

__all__ = ["location_flags"]

#: How the command line writes a flag that takes one location's options.
_ONE_LOCATION = "{flag} (JSON or @FILE)"


def location_flags(args: argparse.Namespace) -> dict[str, str]:
    """The printed form of each location ``args`` names (``describe_location``) and how
    its options are given on the command line, for the command ``args.command``.

    >>> location_flags(argparse.Namespace(command="repack", source="s3://b/a.zarr",
    ...                                   destination="s3://b/r.zarr"))["s3://b/r.zarr"]
    '--destination-storage-options (JSON or @FILE)'
    """
    from ..remote.locations import describe_location
    from .commands import DESTINATION_OPTIONS

    command = getattr(args, "command", "")
    # a mount's source and write's input are one location read with the sources' flag
    # ({...}, not {"NAME": {...}}); repack's source with the flag of what it reads
    with command_line_names():
        one_source = source_options_example(None)
    destination = DESTINATION_OPTIONS.get(command)
    flags = {
        "location": _ONE_LOCATION.format(flag="--storage-options"),
        "destination": None if destination is None else _ONE_LOCATION.format(flag=destination),
        "source": _ONE_LOCATION.format(flag="--storage-options")
        if command == "repack"
        else one_source,
        "input": one_source,
    }
    found: dict[str, str] = {}
    for argument, flag in flags.items():
        value = getattr(args, argument, None)
        if isinstance(value, str) and flag is not None:
            try:
                found[describe_location(value)] = flag
            except (ValueError, OSError):  # a location refused already: its error is reported
                continue
    return found
