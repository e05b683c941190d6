"""The pinned real data sets: their loaders, and the fetch cache's guarantees.

Loader tests use the real cache (``$CYTEARC_DATA_DIR`` or
``~/.cache/cytearc_vfs/data``), so data are downloaded once per machine
(about 15 s in all) and reused. Cache-mechanics tests run on archives built
here and a temporary cache root, with the pip download replaced, so they are
fast and offline; one test runs two real fetches at once into an empty root.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from cytearc_vfs import realdata as rd
from cytearc_vfs.realdata import cache as rd_cache
from cytearc_vfs.realdata import fetching as rd_fetching
from cytearc_vfs.realdata import loaders as rd_loaders

ALL = list(rd.SPECS)

_loaded: dict[str, ad.AnnData] = {}


def load(name: str) -> ad.AnnData:
    """Load a data set once per test session (the CellTypist CSV takes seconds)."""
    if not _loaded:
        # On an empty cache this downloads the scanpy sdist once for both of
        # its data sets, rather than once per loader.
        rd.fetch_many()
    if name not in _loaded:
        _loaded[name] = rd.DATASETS[name]()
    return _loaded[name]


# --------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("name", ALL)
def test_loader_shape_ids_and_counts(name: str) -> None:
    adata = load(name)
    assert adata.shape == rd.SPECS[name].shape
    assert adata.obs_names.is_unique
    assert adata.var_names.is_unique
    matrix = adata.X
    assert isinstance(matrix, sp.csr_matrix)
    assert matrix.has_canonical_format
    data = matrix.data
    # Canonical: stored entries are the non-zero counts, all whole and positive.
    assert np.all(data > 0)
    assert np.array_equal(data, np.rint(data))
    assert matrix.nnz > 0


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("wu2020", np.float32),
        ("celltypist_sample", np.float32),
        ("pbmc68k_reduced", np.float32),
        ("mouse_10k_subset", np.float32),
        ("chr21_10x", np.int32),
    ],
)
def test_loader_dtype(name: str, dtype: type) -> None:
    assert load(name).X.dtype == dtype


def test_wu2020_keeps_batch_columns() -> None:
    obs = load("wu2020").obs
    assert list(obs.columns) == ["patient", "source", "sample"]
    assert obs["patient"].nunique() == 14
    assert set(obs["source"]) == {"Tumor", "NAT", "Blood"}
    assert obs["sample"].nunique() == 30


def test_wu2020_and_celltypist_gene_overlap() -> None:
    # Both index genes by symbol (Wu 2020 NCBI-style, CellTypist GENCODE-style),
    # which is why the overlap is partial: DATA.md's numbers, by var index.
    wu = set(load("wu2020").var_names)
    celltypist = set(load("celltypist_sample").var_names)
    assert len(wu & celltypist) == 20_408
    assert len(celltypist - wu) == 12_378
    assert len(wu - celltypist) == 10_319


# anndata 0.13's own use of a pandas option that pandas 3 deprecates.
@pytest.mark.filterwarnings("ignore:.*future.infer_string:DeprecationWarning")
def test_pbmc68k_counts_reproduce_the_stored_log_values() -> None:
    adata = load("pbmc68k_reduced")
    raw = ad.read_h5ad(rd.fetch("pbmc68k_reduced")).raw
    assert raw is not None
    logged = sp.csr_matrix(raw.X)
    # The file stores each row's column indices in descending order.
    assert not logged.has_sorted_indices
    logged.sort_indices()
    counts = adata.X
    assert np.array_equal(counts.indptr, logged.indptr)
    assert np.array_equal(counts.indices, logged.indices)
    totals = adata.obs["n_counts"].to_numpy(dtype=np.float64)
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    again = np.log1p(counts.data.astype(np.float64) * 1e4 / totals[rows])
    # raw.X holds these values rounded to 3 decimals (stored as float32).
    assert np.max(np.abs(again - logged.data)) <= 5e-4 + 1e-6
    assert "bulk_labels" in adata.obs.columns


def test_mouse_subset_indexed_by_ensembl_and_read_only() -> None:
    adata = load("mouse_10k_subset")
    assert adata.var_names[0] == "ENSMUSG00000051951"
    assert adata.var["gene_symbols"].iloc[0] == "Xkr4"
    # The symbols repeat, which is why the Ensembl id is the index.
    assert not adata.var["gene_symbols"].is_unique
    # Reading the Zarr v2 store with zarr 3 must not write anything into it.
    assert rd.sha256_path(rd.fetch("mouse_10k_subset")) == rd.SPECS["mouse_10k_subset"].sha256


def test_chr21_matches_the_h5_file() -> None:
    adata = load("chr21_10x")
    with h5py.File(rd.fetch("chr21_10x"), "r") as handle:
        group = handle["matrix"]
        csc = sp.csc_matrix(
            (group["data"][()], group["indices"][()], group["indptr"][()]),
            shape=tuple(group["shape"][()]),
        )
        first_id = group["features/id"][0].decode()
    # The file is features x cells in CSC; the loader gives its transpose.
    assert np.array_equal(adata.X.toarray(), csc.T.toarray())
    assert adata.var_names[0] == first_id
    assert set(adata.var["genome"]) == {"GRCh38_chr21"}


def test_celltypist_is_parsed_once_and_each_caller_gets_its_own_copy() -> None:
    first = rd.celltypist_sample()
    expected = first.X.copy()
    first.X.data[:] = 0
    first.obs["changed"] = 1
    again = rd.celltypist_sample()
    assert (expected != again.X).nnz == 0 and "changed" not in again.obs
    assert len(rd_loaders._PARSED_CELLTYPIST) >= 1  # kept by its verified file


def test_celltypist_rounds_noise_but_refuses_non_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv_path = tmp_path / "sample.csv"

    # the real fetch verifies the file's pinned hash; this one rewrites it in place,
    # so the parsed copies the loader keeps by file are forgotten on each call
    def fetch(name: str, cache_dir: object = None) -> Path:
        rd_loaders._PARSED_CELLTYPIST.clear()
        return csv_path

    monkeypatch.setattr(rd_loaders, "fetch", fetch)
    csv_path.write_text(",A,B\nCell_1,0.999999999999,0\nCell_2,3.00000000001,2\n")
    adata = rd.celltypist_sample()
    assert adata.X.toarray().tolist() == [[1, 0], [3, 2]]
    csv_path.write_text(",A,B\nCell_1,0.9999,0\nCell_2,3,2\n")
    with pytest.raises(rd.CountsError, match="away from integers"):
        rd.celltypist_sample()
    csv_path.write_text(",A,B\nCell_1,-1,0\nCell_2,3,2\n")
    with pytest.raises(rd.CountsError, match="negative"):
        rd.celltypist_sample()
    csv_path.write_text(",A,A\nCell_1,1,0\nCell_2,3,2\n")
    with pytest.raises(rd.CountsError, match="duplicate"):
        rd.celltypist_sample()


def test_celltypist_is_kept_parsed_beside_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The parsed sample is kept as an ``.npz`` beside its file: the next process reads
    it instead of parsing the CSV; a damaged copy, or one of another file, is parsed
    again and replaced; a folder that cannot take the copy only costs the parse."""
    from cytearc_vfs.realdata import parsed_cache

    csv_path = tmp_path / "sample.csv"

    def fetch(name: str, cache_dir: object = None) -> Path:
        rd_loaders._PARSED_CELLTYPIST.clear()  # as a new process: only the disk copy
        return csv_path

    monkeypatch.setattr(rd_loaders, "fetch", fetch)
    csv_path.write_text(",A,B,C\nCell_1,1,0,0\nCell_2,3,2,0\n")
    first = rd.celltypist_sample()
    (kept,) = tmp_path.glob("parsed-*.npz")
    parse = rd_loaders._parse_celltypist

    def not_again(path: Path) -> ad.AnnData:
        raise AssertionError("parsed again although a copy is kept")

    monkeypatch.setattr(rd_loaders, "_parse_celltypist", not_again)
    again = rd.celltypist_sample()
    assert (again.X != first.X).nnz == 0 and again.X.dtype == np.float32
    assert list(again.obs_names) == ["Cell_1", "Cell_2"] and list(again.var_names) == [
        "A",
        "B",
        "C",
    ]
    monkeypatch.setattr(rd_loaders, "_parse_celltypist", parse)
    # damaged: cut short
    kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        assert (rd.celltypist_sample().X != first.X).nnz == 0
    assert "cannot be read" in caplog.text
    assert parsed_cache.load_parsed(kept, csv_path) is not None  # replaced whole
    # another file under the same name: its own values, never the copy's
    csv_path.write_text(",A,B,C\nCell_1,5,0,0\nCell_2,7,2,1\nCell_3,1,1,1\n")
    assert rd.celltypist_sample().X.toarray().tolist() == [[5, 0, 0], [7, 2, 1], [1, 1, 1]]
    # a folder that cannot take the copy
    kept.unlink()

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError("read-only cache")

    monkeypatch.setattr(parsed_cache.tempfile, "mkstemp", refused)
    assert rd.celltypist_sample().shape == (3, 3)
    assert not list(tmp_path.glob("parsed-*")) and not list(tmp_path.glob(".parsed-*"))


