"""The array kinds of the interop table (its rows), each a context manager yielding a target.

A kind is a function ``build(workspace) -> context manager of Target``
registered with :func:`array_kind`. The workspace writes (once per session)
the ordinary stores the kinds point into; a kind that needs a server or a
mount starts it on entering and stops it on leaving, and every reader of the
row reads while it runs.

Rows today: ``counts`` and ``countsT`` under three layout policies (the
default, a small one with many shards, and one whose chunks are column
blocks), all written the portable way (each inner chunk a Blosc container of
checksummed zstd blocks, and a crc32c), and under the default policy written
row-framed as stores before issue 14 were (``row_framed_writes``), the id
columns, the
``cellData/I`` flags, two count summaries, an artifact array, and the
default-policy counts over plain HTTP (a static range server).

The rows of the other writers (repack, a mount's target, the array
operations, the AnnData export) are in ``writer_kinds.py``.

How a later row is added (a few lines each), e.g. a composite served over
HTTP by ``cytearc-vfs serve``, or mounted with FUSE::

    @array_kind("composite-http", "composite `RNA/counts` via `cytearc-vfs serve`")
    @contextmanager
    def composite_over_http(ws: Workspace) -> Iterator[Target]:
        composite, expected = ws.composite()          # write it (to be added)
        with cli_server(["serve", str(composite), "--port", "0"]) as url:
            yield Target(url, "RNA/counts", expected, note="...", scrub=(url,))

    @array_kind("composite-fuse", "composite `RNA/counts` via `cytearc-vfs mount-fs`")
    @contextmanager
    def composite_over_fuse(ws: Workspace) -> Iterator[Target]:
        composite, expected = ws.composite()
        with fuse_mount(composite, ws.scratch("fuse")) as mountpoint:
            yield Target(str(mountpoint), "RNA/counts", expected, scrub=(str(mountpoint),))

``cli_server`` (start ``cytearc-vfs``, wait for its first stdout line
``serving http://127.0.0.1:PORT/``, stop it on exit), ``fuse_mount`` and
``Workspace.composite`` are here, and both rows exist. A kind that
cannot run on this machine (no ``/dev/fuse``) calls ``pytest.skip`` inside
its builder; every reader of its row then skips with that reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

import cytearc_vfs as cv
from cytearc_vfs.encoding.row_frames import rows_per_frame
from cytearc_vfs.write.row_framed import row_framed_writes

from .readers import Target
from .static_http import serve_directory

__all__ = ["KINDS", "ArrayKind", "Workspace", "Written", "array_kind", "cli_server"]

#: The matrix every count row reads: cells x features, uint16.
N_CELLS, N_FEATURES = 1_000, 2_000

#: The store written row-framed (the chunk encoding before the portable layout).
ROW_FRAMED = "row-framed"

#: Layout policies of the stores the count rows read.
POLICIES: dict[str, cv.LayoutPolicy] = {
    "default": cv.LayoutPolicy(),
    # many shards (16 cells each), 4-row chunks of two blocks (3 rows + 1)
    "small": cv.LayoutPolicy(unit_bytes=64 * 1024, chunk_bytes=16 * 1024),
    # chunks of 1 row x 512 features (one block), shards wider than the matrix
    "column-blocks": cv.LayoutPolicy(unit_bytes=16 * 1024, chunk_bytes=1024),
    # the default policy before issue 14 (256 KiB chunks), written as then: row frames
    ROW_FRAMED: cv.LayoutPolicy(unit_bytes=64 * 1024**2, chunk_bytes=256 * 1024),
}


def interop_counts(n_cells: int, n_features: int, *, seed: int = 14) -> sp.csr_array:
    """Realistic counts that exercise the readers' edge cases.

    5 % non-zero, mostly 1-3 with a long tail reaching past 255 (stored as
    uint16), and a band of empty cells (390-609) and one of empty features
    (1300-1799), wide enough that under every policy some inner chunks are
    all zero and left out of their shard (the index marks them missing and
    every reader must fill them with 0).
    """
    rng = np.random.default_rng(seed)
    nnz = int(n_cells * n_features * 0.05)
    rows = rng.integers(0, n_cells, nnz)
    cols = rng.integers(0, n_features, nnz)
    values = rng.geometric(0.45, nnz).astype(np.int64)
    tail = rng.random(nnz) < 0.002
    values[tail] = rng.integers(256, 60_000, int(tail.sum()))
    keep = ~(((rows >= 390) & (rows < 610)) | ((cols >= 1300) & (cols < 1800)))
    matrix = sp.coo_array(
        (values[keep], (rows[keep], cols[keep])), shape=(n_cells, n_features)
    ).tocsr()
    matrix.sum_duplicates()
    # duplicates summed past uint16 would change the stored dtype
    matrix.data = np.minimum(matrix.data, 65_535)
    return sp.csr_array(matrix)


def cell_ids(n: int) -> list[str]:
    """Sample-prefixed barcodes of unequal length, as a real cell table has them."""
    bases = np.array(list("ACGT"))
    rng = np.random.default_rng(1)
    return [
        f"{'s1' if i % 3 else 'sample_two'}_{''.join(rng.choice(bases, 16))}-{i}" for i in range(n)
    ]


def feature_ids(n: int) -> list[str]:
    """Gene-like ids, with non-ASCII names (UTF-32 text must survive every reader)."""
    special = ["Hba-\u03b11", "Café1", "ÅGENE", "MT-ATP8", "线粒体1"]
    return [special[j] if j < len(special) else f"ENSG{j:011d}" for j in range(n)]


@dataclass(frozen=True, slots=True)
class Written:
    """An ordinary store the workspace wrote, and what was written into it."""

    path: Path
    """The store's directory."""
    counts: npt.NDArray[Any]
    """The dense counts, in the stored dtype."""
    cells: list[str]
    """Cell ids, in row order."""
    features: list[str]
    """Feature ids, in column order."""


