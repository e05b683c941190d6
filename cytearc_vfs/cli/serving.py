"""The commands that serve a store to other programs: ``serve`` (HTTP) and ``mount-fs`` (FUSE).

Both stay in the foreground until SIGINT, SIGTERM or SIGHUP, and both take the
server side's credentials only from their own options (never from the
clients they serve).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .failures import InputRefusedError
from .inputs import json_option, local_store_options, refuse_unused_source_options, require_store
from .outcome import Outcome, plural
from .progress import ProgressBars

__all__ = ["cmd_mount_fs", "cmd_serve"]


def _check_origin(origin: str) -> None:
    """Refuse an ``--allow-origin`` that no browser's ``Origin`` header can equal.

    Browsers send ``scheme://host[:port]``, nothing more; the server compares
    exactly, so ``viewer.example`` or ``https://viewer.example/`` would be
    accepted and then never match, and the page would fail on CORS with no hint.
    """
    if origin == "*":
        return
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(origin)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or not port_ok
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or any((parts.path, parts.query, parts.fragment))
        or origin != f"{parts.scheme}://{parts.netloc}"
        # browsers send the host in lower case and leave out the scheme's default port
        or parts.netloc != parts.netloc.lower()
        or (parts.scheme, parts.port) in (("http", 80), ("https", 443))
    ):
        raise InputRefusedError(
            f"--allow-origin {origin!r} is not an origin: give it as a browser sends it, "
            "scheme://host[:port] in lower case, with no default port, path or trailing "
            "slash (https://viewer.example, http://localhost:3000), or * for any page"
        )


def _answer_memory(value: str | None, piece_bytes: int) -> int | None:
    """``--max-answer-memory`` in bytes (``None`` when not given); at least two pieces."""
    if value is None:
        return None
    from ..format.sizes import format_size, parse_size

    shown = value.strip()
    smallest = 2 * piece_bytes
    remedy = f"give a size of at least {format_size(smallest)}, such as 256M or 1G"
    if shown.startswith("-"):
        raise InputRefusedError(f"--max-answer-memory {shown} is negative; {remedy}")
    try:
        nbytes = parse_size(shown, what="--max-answer-memory")
    except ValueError as exc:
        raise InputRefusedError(f"{exc}; {remedy}") from None
    if nbytes < smallest:
        raise InputRefusedError(
            f"--max-answer-memory {shown} is smaller than two {format_size(piece_bytes)} "
            f"pieces of a streamed value; {remedy}"
        )
    return nbytes


def _reopen_pause(value: str | None) -> float:
    """``--reopen-pause`` in seconds (the default when not given): a finite number, 0 or more."""
    from cytearc_vfs_adapters.served_store import REOPEN_PAUSE_SECONDS

    if value is None:
        return REOPEN_PAUSE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise InputRefusedError(
            f"--reopen-pause {value} is not a number of seconds; give 0 or more, such as 60 "
            "(0 reopens on every failing read)"
        )
    return seconds


def _anndata_assay(args: argparse.Namespace) -> str | None:
    """The assay ``--as-anndata`` presents, or ``None`` (the store as it is); an
    ``--assay`` without ``--as-anndata``, which would be ignored, is refused."""
    if not args.as_anndata:
        if args.assay is not None:
            raise InputRefusedError(
                f"--assay {args.assay} applies only with --as-anndata (the assay whose counts "
                "become X); add --as-anndata, or leave --assay out to present the store as it is"
            )
        return None
    return "RNA" if args.assay is None else str(args.assay)


def cmd_serve(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``serve LOCATION [--host H] [--port N]``: until SIGINT, SIGTERM or SIGHUP."""
    import logging
    import signal
    import sys

    from cytearc_vfs_adapters.serve.server import ServeOptions, StoreServer
    from cytearc_vfs_adapters.served_store import ServedStore

    from ..remote.locations import describe_location, local_path
    from .interrupts import Interrupted, also_interrupted_by, begin_cleanup

    if not 0 <= args.port <= 65535:
        raise InputRefusedError(
            f"--port {args.port} is not a port (0 to 65535; 0 picks a free one)"
        )
    if not args.host.strip():
        # what "--host $HOST" gives with HOST unset: the socket layer takes "" for every
        # interface, which would put the store on the network unasked
        raise InputRefusedError(
            f"--host is empty{'' if not args.host else ' (blank)'}; give 127.0.0.1 (this "
            "machine only, the default) or an address of this machine, or 0.0.0.0 to mean "
            "all interfaces"
        )
    if args.allow_origin is not None:
        _check_origin(args.allow_origin)
    defaults = ServeOptions()
    answer_memory = _answer_memory(args.max_answer_memory, defaults.piece_bytes)
    pause = _reopen_pause(args.reopen_pause)
    as_anndata = _anndata_assay(args)
    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    if local_path(args.location) is not None:
        # a remote location is refused by open_store itself (it may need the options above)
        found = require_store(
            args.location, command="serve", kinds=("ordinary", "composite", "mount")
        )
        # as info and verify refuse them, "{}" included: an ordinary store has no sources
        if storage_options:
            raise InputRefusedError(local_store_options(found.where, found.kind))
        refuse_unused_source_options(found.kind, source_options, where=found.where)
    where = describe_location(args.location)
    served = ServedStore.open(
        args.location,
        storage_options=storage_options,
        source_storage_options=source_options,
        pause=pause,
        as_anndata=as_anndata,
    )
    # Errors met while serving go on, and reopens: one line each on stderr, in
    # the command's voice.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("cytearc-vfs serve: %(message)s"))
    logs = [logging.getLogger(f"cytearc_vfs_adapters.{name}") for name in ("serve", "served_store")]
    for server_log in logs:
        server_log.addHandler(handler)
    try:
        server = StoreServer.start(
            served,
            host=args.host,
            port=args.port,
            options=ServeOptions(
                allow_origin=args.allow_origin,
                max_answer_bytes=answer_memory or defaults.max_answer_bytes,
            ),
        )
        # SIGHUP (the terminal closed) and SIGQUIT (Ctrl-\, which mount-fs takes too)
        # stop it like SIGTERM; left to their defaults they ended the process without
        # a word or a clean close (SIGQUIT: "Quit (core dumped)", and no exit handler
        # ran, such as the one removing a remote composite's source cache folder)
        with also_interrupted_by(signal.SIGHUP), also_interrupted_by(signal.SIGQUIT):
            try:
                if not server.loopback:
                    # before the first line: whoever waits for that line has the warning too
                    listening = (
                        f"{server.host} (all interfaces)" if server.all_interfaces else server.host
                    )
                    print(
                        f"cytearc-vfs serve: warning: listening on {listening}, which is not a "
                        f"loopback address: anyone who reaches this machine on port "
                        f"{server.port} reads {where}, with no authentication and no "
                        "encryption; where you can, serve on 127.0.0.1 and reach it through a "
                        "tunnel (ssh -L)",
                        file=sys.stderr,
                        flush=True,
                    )
                print(f"serving {server.url}", flush=True)
                server.wait()
            except Interrupted:
                begin_cleanup()  # a second signal must not cut the shutdown short
                server.close()
                raise
            finally:
                server.close()
    finally:
        for server_log in logs:
            server_log.removeHandler(handler)
        served.close()
    stats = server.stats()
    payload = {
        "location": where,
        "url": server.url,
        "requests": stats.requests,
        "reopens": served.reopens,
        "recovered": served.recovered,
    }
    return Outcome(payload, f"stopped serving {where} ({plural(stats.requests, 'request')})")


