"""Command line of the data fetcher: ``python -m cytearc_vfs.realdata``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import DataFetchError
from .fetching import fetch_many
from .listing import describe
from .specs import SPECS

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``describe``, ``fetch NAME... | all`` or ``path NAME``.

    A data set that cannot be fetched (offline, no pip) ends with one error
    line naming the remedy and status 1, for ``fetch`` and ``path`` alike.

    Parameters
    ----------
    argv
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m cytearc_vfs.realdata", description="Pinned real single-cell data sets."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("describe", help="list the data sets and their cache state")
    fetch_p = sub.add_parser("fetch", help="download and cache data sets")
    fetch_p.add_argument("names", nargs="+", help=f"'all' or any of: {', '.join(SPECS)}")
    path_p = sub.add_parser("path", help="print a data set's cached path, fetching it if needed")
    path_p.add_argument("name", choices=list(SPECS))
    args = parser.parse_args(argv)
    names = [args.name] if args.command == "path" else getattr(args, "names", [])
    if "all" in names:
        names = list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        parser.error(f"unknown data set(s): {', '.join(unknown)}")
    try:
        if args.command == "describe":
            print(describe())
            return 0
        # `path` fetches too (offline: the same one error, never a traceback)
        for name, path in fetch_many(names).items():
            print(path if args.command == "path" else f"{name}\t{path}")
    except DataFetchError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return 0
