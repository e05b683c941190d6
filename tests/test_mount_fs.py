"""``cytearc-vfs mount-fs``: stores, composites and mounts as a read-only FUSE directory tree.

Two kinds of tests. The first half drives the file system's callbacks
(:class:`~cytearc_vfs_adapters.fuse.operations.TreeOperations`) in this process, as
libfuse would: sizes, listings, reads, errors, and what is computed when.
They run everywhere. The second half mounts for real with the installed
command and reads through the kernel with zarr-python, tensorstore and
zarrs; it skips, saying why, where FUSE does not work (no /dev/fuse, no
fusermount3, no binding, or a mount the machine refuses). Every mount is
removed when its test ends, passed or failed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cli_harness import TerminalSession, cli_executable, readable, run_main, stop_process
from conftest import realistic_counts
from cytearc_vfs_adapters.fuse.mounting import check_fuse, is_mounted
from cytearc_vfs_adapters.fuse.operations import TreeOperations
from cytearc_vfs_adapters.fuse.tree import StoreTree
from cytearc_vfs_adapters.served_store import ServedStore
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.composite import create as composite_create

PROVENANCE = {"operation": "test.pca", "parameters": {"k": 2}, "inputs": {}}


# --------------------------------------------------------------------------- data


@dataclass
class Composite:
    """A composite of generated sources and the dense matrix it must read as."""

    path: Path
    sources: list[Path]
    dense: np.ndarray


def make_composite(
    root: Path, monkeypatch: pytest.MonkeyPatch, *, chunk_bytes: int = 64 * 1024
) -> Composite:
    """Three sources with overlapping gene sets, composed as a union.

    Virtual chunks are made small (``chunk_bytes``) so the composite has
    several row chunks and a short last one, served at full size.
    """
    monkeypatch.setattr(composite_create, "VIRTUAL_CHUNK_BYTES", chunk_bytes)
    shapes = [(700, 120, 0), (500, 140, 30), (900, 100, 60)]  # cells, genes, first gene id
    sources, blocks, gene_sets = [], [], []
    for index, (cells, genes, first) in enumerate(shapes):
        counts = realistic_counts(cells, genes, density=0.1, seed=10 + index)
        ids = [f"gene{first + g}" for g in range(genes)]
        path = root / f"s{index}.zarr"
        cv.write_counts(
            path, counts, cells=[f"s{index}_cell{c}" for c in range(cells)], features=ids
        )
        sources.append(path)
        blocks.append(counts)
        gene_sets.append(ids)
    store = cv.create_composite(root / "c.zarr", {f"s{i}": str(p) for i, p in enumerate(sources)})
    features = zarr.open_array(store, path="RNA/featureData/ids", mode="r")[:].tolist()
    column = {gene: j for j, gene in enumerate(features)}
    dense = np.zeros((sum(b.shape[0] for b in blocks), len(features)), dtype=np.float64)
    row = 0
    for block, ids in zip(blocks, gene_sets, strict=True):
        dense[row : row + block.shape[0], [column[g] for g in ids]] = block.toarray()
        row += block.shape[0]
    return Composite(root / "c.zarr", sources, dense)


def make_mount(root: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A mounted target whose source published an artifact, with one of its own."""
    source = root / "src.zarr"
    cv.write_counts(source, realistic_counts(60, 15, density=0.2, seed=3))
    published = np.arange(120, dtype=np.float64).reshape(60, 2)
    with cv.publish_artifact(
        cv.open_store(source, mode="r+"), "RNA/artifacts", "pca", provenance=PROVENANCE
    ) as artifact:
        artifact.write_array("data", published)
    target = root / "tgt.zarr"
    mount = cv.mount_datastore(source, target)
    own = np.linspace(0, 1, 60).reshape(60, 1)
    with cv.publish_artifact(
        mount, "RNA/artifacts", "umap", provenance={**PROVENANCE, "operation": "test.umap"}
    ) as artifact:
        artifact.write_array("data", own)
    return target, published, own


def artifact_arrays(root: zarr.Group) -> dict[str, np.ndarray]:
    """Every artifact array of the mounted target, by kind."""
    found = {}
    artifacts = root["RNA/artifacts"]
    assert isinstance(artifacts, zarr.Group)
    for kind, group in artifacts.groups():
        for _, artifact in group.groups():
            data = artifact["data"]
            assert isinstance(data, zarr.Array)
            found[kind] = np.asarray(data[:])
    return found