def _check_mountpoint(mountpoint: str) -> None:
    import errno

    from cytearc_vfs_adapters.fuse.mounting import enclosing_mount, is_mounted

    path = Path(mountpoint)
    try:
        exists = path.exists()
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise
        # a FUSE mount whose server is gone (a mount-fs killed with SIGKILL)
        dead = enclosing_mount(path) or mountpoint
        where = "is" if dead == str(path.resolve()) else "lies inside"
        raise InputRefusedError(
            f"mount point {mountpoint} {where} {dead}, a FUSE mount whose server has stopped "
            f"(it answers 'Transport endpoint is not connected'); remove the stale mount with "
            f"fusermount3 -u {dead} and run the command again"
        ) from None
    if not exists:
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


def _refuse_nonempty(mountpoint: str) -> None:
    """Refuse a mount point with files in it.

    FUSE 3 mounts over them and hides them until the unmount; a directory
    that holds files is far more likely a mistyped path than a wish.
    """
    held = sorted(entry.name for entry in Path(mountpoint).iterdir())
    if held:
        shown = ", ".join(repr(name) for name in held[:3]) + (", ..." if len(held) > 3 else "")
        raise InputRefusedError(
            f"mount point {mountpoint} is not empty (it holds {shown}), and the mount would "
            "hide its files until unmounted; give an empty directory"
        )


