"""The argument parser of ``cytearc-vfs``: every command, every argument with its help.

Kept free of heavy imports so ``cytearc-vfs --help`` and ``--version`` answer
at once; the commands import what they need when they run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

__all__ = ["DESCRIPTION", "build_parser", "package_version"]

DESCRIPTION = (
    "cytearc-vfs: CyteArc count stores, composites (virtual counts over many "
    "sources), mounts and repacks. Run 'cytearc-vfs COMMAND --help' for a command's "
    "options. Exit codes: 0 done, 1 verify found problems, 2 input refused (nothing "
    "changed), 3 damaged or incomplete store, 4 system error (disk, permission, "
    "network), 70 internal error, 130/143 interrupted (an unfinished destination is "
    "removed)."
)


def package_version() -> str:
    """The installed version of cytearc-vfs."""
    from .. import __version__

    return __version__


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors honour ``--json`` (one JSON object)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if _Parser.json_errors:
            payload = {
                "ok": False,
                "command": self.prog,
                "error": "UsageError",
                "category": "refused",
                "exitCode": 2,
                "message": message,
            }
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        # one line, like every other error; --help shows the usage
        self.exit(2, f"{self.prog}: {message}; run '{self.prog} --help' for the options\n")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout instead of text"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show the Python traceback as well as the message",
    )


def _overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=(
            "replace a destination that holds a CyteArc store this layer wrote, or an "
            "unfinished one (a mount target with analyses is never replaced)"
        ),
    )


def _mem_budget(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--mem-budget",
        metavar="SIZE",
        default=None,
        help=f"working-memory bound, bytes or a size such as 512M or 2G (default {default})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``cytearc-vfs`` (exposed for docs and tests)."""
    parser = _Parser(prog="cytearc-vfs", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"cytearc-vfs {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="write two real datasets, compose, mount and read them back, with timings",
        description=(
            "Write two real single-cell datasets as CyteArc stores, read them back through "
            "plain zarr, build a composite and read it, publish an artifact and verify a "
            "store. Prints each step and its time."
        ),
    )
    demo.add_argument(
        "--directory",
        metavar="DIR",
        help="keep the demo's stores in DIR (replaced on the next run) instead of a temporary folder",
    )

    info = sub.add_parser(
        "info",
        help="describe a store: kind, assays, shapes, layouts, fingerprints",
        description="Describe a CyteArc store, composite or mount (verifies its metadata).",
    )
    info.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")

    verify = sub.add_parser(
        "verify",
        help="re-read every value and check it against the records",
        description=(
            "Verify a store's metadata, then read every count and check it against the "
            "recorded fingerprints and summaries. Exit 1 when something is wrong."
        ),
    )
    verify.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")

    write = sub.add_parser(
        "write",
        help="write an AnnData file or store (.h5ad or AnnData .zarr) as a CyteArc store",
        description="Import the counts and tables of an AnnData into a new CyteArc store.",
    )
    write.add_argument("input", metavar="INPUT", help="an .h5ad file or an AnnData Zarr store")
    write.add_argument("destination", metavar="DEST", help="path or URL of the new store")
    write.add_argument("--assay", default="RNA", help="assay name of the counts (default RNA)")
    write.add_argument(
        "--assay-type", metavar="TYPE", help="assay preset (default: taken from the assay name)"
    )
    write.add_argument(
        "--layer", metavar="NAME", help="AnnData layer holding the counts (default: X)"
    )
    write.add_argument("--workspace", metavar="NAME", help="write the workspace layout under NAME")
    _mem_budget(write, "2G")
    _overwrite(write)

    composite = sub.add_parser(
        "composite",
        help="create a composite (virtual counts, nothing copied) of source stores",
        description=(
            "Create a composite: one virtual cells x features matrix over the sources, in "
            "the order given. No counts are copied."
        ),
    )
    composite.add_argument(
        "destination", metavar="DEST", help="path or URL of the composite's own small store"
    )
    composite.add_argument(
        "sources",
        nargs="+",
        metavar="[NAME=]SOURCE",
        help="source stores; NAME defaults to the directory name without its suffix",
    )
    composite.add_argument("--assay", default="RNA", help="assay to compose (default RNA)")
    composite.add_argument(
        "--features",
        default="union",
        metavar="union|intersection|@FILE",
        help="output features: union (default), intersection, or @FILE with one id per line",
    )
    composite.add_argument(
        "--features-file",
        metavar="FILE",
        help="explicit feature ids, one per line (the same as --features @FILE)",
    )
    composite.add_argument(
        "--cells",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="keep only the cells of source NAME whose ids FILE lists, one per line (repeatable)",
    )
    _mem_budget(composite, "512M")
    _overwrite(composite)

    mount = sub.add_parser(
        "mount",
        help="mount a read-only source under a writable target",
        description=(
            "Create a mounted target: analyses write to DEST, the source's counts and "
            "artifacts read through. The source is never modified."
        ),
    )
    mount.add_argument("source", metavar="SOURCE", help="the ordinary store that owns the counts")
    mount.add_argument("destination", metavar="DEST", help="path or URL of the new target")
    mount.add_argument("--workspace", metavar="NAME", help="mount this workspace of the source")
    mount.add_argument(
        "--assay", action="append", metavar="NAME", help="mount only this assay (repeatable)"
    )
    _overwrite(mount)

    repack = sub.add_parser(
        "repack",
        help="rewrite a store or a mount as a standalone store",
        description=(
            "Copy an ordinary store, or a mount with its source's counts, into a new "
            "standalone store, verified."
        ),
    )
    repack.add_argument("source", metavar="SOURCE", help="an ordinary store or a mount")
    repack.add_argument("destination", metavar="DEST", help="path or URL of the new store")
    repack.add_argument(
        "--data-only",
        action="store_true",
        help="rewrite counts and tables of a store that does not open (no records needed)",
    )
    _mem_budget(repack, "2G")
    _overwrite(repack)

    artifacts = sub.add_parser(
        "artifacts",
        help="list the complete artifacts of a store",
        description="List every complete artifact of a store, composite or mount.",
    )
    artifacts.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")
    artifacts.add_argument("--kind", help="only artifacts of this kind")

    mount_fs = sub.add_parser(
        "mount-fs",
        help="show a store, composite or mount as a read-only directory of Zarr files (FUSE)",
        description=(
            "Mount LOCATION read-only at MOUNTPOINT with FUSE: every key becomes a file "
            "(zarr.json documents, chunks), so any Zarr reader (zarr-python, tensorstore, "
            "zarrs, R) reads it from the path; a composite's counts are computed as they are "
            "read. Stays in the foreground; Ctrl-C (SIGINT) or SIGTERM unmounts and exits 0. "
            "Needs FUSE 3 (the fuse3 package, /dev/fuse) and pip install 'cytearc-vfs[fuse]'."
        ),
    )
    mount_fs.add_argument(
        "location", metavar="LOCATION", help="path or URL of a CyteArc store, composite or mount"
    )
    mount_fs.add_argument(
        "mountpoint", metavar="MOUNTPOINT", help="an existing directory to show the store at"
    )
    mount_fs.add_argument(
        "--storage-options",
        metavar="JSON|@FILE",
        help="backend options of LOCATION as a JSON object, or @FILE holding one",
    )
    mount_fs.add_argument(
        "--source-storage-options",
        metavar="JSON|@FILE",
        help=(
            "backend options of the sources of a composite ({name: {...}}) or of a mount's "
            "source ({...}), as JSON or @FILE; a file keeps credentials out of the process list"
        ),
    )
    mount_fs.add_argument(
        "--allow-other",
        action="store_true",
        help=(
            "let other users read the mount (for users other than root, /etc/fuse.conf "
            "must say user_allow_other)"
        ),
    )

    for command in (demo, info, verify, write, composite, mount, repack, artifacts, mount_fs):
        _common(command)
    return parser
