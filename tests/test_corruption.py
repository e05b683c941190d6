"""The corruption catalogue: damage a real store many ways, then read it.

Each case damages one copy of a written store (counts and countsT sharded
with small shards, so there are many shard files), then reads it two ways:
plain zarr (``zarr.open_array(...)[:]`` of counts and countsT through
``cv.open_store``) and the package's reader (``VirtualArrayReader.read``).
A read is *handled* when it raises (any exception: zarr's decode errors,
zstd checksum errors, the package's ``VfsError``s on open) or returns the
original values; otherwise it is a *silent wrong value*. Deep verification
(``cytearc-vfs verify``) must flag every case that changes what a read
returns.

Kinds: byte flips at seeded random positions of shards, truncated shards,
0-byte shards, deleted shards, shards swapped between chunk keys, record
fields edited, a countsT value moved to the next cell (and two moves that
cancel in sums), +1 on the highest count of countsT. Figures go to
``$CYTEARC_CONFORMANCE_REPORT/corruption.json`` and
``corruption_deep_verify.json``.

Storage damage (flips, truncated, emptied, deleted or swapped shards,
edited records) must never read as other values: flips are caught by the
chunks' checksums, and shard files that are not the ones written (deleted,
swapped, truncated) by the shard tables that ``open_store`` and the gather
reader compare (``cytearc_vfs.format.shard_tables``). Those kinds are
asserted to give 0 silent wrong values.

Edits through a Zarr writer (a countsT value moved, or +1, re-encoded with
valid checksums) are another family: an edit whose chunks compress to other
lengths changes the shard's index and is refused on open, but one of equal
lengths is indistinguishable from the written bytes without reading every
value. Those are reported (``corruption_zarr_edits``) and must be flagged by
deep verification, which reads every value.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import realistic_counts
from cytearc_vfs_conformance.families import record_family
from store_copies import copy_stores

import cytearc_vfs as cv
from cytearc_vfs.inspection.deep_verify import deep_verify

FLIPS = 48
ASSERTED = {
    "byte flip",
    "truncated shard",
    "empty shard",
    "deleted shard",
    "swapped shards",
    "edited record",
}
#: Values rewritten through zarr with valid encodings (reported, see above).
ZARR_EDITS = {"countsT value moved", "countsT +1"}

Damage = Callable[[Path], None]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    base = tmp_path_factory.mktemp("corruption")
    counts = realistic_counts(240, 64, density=0.15, seed=11, dtype="int64")
    counts.data[:5] = [300, 1000, 70000, 5, 9]  # a few large values: uint32 storage
    cv.write_counts(base / "s.zarr", counts, layout=cv.LayoutPolicy(16 << 10, 2 << 10))
    return base / "s.zarr", counts.toarray()


def _shards(root: Path) -> list[Path]:
    return sorted(
        p for a in ("counts", "countsT") for p in (root / "RNA" / a / "c").rglob("*") if p.is_file()
    )


def _flip(position: int, xor: int) -> Damage:
    def damage(root: Path) -> None:
        shards = _shards(root)
        sizes = np.cumsum([p.stat().st_size for p in shards])
        index = int(np.searchsorted(sizes, position % int(sizes[-1]), side="right"))
        shard = shards[index]
        offset = position % int(sizes[-1]) - (int(sizes[index - 1]) if index else 0)
        data = bytearray(shard.read_bytes())
        data[offset] ^= xor
        shard.write_bytes(bytes(data))

    return damage


def _on_shard(index: int, change: Callable[[Path], None]) -> Damage:
    return lambda root: change(_shards(root)[index % len(_shards(root))])


def _swap(first: int, second: int) -> Damage:
    def damage(root: Path) -> None:
        shards = [p for p in _shards(root) if "countsT" not in p.parts]
        a, b = shards[first % len(shards)], shards[second % len(shards)]
        data_a, data_b = a.read_bytes(), b.read_bytes()
        a.write_bytes(data_b)
        b.write_bytes(data_a)

    return damage


def _edit(node: str, change: Callable[[dict[str, object]], None]) -> Damage:
    def damage(root: Path) -> None:
        path = root / node / "zarr.json"
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document))

    return damage


def _rewrite_counts_t(change: Callable[[np.ndarray], None]) -> Damage:
    def damage(root: Path) -> None:
        array = zarr.open_array(root, path="RNA/countsT", mode="r+")
        values = np.asarray(array[:])
        change(values)
        array[:] = values

    return damage


def _move(values: np.ndarray) -> None:
    gene, cell = map(int, np.argwhere(values[:, :-1] > 0)[0])
    values[gene, cell + 1] += values[gene, cell]
    values[gene, cell] = 0


def _two_moves_that_cancel(values: np.ndarray) -> None:
    # v from cell c to c+1 and v from c+2 to c+1: per-gene sums and
    # index-weighted sums stay the same
    for gene in range(values.shape[0]):
        row = values[gene]
        for c in range(values.shape[1] - 2):
            v = min(row[c], row[c + 2])
            if v > 0:
                row[c] -= v
                row[c + 2] -= v
                row[c + 1] += 2 * v
                return
    raise AssertionError("no gene with two values two cells apart")


def _plus_one(values: np.ndarray) -> None:
    gene = int(values.sum(axis=1).argmax())
    values[gene, int(values[gene].argmax())] += 1


def _attrs(key: str, value: object) -> Callable[[dict[str, object]], None]:
    return lambda document: document["attributes"].__setitem__(key, value)  # type: ignore[index]


def _layout_field(key: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(document: dict[str, object]) -> None:
        document["attributes"]["cytearc:countMatrixLayout"][key] = value  # type: ignore[index]

    return change


def _cases() -> Iterator[tuple[str, str, Damage]]:
    rng = np.random.default_rng(20261130)
    for i in range(FLIPS):
        position, xor = int(rng.integers(0, 2**40)), int(rng.integers(1, 256))
        yield "byte flip", f"flip {i}", _flip(position, xor)
    for i in (0, 3, -1):
        yield (
            "truncated shard",
            f"shard {i} halved",
            _on_shard(i, lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
        )
        yield "empty shard", f"shard {i} emptied", _on_shard(i, lambda p: p.write_bytes(b""))
        yield "deleted shard", f"shard {i} deleted", _on_shard(i, lambda p: p.unlink())
    yield "swapped shards", "counts shards 0 and 1", _swap(0, 1)
    yield "swapped shards", "counts shards 1 and last", _swap(1, -1)
    fp = "sha256:" + "0" * 64
    for node, change, label in (
        ("RNA/counts", _attrs("content_fingerprint", fp), "counts content_fingerprint"),
        ("RNA/countsT", _attrs("content_fingerprint", fp), "countsT content_fingerprint"),
        ("RNA/countsT", _attrs("complete", False), "countsT complete=false"),
        ("RNA/countSummaries", _attrs("source_fingerprint", fp), "summaries source_fingerprint"),
        ("RNA/counts", _layout_field("unitBytes", 1 << 20), "counts layout unitBytes"),
        ("RNA/countsT", _layout_field("chunkBytes", 1 << 10), "countsT layout chunkBytes"),
        ("RNA", _attrs("is_assay", False), "assay is_assay=false"),
        ("", _attrs("assayTypes", {"RNA": "ATAC"}), "root assayTypes"),
    ):
        yield "edited record", label, _edit(node, change)
    yield "countsT value moved", "one value to the next cell", _rewrite_counts_t(_move)
    yield (
        "countsT value moved",
        "two moves that cancel in sums",
        _rewrite_counts_t(_two_moves_that_cancel),
    )
    yield "countsT +1", "+1 on the highest count of the busiest gene", _rewrite_counts_t(_plus_one)


def _read(root: Path, original: np.ndarray, how: str) -> str:
    """'error', 'same' or 'wrong' for one read path."""
    try:
        store = cv.open_store(root)
        if how == "zarr":
            counts = np.asarray(zarr.open_array(store, path="RNA/counts", mode="r")[:])
            counts_t = np.asarray(zarr.open_array(store, path="RNA/countsT", mode="r")[:])
            same = np.array_equal(counts, original) and np.array_equal(counts_t, original.T)
        else:
            reader = cv.VirtualArrayReader(store, assay="RNA")
            same = np.array_equal(reader.read(), original) and np.array_equal(
                reader.read(features=np.arange(original.shape[1])[::-1]), original[:, ::-1]
            )
    except Exception:  # any refusal is a handled corruption
        return "error"
    return "same" if same else "wrong"


def _verify_flags(root: Path) -> bool:
    try:
        reports = deep_verify(cv.open_store(root), where=str(root))
    except Exception:  # refusing to open is flagging
        return True
    return any(report.problems for report in reports)


def test_corruption_catalogue(written: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    """Every kind of storage damage reads as an error or the original values;
    edits through zarr are reported, and deep verification flags every case
    that changes what a read returns."""
    source, original = written
    tried, wrong = Counter[str](), Counter[str]()
    outcomes = Counter[str]()
    verify_missed: list[str] = []
    for n, (kind, label, damage) in enumerate(_cases()):
        root = tmp_path / f"case{n}.zarr"
        shutil.copytree(source, root)
        damage(root)
        results = {how: _read(root, original, how) for how in ("zarr", "reader")}
        for result in results.values():
            tried[kind] += 1
            outcomes[f"{kind} {result}"] += 1
            if result == "wrong":
                wrong[kind] += 1
        changes_values = "wrong" in results.values() or kind.startswith("countsT")
        if changes_values and not _verify_flags(root):
            verify_missed.append(f"{kind}: {label}")
        shutil.rmtree(root)
    for family, kinds in (("corruption", ASSERTED), ("corruption_zarr_edits", ZARR_EDITS)):
        family_tried = sum(tried[kind] for kind in kinds)
        family_wrong = sum(wrong[kind] for kind in kinds)
        record_family(
            family,
            tried=family_tried,
            handled=family_tried - family_wrong,
            wrong_values=family_wrong,
            details={
                "read paths": "plain zarr and VirtualArrayReader, each case",
                **{f"{k} wrong/tried": f"{wrong[k]}/{tried[k]}" for k in sorted(kinds)},
                "errors": sum(outcomes[f"{k} error"] for k in kinds),
                "original values": sum(outcomes[f"{k} same"] for k in kinds),
            },
        )
    checked = sum(1 for _ in _cases())
    record_family(
        "corruption_deep_verify",
        tried=checked,
        handled=checked - len(verify_missed),
        wrong_values=len(verify_missed),
        details={"missed": "; ".join(verify_missed) or "none"},
    )
    assert verify_missed == []
    assert {kind: wrong[kind] for kind in ASSERTED if wrong[kind]} == {}


# ------------------------------------------- identity of the tables a composite or mount uses


def _reorder_ids(root: Path, table: str) -> None:
    ids = zarr.open_array(root, path=f"{table}/ids", mode="r+")
    ids[:] = np.asarray(ids[:])[::-1]


def test_reordered_mount_cell_ids_fail_closed(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """A mount whose copied cell ids were reordered no longer lines up with the
    source's counts: opening it must fail closed."""
    source, _ = written
    cv.mount_datastore(source, tmp_path / "tgt.zarr")
    _reorder_ids(tmp_path / "tgt.zarr", "cellData")
    with pytest.raises(cv.VfsError):
        cv.open_store(tmp_path / "tgt.zarr")