class Workspace:
    """Stores and scratch directories of one test session, each written once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._stores: dict[str, Written] = {}
        self._artifact: tuple[str, npt.NDArray[Any]] | None = None
        self._composite: tuple[Path, npt.NDArray[Any]] | None = None
        self._mount: tuple[Path, str, npt.NDArray[Any]] | None = None

    def scratch(self, name: str) -> Path:
        """A fresh directory under the session's root."""
        path = self.root / "scratch" / name
        path.mkdir(parents=True, exist_ok=False)
        return path

    def ordinary(self, policy: str = "default") -> Written:
        """The interop matrix written by ``cv.write_counts`` under ``POLICIES[policy]``."""
        if policy not in self._stores:
            matrix = interop_counts(N_CELLS, N_FEATURES)
            path = self.root / f"ordinary-{policy}.zarr"
            cells, features = cell_ids(N_CELLS), feature_ids(N_FEATURES)
            with row_framed_writes() if policy == ROW_FRAMED else nullcontext():
                info = cv.write_counts(
                    path, matrix, cells=cells, features=features, layout=POLICIES[policy]
                )
            dense = matrix.toarray().astype(np.uint16)
            if info.dtype != dense.dtype:  # the rows would test another dtype than they say
                raise AssertionError(f"write_counts stored {info.dtype}, expected uint16")
            self._stores[policy] = Written(path, dense, cells, features)
        return self._stores[policy]

    def artifact(self) -> tuple[str, npt.NDArray[Any]]:
        """A float32 embedding published as an artifact of the default store: (path, values)."""
        if self._artifact is None:
            store = self.ordinary("default")
            values = np.random.default_rng(7).standard_normal((N_CELLS, 30)).astype(np.float32) * 10
            values[0, :3] = [0.0, -0.0, np.float32(1e-42)]  # signed zero and a subnormal
            with cv.publish_artifact(
                store.path,
                "RNA/artifacts",
                "reduction",
                provenance={"operation": "pca", "parameters": {"n": 30}, "inputs": {}},
            ) as art:
                art.write_array("embedding", values)
            self._artifact = (f"{art.path}/embedding", values)
        return self._artifact

    def composite(self) -> tuple[Path, npt.NDArray[Any]]:
        """A composite of the default store and a second source: (path, its counts)."""
        if self._composite is None:
            first = self.ordinary("default")
            matrix = interop_counts(400, N_FEATURES, seed=15)
            second = self.root / "second-source.zarr"
            cv.write_counts(
                second,
                matrix,
                cells=[f"b_{cell}" for cell in cell_ids(400)],
                features=first.features,
            )
            path = self.root / "composite.zarr"
            cv.create_composite(path, {"a": first.path, "b": second})
            expected = np.vstack([first.counts, matrix.toarray().astype(first.counts.dtype)])
            self._composite = (path, expected)
        return self._composite

    def mount(self) -> tuple[Path, str, npt.NDArray[Any]]:
        """A mount over the default store with an artifact published through it
        (so it lands in the mount's target): (path, artifact array path, values)."""
        if self._mount is None:
            source = self.ordinary("default")
            self.artifact()  # the source's own artifact: the mount reads it through
            path = self.root / "mount.zarr"
            cv.mount_datastore(source.path, path).close()
            values = np.random.default_rng(8).standard_normal((N_CELLS, 5)).astype(np.float32)
            with cv.publish_artifact(
                path,
                "RNA/artifacts",
                "reduction",
                provenance={"operation": "pca", "parameters": {"n": 5}, "inputs": {}},
            ) as art:
                art.write_array("embedding", values)
            self._mount = (path, f"{art.path}/embedding", values)
        return self._mount


