"""One rule broken at a time: the conformance suite must name it, and opening must refuse
or accept it as docs/layout.md ("What opening checks") says.

Each case copies a valid store written by ``cv.write_counts`` and damages it
with plain file and zarr edits, so only the one rule is broken.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from cytearc_vfs_conformance import check_source_store

import cytearc_vfs as cv
from cytearc_vfs.errors import IdentityMismatchError, IncompleteStoreError, RecordShapeError

LAYOUT = "cytearc:countMatrixLayout"
OPEN = "open_store verifies"
CONVENTIONS = "conventions the DataStore relies on"
VALUES = "values agree with their records"


def _attrs(path: Path, node: str, change: Callable[[dict], object]) -> None:
    document_path = path / node / "zarr.json"
    document = json.loads(document_path.read_text())
    change(document.setdefault("attributes", {}))
    document_path.write_text(json.dumps(document))


def _document(path: Path, node: str, change: Callable[[dict], object]) -> None:
    document_path = path / node / "zarr.json"
    document = json.loads(document_path.read_text())
    change(document)
    document_path.write_text(json.dumps(document))


def _stray_counts_t(path: Path) -> None:
    """A complete countsT beside counts of an ADT assay, holding other values."""
    counts = zarr.open_array(path, path="ADT/counts", mode="r")
    stray = zarr.create_array(
        path, name="ADT/countsT", shape=counts.shape[::-1], dtype=counts.dtype, fill_value=0
    )
    stray[:] = 7
    stray.attrs.update(complete=True, content_fingerprint=counts.attrs["content_fingerprint"])


def _relabel_dtype(path: Path, dtype: str) -> None:
    for node in ("ADT", "ADT/counts"):
        _attrs(path, node, lambda a: a[LAYOUT].update(dtype=dtype))
    _document(path, "ADT/counts", lambda d: d.update(data_type=dtype))


def _summary_as(path: Path, name: str, dtype: str) -> None:
    node = f"RNA/countSummaries/{name}"
    values = zarr.open_array(path, path=node, mode="r")[:]
    shutil.rmtree(path / node)
    zarr.create_array(path, name=node, shape=values.shape, dtype=dtype)[:] = values


def _unreplayable_policy(path: Path) -> None:
    """The three records agree and match the arrays, but their policy gives other shapes."""
    for node in ("RNA", "RNA/counts", "RNA/countsT"):
        _attrs(path, node, lambda a: a[LAYOUT].update(unitBytes=64, chunkBytes=16))


def _membership(path: Path, dtype: str, assay: str, name: str = "RNA_I") -> None:
    column = zarr.create_array(path, name=f"cellData/{name}", shape=(40,), dtype=dtype)
    column[:] = 1
    column.attrs.update(role="assay_membership", assay=assay)


def _categorical(path: Path, spec: object) -> None:
    column = zarr.create_array(path, name="cellData/kind", shape=(40,), dtype="<U1")
    column[:] = np.array(["a", "b"] * 20)
    column.attrs["cytearc:categorical"] = spec


def _nan_count(path: Path) -> None:
    """A NaN count that its writer recorded consistently: fingerprint and summaries
    describe it (as a writer that skipped the finite check would)."""
    from cytearc_vfs.format.fingerprints import ContentHasher

    counts = zarr.open_array(path, path="ADT/counts", mode="r+")
    values = counts[:]
    row, column = np.argwhere(values > 0)[0]
    values[row, column] = np.nan
    counts[row, column] = np.nan
    hasher = ContentHasher(values.shape, values.dtype)
    hasher.update(sp.csr_array(values))
    del counts.attrs["cytearc:shardTable"]  # stores written before it have none
    counts.attrs["content_fingerprint"] = hasher.hexdigest()
    summaries = zarr.open_group(path, path="ADT/countSummaries", mode="r+")
    summaries.attrs["source_fingerprint"] = hasher.hexdigest()
    summaries["rowSums"][:] = values.sum(axis=1, dtype=np.float64)
    summaries["rowPositive"][:] = (values > 0).sum(axis=1)
    summaries["columnPositive"][:] = (values > 0).sum(axis=0)


def _bump(path: Path, node: str, index: tuple[int, ...]) -> None:
    array = zarr.open_array(path, path=node, mode="r+")
    array[index] = array[index] + 1


# (damage, base store, failing check, phrase in its detail, what open_store does)
# open None: the docs have opening accept it (it reads no values, and
# "Opening saved results does not retroactively validate assay membership").
CASES: dict[str, tuple[Callable[[Path], object], str, str, str, type[Exception] | None]] = {
    # caught before this review
    "root pending": (
        lambda p: _attrs(p, "", lambda a: a.update({"cytearc:pending_store": "write_counts"})),
        "rna",
        OPEN,
        "never finished",
        IncompleteStoreError,
    ),
    "assayTypes not a preset": (
        lambda p: _attrs(p, "", lambda a: a.update(assayTypes={"RNA": "RNAX"})),
        "rna",
        OPEN,
        "not a preset",
        ValueError,
    ),
    "defaultAssay names no assay": (
        lambda p: _attrs(p, "", lambda a: a.update(defaultAssay="ATAC")),
        "rna",
        OPEN,
        "defaultAssay",
        RecordShapeError,
    ),
    "layout unknown field": (
        lambda p: [
            _attrs(p, n, lambda a: a[LAYOUT].update(x=1))
            for n in ("RNA", "RNA/counts", "RNA/countsT")
        ],
        "rna",
        OPEN,
        "unknown field",
        RecordShapeError,
    ),
    "fill value 1": (
        lambda p: _document(p, "RNA/counts", lambda d: d.update(fill_value=1)),
        "rna",
        OPEN,
        "fill_value",
        RecordShapeError,
    ),
    "countsT incomplete": (
        lambda p: _attrs(p, "RNA/countsT", lambda a: a.update(complete="true")),
        "rna",
        OPEN,
        "not complete",
        IncompleteStoreError,
    ),
    "countsT bound elsewhere": (
        lambda p: _attrs(
            p, "RNA/countsT", lambda a: a.update(content_fingerprint="sha256:" + "0" * 64)
        ),
        "rna",
        OPEN,
        "not one matrix",
        IdentityMismatchError,
    ),
    "summaries value": (
        lambda p: _bump(p, "RNA/countSummaries/rowSums", (0,)),
        "rna",
        VALUES,
        "rowSums",
        None,
    ),
    "ids reordered": (
        lambda p: _document(p, "cellData/ids", lambda d: None) or _swap_ids(p),
        "rna",
        VALUES,
        "cellData/ids changed",
        None,
    ),
    "I not boolean": (
        lambda p: [
            shutil.rmtree(p / "cellData/I"),
            zarr.create_array(p, name="cellData/I", shape=(40,), dtype="int8"),
        ],
        "rna",
        CONVENTIONS,
        "cellData/I is not boolean",
        None,
    ),
    # missed before this review
    "stray countsT of a non-RNA assay": (
        _stray_counts_t,
        "adt",
        OPEN,
        "records none (countsT: null)",
        RecordShapeError,
    ),
    "float16 counts": (
        lambda p: _relabel_dtype(p, "float16"),
        "adt",
        OPEN,
        "not a count storage dtype",
        RecordShapeError,
    ),
    "rowPositive float32": (
        lambda p: _summary_as(p, "rowPositive", "float32"),
        "rna",
        OPEN,
        "expected 'int64'",
        RecordShapeError,
    ),
    "rowSums int32": (
        lambda p: _summary_as(p, "rowSums", "int32"),
        "rna",
        OPEN,
        "expected 'uint64'",
        RecordShapeError,
    ),
    "policy does not give the recorded geometry": (
        _unreplayable_policy,
        "rna",
        CONVENTIONS,
        "is not what its policy",
        None,
    ),
    "membership column not boolean": (
        lambda p: _membership(p, "int8", "RNA"),
        "rna",
        CONVENTIONS,
        "a membership column is boolean",
        None,
    ),
    "membership column of another assay": (
        lambda p: _membership(p, "bool", "ADT"),
        "rna",
        CONVENTIONS,
        "no membership column",
        None,
    ),
    "membership role on another name": (
        lambda p: _membership(p, "bool", "RNA", name="measured"),
        "rna",
        CONVENTIONS,
        "no membership column",
        None,
    ),
    "categorical value outside its categories": (
        lambda p: _categorical(p, {"categories": ["a"], "ordered": False}),
        "rna",
        CONVENTIONS,
        "outside its categories",
        None,
    ),
    "categorical record malformed": (
        lambda p: _categorical(p, {"categories": "ab"}),
        "rna",
        CONVENTIONS,
        "must be {'categories'",
        None,
    ),
    "NaN count recorded consistently": (
        _nan_count,
        "float",
        VALUES,
        "count matrices hold finite values",
        None,
    ),
}


#: Words of the remedies the findings name.
REMEDIES = (
    "re-import",
    "restore the store",
    "repack",
    "rebuild",
    "drop the",
    "writable",
    "Write it again",
)


def _swap_ids(path: Path) -> None:
    ids = zarr.open_array(path, path="cellData/ids", mode="r+")
    values = ids[:]
    values[[0, 1]] = values[[1, 0]]
    ids[:] = values


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    counts = sp.random(40, 12, density=0.3, random_state=1, format="csr")
    counts.data = np.ceil(counts.data * 1000)  # uint16
    cv.write_counts(root / "rna.zarr", counts)
    cv.write_counts(root / "adt.zarr", counts, assay="ADT")
    cv.write_counts(root / "float.zarr", (counts * 0.5).astype(np.float32), assay="ADT")
    return {"rna": root / "rna.zarr", "adt": root / "adt.zarr", "float": root / "float.zarr"}


@pytest.mark.parametrize("case", list(CASES))
def test_one_broken_rule_is_named(case: str, bases: dict[str, Path], tmp_path: Path) -> None:
    damage, base, check, phrase, refused = CASES[case]
    path = tmp_path / "s.zarr"
    shutil.copytree(bases[base], path)
    damage(path)
    failed = {f.check: f.detail for f in check_source_store(path) if not f.ok}
    assert check in failed, failed
    assert phrase in failed[check]
    # each finding says what to do, not only what is wrong
    assert any(remedy in failed[check] for remedy in REMEDIES), failed[check]
    if refused is None:
        cv.open_store(path)
    else:
        with pytest.raises(refused) as raised:
            cv.open_store(path)
        assert phrase in str(raised.value)


def test_composite_and_mount_conform(bases: dict[str, Path], tmp_path: Path) -> None:
    """check_source_store reported a valid composite ("no cytearc:countMatrixLayout
    record") and a valid mount ("no counts array") as broken, with the remedy
    "re-import"; they are checked through the store that opening gives."""
    shutil.copytree(bases["rna"], tmp_path / "copy.zarr")
    cv.create_composite(tmp_path / "c.zarr", {"a": bases["rna"], "b": tmp_path / "copy.zarr"})
    cv.mount_datastore(bases["rna"], tmp_path / "m.zarr")
    for name in ("c.zarr", "m.zarr"):
        assert [f for f in check_source_store(tmp_path / name) if not f.ok] == []
    # a mount's source counts are checked where they are
    broken = tmp_path / "broken.zarr"
    shutil.copytree(bases["rna"], broken)
    cv.mount_datastore(broken, tmp_path / "m2.zarr")
    _bump(broken, "RNA/countSummaries/rowSums", (0,))
    failed = {f.check: f.detail for f in check_source_store(tmp_path / "m2.zarr") if not f.ok}
    assert "rowSums" in failed[VALUES]


def test_checks_read_no_value_twice(tmp_path: Path) -> None:
    """The suite's before/after snapshot read every key's bytes twice, and an open
    through any wrapping store (zarr's WrapperStore has no getsize of its own)
    read every shard whole to learn its size: ``deep=False`` read three times
    the store, ``deep=True`` five. Sizes are asked, metadata documents read."""
    from zarr.storage import LocalStore

    from cytearc_vfs.read.read_stats import CountingStore, ReadCounters

    counts = sp.random(3000, 800, density=0.1, random_state=2, format="csr")
    counts.data = np.ceil(counts.data * 50)
    path = tmp_path / "s.zarr"
    cv.write_counts(
        path, counts, layout=cv.LayoutPolicy(unit_bytes=256 * 1024, chunk_bytes=32 * 1024)
    )
    stored = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    shards = sum(1 for p in path.rglob("c/*/*") if p.is_file())
    assert shards >= 8

    def bytes_read(run: Callable[[CountingStore], object]) -> int:
        counters = ReadCounters()
        run(CountingStore(LocalStore(path, read_only=True), counters))
        return counters.snapshot().bytes_read

    assert bytes_read(lambda s: cv.open_store(s)) < stored // 20
    assert bytes_read(lambda s: check_source_store(s, deep=False)) < stored // 5
    # every value once (counts and countsT), plus metadata
    assert bytes_read(lambda s: check_source_store(s)) < stored * 1.3


@pytest.mark.remote
def test_remote_checks_fetch_no_shard_whole(s3_server: Any, s3_proxy: Any) -> None:
    """On an object store the snapshot listed sizes nowhere and fetched every key
    twice, shards included; now one listing carries sizes and ETags, and only
    metadata documents are fetched (plus the conventions' one edge chunk)."""
    counts = sp.random(3000, 800, density=0.1, random_state=2, format="csr")
    counts.data = np.ceil(counts.data * 50)
    url = f"s3://{s3_server.new_bucket()}/s.zarr"
    options = {**s3_server.storage_options(), "endpoint": s3_proxy.endpoint}
    layout = cv.LayoutPolicy(unit_bytes=256 * 1024, chunk_bytes=32 * 1024)
    cv.write_counts(url, counts, storage_options=options, layout=layout)
    s3_proxy.take()
    assert [
        f for f in check_source_store(url, storage_options=options, deep=False) if not f.ok
    ] == []
    shard_gets = [
        s
        for s in s3_proxy.take()
        if s.method == "GET" and ("/counts/c/" in s.path or "/countsT/c/" in s.path)
    ]
    assert all(s.range is not None for s in shard_gets), [
        s.path for s in shard_gets if s.range is None
    ]


@pytest.mark.remote
def test_remote_composite_and_mount_conform(s3_server: Any, tmp_path: Path) -> None:
    """The suite runs on a composite and a mount whose stores and sources are on S3."""
    options = s3_server.storage_options()
    bucket = s3_server.new_bucket()
    counts = sp.random(40, 12, density=0.3, random_state=1, format="csr")
    counts.data = np.ceil(counts.data * 10)
    sources = {name: f"s3://{bucket}/{name}.zarr" for name in ("a", "b")}
    for url in sources.values():
        cv.write_counts(url, counts, storage_options=options)
    source_options = {name: options for name in sources}
    composite = f"s3://{bucket}/c.zarr"
    cv.create_composite(
        composite, sources, source_storage_options=source_options, storage_options=options
    )
    cv.mount_datastore(sources["a"], tmp_path / "m.zarr", source_storage_options=options)
    found = check_source_store(
        composite, storage_options=options, source_storage_options=source_options
    )
    assert [f for f in found if not f.ok] == []
    found = check_source_store(tmp_path / "m.zarr", source_storage_options=options)
    assert [f for f in found if not f.ok] == []


def test_an_assay_without_a_recorded_type_opens_as_assay_with_a_warning(tmp_path: Path) -> None:
    """Spec ("Assay types"): an assay without an explicit or recorded type takes the
    preset of its name, or Assay with a warning. open_store took Assay silently."""
    counts = sp.random(40, 12, density=0.3, random_state=1, format="csr")
    counts.data = np.ceil(counts.data * 10)
    with pytest.warns(cv.VfsWarning, match="generic 'Assay'"):  # the writer's own warning
        cv.write_counts(tmp_path / "s.zarr", counts, assay="GEX")
    cv.open_store(tmp_path / "s.zarr")  # recorded: no warning
    _attrs(tmp_path / "s.zarr", "", lambda a: a.update(assayTypes={}))
    with pytest.warns(
        cv.VfsWarning, match="no type in the assayTypes of / .* opens as the generic"
    ):
        cv.open_store(tmp_path / "s.zarr")
    found = {f.check: f for f in check_source_store(tmp_path / "s.zarr")}
    assert found[OPEN].ok and "warned: " in found[OPEN].detail  # reported, not raised
    assert "assayTypes of / does not name GEX" in found[CONVENTIONS].detail


def _in_terminal(args: list[str]) -> tuple[int, str]:
    """Run ``python -m cytearc_vfs_conformance ARGS`` with its output on a pseudo-terminal."""
    import sys

    from cli_harness import run_in_terminal

    run = run_in_terminal(
        args, timeout=120, program=[sys.executable, "-m", "cytearc_vfs_conformance"]
    )
    return run.returncode, run.output


def test_check_command_exits_non_zero_on_a_failed_check(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    """The suite had no command for a store (only ``report``); ``check`` prints each
    finding and exits 1 when one failed, also on a terminal."""
    code, output = _in_terminal(["check", str(bases["rna"])])
    assert code == 0, output
    assert "5 passed, 0 failed" in output
    broken = tmp_path / "s.zarr"
    shutil.copytree(bases["rna"], broken)
    _bump(broken, "RNA/countSummaries/rowSums", (0,))
    code, output = _in_terminal(["check", str(broken), "--no-deep"])
    assert code == 0, output  # the values are not read
    code, output = _in_terminal(["check", str(broken)])
    assert code == 1, output
    assert f"FAIL {VALUES}: RNA: countSummaries/rowSums does not match" in output