def _read_directories(location: str, store: object) -> list[Path]:
    """The local directories a mount of ``store`` reads from: the store's own,
    a composite's sources', a mount's source's (remote ones have none)."""
    from ..inspection.read_sources import stores_read_by
    from ..remote.locations import local_path

    locations = [location, *stores_read_by(store).values()]
    return [path for path in map(local_path, locations) if path is not None]


def _refuse_overlap(mountpoint: str, directories: list[Path]) -> None:
    """Refuse a mount point that is, holds or lies inside a directory the mount reads.

    Once mounted, the file system would serve reads of that directory by
    reading it through itself: every read waits on itself, the reading
    process hangs unkillably, and the mount can only be aborted.
    """
    point = Path(mountpoint).resolve()
    for directory in directories:
        read = directory.resolve()
        if point == read or read in point.parents:
            relation = "is the same directory as" if point == read else "is inside"
        elif point in read.parents:
            relation = "holds"
        else:
            continue
        raise InputRefusedError(
            f"mount point {mountpoint} {relation} {read}, a directory the mounted file "
            "system reads from: its reads would wait on themselves and hang; choose a "
            f"directory outside {read}"
        )


def cmd_mount_fs(args: argparse.Namespace, bars: ProgressBars) -> Outcome:
    """``mount-fs LOCATION MOUNTPOINT``: serve until SIGINT, SIGTERM, SIGHUP, SIGQUIT or
    an unmount."""
    import logging
    import signal
    import sys

    from cytearc_vfs_adapters.fuse.mounting import FuseMount, check_fuse
    from cytearc_vfs_adapters.served_store import ServedStore

    from ..remote.locations import describe_location, expand_home, local_path
    from .interrupts import Interrupted, also_interrupted_by, begin_cleanup

    storage_options = json_option(args.storage_options, "--storage-options")
    source_options = json_option(args.source_storage_options, "--source-storage-options")
    pause = _reopen_pause(args.reopen_pause)
    as_anndata = _anndata_assay(args)
    kinds = ("ordinary", "composite", "mount")
    if storage_options and local_path(args.location) is not None:
        found = require_store(args.location, command="mount-fs", kinds=kinds)
        raise InputRefusedError(local_store_options(found.where, found.kind))
    found = require_store(
        args.location, command="mount-fs", kinds=kinds, storage_options=storage_options
    )
    refuse_unused_source_options(found.kind, source_options, where=found.where)
    args.mountpoint = expand_home(args.mountpoint)  # a quoted "~/mnt" reaches us as typed
    _check_mountpoint(args.mountpoint)
    binding = check_fuse()
    where = describe_location(args.location)
    served = ServedStore.open(
        args.location,
        storage_options=storage_options,
        source_storage_options=source_options,
        pause=pause,
        as_anndata=as_anndata,
    )
    try:
        _refuse_overlap(args.mountpoint, _read_directories(args.location, served.current))
        _refuse_nonempty(args.mountpoint)
    except InputRefusedError:
        served.close()
        raise
    mounted = FuseMount(served, args.mountpoint, allow_other=args.allow_other)
    # reopens after a source came back (or did not), one line each on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("cytearc-vfs mount-fs: %(message)s"))
    reopen_log = logging.getLogger("cytearc_vfs_adapters.served_store")
    reopen_log.addHandler(handler)
    started = time.perf_counter()
    ended = "unmounted from elsewhere"
    # SIGHUP (the terminal closed) stops it like SIGINT and SIGTERM; left to
    # libfuse, its handler would mark the session ended without waking it.
    # SIGQUIT (Ctrl-\) too: its default ends the process without unmounting,
    # leaving a dead mount point ("Transport endpoint is not connected")
    try:
        with also_interrupted_by(signal.SIGHUP), also_interrupted_by(signal.SIGQUIT):
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
        reopen_log.removeHandler(handler)
        served.close()
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
        "reopens": served.reopens,
        "recovered": served.recovered,
        "seconds": round(seconds, 3),
    }
    text = (
        f"{done} {mounted.mountpoint} ({ended}) after {seconds:.1f} s; "
        f"{plural(mounted.operations.computed_values, 'chunk')} computed for reading"
    )
    return Outcome(payload, text)
