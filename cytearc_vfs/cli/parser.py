"""The argument parser of ``cytearc-vfs``: every command, every argument with its help.

Kept free of heavy imports so ``cytearc-vfs --help`` and ``--version`` answer
at once; the commands import what they need when they run.
"""

from __future__ import annotations

import argparse

from .serving_options import add_anndata_view_options, add_reopen_pause_option
from .usage_errors import _Parser

__all__ = ["DESCRIPTION", "build_parser", "package_version"]

DESCRIPTION = (
    "cytearc-vfs: CyteArc count stores, composites (virtual counts over many "
    "sources), mounts and repacks, and in-place operations on any Zarr v3 array. "
    "Run 'cytearc-vfs COMMAND --help' for a command's options. Exit codes: 0 done, 1 verify found problems, 2 input refused (nothing "
    "changed), 3 damaged or incomplete store, 4 system error (disk, permission, "
    "network), 70 internal error, 130/143 interrupted (an unfinished destination is "
    "removed)."
)


def package_version() -> str:
    """The installed version of cytearc-vfs."""
    from .. import __version__

    return str(__version__)


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


def _remote_options(parser: argparse.ArgumentParser, *, own: str, sources: str | None) -> None:
    """``--storage-options`` (of ``own``) and, when ``sources`` says whose, ``--source-storage-options``.

    Both take a JSON object or ``@FILE``; a file keeps credentials out of the
    process list and the shell history.
    """
    parser.add_argument(
        "--storage-options",
        metavar="JSON|@FILE",
        help=f"backend options (credentials) of {own}: a JSON object, or @FILE holding one",
    )
    if sources is not None:
        parser.add_argument(
            "--source-storage-options",
            metavar="JSON|@FILE",
            help=f"backend options of {sources}: a JSON object, or @FILE holding one",
        )