def test_parsed_copy_temporaries_of_killed_writers_are_removed(tmp_path: Path) -> None:
    """A temporary left by a process killed while writing the parsed copy is removed by
    the next write; one young enough to be another process's write in progress stays."""
    import os
    import time

    import scipy.sparse as sp

    from cytearc_vfs.realdata import parsed_cache

    source = tmp_path / "sample.csv"
    source.write_text(",A\nCell_1,1\n")
    path = parsed_cache.parsed_path(tmp_path, "ab" * 32)
    stale = tmp_path / f".{path.name}.killed.tmp"
    live = tmp_path / f".{path.name}.writing.tmp"
    other = tmp_path / ".unrelated.tmp"
    for temporary in (stale, live, other):
        temporary.write_bytes(b"partial")
    old = time.time() - parsed_cache.STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    parsed = parsed_cache.ParsedCounts(
        sp.csr_matrix(np.ones((1, 1), np.float32)), ["Cell_1"], ["A"]
    )
    parsed_cache.store_parsed(path, source, parsed)
    assert not stale.exists() and live.exists() and other.exists()
    assert parsed_cache.load_parsed(path, source) is not None
    assert sorted(p.name for p in tmp_path.glob(f".{path.name}.*")) == [live.name]


# --------------------------------------------------------------------------- registry