# ----------------------------------------------------------- callbacks, in process


def walk(operations: TreeOperations, path: str = "/") -> dict[str, dict[str, Any]]:
    """Every file below ``path`` with its attributes, through readdir and getattr only."""
    files: dict[str, dict[str, Any]] = {}
    for entry in operations.readdir(path, 0):
        if isinstance(entry, str):
            continue  # "." and ".."
        name, mode, _ = entry
        child = path.rstrip("/") + "/" + name
        attributes = operations.getattr(child)
        assert (attributes["st_mode"] & 0o170000) == mode, child
        if attributes["st_mode"] & 0o040000:
            files.update(walk(operations, child))
        else:
            files[child] = attributes
    return files


def read_through(operations: TreeOperations, path: str, piece: int = 128 * 1024) -> bytes:
    """A whole file read as the kernel reads it: one open, many reads, one release."""
    handle = operations.open_file(path, os.O_RDONLY)
    try:
        size = operations.getattr(path)["st_size"]
        return b"".join(
            operations.read_file(path, piece, offset, handle) for offset in range(0, size, piece)
        )
    finally:
        operations.release_file(path, handle)


def value_of(store: Any, key: str) -> bytes:
    buffer = sync(store.get(key, prototype=default_buffer_prototype()))
    assert buffer is not None, key
    return bytes(buffer.to_bytes())


def test_listing_and_sizing_a_composite_computes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    store = cv.open_store(composite.path)
    assert isinstance(store, cv.CompositeStore)
    operations = TreeOperations(StoreTree(store))
    files = walk(operations)
    # the walk read no source and computed no chunk
    assert store.chunk_stats.requests == 0 and store.chunk_stats.bytes_read == 0
    assert operations.computed_values == 0
    chunks = sorted(path for path in files if "/counts/c/" in path or "/countsT/c/" in path)
    assert len(chunks) >= 2 * 3, chunks  # several row chunks of counts and of countsT
    for path, attributes in files.items():
        assert attributes["st_size"] == len(value_of(store, path.lstrip("/"))), path
    assert store.chunk_stats.requests > 0  # the comparison above did compute them


def test_every_key_of_every_kind_has_its_size_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    target, _, _ = make_mount(tmp_path)
    for location in (composite.sources[0], composite.path, target):
        store = cv.open_store(location)
        operations = TreeOperations(StoreTree(store))
        files = walk(operations)
        listed = sorted(sync(_all_keys(store)))
        assert sorted(path.lstrip("/") for path in files) == listed, location
        for path, attributes in files.items():
            value = value_of(store, path.lstrip("/"))
            assert attributes["st_size"] == len(value), (location, path)
            assert read_through(operations, path, piece=4096) == value, (location, path)


async def _all_keys(store: Any) -> list[str]:
    return [key async for key in store.list()]


def test_a_computed_chunk_is_computed_once_per_open_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    store = cv.open_store(composite.path)
    operations = TreeOperations(StoreTree(store))
    path = "/RNA/counts/c/1/0"
    expected = value_of(store, path.lstrip("/"))
    assert read_through(operations, path, piece=1000) == expected  # 66 reads
    assert operations.computed_values == 1
    assert read_through(operations, path) == expected  # a new open computes again
    assert operations.computed_values == 2

    # concurrent reads of two handles on one key share one computation
    handles = [operations.open_file(path, os.O_RDONLY) for _ in range(2)]
    barrier = threading.Barrier(8)
    pieces: dict[int, bytes] = {}

    def read(index: int) -> None:
        barrier.wait()
        offset = index * 4096
        pieces[index] = operations.read_file(path, 4096, offset, handles[index % 2])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for handle in handles:
        operations.release_file(path, handle)
    assert operations.computed_values == 3
    assert b"".join(pieces[i] for i in range(8)) == expected[: 8 * 4096]


