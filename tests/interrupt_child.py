"""Writers interrupted with SIGINT while their writes are in flight: the interrupt sweeps' child.

Run as ``python tests/interrupt_child.py CONFIG_JSON``; one process runs
every trial in turn, going on after each interrupt as a notebook does.
``CONFIG_JSON`` holds

- ``mode``: ``"api"`` (``cv.write_counts`` or ``cv.repack``; the caller
  catches ``KeyboardInterrupt``) or ``"cli"`` (``cytearc-vfs``'s ``main``,
  which reports the interrupt and cleans up);
- ``argv`` (``api``): ``["write"|"repack", INPUT]``;
- ``storage_options`` (``null`` for local paths);
- ``mark``: a URL fetched once the interrupt has returned (``api``) or the
  command has reported (``cli``): the proxy records it, so every request it
  saw can be placed before or after that moment.

The child and the parent take turns by lines (the child's start with
:data:`SAY`). The child prints ``{"ready": true}`` and reads the next trial from stdin (an empty line
ends it): a ``destination``, for ``cli`` its command line ``argv``, and
``point``: SIGINT right after the ``point``-th LocalStore write has
started (each write sleeps ``delay`` seconds in its thread before it
touches the file, so writes are in flight when the signal lands); 0 when
the parent sends the signal itself (on S3 the proxy counts the requests).
It prints the trial's report; after an interrupt it waits for a line
(the parent has looked at what the interrupt left), runs the same write
again (the API with ``overwrite=True``) and prints that outcome.

Every LocalStore write and delete is logged with its start and end, in one
order with the moment the exception returned. After that moment the child
waits ``linger`` seconds, so that anything still running gets the chance to
write, then reports: ``outcome`` (``interrupted``, ``finished`` or the
error), ``late`` (the writes that started or ended after the exception
returned) and ``changed`` (whether the destination's files changed while it
waited).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a digest of its bytes."""
    if not path.exists():
        return {}
    return {
        str(file.relative_to(path)): hashlib.sha256(file.read_bytes()).hexdigest()
        for file in sorted(path.rglob("*"))
        if file.is_file()
    }


class _Log:
    """LocalStore's writes in one order with the moment the interrupt returned."""

    def __init__(self, point: int, delay: float) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.started = 0
        self.point = point
        self.delay = delay

    def add(self, what: str, where: str) -> None:
        with self.lock:
            self.events.append((what, where))

    def late(self) -> list[tuple[str, str]]:
        """The events after the exception returned."""
        with self.lock:
            kinds = [kind for kind, _ in self.events]
            if "returned" not in kinds:
                return []
            return self.events[kinds.index("returned") + 1 :]

    def install(self) -> None:
        from zarr.storage import _local

        def logged(function: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                where = str(args[0])
                with self.lock:
                    self.started += 1
                    hit = self.started == self.point
                self.add("start", where)
                if hit:
                    os.kill(os.getpid(), signal.SIGINT)  # lands in the main thread
                time.sleep(self.delay)  # the write is in flight
                try:
                    return function(*args, **kwargs)
                finally:
                    self.add("end", where)

            return wrapper

        for name in ("_put", "_delete", "_delete_dir"):
            setattr(_local, name, logged(getattr(_local, name)))


def _run_api(
    argv: list[str], destination: str, options: dict[str, Any] | None, again: bool
) -> None:
    import cytearc_vfs as cv

    kind, source = argv
    if kind == "write":
        import anndata

        counts = anndata.read_h5ad(source).X
        cv.write_counts(destination, counts, storage_options=options, overwrite=again)
    else:
        cv.repack(source, destination, destination_storage_options=options, overwrite=again)


def _attempt(config: dict[str, Any], trial: dict[str, Any], again: bool) -> dict[str, Any]:
    """Run the trial's writer once; its outcome (and the command line's exit status)."""
    try:
        if config["mode"] == "api":
            _run_api(config["argv"], trial["destination"], config.get("storage_options"), again)
            return {"outcome": "finished"}
        from cytearc_vfs.cli.running import main as cli_main

        code = cli_main(trial["argv"])
        return {"outcome": "interrupted" if code == 130 else "finished", "code": code}
    except KeyboardInterrupt:
        return {"outcome": "interrupted"}
    except Exception as exc:  # reported to the parent, which fails the test
        return {"outcome": f"error: {type(exc).__name__}: {exc}"}


def _mark(url: str | None) -> None:
    if url:
        try:
            with urllib.request.urlopen(url, timeout=30):
                pass
        except urllib.error.HTTPError:
            pass  # the server has no such key: the proxy saw the request, which is all


#: Starts the lines meant for the parent (a command prints its own output too).
SAY = "@child "


def _say(message: dict[str, Any]) -> None:
    print(SAY + json.dumps(message), flush=True)


def main() -> None:
    # A process started with SIGINT ignored (SIG_IGN survives exec) or blocked (the
    # mask of the thread that started it) never gets KeyboardInterrupt: the trials
    # would run to the end. Such an inheritance from the test worker is no part of
    # what is tested: start as a process a person starts does.
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        print(f"interrupt_child: SIGINT was {signal.getsignal(signal.SIGINT)!r}", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]):
        print("interrupt_child: SIGINT was blocked", file=sys.stderr)
    config = json.loads(sys.argv[1])
    log = _Log(0, float(config.get("delay", 0.0)))
    log.install()
    import cytearc_vfs  # noqa: F401  (imported before the signal can land)

    while True:
        _say({"ready": True})
        line = sys.stdin.readline()  # the next trial, once the parent is ready to interrupt
        if not line.strip():
            break
        trial = json.loads(line)
        local = None if config.get("storage_options") else Path(trial["destination"])
        with log.lock:
            log.events.clear()
            log.started, log.point = 0, int(trial.get("point", 0))
        outcome = _attempt(config, trial, again=False)
        log.add("returned", "")
        _mark(config.get("mark"))
        before = _tree(local) if local is not None else {}
        time.sleep(float(config.get("linger", 0.0)))  # whatever still runs gets its chance
        outcome["late"] = log.late()
        outcome["changed"] = local is not None and _tree(local) != before
        outcome["writes"] = log.started
        _say(outcome)
        if outcome["outcome"] == "interrupted":
            sys.stdin.readline()  # the parent has looked at what the interrupt left
            with log.lock:
                log.point = 0
            _say(_attempt(config, trial, again=True))
    os._exit(0)  # no interpreter shutdown: it would wait for nothing and prove nothing


if __name__ == "__main__":
    main()