def test_registry_and_listing() -> None:
    assert rd.available() == ALL == list(rd.DATASETS)
    for path in rd.fetch_many().values():
        assert path.exists()
    assert rd.available(cached_only=True) == ALL
    text = rd.describe()
    for spec in rd.SPECS.values():
        assert spec.name in text
        assert spec.sha256 in text
        assert spec.requirement in text
    with pytest.raises(KeyError, match="unknown data set"):
        rd.fetch("nope")


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert rd.main(["fetch", "chr21_10x", "wu2020"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out] == ["chr21_10x", "wu2020"]
    assert Path(out[0].split("\t")[1]) == rd.fetch("chr21_10x")
    assert rd.main(["describe"]) == 0
    assert "licence BSD-3-Clause" in capsys.readouterr().out


def test_specs_pin_every_digest() -> None:
    for spec in rd.SPECS.values():
        for digest in (spec.sha256, spec.archive_sha256):
            assert len(digest) == 64
            int(digest, 16)
        assert spec.member.endswith(spec.basename)
        assert spec.license in {"BSD-3-Clause", "MIT"}


# --------------------------------------------------------------------------- cache mechanics

_FILE_BYTES = b"cell,gene\n1,2\n"
_TREE = {".zgroup": b'{"zarr_format": 2}', "X/.zarray": b"{}", "X/0.0": b"\x00\x01" * 64}


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/data/counts.csv", _FILE_BYTES)
        zf.writestr("pkg/data/other.csv", b"not wanted")
    return path


def _sdist(path: Path) -> Path:
    members = {f"pkg-1.0/tests/store.zarr/{rel}": payload for rel, payload in _TREE.items()}
    # Shares the member's name as a string prefix, not as a directory: not extracted.
    members["pkg-1.0/tests/store.zarr.bak"] = b"x"
    with tarfile.open(path, "w:gz") as tf:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    return path


def _tree_digest() -> str:
    digest = hashlib.sha256()
    for rel in sorted(_TREE):
        digest.update(rel.encode() + b"\0" + len(_TREE[rel]).to_bytes(8, "little"))
        digest.update(_TREE[rel])
    return digest.hexdigest()


def _spec(archive: Path, *, kind: str) -> rd.DatasetSpec:
    wheel = kind == "wheel"
    return rd.DatasetSpec(
        name="fake_wheel" if wheel else "fake_sdist",
        package="pkg",
        version="1.0",
        kind="wheel" if wheel else "sdist",
        member="pkg/data/counts.csv" if wheel else "pkg-1.0/tests/store.zarr",
        is_dir=not wheel,
        sha256=hashlib.sha256(_FILE_BYTES).hexdigest() if wheel else _tree_digest(),
        archive_file=archive.name,
        archive_sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        archive_bytes=archive.stat().st_size,
        license="MIT",
        citation="made in a test",
        shape=(1, 1),
        title="fake",
    )


class FakePip:
    """Stands in for the pip download: copies a prepared archive, counts calls."""

    def __init__(self, archive: Path, delay: float = 0.0) -> None:
        self.archive = archive
        self.delay = delay
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, spec: rd.DatasetSpec, dest: Path) -> Path:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay)
        target = dest / self.archive.name
        target.write_bytes(self.archive.read_bytes())
        return target


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(rd.DATA_DIR_ENV, str(root))
    return root


