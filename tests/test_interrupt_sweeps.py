"""SIGINT at every stage of a write: when the interrupt returns, nothing the writer started still writes.

Each trial runs one writer in a child (``interrupt_child.py``) and sends it
SIGINT while its writes are in flight: locally right after the n-th
LocalStore write has started (each write waits in its thread before it
touches the file), on S3 when the proxy has received the n-th write request
(each request waits in the proxy before it is forwarded). Points are spread
over the whole write, from the root's first document to the commit.

Afterwards, for the Python API (the caller catches ``KeyboardInterrupt``)
and the command line (which reports and cleans up):

- no write started, ended or was stored after the exception returned (the
  child's log of LocalStore writes; the proxy's record of every request,
  placed against a mark the child sends once it has returned), and the
  destination's files did not change while the child waited;
- the destination is refused as unfinished (API) or absent (the command
  created it and removed it);
- the same write then succeeds (``overwrite=True`` for the API).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_harness import write_h5ad
from conftest import realistic_counts
from interrupt_child import SAY
from loopback_proxy import LoopbackProxy, Seen
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.errors import IncompleteStoreError
from cytearc_vfs.remote.locations import open_location

CHILD = Path(__file__).with_name("interrupt_child.py")
#: Seconds each LocalStore write waits in its thread, and each S3 request in the proxy.
IN_FLIGHT = 0.05
#: Seconds a child waits after the interrupt returned for late writes to show.
LINGER = 0.5
MARK = "/__interrupt_returned__"
#: Seconds to wait for one line of the child (a whole write, on a loaded machine).
LINE_TIMEOUT = 300
WRITES = ("PUT", "POST", "DELETE")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("interrupt-sweeps")
    counts = realistic_counts(3_000, 400, seed=3, density=0.05)
    write_h5ad(root / "in.h5ad", counts)
    cv.write_counts(root / "a.zarr", counts)
    return {"h5ad": str(root / "in.h5ad"), "a": str(root / "a.zarr"), "counts": counts}


class _Child:
    """The child process that runs the trials one after another (see interrupt_child.py)."""

    def __init__(self, config: dict[str, Any], errors: Path) -> None:
        self._errors = errors
        self._stderr = errors.open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps({"linger": LINGER, **config})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        # read by a thread, so a child that hangs fails the test instead of stopping it
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _line(self) -> dict[str, Any]:
        line = ""
        while not line.startswith(SAY):  # the command's own output is not for us
            try:
                line = self._lines.get(timeout=LINE_TIMEOUT)
            except queue.Empty:
                raise AssertionError(
                    f"the child hangs: {self._errors.read_text()[-2000:]}"
                ) from None
            assert line, f"the child ended: {self._errors.read_text()[-2000:]}"
        answer: dict[str, Any] = json.loads(line[len(SAY) :])
        assert not str(answer.get("outcome", "")).startswith("error"), answer
        return answer

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def trial(self, trial: dict[str, Any], proxy: LoopbackProxy | None = None) -> dict[str, Any]:
        """Run one trial; with ``proxy`` and ``trial["proxy_point"]``, SIGINT the child when
        the proxy has received that many write requests."""
        assert self._line() == {"ready": True}
        if proxy is not None:
            proxy.take()
            if trial.get("proxy_point"):
                pid = self.process.pid
                proxy.on(int(trial["proxy_point"]), lambda: os.kill(pid, signal.SIGINT))
        self._send(json.dumps(trial))
        report = self._line()
        if proxy is not None:
            proxy.clear()  # a point past the last write is never met
        return report

    def rerun(self) -> dict[str, Any]:
        """After an interrupted trial: the same write again, in the same process."""
        self._send("")
        return self._line()

    def close(self) -> str:
        """End the child; its stderr."""
        with contextlib.suppress(AssertionError, OSError, ValueError):
            assert self._line() == {"ready": True}
            self._send("")
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()  # a failed test left it waiting for a line
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self._stderr):
            if stream is not None:
                stream.close()
        errors = self._errors.read_text()
        assert "Task was destroyed" not in errors, errors
        return errors


def _points(total: int, count: int) -> list[int]:
    """``count`` points spread over writes 1..``total``, the first and the last included."""
    return sorted({round(p) for p in np.linspace(1, total, count)})


def _refused_or_absent(destination: str, options: dict[str, Any] | None = None) -> None:
    """The destination does not open: refused as unfinished, or not there at all."""
    try:
        cv.open_store(destination, storage_options=options)
    except IncompleteStoreError:
        return
    except (FileNotFoundError, ValueError):
        keys = _keys(destination, options)
    else:
        raise AssertionError(f"{destination} opens after the interrupt")
    assert keys == [], keys


def _keys(destination: str, options: dict[str, Any] | None) -> list[str]:
    if options is None:
        path = Path(destination)
        return sorted(str(p) for p in path.rglob("*")) if path.exists() else []
    store = open_location(destination, read_only=True, storage_options=options)
    from zarr.core.sync import sync

    async def listed() -> list[str]:
        return [key async for key in store.list()]

    return sorted(sync(listed()))


# ------------------------------------------------------------------ local


def _local_checks(report: dict[str, Any], point: int) -> None:
    assert report["outcome"] == "interrupted", (point, report)
    assert report["late"] == [], (point, report)  # no write started or ended after
    assert report["changed"] is False, (point, report)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["write", "repack"])
def test_api_interrupt_sweep_local(kind: str, inputs: dict[str, Any], tmp_path: Path) -> None:
    source = inputs["h5ad"] if kind == "write" else inputs["a"]
    child = _Child({"mode": "api", "argv": [kind, source], "delay": IN_FLIGHT}, tmp_path / "err")
    try:
        full = child.trial({"destination": str(tmp_path / "full.zarr")})
        assert full["outcome"] == "finished", full
        for point in _points(full["writes"], 6):
            destination = str(tmp_path / f"{kind}-{point}.zarr")
            _local_checks(child.trial({"destination": destination, "point": point}), point)
            _refused_or_absent(destination)
            # the same process goes on: the same write replaces the unfinished destination
            assert child.rerun()["outcome"] == "finished"
            assert cv.open_store(destination)
    finally:
        child.close()


@pytest.mark.slow
def test_cli_interrupt_sweep_local(inputs: dict[str, Any], tmp_path: Path) -> None:
    child = _Child({"mode": "cli", "delay": IN_FLIGHT}, tmp_path / "err")

    def trial(destination: str, point: int = 0) -> dict[str, Any]:
        argv = ["write", inputs["h5ad"], destination]
        return {"destination": destination, "argv": argv, "point": point}

    try:
        full = child.trial(trial(str(tmp_path / "full.zarr")))
        assert full["code"] == 0, full
        for point in _points(full["writes"], 4):
            destination = str(tmp_path / f"cli-{point}.zarr")
            report = child.trial(trial(destination, point))
            _local_checks(report, point)
            assert report["code"] == 130
            assert not Path(destination).exists()  # the command created it and removed it
            assert child.rerun()["code"] == 0
            assert cv.open_store(destination)
    finally:
        errors = child.close()
    assert "interrupted" in errors


# ------------------------------------------------------------------ S3


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[LoopbackProxy]:
    running = LoopbackProxy(s3_server.endpoint)
    running.delay = IN_FLIGHT
    try:
        yield running
    finally:
        running.close()


def _answered(proxy: LoopbackProxy) -> list[Seen]:
    """Every request the proxy took, once all of them have been answered."""
    for _ in range(600):  # bounded: a request forwarded late is answered within its delay
        with proxy._lock:
            if all(seen.ended for seen in proxy.seen):
                break
        time.sleep(0.05)
    return proxy.take()


def _after_mark(seen: list[Seen]) -> tuple[list[Seen], list[Seen]]:
    """The requests sent after the mark, and the writes answered (stored) after it."""
    marks = [s for s in seen if s.path.startswith(MARK)]
    assert len(marks) == 1, "the child sent no mark"
    mark = marks[0]
    others = [s for s in seen if s is not mark]
    sent = [s for s in others if s.started >= mark.started]
    stored = [s for s in others if s.method in WRITES and (not s.ended or s.ended >= mark.started)]
    return sent, stored


@pytest.mark.slow
@pytest.mark.remote
@pytest.mark.parametrize("mode", ["api", "cli"])
def test_interrupt_sweep_s3(
    mode: str, inputs: dict[str, Any], s3_server: S3Server, proxy: LoopbackProxy, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    via_proxy = {**s3_server.storage_options(), "endpoint": proxy.endpoint}
    direct = s3_server.storage_options()
    config = {
        "mode": mode,
        "argv": ["write", inputs["h5ad"]],
        "storage_options": via_proxy,
        "mark": proxy.endpoint + MARK,
    }

    def trial(destination: str, point: int = 0) -> dict[str, Any]:
        argv = ["write", inputs["h5ad"], destination, "--storage-options", json.dumps(via_proxy)]
        return {"destination": destination, "argv": argv, "proxy_point": point}

    child = _Child(config, tmp_path / "err")
    try:
        full = child.trial(trial(f"s3://{bucket}/full.zarr"), proxy)
        assert full["outcome"] == "finished", full
        total = sum(1 for s in _answered(proxy) if s.method in WRITES)
        points = _points(total, 5)
        interrupted = 0
        for point in points:
            destination = f"s3://{bucket}/{mode}-{point}.zarr"
            report = child.trial(trial(destination, point), proxy)
            sent, stored = _after_mark(_answered(proxy))
            assert sent == [], (point, sent)  # nothing was sent after the interrupt returned
            assert stored == [], (point, stored)  # nothing sent before was stored after
            if report["outcome"] == "finished":
                continue  # the signal came after the last write had been answered
            interrupted += 1
            if mode == "api":
                _refused_or_absent(destination, direct)
            else:
                assert report["code"] == 130
                assert _keys(destination, direct) == []  # created by the command, removed
            rerun = child.rerun()
            assert rerun["outcome"] == "finished", rerun
            assert cv.open_store(destination, storage_options=direct)
    finally:
        child.close()
    assert interrupted >= len(points) - 1, interrupted