def test_edited_composite_feature_ids_fail_closed(
    written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """A composite whose feature ids were reordered after creation maps its
    columns to the wrong features: opening it must fail closed."""
    source, _ = written
    cv.create_composite(tmp_path / "comp.zarr", {"a": source})
    _reorder_ids(tmp_path / "comp.zarr", "RNA/featureData")
    with pytest.raises(cv.VfsError):
        cv.open_store(tmp_path / "comp.zarr")


@pytest.mark.remote
def test_corrupted_cache_entries_are_not_served(
    s3_server: Any, written: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """A byte flipped in the remote source cache's files reads as the
    original values (the entry is refetched) or as an error, never as other values."""
    _, original = written
    options = s3_server.storage_options()
    url = f"s3://{s3_server.new_bucket()}/s.zarr"
    cv.write_counts(
        url, original, storage_options=options, layout=cv.LayoutPolicy(16 << 10, 2 << 10)
    )
    cv.create_composite(tmp_path / "comp.zarr", {"s": url}, source_storage_options={"s": options})
    store = cv.open_store(tmp_path / "comp.zarr", source_storage_options={"s": options})
    reader = store.reader()
    assert np.array_equal(reader.read(), original)
    directory = store.cache_info().directory
    assert directory is not None
    entries = [p for p in Path(directory).rglob("*") if p.is_file() and p.stat().st_size]
    assert entries
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0x5A
        entry.write_bytes(bytes(data))
    try:
        again = reader.read()
    except Exception:  # an error is a handled corruption
        return
    assert np.array_equal(again, original)


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sources a and b and their composite comp.zarr, built once and never
    opened after: each test damages a copy of its own (copy_stores points the
    copied composite at the copied sources)."""
    root = tmp_path_factory.mktemp("two-sources")
    for name, seed in (("a", 1), ("b", 2)):
        cv.write_counts(root / f"{name}.zarr", realistic_counts(1500, 400, seed=seed))
    cv.create_composite(root / "comp.zarr", [root / "a.zarr", root / "b.zarr"]).close()
    return root


@pytest.mark.parametrize("array", ["counts", "countsT"])
def test_verify_of_a_composite_finds_damage_in_either_orientation_of_a_source(
    two_sources: Path, tmp_path: Path, array: str
) -> None:
    """``verify`` of a composite reads the virtual counts through the gather
    reader, which takes each source in the orientation (counts or countsT)
    that decodes less for the read at hand: a full pass may never touch the
    other one, which other reads (a few cells through zarr, ``serve`` or
    ``mount-fs``) do. A byte flipped in either must be a finding naming the
    source, not "OK"."""
    copy_stores(two_sources, tmp_path)
    assert [r.ok for r in deep_verify(cv.open_store(tmp_path / "comp.zarr"), where="c")] == [True]
    shard = tmp_path / "b.zarr" / "RNA" / array / "c" / "0" / "0"
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 3] ^= 0xFF  # inside the chunks, before the shard index
    shard.write_bytes(bytes(damaged))

    store = cv.open_store(tmp_path / "comp.zarr")
    (report,) = deep_verify(store, where="comp.zarr")
    assert not report.ok
    named = [p for p in report.problems if p.startswith(f"source 'b' at {tmp_path / 'b.zarr'}")]
    assert named and f"{array} rows" in named[0], report.problems
    assert not any("source 'a'" in p for p in report.problems)


@pytest.mark.parametrize("array", ["counts", "countsT"])
def test_a_damaged_source_chunk_is_named_by_its_source(
    two_sources: Path, tmp_path: Path, array: str
) -> None:
    """The error of a chunk that does not decode names the source's location:
    a composite (and ``serve``'s 500 line) otherwise said only ``RNA/counts``."""
    copy_stores(two_sources, tmp_path)
    shard = tmp_path / "b.zarr" / "RNA" / array / "c" / "0" / "0"
    damaged = bytearray(shard.read_bytes())
    # a byte in every few hundred, up to the shard index: the blocks a read of
    # any rows decodes are damaged (the reader decodes only the blocks it needs)
    for at in range(64, len(damaged) - 4096, 211):
        damaged[at] ^= 0xFF
    shard.write_bytes(bytes(damaged))
    reader = cv.open_store(tmp_path / "comp.zarr").reader()
    # few cells read counts, few features countsT (the orientation that decodes less)
    selection = {"cells": [1500, 1501]} if array == "counts" else {"features": [0, 1]}
    with pytest.raises(cv.RecordShapeError) as raised:
        reader.read(**selection)
    assert f"{tmp_path / 'b.zarr'}/RNA/{array} does not decode" in str(raised.value)


def _float_counts(seed: int, shape: tuple[int, int] = (300, 200)) -> Any:
    import scipy.sparse as sp

    matrix = sp.random(*shape, density=0.5, random_state=seed, format="csr", dtype=np.float64)
    matrix.data = matrix.data * 10  # non-integers: stored float64
    return matrix


@pytest.mark.parametrize("kind", ["store", "composite"])
def test_verify_of_float64_counts_finds_nothing_in_a_fresh_store(tmp_path: Path, kind: str) -> None:
    """Writers sum a row's non-zeros in column order; verification summed the
    dense row with numpy's pairwise sum, whose last bit differs for float64
    values, so every freshly written float64 store was reported with
    "countSummaries/rowSums does not match the counts"."""
    cv.write_counts(tmp_path / "a.zarr", _float_counts(3))
    where = tmp_path / "a.zarr"
    if kind == "composite":
        cv.write_counts(tmp_path / "b.zarr", _float_counts(4, (100, 200)))
        cv.create_composite(tmp_path / "comp.zarr", [where, tmp_path / "b.zarr"])
        where = tmp_path / "comp.zarr"
    reports = deep_verify(cv.open_store(where), where=str(where))
    assert [r.problems for r in reports] == [[]]


def test_verify_finds_a_float_countsT_that_differs_only_in_fractions(tmp_path: Path) -> None:
    """The transpose check summed values cast to integers, so a countsT whose
    float values differ from counts below 1 (2.5 stored as 2.75) passed
    ``verify`` although readers of countsT get other values than counts."""
    import scipy.sparse as sp

    matrix = sp.random(50, 40, density=0.3, random_state=3, format="csr", dtype=np.float32)
    matrix.data = (np.round(matrix.data * 10) + 0.5).astype(np.float32)
    other = matrix.copy()
    other.data[0] += 0.25
    cv.write_counts(tmp_path / "a.zarr", matrix)
    cv.write_counts(tmp_path / "b.zarr", other)
    # countsT of the other matrix, with its shard table, so only the values tell
    shutil.rmtree(tmp_path / "a.zarr" / "RNA" / "countsT" / "c")
    shutil.copytree(
        tmp_path / "b.zarr" / "RNA" / "countsT" / "c", tmp_path / "a.zarr" / "RNA" / "countsT" / "c"
    )
    table = zarr.open_array(tmp_path / "b.zarr", path="RNA/countsT", mode="r").attrs
    target = zarr.open_array(tmp_path / "a.zarr", path="RNA/countsT", mode="r+")
    target.attrs["cytearc:shardTable"] = table["cytearc:shardTable"]
    assert not np.array_equal(target[:], matrix.toarray().T)

    (report,) = deep_verify(cv.open_store(tmp_path / "a.zarr"), where="a.zarr")
    assert report.problems == [
        "countsT is not the transpose of counts (first at feature 1); restore the store from a "
        "copy or re-import the dataset"
    ]