@pytest.fixture
def wheel_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[rd.DatasetSpec, FakePip]:
    archive = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    pip = FakePip(archive)
    monkeypatch.setattr(rd_fetching, "_download_archive", pip)
    return _spec(archive, kind="wheel"), pip


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(".tmp-*"))


def test_data_dir_follows_env(cache: Path) -> None:
    assert rd.data_dir() == cache
    assert cache.is_dir()


def test_fetch_file_member_once(cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip]) -> None:
    spec, pip = wheel_case
    path = rd.fetch_spec(spec)
    assert path == cache / "fake_wheel" / "pkg-1.0" / "counts.csv"
    assert path.read_bytes() == _FILE_BYTES
    assert rd.fetch_spec(spec) == path
    assert pip.calls == 1
    assert _leftovers(cache) == []
    assert not (path.parent / "other.csv").exists()


def test_fetch_directory_member(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _sdist(tmp_path / "pkg-1.0.tar.gz")
    monkeypatch.setattr(rd_fetching, "_download_archive", FakePip(archive))
    path = rd.fetch_spec(_spec(archive, kind="sdist"))
    assert path.is_dir()
    assert path.name == "store.zarr"
    found = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    assert found == _TREE
    assert rd.sha256_path(path) == _tree_digest()


def test_directory_digest_is_unambiguous(tmp_path: Path) -> None:
    # Same concatenated bytes, split differently between two files.
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"12")
    (tmp_path / "a" / "y").write_bytes(b"3")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_bytes(b"1")
    (tmp_path / "b" / "y").write_bytes(b"23")
    assert rd.sha256_path(tmp_path / "a") != rd.sha256_path(tmp_path / "b")
    assert rd.sha256_path(tmp_path / "a" / "x") == hashlib.sha256(b"12").hexdigest()


@pytest.mark.parametrize("tamper", ["edit", "delete", "extra_file"])
def test_tampered_cache_is_fetched_again(
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tamper: str,
) -> None:
    archive = _sdist(tmp_path / "pkg-1.0.tar.gz")
    pip = FakePip(archive)
    monkeypatch.setattr(rd_fetching, "_download_archive", pip)
    spec = _spec(archive, kind="sdist")
    path = rd.fetch_spec(spec)
    if tamper == "edit":
        (path / "X" / "0.0").write_bytes(b"garbage")
    elif tamper == "delete":
        (path / ".zgroup").unlink()
    else:
        (path / "X" / "1.0").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger=rd.__name__):
        again = rd.fetch_spec(spec)
    assert again == path
    assert rd.sha256_path(path) == spec.sha256
    assert pip.calls == 2
    assert "fetching again" in caplog.text
    assert _leftovers(cache) == []


def test_tampered_real_file_is_fetched_again(cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The real thing end to end: pip download into an empty root, then repair.
    path = rd.fetch("pbmc68k_reduced")
    assert rd.available(cached_only=True) == ["pbmc68k_reduced"]
    with path.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\xff" * 16)
    assert rd.available(cached_only=True) == []
    with caplog.at_level(logging.WARNING, logger=rd.__name__):
        assert rd.fetch("pbmc68k_reduced") == path
    assert "sha256" in caplog.text
    assert rd.sha256_path(path) == rd.SPECS["pbmc68k_reduced"].sha256
    assert rd.pbmc68k_reduced().shape == (700, 765)


def test_member_mismatch_raises_and_caches_nothing(
    cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip]
) -> None:
    spec, _ = wheel_case
    bad = replace(spec, sha256="0" * 64)
    with pytest.raises(rd.ChecksumMismatchError, match="nothing was cached") as info:
        rd.fetch_spec(bad)
    assert info.value.name == "fake_wheel"
    assert info.value.expected == "0" * 64
    assert info.value.actual == spec.sha256
    assert isinstance(info.value, rd.DataFetchError)
    assert not (cache / "fake_wheel").exists()
    assert _leftovers(cache) == []


def test_archive_mismatch_raises(cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip]) -> None:
    spec, _ = wheel_case
    with pytest.raises(rd.ChecksumMismatchError, match="registry served another file"):
        rd.fetch_spec(replace(spec, archive_sha256="f" * 64))
    assert not (cache / "fake_wheel").exists()