#: whose options ``--source-storage-options`` are, for commands that open a composite or mount
_OPENED_SOURCES = "a composite's sources ({\"NAME\": {...}}) or of a mount's source ({...})"


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
        help="describe a store: kind, assays, shapes, layouts, fingerprints, artifacts",
        description="Describe a CyteArc store, composite or mount (verifies its metadata), "
        "and count its artifacts by root and kind.",
    )
    info.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")
    _remote_options(info, own="LOCATION", sources=_OPENED_SOURCES)

    verify = sub.add_parser(
        "verify",
        help="re-read every value and check it against the records",
        description=(
            "Verify a store's metadata, then read every count and check it against the "
            "recorded fingerprints and summaries. Exit 1 when something is wrong."
        ),
    )
    verify.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")
    _remote_options(verify, own="LOCATION", sources=_OPENED_SOURCES)

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
        "--layer",
        metavar="NAME",
        help="AnnData layer holding the counts, or raw/X for its raw counts (adata.raw.X, "
        "features from raw/var) (default: X)",
    )
    write.add_argument("--workspace", metavar="NAME", help="write the workspace layout under NAME")
    write.add_argument(
        "--fill-missing",
        action="store_true",
        help=(
            'store missing obs/var values as a composite does (text and categories "", '
            "numbers NaN) instead of refusing them"
        ),
    )
    write.add_argument(
        "--make-unique",
        action="store_true",
        help="rename repeated obs/var ids as anndata's make_unique does (id-1, id-2, ...) "
        "instead of refusing them",
    )
    _remote_options(write, own="DEST (the new store)", sources="INPUT ({...})")
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
        help=(
            "source stores (CyteArc or AnnData Zarr); NAME defaults to the directory name "
            "without its suffix"
        ),
    )
    composite.add_argument("--assay", default="RNA", help="assay to compose (default RNA)")
    composite.add_argument(
        "--features",
        default=None,
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
    composite.add_argument(
        "--layer",
        action="append",
        default=[],
        metavar="NAME=LAYER",
        help="read layer LAYER of the AnnData source NAME instead of its X, or its raw "
        "counts with NAME=raw/X (features from raw/var) (repeatable)",
    )
    composite.add_argument(
        "--workspace",
        action="append",
        default=[],
        metavar="NAME=WS",
        help="read the assay of source NAME from its workspace WS (a store written with "
        "write --workspace WS) (repeatable)",
    )
    _remote_options(
        composite,
        own="DEST",
        sources='the sources, by name ({"NAME": {...}}; only the remote ones need an entry)',
    )
    _mem_budget(composite, "2G")
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
    _remote_options(mount, own="DEST (the new target)", sources="SOURCE ({...})")
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
    _remote_options(repack, own="SOURCE", sources="the source of a mount SOURCE ({...})")
    repack.add_argument(
        "--destination-storage-options",
        metavar="JSON|@FILE",
        help="backend options (credentials) of DEST: a JSON object, or @FILE holding one",
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
    artifacts.add_argument(
        "--incomplete",
        action="store_true",
        help="list the store's unpublished artifact groups (complete=False) instead",
    )
    artifacts.add_argument(
        "--remove-incomplete",
        metavar="PATH",
        help="remove the unpublished artifact group at PATH, once its producer has stopped",
    )
    _remote_options(artifacts, own="LOCATION", sources=_OPENED_SOURCES)

    export = sub.add_parser(
        "export",
        help="write a store, composite or mount as an AnnData .zarr or .h5ad",
        description=(
            "Write one assay of a CyteArc store, composite or mount as a conformant AnnData "
            "(current encoding versions): X as CSR, streamed band by band; obs and var from "
            "the tables; the assay's membership column kept and declared in "
            "uns['cytearc']['assayMembership']. OUT ends in .zarr (Zarr v3, or v2 with "
            "--zarr-format 2) or .h5ad. The file is written under a temporary name and renamed "
            "into place when complete."
        ),
    )
    export.add_argument("location", metavar="STORE", help="path or URL of a CyteArc store")
    export.add_argument("destination", metavar="OUT", help="local path ending in .zarr or .h5ad")
    export.add_argument(
        "--assay", default="RNA", help="the assay whose counts become X (default RNA)"
    )
    export.add_argument("--workspace", help="workspace of the assay (workspace layout)")
    _remote_options(export, own="STORE", sources=_OPENED_SOURCES)
    _mem_budget(export, "2G")
    export.add_argument(
        "--zarr-format",
        type=int,
        choices=(2, 3),
        help="Zarr format of a .zarr OUT (default 3; 2 for anndata < 0.11 and other v2 readers)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an AnnData already at OUT (anything else there is refused)",
    )

    serve = sub.add_parser(
        "serve",
        help="serve a store read-only over HTTP (composites' counts computed on request)",
        description=(
            "Serve a CyteArc store, composite or mount read-only over HTTP, so Zarr v3 "
            "clients of any language (tensorstore, zarrita, R) read it; a composite's "
            "counts are computed per chunk as they are asked for. Prints 'serving URL' "
            "first and runs until SIGINT, SIGTERM, SIGHUP or SIGQUIT."
        ),
    )
    serve.add_argument("location", metavar="LOCATION", help="path or URL of a CyteArc store")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "address to listen on (default 127.0.0.1; another than loopback is warned about; "
            "0.0.0.0 listens on all interfaces and prints a 127.0.0.1 URL)"
        ),
    )
    serve.add_argument(
        "--port", type=int, default=0, help="port to listen on (default 0: a free port)"
    )
    _remote_options(serve, own="LOCATION", sources=_OPENED_SOURCES)
    serve.add_argument(
        "--allow-origin",
        metavar="ORIGIN",
        help="let web pages of ORIGIN (or *) read through CORS, e.g. zarrita in a browser",
    )
    serve.add_argument(
        "--max-answer-memory",
        metavar="SIZE",
        default=None,
        help=(
            "bytes of values all answers together hold in memory while clients take them, "
            "a size such as 256M or 1G (default 256M); larger values are sent in 1 MiB pieces"
        ),
    )
    add_reopen_pause_option(serve)
    add_anndata_view_options(serve)

    mount_fs = sub.add_parser(
        "mount-fs",
        help="show a store, composite or mount as a read-only directory of Zarr files (FUSE)",
        description=(
            "Mount LOCATION read-only at MOUNTPOINT with FUSE: every key becomes a file "
            "(zarr.json documents, chunks), so any Zarr reader (zarr-python, tensorstore, "
            "zarrs, R) reads it from the path; a composite's counts are computed as they are "
            "read. Stays in the foreground; Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGQUIT "
            "unmounts and exits 0. "
            "Needs FUSE 3 (the fuse3 package, /dev/fuse) and pip install 'cytearc-vfs[fuse]'."
        ),
    )
    mount_fs.add_argument(
        "location", metavar="LOCATION", help="path or URL of a CyteArc store, composite or mount"
    )
    mount_fs.add_argument(
        "mountpoint",
        metavar="MOUNTPOINT",
        help="an existing empty directory outside the store (and its sources) to show it at",
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
    add_reopen_pause_option(mount_fs)
    add_anndata_view_options(mount_fs)

    for command in (
        demo,
        info,
        verify,
        write,
        composite,
        mount,
        repack,
        artifacts,
        export,
        serve,
        mount_fs,
    ):
        _common(command)
    _array_commands(sub)
    _anndata_commands(sub)
    return parser


def _anndata_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``anndata ls``: what an AnnData container holds, element by element."""
    anndata = sub.add_parser(
        "anndata",
        help="inspect an AnnData container (.h5ad, or a Zarr v2/v3 store of anndata 0.7 or later)",
        description=(
            "Inspect AnnData containers (docs/anndata.md): .h5ad files and AnnData Zarr stores, "
            "v2 or v3, including the legacy layouts of anndata 0.7."
        ),
    )
    actions = anndata.add_subparsers(
        dest="anndata_command", required=True, metavar="ACTION", help="ls"
    )
    ls = actions.add_parser(
        "ls",
        help="list every element with its encoding, version and shape",
        description=(
            "List every element of an AnnData container with its encoding type and version "
            "(declared, or inferred for legacy files), its shape, and whether it uses a "
            "legacy (anndata 0.7.x) layout. Awkward arrays are reported, not read. Reads "
            "metadata only."
        ),
    )
    ls.add_argument(
        "location",
        metavar="PATH",
        help="an .h5ad file, or the path or URL of an AnnData Zarr store",
    )
    ls.add_argument(
        "--storage-options",
        metavar="JSON|@FILE",
        help="backend options (credentials) of a remote PATH: a JSON object, or @FILE holding one",
    )
    _common(ls)


def _array_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``array info | resize | promote | recover``: one Zarr v3 array, changed in place."""
    array = sub.add_parser(
        "array",
        help="inspect, resize or promote one Zarr v3 array in place (chunks renamed, not rewritten)",
        description=(
            "Operations on one Zarr v3 array of any Zarr store (docs/arrays.md). resize and "
            "promote rename chunks instead of rewriting them, under a journal: an interrupted "
            "one is finished by array recover (the other actions refuse the array until then)."
        ),
    )
    actions = array.add_subparsers(
        dest="array_command",
        required=True,
        metavar="ACTION",
        help="info, resize, promote or recover",
    )

    def located(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        action = actions.add_parser(name, help=help_text, description=description)
        action.add_argument("location", metavar="LOCATION", help="path or URL of the Zarr store")
        action.add_argument(
            "path",
            metavar="PATH",
            nargs="?" if name in ("info", "recover") else None,
            default="",
            help="path of the array in the store ('/' for the root)"
            + (" (or of a group; default: the root)" if name == "info" else "")
            + (" (default: the root)" if name == "recover" else ""),
        )
        _remote_options(action, own="LOCATION", sources=None)
        _common(action)
        return action

    located(
        "info",
        "summarize an array, or list the hierarchy of a group",
        "An array: data type, shape, chunks, shards, chunk keys, codecs, fill value, "
        "dimension names. A group: its tree of groups and arrays.",
    )
    resize = located(
        "resize",
        "grow or shrink dimensions at either end",
        "Grow (positive) or shrink (negative) each dimension at its start (--low) and end "
        "(--high). --low moves in whole chunks (shards), rounded outward. Chunks are renamed, "
        "not rewritten; new cells read as missing.",
    )
    resize.add_argument(
        "--low",
        metavar="N,N,...",
        help="change at the start of each dimension, comma-separated (write --low=-2,0 for "
        "negative values); default 0 each",
    )
    resize.add_argument(
        "--high",
        metavar="N,N,...",
        help="change at the end of each dimension (--high=0,-3 for negative); default 0 each",
    )
    promote = located(
        "promote",
        "insert a new dimension (its chunks renamed, bytes unchanged)",
        "Insert a new dimension at --dimension (0 prepends, NDIM appends) of --length cells "
        "(default 1), chunked as one chunk. Codecs that would not keep their bytes valid are "
        "refused by name.",
    )
    promote.add_argument(
        "--dimension",
        type=int,
        required=True,
        metavar="D",
        help="0-based position in the new shape",
    )
    promote.add_argument(
        "--length", type=int, default=1, metavar="L", help="length of the new dimension (default 1)"
    )
    promote.add_argument(
        "--name",
        default=None,
        metavar="NAME",
        help="the new dimension's name among the array's dimension_names (default: unnamed)",
    )
    located(
        "recover",
        "finish a resize or promote that was interrupted",
        "Finish (roll forward) an interrupted resize or promote of the array; zarr refuses "
        "to open the array until then. Run it only when no other process is changing the "
        "array (a live operation looks the same as an interrupted one).",
    )
