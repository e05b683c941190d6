"""Every refusal of write_counts: right error, names the problem, nothing created or changed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.format.layout import LayoutTooLargeError


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_refused_before_destination_exists(tmp_path: Path, bad: float) -> None:
    values = np.ones((3, 3), dtype=np.float32)
    values[2, 1] = bad
    with pytest.raises(ValueError, match=r"non-finite.*rows 0:3"):
        cv.write_counts(tmp_path / "s.zarr", values)
    assert not (tmp_path / "s.zarr").exists()


def test_non_numeric_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="numeric"):
        cv.write_counts(tmp_path / "s.zarr", np.array([["a"]]))
    assert not (tmp_path / "s.zarr").exists()


def test_existing_store_needs_overwrite(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        cv.write_counts(tmp_path / "s.zarr", counts * 2)
    assert snapshot_tree(tmp_path / "s.zarr") == before
    info = cv.write_counts(tmp_path / "s.zarr", counts * 2, overwrite=True)
    stored = zarr.open_array(cv.open_store(tmp_path / "s.zarr"), path="RNA/counts", mode="r")
    np.testing.assert_array_equal(stored[:], (counts * 2).toarray())
    assert info.location == str((tmp_path / "s.zarr").resolve())


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda root: (root / ".DS_Store").write_bytes(b"x"), r"\.DS_Store"),
        (lambda root: (root / "RNA" / "notes.txt").write_text("mine"), r"notes\.txt"),
        (lambda root: (root / "cellData" / "ids" / "README").write_text("mine"), r"README"),
    ],
)
def test_overwrite_refuses_foreign_keys(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree, plant, message
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    plant(tmp_path / "s.zarr")
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match=message):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_of_files_is_refused_without_listing_below_it(
    tmp_path: Path,
    counts: sp.csr_array,
    snapshot_tree: Any,
    monkeypatch: pytest.MonkeyPatch,
    overwrite: bool,
) -> None:
    # `write IN .` in a home directory: every file below it was listed first
    import cytearc_vfs.write.destination_checks as destination_checks

    folder = tmp_path / "home"
    (folder / "projects" / "deep").mkdir(parents=True)
    (folder / "projects" / "deep" / "data.csv").write_text("1,2")
    (folder / "notes.txt").write_text("mine")
    before = snapshot_tree(folder)

    def listed(store: object) -> list[str]:
        raise AssertionError("the destination was listed key by key")

    monkeypatch.setattr(destination_checks, "_list", listed)
    with pytest.raises(
        FileExistsError, match=r"holds keys but no root group \(first: 'notes\.txt'\)"
    ):
        cv.write_counts(folder, counts, overwrite=overwrite)
    assert snapshot_tree(folder) == before
    # only folders at its top: the listing decides, as before (no keys: written)
    (folder / "notes.txt").unlink()
    monkeypatch.undo()
    with pytest.raises(FileExistsError, match=r"first: 'projects/deep/data\.csv'"):
        cv.write_counts(folder, counts, overwrite=overwrite)
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert cv.write_counts(empty, counts).location


def test_overwrite_refuses_root_array(tmp_path: Path, counts: sp.csr_array, snapshot_tree) -> None:
    zarr.create_array(tmp_path / "s.zarr", shape=(2,), dtype="int8")
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="no root group"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


def test_overwrite_refuses_unknown_member_group(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    zarr.open_group(tmp_path / "s.zarr", mode="a").create_group("my_results")
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="my_results"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


def test_overwrite_refuses_prepared_assay(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    root = zarr.open_group(tmp_path / "s.zarr", mode="a")
    root["cellData"].create_array("RNA_nCounts", shape=(counts.shape[0],), dtype="float64")
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="prepared assay"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


def test_overwrite_refuses_prepared_assay_of_a_workspace(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    # the QC columns of a workspace's assay sit in the workspace's cell table
    cv.write_counts(tmp_path / "s.zarr", counts, workspace="ws")
    root = zarr.open_group(tmp_path / "s.zarr", mode="a")
    root["ws/cellData"].create_array("RNA_nCounts", shape=(counts.shape[0],), dtype="float64")
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="prepared assay 'ws/RNA'"):
        cv.write_counts(tmp_path / "s.zarr", counts, workspace="ws", overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


@pytest.mark.parametrize("text", ["my notes", "[1, 2]", ""])
def test_overwrite_refuses_a_root_document_that_is_not_a_group(
    tmp_path: Path, counts: sp.csr_array, text: str
) -> None:
    # a zarr.json that is not a JSON object is a key without a root group
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / "zarr.json").write_text(text)
    with pytest.raises(FileExistsError, match="no root group"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert (tmp_path / "s.zarr" / "zarr.json").read_text() == text


def test_overwrite_replaces_a_first_document_left_half_written(
    tmp_path: Path, counts: sp.csr_array
) -> None:
    # what a LocalStore write interrupted before its rename leaves
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / f"zarr.{'0' * 32}.partial").write_text('{"zarr_fo')
    cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    stored = zarr.open_array(cv.open_store(tmp_path / "s.zarr"), path="RNA/counts", mode="r")
    np.testing.assert_array_equal(stored[:], counts.toarray())


def test_overwrite_refuses_mount_target(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    root = zarr.open_group(tmp_path / "s.zarr", mode="w")
    root.attrs["matrixSource"] = {"location": "/x", "workspace": None, "assays": {}}
    before = snapshot_tree(tmp_path / "s.zarr")
    with pytest.raises(FileExistsError, match="matrixSource"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "s.zarr") == before


def test_overwrite_refuses_plain_files_without_group(tmp_path: Path, counts: sp.csr_array) -> None:
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / "data.csv").write_text("1,2")
    with pytest.raises(FileExistsError, match="no root group"):
        cv.write_counts(tmp_path / "s.zarr", counts, overwrite=True)
    assert (tmp_path / "s.zarr" / "data.csv").read_text() == "1,2"


@pytest.mark.parametrize("marker", ["zarr.json", ".zgroup", ".zarray"])
def test_destination_below_zarr_node_refused(
    tmp_path: Path, counts: sp.csr_array, marker: str
) -> None:
    outer = tmp_path / "outer.zarr"
    outer.mkdir()
    (outer / marker).write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(ValueError, match="below the Zarr node"):
        cv.write_counts(outer / "inner" / "s.zarr", counts)
    assert not (outer / "inner").exists()


def test_destination_that_is_an_assay_refused(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    root = zarr.open_group(tmp_path / "a.zarr", mode="w")
    root.attrs["is_assay"] = True
    before = snapshot_tree(tmp_path / "a.zarr")
    with pytest.raises(ValueError, match="is itself an assay"):
        cv.write_counts(tmp_path / "a.zarr", counts, overwrite=True)
    assert snapshot_tree(tmp_path / "a.zarr") == before


def test_explicit_layout_that_does_not_fit_names_largest_halving(tmp_path: Path) -> None:
    matrix = sp.random(4000, 2000, density=0.01, format="csr", random_state=0, dtype=np.float32)
    matrix.data[:] = 1
    with pytest.raises(
        LayoutTooLargeError, match=r"largest halving that fits is layout=LayoutPolicy\("
    ) as info:
        cv.write_counts(
            tmp_path / "s.zarr",
            matrix,
            layout=cv.LayoutPolicy(8 * 1024**2, 128 * 1024),
            mem_budget="4M",
        )
    assert not (tmp_path / "s.zarr").exists()
    # the named halving is accepted as given
    text = str(info.value)
    named = text.split("layout=LayoutPolicy(")[1].split(")")[0]
    fields = dict(part.split("=") for part in named.split(", "))
    policy = cv.LayoutPolicy(int(fields["unit_bytes"]), int(fields["chunk_bytes"]))
    halvings = (8 * 1024**2) // policy.unit_bytes
    assert halvings > 1 and halvings & (halvings - 1) == 0  # a power-of-two halving
    assert policy.unit_bytes // policy.chunk_bytes == 64  # chunks per shard kept
    cv.write_counts(tmp_path / "s.zarr", matrix, layout=policy, mem_budget="4M")


def test_budget_too_small_for_any_halving(tmp_path: Path) -> None:
    matrix = sp.random(100, 200_000, density=0.001, format="csr", random_state=0, dtype=np.float32)
    matrix.data[:] = 1
    with pytest.raises(LayoutTooLargeError, match="raise mem_budget"):
        cv.write_counts(tmp_path / "s.zarr", matrix, mem_budget="64K")
    assert not (tmp_path / "s.zarr").exists()


def test_unknown_assay_type_refused(tmp_path: Path, counts: sp.csr_array) -> None:
    with pytest.raises(ValueError, match="not a preset"):
        cv.write_counts(tmp_path / "s.zarr", counts, assay_type="rna-seq")
    assert not (tmp_path / "s.zarr").exists()


def test_unknown_assay_name_warns_and_is_generic(tmp_path: Path, counts: sp.csr_array) -> None:
    with pytest.warns(UserWarning, match="generic 'Assay'") as caught:
        info = cv.write_counts(tmp_path / "s.zarr", counts, assay="peaks")
    assert info.assay_type == "Assay" and info.layout.counts_t is None
    # the warning names the line that asked for it, not a line inside the package
    assert [w.filename for w in caught] == [__file__]


@pytest.mark.parametrize("name", ["", "../x", "a/b", "cellData", ".hidden"])
def test_bad_assay_names_refused(tmp_path: Path, counts: sp.csr_array, name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        cv.write_counts(tmp_path / "s.zarr", counts, assay=name)
    assert not (tmp_path / "s.zarr").exists()


def test_table_length_mismatch_refused(tmp_path: Path, counts: sp.csr_array) -> None:
    with pytest.raises(ValueError, match="cells has 3 rows"):
        cv.write_counts(tmp_path / "s.zarr", counts, cells=["a", "b", "c"])
    assert not (tmp_path / "s.zarr").exists()


def test_duplicate_ids_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unique"):
        cv.write_counts(tmp_path / "s.zarr", np.ones((2, 2)), cells=["a", "a"])
    assert not (tmp_path / "s.zarr").exists()


class CountingRows:
    """A real matrix behind the row-slicing protocol write_counts reads (``shape``,
    ``dtype``, ``matrix[start:stop]``, as a backed AnnData's ``X``), counting reads."""

    def __init__(self, values: sp.csr_array) -> None:
        self._values = values
        self.shape = values.shape
        self.dtype = values.dtype
        self.reads = 0

    def __getitem__(self, rows: slice) -> sp.csr_array:
        self.reads += 1
        return self._values[rows]


class CountingStore(WrapperStore[Store]):
    """A real store that counts every read and listing made through it."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.calls = 0

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.calls += 1
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        self.calls += 1
        return await self._store.get_partial_values(prototype, key_ranges)

    async def exists(self, key: str) -> bool:
        self.calls += 1
        return await self._store.exists(key)

    def list(self) -> AsyncIterator[str]:
        self.calls += 1
        return self._store.list()

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        self.calls += 1
        return self._store.list_dir(prefix)

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self.calls += 1
        return self._store.list_prefix(prefix)


def test_an_occupied_destination_is_refused_before_the_input_is_read(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    cv.write_counts(tmp_path / "s.zarr", counts)
    before = snapshot_tree(tmp_path / "s.zarr")
    rows = CountingRows(counts)
    with pytest.raises(FileExistsError, match=r"already holds \d+ key\(s\).*overwrite=True"):
        cv.write_counts(tmp_path / "s.zarr", rows)
    assert rows.reads == 0  # not scanned, not sliced: the refusal cost nothing
    assert snapshot_tree(tmp_path / "s.zarr") == before
    # the same input to a free destination is read: the counter sees reads
    cv.write_counts(tmp_path / "free.zarr", rows)
    assert rows.reads > 0


def test_a_destination_overwrite_would_refuse_is_refused_before_the_input_is_read(
    tmp_path: Path, counts: sp.csr_array, snapshot_tree
) -> None:
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / "data.csv").write_text("1,2")
    rows = CountingRows(counts)
    with pytest.raises(FileExistsError, match="no root group"):
        cv.write_counts(tmp_path / "s.zarr", rows, overwrite=True)
    assert rows.reads == 0


def test_an_anndata_store_is_not_opened_for_an_occupied_destination(
    tmp_path: Path, counts: sp.csr_array
) -> None:
    ad.AnnData(X=sp.csr_matrix(counts)).write_zarr(tmp_path / "in.zarr")
    cv.write_counts(tmp_path / "s.zarr", counts)
    source = CountingStore(LocalStore(tmp_path / "in.zarr", read_only=True))
    with pytest.raises(FileExistsError, match="already holds"):
        cv.write_counts(tmp_path / "s.zarr", source)
    assert source.calls == 0
    # with overwrite=True the same input is read and written
    info = cv.write_counts(tmp_path / "s.zarr", source, overwrite=True)
    assert source.calls > 0 and info.shape == counts.shape