def test_missing_member_raises(cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip]) -> None:
    spec, _ = wheel_case
    with pytest.raises(rd.DataFetchError, match="not found"):
        rd.fetch_spec(replace(spec, member="pkg/data/absent.csv"))
    assert _leftovers(cache) == []


def test_interrupted_extraction_leaves_no_entry(
    cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, pip = wheel_case
    real_write: Callable[..., None] = rd_cache._write_stream

    def write_half_then_die(source: io.BufferedIOBase, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read(3))
        raise KeyboardInterrupt

    monkeypatch.setattr(rd_cache, "_write_stream", write_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        rd.fetch_spec(spec)
    assert not (cache / "fake_wheel").exists()
    monkeypatch.setattr(rd_cache, "_write_stream", real_write)
    assert rd.fetch_spec(spec).read_bytes() == _FILE_BYTES
    assert pip.calls == 2


def test_killed_fetch_leftovers_are_ignored_and_removed(
    cache: Path, wheel_case: tuple[rd.DatasetSpec, FakePip]
) -> None:
    spec, _ = wheel_case
    # What a SIGKILLed fetch leaves: a temp dir holding a half-written member.
    stale = cache / f".tmp-{spec.archive_key}-killed" / "entry"
    stale.mkdir(parents=True)
    (stale / "counts.csv").write_bytes(_FILE_BYTES[:4])
    path = rd.fetch_spec(spec)
    assert path.read_bytes() == _FILE_BYTES
    assert _leftovers(cache) == []


def test_concurrent_threads_download_once(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    pip = FakePip(archive, delay=0.3)
    monkeypatch.setattr(rd_fetching, "_download_archive", pip)
    spec = _spec(archive, kind="wheel")
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(rd.fetch_spec(spec))
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(results)) == 1
    assert pip.calls == 1
    assert results[0].read_bytes() == _FILE_BYTES


def test_concurrent_processes_real_fetch(tmp_path: Path) -> None:
    root = tmp_path / "shared-cache"
    env = {**os.environ, rd.DATA_DIR_ENV: str(root)}
    command = [sys.executable, "-m", "cytearc_vfs.realdata", "fetch", "wu2020"]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert out.decode().startswith("wu2020\t")
    assert rd.available(cached_only=True, cache_dir=root) == ["wu2020"]
    assert _leftovers(root) == []


def test_pip_override_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rd.PIP_ENV, "/opt/my pip --isolated")
    assert rd_fetching._pip_candidates()[0] == ["/opt/my", "pip", "--isolated"]


def test_no_working_pip_is_a_clear_error(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real _download_archive, with a "pip" that always fails.
    spec = _spec(_wheel(tmp_path / "pkg-1.0-py3-none-any.whl"), kind="wheel")
    monkeypatch.setattr(rd_fetching, "_pip_candidates", lambda: [[sys.executable, "-c", "exit(3)"]])
    monkeypatch.setattr(rd_fetching, "_pip_cache", None)
    with pytest.raises(rd.DataFetchError, match="exited 3"):
        rd.fetch_spec(spec)
    assert _leftovers(cache) == []


def test_a_cache_dir_that_cannot_be_made_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a file where the cache root should be: was a raw FileExistsError traceback
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(rd.DATA_DIR_ENV, str(blocker))
    with pytest.raises(rd.DataFetchError, match=rd.DATA_DIR_ENV) as info:
        rd.data_dir()
    assert str(blocker) in str(info.value) and "writable directory" in str(info.value)
    for argv in (["describe"], ["path", "wu2020"], ["fetch", "wu2020"]):
        assert rd.main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert str(blocker) in err and rd.DATA_DIR_ENV in err


def test_path_offline_is_one_error_with_its_remedy(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `path` fetches too: offline it raised a raw DataFetchError traceback
    monkeypatch.setattr(rd_fetching, "_pip_candidates", lambda: [[sys.executable, "-c", "exit(3)"]])
    monkeypatch.setattr(rd_fetching, "_pip_cache", None)
    assert rd.main(["path", "chr21_10x"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    first = captured.err.splitlines()[0]
    assert first.startswith("python -m cytearc_vfs.realdata path: error: pip could not download")
    # the remedy: the network, another pip, or a cache copied from elsewhere
    assert "can be reached" in first and rd.PIP_ENV in first and rd.DATA_DIR_ENV in first
    assert "exited 3" in captured.err  # what pip said is kept