def test_a_deleted_source_is_eio_never_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch, chunk_bytes=8 << 20)  # one chunk: all sources
    served = ServedStore.open(composite.path)
    operations = TreeOperations(served)
    expected = value_of(served.current, "RNA/counts/c/0/0")
    shutil.copytree(composite.sources[1], tmp_path / "kept.zarr")
    shutil.rmtree(composite.sources[1])
    handle = operations.open_file("/RNA/counts/c/0/0", os.O_RDONLY)
    with pytest.raises(OSError) as failed:
        operations.read_file("/RNA/counts/c/0/0", 4096, 0, handle)
    assert failed.value.errno == errno.EIO
    assert "reopening" in str(failed.value) and "restore the source" in str(failed.value)
    assert served.reopens == 1  # the failure reopened the composite, which failed too
    # the next read fails again, without another reopen (nothing changed on disk)
    with pytest.raises(OSError) as again:
        operations.read_file("/RNA/counts/c/0/0", 4096, 0, handle)
    assert again.value.errno == errno.EIO
    assert served.reopens == 1
    # restored at its path from a copy: the open handle reads the same bytes,
    # from the store reopened by itself (no restart)
    shutil.copytree(tmp_path / "kept.zarr", composite.sources[1])
    assert operations.read_file("/RNA/counts/c/0/0", 4096, 0, handle) == expected[:4096]
    assert (served.reopens, served.recovered) == (2, 1)
    operations.release_file("/RNA/counts/c/0/0", handle)
    # metadata still answers: it never needed the source
    assert operations.getattr("/RNA/counts/zarr.json")["st_size"] > 0
    served.close()


def test_changes_are_erofs_and_absent_paths_enoent(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(50, 20, seed=1))
    operations = TreeOperations(StoreTree(cv.open_store(tmp_path / "a.zarr")))
    for call in (
        lambda: operations.open_file("/zarr.json", os.O_WRONLY),
        lambda: operations.open_file("/zarr.json", os.O_RDWR),
        lambda: operations.create("/new", 0o644, os.O_WRONLY),
        lambda: operations.mkdir("/dir", 0o755),
        lambda: operations.unlink("/zarr.json"),
        lambda: operations.rename("/zarr.json", "/other"),
        lambda: operations.write("/zarr.json", b"x", 0, 0),
        lambda: operations.truncate("/zarr.json", 0),
    ):
        with pytest.raises(OSError) as refused:
            call()
        assert refused.value.errno == errno.EROFS
    for path in ("/absent", "/RNA/absent/zarr.json", "/zarr.json/below"):
        with pytest.raises(OSError) as missing:
            operations.getattr(path)
        assert missing.value.errno == errno.ENOENT


def test_every_listed_name_can_be_stat_ed(tmp_path: Path) -> None:
    # A composite refuses keys spelled with a backslash or a newline; files of
    # its directory so named were listed as directories that then answered
    # ENOENT, so `find` and `cp -r` of the mount failed on them.
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(tmp_path / f"{name}.zarr", realistic_counts(40, 20, seed=seed))
    cv.create_composite(tmp_path / "c.zarr", [tmp_path / "a.zarr", tmp_path / "b.zarr"])
    odd = ["sp ace %20 \u00fc", "L" * 255]
    for name in ["back\\slash", "new\nline", *odd]:
        (tmp_path / "c.zarr" / "cellData" / name).write_bytes(name.encode())
    operations = TreeOperations(StoreTree(cv.open_store(tmp_path / "c.zarr")))
    listed = {entry[0] for entry in operations.readdir("/cellData", 0) if isinstance(entry, tuple)}
    assert set(odd) <= listed
    assert not {"back\\slash", "new\nline"} & listed
    for name in listed:
        assert operations.getattr(f"/cellData/{name}")["st_mode"]
    for name in odd:
        assert read_through(operations, f"/cellData/{name}") == name.encode()


# ------------------------------------------------------------------ command line


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli_executable(), *args], capture_output=True, text=True, check=False, env=env, timeout=300
    )


def test_refusals_are_one_line(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(50, 20, seed=1))
    missing = run_main("mount-fs", str(tmp_path / "a.zarr"), str(tmp_path / "absent"))
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.count("\n") == 1 and "mkdir" in missing.stderr
    (tmp_path / "file").write_text("x")
    not_dir = run_main("mount-fs", str(tmp_path / "a.zarr"), str(tmp_path / "file"))
    assert not_dir.returncode == 2 and "not a directory" in not_dir.stderr
    (tmp_path / "mp").mkdir()
    not_store = run_main("mount-fs", str(tmp_path / "mp"), str(tmp_path / "mp"))
    assert not_store.returncode == 2 and "mount-fs needs a CyteArc store" in not_store.stderr
    bad_options = run_main(
        "mount-fs", str(tmp_path / "a.zarr"), str(tmp_path / "mp"), "--storage-options", "[1]"
    )
    assert bad_options.returncode == 2 and "must be a JSON object" in bad_options.stderr