KindBuilder = Callable[[Workspace], AbstractContextManager[Target]]


@dataclass(frozen=True, slots=True)
class ArrayKind:
    """A row of the table."""

    name: str
    """Slug: the test id and the JSON file's prefix."""
    label: str
    """The row's heading in the report (markdown)."""
    build: KindBuilder
    """Yields the target while its server or mount (if any) runs."""
    everywhere: bool = False
    """Every reader must read it exactly (count arrays as this package writes them)."""


KINDS: dict[str, ArrayKind] = {}


def array_kind(
    name: str, label: str, *, everywhere: bool = False
) -> Callable[[KindBuilder], KindBuilder]:
    """Register ``build`` as the row ``name``; rows keep their registration order.

    ``everywhere``: a reader that fails on the row fails the test (what this
    package writes must read in every reader).
    """

    def register(build: KindBuilder) -> KindBuilder:
        if name in KINDS or "__" in name or "/" in name:
            raise ValueError(f"array kind {name!r} is taken or not a slug")
        KINDS[name] = ArrayKind(name, label, build, everywhere)
        return build

    return register


def describe(store: Path, path: str) -> str:
    """Data type, chunking and codecs of an array, from its ``zarr.json`` (not via zarr)."""
    meta = json.loads((store / path / "zarr.json").read_text(encoding="utf-8"))
    dtype = meta["data_type"]
    dtype_name = dtype if isinstance(dtype, str) else f"{dtype['name']} {dtype['configuration']}"
    grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
    codecs = meta["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        inner = codecs[0]["configuration"]
        chunk = inner["chunk_shape"]
        names = "+".join(c["name"] for c in inner["codecs"])
        text = f"{dtype_name}; shards {grid}, chunks {chunk} ({names})"
        if path.endswith(("counts", "countsT")):
            itemsize = np.dtype(dtype_name).itemsize
            per_frame = rows_per_frame((chunk[0], chunk[1]), itemsize)
            frames = -(-chunk[0] // per_frame)
            if policy_of(store) == ROW_FRAMED:
                text += f", {frames} row frames per chunk" if frames > 1 else ", one zstd frame"
            elif "blosc" in names:
                text += f", {frames} zstd blocks of {per_frame} row(s) per chunk"
            else:
                text += ", one zstd frame per chunk"
        return text
    names = "+".join(c["name"] for c in codecs)
    return f"{dtype_name}; chunks {grid} ({names})"


def _target(store: Written | Path, path: str, expected: npt.NDArray[Any]) -> Target:
    root = store.path if isinstance(store, Written) else store
    return Target(str(root), path, expected, describe(root, path), scrub=(str(root),))


def policy_of(store: Path) -> str:
    """The policy name of a workspace store (``ordinary-{policy}.zarr``)."""
    return store.name.removeprefix("ordinary-").removesuffix(".zarr")


def _count_rows(policy: str) -> None:
    portable = policy != ROW_FRAMED
    what = f"{policy} policy" if portable else "row-framed (stores written before issue 14)"

    @array_kind(f"counts-{policy}", f"`RNA/counts`, {what}", everywhere=portable)
    @contextmanager
    def counts(ws: Workspace) -> Iterator[Target]:
        store = ws.ordinary(policy)
        yield _target(store, "RNA/counts", store.counts)

    @array_kind(f"countsT-{policy}", f"`RNA/countsT`, {what}", everywhere=portable)
    @contextmanager
    def counts_t(ws: Workspace) -> Iterator[Target]:
        store = ws.ordinary(policy)
        yield _target(store, "RNA/countsT", np.ascontiguousarray(store.counts.T))


for _policy in POLICIES:
    _count_rows(_policy)


@array_kind("cell-ids", "`cellData/ids`")
@contextmanager
def _cell_ids(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    yield _target(store, "cellData/ids", np.array(store.cells, dtype=str))


@array_kind("feature-ids", "`RNA/featureData/ids` (non-ASCII)")
@contextmanager
def _feature_ids(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    yield _target(store, "RNA/featureData/ids", np.array(store.features, dtype=str))


@array_kind("cell-flags", "`cellData/I`")
@contextmanager
def _cell_flags(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    yield _target(store, "cellData/I", np.ones(len(store.cells), dtype=bool))


@array_kind("row-sums", "`RNA/countSummaries/rowSums`")
@contextmanager
def _row_sums(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    yield _target(store, "RNA/countSummaries/rowSums", store.counts.sum(axis=1, dtype=np.uint64))


@array_kind("row-positive", "`RNA/countSummaries/rowPositive`")
@contextmanager
def _row_positive(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    positive = np.count_nonzero(store.counts, axis=1).astype(np.int64)
    yield _target(store, "RNA/countSummaries/rowPositive", positive)


@array_kind("artifact", "artifact array (`cv.publish_artifact`, float32)")
@contextmanager
def _artifact(ws: Workspace) -> Iterator[Target]:
    path, values = ws.artifact()
    yield _target(ws.ordinary(), path, values)


@array_kind(
    "counts-http",
    "`RNA/counts`, default policy, over HTTP (static range server)",
    everywhere=True,
)
@contextmanager
def _counts_over_http(ws: Workspace) -> Iterator[Target]:
    store = ws.ordinary()
    with serve_directory(store.path) as url:
        local = _target(store, "RNA/counts", store.counts)
        yield Target(
            url, local.path, local.expected, local.note, scrub=(url.rstrip("/"), str(store.path))
        )


@array_kind("composite-http", "composite `RNA/counts` via `cytearc-vfs serve`")
@contextmanager
def _composite_over_http(ws: Workspace) -> Iterator[Target]:
    composite, expected = ws.composite()
    with cli_server(["serve", str(composite), "--port", "0"]) as url:
        note = "computed chunks (bytes codec), served over HTTP"
        yield Target(url, "RNA/counts", expected, note, scrub=(url.rstrip("/"), str(composite)))


@array_kind("composite-fuse", "composite `RNA/counts` via `cytearc-vfs mount-fs`")
@contextmanager
def _composite_over_fuse(ws: Workspace) -> Iterator[Target]:
    composite, expected = ws.composite()
    with fuse_mount(composite, ws.scratch("composite-fuse")) as mountpoint:
        note = "computed chunks (bytes codec), a read-only FUSE directory"
        yield Target(str(mountpoint), "RNA/counts", expected, note, scrub=(str(mountpoint),))


@array_kind(
    "mount-artifact-fuse", "mount: artifact written to the mount, via `cytearc-vfs mount-fs`"
)
@contextmanager
def _mount_artifact_over_fuse(ws: Workspace) -> Iterator[Target]:
    mount, path, values = ws.mount()
    with fuse_mount(mount, ws.scratch("mount-artifact-fuse")) as mountpoint:
        note = "an artifact in the mount's target, a read-only FUSE directory"
        yield Target(str(mountpoint), path, values, note, scrub=(str(mountpoint),))


@array_kind(
    "mount-source-artifact-fuse",
    "mount: the source's artifact read through, via `cytearc-vfs mount-fs`",
)
@contextmanager
def _source_artifact_over_fuse(ws: Workspace) -> Iterator[Target]:
    mount, _, _ = ws.mount()
    path, values = ws.artifact()
    with fuse_mount(mount, ws.scratch("mount-source-artifact-fuse")) as mountpoint:
        note = "an artifact of the mount's source, resolved through the mount namespace"
        yield Target(str(mountpoint), path, values, note, scrub=(str(mountpoint),))


@contextmanager
def fuse_mount(location: Path, mountpoint: Path, *, timeout: float = 60) -> Iterator[Path]:
    """Run ``cytearc-vfs mount-fs LOCATION MOUNTPOINT`` until the block ends.

    Skips (every reader of the row) where this machine cannot mount FUSE;
    fails when the command itself fails to mount.
    """
    import pytest

    try:
        from cytearc_vfs_adapters.fuse.mounting import check_fuse, is_mounted

        check_fuse()
    except Exception as exc:  # no binding, no /dev/fuse, no fusermount3
        pytest.skip(f"FUSE is not available here: {exc}")
    # its log goes to a file, not a pipe nobody drains: a read that fails on
    # every chunk (EIO lines) must not fill a pipe and block the mount
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cytearc_vfs.cli", "mount-fs", str(location), str(mountpoint)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert process.stdout is not None
            # the first line, waited for at most `timeout`: a hung mount fails the test
            lines: list[str] = []
            waiting = threading.Thread(
                target=lambda: lines.append(process.stdout.readline()),  # type: ignore[union-attr]
                daemon=True,
            )
            waiting.start()
            waiting.join(timeout)
            first = lines[0].strip() if lines else ""
            if not first.startswith("mounted ") or not is_mounted(mountpoint):
                process.kill()
                process.wait(timeout=timeout)
                log.seek(0)
                said = log.read().strip()[-500:]
                if "could not mount" in said or "FUSE is not available" in said:
                    # the machine refuses mounts (a container without SYS_ADMIN...)
                    pytest.skip(f"FUSE does not work here: {said}")
                # anything else is mount-fs failing: a finding, never a quiet skip
                raise AssertionError(
                    f"mount-fs {location} {mountpoint} did not mount within {timeout:g} s (first "
                    f"line {first!r}, exit {process.returncode}): {said}"
                )
            yield mountpoint
        finally:
            _interrupt(process, timeout)
            if is_mounted(mountpoint):  # killed (here or above): its mount is left behind
                subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
            if process.stdout is not None:
                process.stdout.close()


def _interrupt(process: subprocess.Popen[str], timeout: float) -> bool:
    """SIGINT a running command and wait; SIGKILL it after ``timeout`` seconds.
    Returns False when it had to be killed (it cleaned nothing up)."""
    if process.poll() is not None:
        return True
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False
    return True


@contextmanager
def cli_server(args: Sequence[str], *, timeout: float = 60) -> Iterator[str]:
    """Run ``cytearc-vfs *args`` until the block ends; yields the URL of its first line.

    The command must print ``serving http://HOST:PORT/`` as its first line
    of stdout (``cytearc-vfs serve LOCATION --port 0`` does). Later output is
    drained so a chatty server never blocks on a full pipe. On leaving, the
    command gets SIGINT, then SIGKILL if it has not exited within ``timeout``
    seconds.
    """
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "cytearc_vfs.cli", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert process.stdout is not None
            first = process.stdout.readline().strip()
            if not first.startswith("serving "):
                with suppress(subprocess.TimeoutExpired):  # its stderr is complete once it exits
                    process.wait(timeout=5)
                stderr.seek(0)
                raise RuntimeError(
                    f"cytearc-vfs {' '.join(args)} printed {first!r} first, not 'serving URL' "
                    f"(exit code {process.returncode}): {stderr.read().strip()[-2000:]}"
                )
            threading.Thread(target=process.stdout.read, daemon=True).start()
            yield first.removeprefix("serving ")
        finally:
            _interrupt(process, timeout)
            if process.stdout is not None:
                process.stdout.close()


# the rows of the other writers (repack, mounts, array operations, AnnData export),
# registered after these; that module imports this one's names, all defined by now
from . import writer_kinds  # noqa: E402, F401