def test_missing_binding_names_the_extra(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(50, 20, seed=1))
    (tmp_path / "mp").mkdir()
    # an installation without the fuse extra: importing mfusepy fails
    code = (
        "import sys; sys.modules['mfusepy'] = None\n"
        "from cytearc_vfs.cli import main\n"
        f"sys.exit(main(['mount-fs', {str(tmp_path / 'a.zarr')!r}, {str(tmp_path / 'mp')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    try:
        check_fuse()
    except OSError:  # the machine lacks FUSE itself: that is checked (and named) first
        assert result.returncode == 4 and "FUSE is not available" in result.stderr
        return
    assert result.returncode == 4, result.stderr
    assert result.stderr.count("\n") == 1
    assert "pip install 'cytearc-vfs[fuse]'" in result.stderr


def test_missing_fusermount3_names_the_package(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(50, 20, seed=1))
    (tmp_path / "mp").mkdir()
    bare = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    result = run_cli("mount-fs", str(tmp_path / "a.zarr"), str(tmp_path / "mp"), env=bare)
    assert result.returncode == 4, result.stderr
    assert result.stderr.count("\n") == 1
    assert "FUSE is not available" in result.stderr
    if Path("/dev/fuse").exists() and os.access("/dev/fuse", os.R_OK | os.W_OK):
        assert (
            "fusermount3 is missing" in result.stderr and "apt-get install fuse3" in result.stderr
        )


def test_the_core_never_imports_the_binding() -> None:
    code = (
        "import sys, cytearc_vfs as cv, cytearc_vfs.cli, cytearc_vfs_adapters.fuse.tree, "
        "cytearc_vfs_adapters.fuse.operations, cytearc_vfs_adapters.fuse.mounting\n"
        "from cytearc_vfs.cli.parser import build_parser; build_parser()\n"
        "assert 'mfusepy' not in sys.modules, 'the binding was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ------------------------------------------------------------------ real mounts


@pytest.fixture(scope="module")
def fuse_works() -> None:
    """Skip (with the reason) where this machine cannot mount FUSE file systems."""
    try:
        check_fuse()
    except (ImportError, OSError) as exc:
        pytest.skip(f"FUSE does not work here: {exc}")


@dataclass
class Mounted:
    """A running ``cytearc-vfs mount-fs``."""

    process: subprocess.Popen[str]
    mountpoint: Path
    stderr: Path

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, str, str]:
        """Send ``signum``; the exit status, the rest of stdout, and stderr."""
        self.process.send_signal(signum)
        out, _ = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, self.stderr.read_text()


def _first_line(process: subprocess.Popen[str], stderr: Path, *, json_mode: bool) -> str:
    """The command's first line: on stdout, or with ``--json`` on stderr (stdout
    then carries one JSON object, at the end)."""
    deadline = time.monotonic() + 120
    if not json_mode:
        assert process.stdout is not None
        ready = readable(process.stdout, 120)
        return process.stdout.readline() if ready else ""
    while time.monotonic() < deadline and process.poll() is None:
        said = stderr.read_text()
        if said.endswith("\n"):
            return said.splitlines()[0] + "\n"
        time.sleep(0.05)
    return ""


@contextmanager
def mount_fs(location: Path, mountpoint: Path, *extra: str) -> Iterator[Mounted]:
    """Run ``cytearc-vfs mount-fs`` until the block ends; the mount is always removed."""
    mountpoint.mkdir(exist_ok=True)
    stderr = mountpoint.parent / f"{mountpoint.name}.stderr"
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            [cli_executable(), "mount-fs", str(location), str(mountpoint), *extra],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        line = _first_line(process, stderr, json_mode="--json" in extra)
        if not line.startswith("mounted "):
            process.wait(timeout=60)
            said = stderr.read_text().strip()
            if "could not mount" in said or "FUSE is not available" in said:
                pytest.skip(f"FUSE does not work here: {said}")
            raise AssertionError(f"mount-fs did not mount (exit {process.returncode}): {said}")
        # the mount point is named resolved (a symbolic link followed), as the mount table has it
        assert line.strip() == f"mounted {location} at {mountpoint.resolve()}", line
        assert is_mounted(mountpoint)
        yield Mounted(process, mountpoint, stderr)
    finally:
        stop_process(process)
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
        if process.stdout is not None:
            process.stdout.close()


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_an_ordinary_store_reads_byte_for_byte(fuse_works: None, tmp_path: Path) -> None:
    counts = realistic_counts(3000, 400, density=0.05, seed=5)
    cv.write_counts(tmp_path / "a.zarr", counts)
    with mount_fs(tmp_path / "a.zarr", tmp_path / "mp") as mounted:
        assert tree_bytes(mounted.mountpoint) == tree_bytes(tmp_path / "a.zarr")
        # each file has its own time, as serve's Last-Modified (all had the mount's)
        for source in (tmp_path / "a.zarr").rglob("*"):
            if source.is_file():
                shown = mounted.mountpoint / source.relative_to(tmp_path / "a.zarr")
                assert shown.stat().st_mtime_ns == source.stat().st_mtime_ns, shown
        dense = counts.toarray()
        assert np.array_equal(
            zarr.open_array(mounted.mountpoint / "RNA/counts", mode="r")[:], dense
        )
        assert np.array_equal(
            zarr.open_array(mounted.mountpoint / "RNA/countsT", mode="r")[:], dense.T
        )
        code, out, err = mounted.stop()
    assert code == 0, err
    assert "unmounted" in out and "(SIGTERM)" in out
    assert out.strip().endswith("; 0 chunks computed for reading"), out
    assert not is_mounted(tmp_path / "mp")


def test_a_composite_reads_every_value_with_zarr_tensorstore_and_zarrs(
    fuse_works: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tensorstore as ts

    composite = make_composite(tmp_path, monkeypatch)
    with mount_fs(composite.path, tmp_path / "mp") as mounted:
        counts_path = mounted.mountpoint / "RNA/counts"
        dtype = zarr.open_array(counts_path, mode="r").dtype
        expected = composite.dense.astype(dtype)
        for name, reference in (("counts", expected), ("countsT", expected.T)):
            path = mounted.mountpoint / "RNA" / name
            with_zarr = zarr.open_array(path, mode="r")
            assert with_zarr.shape == reference.shape
            assert np.array_equal(with_zarr[:], reference), f"zarr-python, {name}"
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{path}/"}}
            with_tensorstore = ts.open(spec, read=True).result()
            assert with_tensorstore.shape == reference.shape
            assert np.array_equal(with_tensorstore.read().result(), reference), (
                f"tensorstore, {name}"
            )
            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                with_zarrs = zarr.open_array(path, mode="r")
                assert type(with_zarrs.async_array.codec_pipeline).__name__ == "ZarrsCodecPipeline"
                assert np.array_equal(with_zarrs[:], reference), f"zarrs, {name}"
        # a band and scattered rows, as a reader asks for them
        rows = np.random.default_rng(0).choice(expected.shape[0], 100, replace=False)
        band = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{counts_path}/"}},
            read=True,
        ).result()
        assert np.array_equal(band[500:1500].read().result(), expected[500:1500])
        assert np.array_equal(band[np.sort(rows)].read().result(), expected[np.sort(rows)])
        code, out, err = mounted.stop()
    assert code == 0, err
    # the last line counts computed chunks (--json: computedChunks); it said "values",
    # which a reader of counts takes for counts
    assert re.search(r"; [1-9][0-9]* chunks computed for reading$", out.strip()), out


def test_walking_a_composite_mount_computes_no_chunk(
    fuse_works: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    store = cv.open_store(composite.path)
    assert isinstance(store, cv.CompositeStore)
    documents = store.record.arrays
    with mount_fs(composite.path, tmp_path / "mp", "--json") as mounted:
        sizes = {}
        for directory, _, names in os.walk(mounted.mountpoint):
            for name in names:
                path = Path(directory, name)
                sizes[str(path.relative_to(mounted.mountpoint))] = path.stat().st_size
        listing = subprocess.run(
            ["ls", "-lR", str(mounted.mountpoint)], capture_output=True, text=True, check=True
        )
        assert "c" in listing.stdout
        for array in ("RNA/counts", "RNA/countsT"):
            rows, cols = documents[array]["chunk_grid"]["configuration"]["chunk_shape"]
            itemsize = np.dtype(documents[array]["data_type"]).itemsize
            chunks = [key for key in sizes if key.startswith(array + "/c/")]
            assert len(chunks) >= 3, chunks
            assert {sizes[key] for key in chunks} == {rows * cols * itemsize}
        code, out, err = mounted.stop()
    assert code == 0, err
    report = json.loads(out)
    assert report["computedChunks"] == 0, report
    assert report["ended"] == "SIGTERM"


def test_a_mount_shows_its_own_and_its_sources_artifacts(fuse_works: None, tmp_path: Path) -> None:
    target, published, own = make_mount(tmp_path)
    with mount_fs(target, tmp_path / "mp") as mounted:
        arrays = artifact_arrays(zarr.open_group(mounted.mountpoint, mode="r"))
        assert np.array_equal(arrays["pca"], published)  # read through from the source
        assert np.array_equal(arrays["umap"], own)  # the target's own
        assert zarr.open_group(mounted.mountpoint, mode="r").attrs["matrixSource"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_unmounts_even_with_a_file_open(
    fuse_works: None, tmp_path: Path, signum: int
) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(200, 50, seed=2))
    with mount_fs(tmp_path / "a.zarr", tmp_path / "mp") as mounted:
        held = (mounted.mountpoint / "zarr.json").open("rb")  # keeps the mount busy
        try:
            code, out, err = mounted.stop(signum)
        finally:
            # the server is gone: closing may report ENOTCONN, as it does for any
            # FUSE file whose server stopped
            with contextlib.suppress(OSError):
                held.close()
        assert code == 0, err
        assert "unmounted lazily" in out, out
        assert f"({signal.Signals(signum).name})" in out
        assert "Traceback" not in err
        assert not is_mounted(mounted.mountpoint)
        assert str(mounted.mountpoint) not in Path("/proc/mounts").read_text()


def test_a_mount_point_the_file_system_reads_from_is_refused(
    fuse_works: None, tmp_path: Path
) -> None:
    # Mounted there, the file system would serve its own reads of the store by
    # reading through itself: the reader hangs in the kernel (state D), and
    # only an abort through fusectl ends it.
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(tmp_path / f"{name}.zarr", realistic_counts(60, 20, seed=seed))
    cv.create_composite(tmp_path / "c.zarr", [tmp_path / "a.zarr", tmp_path / "b.zarr"])
    cv.mount_datastore(tmp_path / "a.zarr", tmp_path / "m.zarr")
    inside_source = tmp_path / "b.zarr" / "RNA" / "empty"
    inside_source.mkdir()
    cases = [
        ("a.zarr", tmp_path / "a.zarr", "is the same directory as"),
        ("a.zarr", tmp_path, "holds"),
        ("c.zarr", inside_source, "is inside"),  # a composite's source
        ("m.zarr", tmp_path / "a.zarr" / "RNA", "is inside"),  # a mount's source
    ]
    for location, mountpoint, relation in cases:
        result = run_main("mount-fs", str(tmp_path / location), str(mountpoint))
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert f"mount point {mountpoint} {relation} " in result.stderr
        assert "choose a directory outside" in result.stderr
        assert not is_mounted(mountpoint)


def test_a_mount_point_that_holds_files_is_refused(fuse_works: None, tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(60, 20, seed=1))
    (tmp_path / "mp").mkdir()
    (tmp_path / "mp" / "notes.txt").write_text("mine")
    result = run_main("mount-fs", str(tmp_path / "a.zarr"), str(tmp_path / "mp"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert "is not empty (it holds 'notes.txt')" in result.stderr
    assert "give an empty directory" in result.stderr
    assert not is_mounted(tmp_path / "mp")
    assert (tmp_path / "mp" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("how", ["fusermount3 -u", "SIGHUP", "SIGQUIT"])
def test_an_unmount_from_elsewhere_ends_the_command(
    fuse_works: None, tmp_path: Path, how: str
) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(200, 50, seed=2))
    with mount_fs(tmp_path / "a.zarr", tmp_path / "mp") as mounted:
        if how.startswith("SIG"):  # the terminal closed; Ctrl-\ (it left a dead mount)
            mounted.process.send_signal(getattr(signal, how))
        else:
            subprocess.run(["fusermount3", "-u", str(mounted.mountpoint)], check=True)
        out, _ = mounted.process.communicate(timeout=60)
        assert mounted.process.returncode == 0, mounted.stderr.read_text()
        ended = how if how.startswith("SIG") else "unmounted from elsewhere"
        assert f"({ended})" in out, out
        assert not is_mounted(mounted.mountpoint)


def test_a_mount_point_given_through_a_symbolic_link_is_unmounted(
    fuse_works: None, tmp_path: Path
) -> None:
    # The kernel mounts at the resolved directory; the command used to look for
    # the link's own path in the mount table, found nothing, said "unmounted"
    # and left a dead mount behind ("Transport endpoint is not connected").
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(60, 20, seed=1))
    real = tmp_path / "real mp"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real.name)
    with mount_fs(tmp_path / "a.zarr", link) as mounted:
        assert is_mounted(real) and is_mounted(link)
        assert (real / "zarr.json").read_bytes() == (tmp_path / "a.zarr/zarr.json").read_bytes()
        code, out, err = mounted.stop()
    assert code == 0, err
    assert f"unmounted {real} (SIGTERM)" in out, out
    assert not is_mounted(real)
    assert list(real.iterdir()) == []


def test_a_stale_mount_is_refused_naming_fusermount3(fuse_works: None, tmp_path: Path) -> None:
    # A mount-fs killed with SIGKILL leaves its mount behind; the next mount-fs
    # there used to fail with "[Errno 107] Transport endpoint is not connected
    # (OSError); fix the cause (space, permissions, network)", exit 4.
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(60, 20, seed=1))
    mountpoint = tmp_path / "mp"
    with mount_fs(tmp_path / "a.zarr", mountpoint) as mounted:
        mounted.process.kill()
        mounted.process.wait(timeout=60)
        assert is_mounted(mountpoint)
        for point in (mountpoint, mountpoint / "RNA"):
            result = run_main("mount-fs", str(tmp_path / "a.zarr"), str(point))
            assert result.returncode == 2, result.stderr
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
            # the mount point itself may still stat (its attributes are cached):
            # it is then refused as a mount point already, with the same remedy
            assert f"fusermount3 -u {mountpoint}" in result.stderr
        inside = f"mount point {mountpoint / 'RNA'} lies inside {mountpoint}, a FUSE mount whose"
        assert inside in result.stderr
        subprocess.run(["fusermount3", "-u", str(mountpoint)], check=True)
    assert not is_mounted(mountpoint)


def test_a_deleted_source_reads_as_eio_through_the_mount(
    fuse_works: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    composite = make_composite(tmp_path, monkeypatch)
    with mount_fs(composite.path, tmp_path / "mp") as mounted:
        shutil.rmtree(composite.sources[2])  # its cells are in the last chunks
        chunks = sorted((mounted.mountpoint / "RNA/counts/c").iterdir(), key=lambda p: int(p.name))
        with pytest.raises(OSError) as failed:
            (chunks[-1] / "0").read_bytes()
        assert failed.value.errno == errno.EIO
        with pytest.raises(OSError) as through_zarr:
            zarr.open_array(mounted.mountpoint / "RNA/counts", mode="r")[-10:]
        assert through_zarr.value.errno == errno.EIO
        # cells of the remaining sources still read
        first = zarr.open_array(mounted.mountpoint / "RNA/counts", mode="r")[:100]
        assert np.array_equal(first, composite.dense[:100].astype(first.dtype))
        code, _, err = mounted.stop()
    assert code == 0
    assert "answered EIO" in err


def test_writes_through_the_kernel_are_erofs(fuse_works: None, tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "a.zarr", realistic_counts(200, 50, seed=2))
    before = tree_bytes(tmp_path / "a.zarr")
    with mount_fs(tmp_path / "a.zarr", tmp_path / "mp") as mounted:
        root = mounted.mountpoint
        for change in (
            lambda: (root / "new").write_bytes(b"x"),
            lambda: (root / "zarr.json").open("r+b"),
            lambda: (root / "dir").mkdir(),
            lambda: (root / "zarr.json").unlink(),
            lambda: (root / "zarr.json").rename(root / "moved"),
        ):
            with pytest.raises(OSError) as refused:
                change()
            assert refused.value.errno == errno.EROFS
        second = run_cli("mount-fs", str(tmp_path / "a.zarr"), str(root))
        assert second.returncode == 2 and "mount point already" in second.stderr
    assert tree_bytes(tmp_path / "a.zarr") == before


def test_mount_fs_in_a_terminal_stops_on_ctrl_c(fuse_works: None, tmp_path: Path) -> None:
    counts = realistic_counts(300, 40, seed=4)
    cv.write_counts(tmp_path / "a.zarr", counts)
    mountpoint = tmp_path / "mp"
    mountpoint.mkdir()
    session = TerminalSession(["mount-fs", str(tmp_path / "a.zarr"), str(mountpoint)])
    try:
        seen = session.read_until("mounted ")
        if "mounted " not in seen:
            run = session.finish()
            if "could not mount" in run.output:
                pytest.skip(f"FUSE does not work here: {run.output.strip()}")
            raise AssertionError(run.output)
        session.read_until(str(mountpoint))
        values = zarr.open_array(mountpoint / "RNA/counts", mode="r")[:]
        assert np.array_equal(values, counts.toarray())
        session.type(b"\x03")  # Ctrl-C
        run = session.finish()
    finally:
        if session.process.poll() is None:
            session.process.kill()
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
    assert run.returncode == 0, run.output
    assert "Traceback" not in run.output
    assert f"mounted {tmp_path / 'a.zarr'} at {mountpoint}" in run.output
    assert "unmounted" in run.output and "(SIGINT)" in run.output
    assert not is_mounted(mountpoint)


@pytest.mark.parametrize("kind", ["ordinary", "composite"])
def test_relative_paths_typed_in_a_terminal_show_the_whole_store(
    fuse_works: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``cytearc-vfs mount-fs a.zarr mp`` typed in the store's directory showed an empty
    directory (a composite: only its computed counts, no zarr.json): libfuse moves the
    process to ``/`` as it mounts, and the store, opened at the relative path, read
    ``/a.zarr`` from then on, without an error."""
    counts = realistic_counts(200, 30, seed=6)
    cv.write_counts(tmp_path / "a.zarr", counts)
    cv.create_composite(tmp_path / "c.zarr", {"a": tmp_path / "a.zarr"})
    location = "a.zarr" if kind == "ordinary" else "c.zarr"
    (tmp_path / "mp").mkdir()
    monkeypatch.chdir(tmp_path)  # the terminal's working directory
    session = TerminalSession(["mount-fs", location, "mp"])
    mountpoint = tmp_path / "mp"
    try:
        seen = session.read_until("mounted ")
        if "mounted " not in seen:
            run = session.finish()
            if "could not mount" in run.output:
                pytest.skip(f"FUSE does not work here: {run.output.strip()}")
            raise AssertionError(run.output)
        session.read_until(str(mountpoint))
        if kind == "ordinary":
            assert tree_bytes(mountpoint) == tree_bytes(tmp_path / "a.zarr")
        else:
            assert (mountpoint / "zarr.json").read_bytes() == (
                tmp_path / "c.zarr" / "zarr.json"
            ).read_bytes()
            assert {"RNA", "_composite", "cellData", "zarr.json"} <= set(os.listdir(mountpoint))
            # what cytearc-vfs info reads: the composite, opened from the mount
            shown = cv.open_store(mountpoint)
            assert np.array_equal(shown.reader().read(), counts.toarray())
        session.type(b"\x03")  # Ctrl-C
        run = session.finish()
    finally:
        if session.process.poll() is None:
            session.process.kill()
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
    assert run.returncode == 0, run.output
    assert not is_mounted(mountpoint)


def test_a_store_opened_at_a_relative_path_stays_there_when_the_process_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = realistic_counts(50, 10, seed=7)
    cv.write_counts(tmp_path / "a.zarr", counts)
    monkeypatch.chdir(tmp_path)
    store = cv.open_store("a.zarr")
    monkeypatch.chdir("/")
    assert np.array_equal(zarr.open_array(store, path="RNA/counts", mode="r")[:], counts.toarray())
    assert sync(store.exists("zarr.json"))


@pytest.mark.remote
def test_a_composite_of_a_remote_source_reads_through_its_cache(
    fuse_works: None, tmp_path: Path, s3_server: Any
) -> None:
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    remote_counts = realistic_counts(400, 60, seed=7)
    local_counts = realistic_counts(300, 60, seed=8)
    url = f"s3://{bucket}/remote.zarr"
    cv.write_counts(url, remote_counts, storage_options=options)
    cv.write_counts(tmp_path / "local.zarr", local_counts)
    cv.create_composite(
        tmp_path / "c.zarr",
        {"remote": url, "local": str(tmp_path / "local.zarr")},
        source_storage_options={"remote": options},
    )
    # credentials from a file, as a person keeps them out of the process list
    (tmp_path / "sources.json").write_text(json.dumps({"remote": options}))
    expected = sp.vstack([remote_counts, local_counts]).toarray()
    with mount_fs(
        tmp_path / "c.zarr",
        tmp_path / "mp",
        "--source-storage-options",
        f"@{tmp_path / 'sources.json'}",
    ) as mounted:
        values = zarr.open_array(mounted.mountpoint / "RNA/counts", mode="r")[:]
        assert np.array_equal(values, expected.astype(values.dtype))
        code, _, err = mounted.stop()
    assert code == 0, err
