"""AnnData sources whose sparse arrays are damaged: a composite refuses them by name.

A decreasing ``indptr``, one that runs past the entries stored, or arrays whose
lengths disagree with the element's shape are each refused with a
``RecordShapeError`` that names the source, the element and the remedy (the
command line exits 3), never numpy's own message, and no composite is left.
``write_counts`` refuses the same files through the element layer
(``MalformedElementError``, naming the file), and containers whose stored
values do not decode (a damaged chunk of a Zarr store or of an ``.h5ad``)
the same way, not with the codec's or HDF5's bare error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata_files import write_anndata_zarr
from cytearc_vfs_adapters.anndata import MalformedElementError

import cytearc_vfs as cv
from cytearc_vfs.cli import main
from cytearc_vfs.errors import IdentityMismatchError, RecordShapeError, UnsupportedSourceError
from cytearc_vfs.read.local_chunk_files import RecordedFiles

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def source(tmp_path: Path, encoding: str, zarr_format: int = 3) -> Path:
    """A 6 x 5 AnnData whose X (``encoding``) stores one entry per major."""
    matrix: Any = {"csr": sp.csr_matrix, "csc": sp.csc_matrix}[encoding](
        np.eye(6, 5, dtype=np.float32) * 3
    )
    data = ad.AnnData(
        X=matrix,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(6)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(5)]),
    )
    return write_anndata_zarr(data, tmp_path / f"{encoding}.zarr", zarr_format)


def damage_indptr(path: Path, case: str) -> None:
    """Rewrite ``X/indptr`` in place (same shape and dtype)."""
    indptr = zarr.open_array(path / "X" / "indptr", mode="r+")
    values = indptr[:]
    if case == "decreasing":
        values[2], values[3] = values[3], values[2]
    elif case == "past-the-entries":
        values[-1] += 5
    else:  # "not-from-zero"
        values[0] = 1
    indptr[:] = values


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("encoding", ["csr", "csc"])
@pytest.mark.parametrize("case", ["decreasing", "past-the-entries", "not-from-zero"])
def test_a_damaged_indptr_is_refused_naming_the_source(
    tmp_path: Path, case: str, encoding: str, zarr_format: int
) -> None:
    path = source(tmp_path, encoding, zarr_format)
    damage_indptr(path, case)
    axis = "row" if encoding == "csr" else "column"
    with pytest.raises(
        RecordShapeError,
        match=(
            rf"^source 's' at .*{encoding}\.zarr: the AnnData element 'X' \({encoding}_matrix, "
            rf"shape \(6, 5\)\) has an indptr that is no range of its 5 stored entries: "
            rf"indptr\[\d:\d\] = -?\d+, \d+ for {axis} \d .*the source is damaged\. Write it "
            "again with anndata, or restore it"
        ),
    ):
        cv.create_composite(tmp_path / "c.zarr", {"s": path})
    assert not (tmp_path / "c.zarr").exists()
    if case != "not-from-zero":  # the element layer reads such an indptr as scipy does
        with pytest.raises(
            MalformedElementError,
            match=rf"^{path}: element X: indptr.*the container is damaged; restore it",
        ):
            cv.write_counts(tmp_path / "w.zarr", path)
        assert not (tmp_path / "w.zarr").exists()


def test_the_command_line_exits_3_naming_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = source(tmp_path, "csr")
    damage_indptr(path, "decreasing")
    assert main(["composite", str(tmp_path / "c.zarr"), f"s={path}", "--json"]) == 3
    answer = json.loads(capsys.readouterr().out)
    assert answer["category"] == "damaged" and answer["error"] == "RecordShapeError"
    assert answer["message"].startswith("source 's' at ") and "indptr[2:4] = " in answer["message"]


@pytest.mark.parametrize("member", ["indptr", "indices"])
def test_arrays_whose_lengths_disagree_with_the_shape_are_refused_at_binding(
    tmp_path: Path, member: str
) -> None:
    """Found from the documents: no value is read."""
    path = source(tmp_path, "csr")
    x = zarr.open_group(path / "X", mode="a", use_consolidated=False)
    values = x[member][:]
    del x[member]
    x.create_array(member, data=values[:-1])
    with pytest.raises(
        RecordShapeError,
        match=r"^source 's' at .*: the AnnData element 'X' \(csr_matrix, shape \(6, 5\)\) has "
        + (
            r"indptr of shape \(6,\), not \(7,\): "
            if member == "indptr"
            else r"indices of shape \(4,\) and data \(5,\), not one length: "
        )
        + "the source is damaged",
    ):
        cv.create_composite(tmp_path / "c.zarr", {"s": path})


def test_a_source_damaged_after_open_is_refused_on_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local source's chunk file rewritten after the open is refused by the read
    that opens it (its version differs from the record). Where no version tells
    (a store that reports none), reads check the ``indptr`` entries of the majors
    they read: a read through a composite opened before the damage raises the
    same error as creation would (creation read every major, so it was whole then)."""
    path = source(tmp_path, "csr")
    cv.create_composite(tmp_path / "c.zarr", {"s": path}).close()
    store = cv.open_store(tmp_path / "c.zarr")
    reader = store.reader()
    damage_indptr(path, "decreasing")
    with pytest.raises(IdentityMismatchError, match="the chunk file X/indptr/c/0 was rewritten"):
        reader.read([2, 5])
    store.close()
    # the second line of defence, with the file check out of the way
    monkeypatch.setattr(RecordedFiles, "check", lambda self, key, stat: None)
    (tmp_path / "fresh").mkdir()
    fresh = source(tmp_path / "fresh", "csr")
    cv.create_composite(tmp_path / "c2.zarr", {"s": fresh}).close()
    store = cv.open_store(tmp_path / "c2.zarr")
    reader = store.reader()
    damage_indptr(fresh, "decreasing")
    np.testing.assert_array_equal(reader.read([0], [0]), [[3]])  # row 0 is whole
    with pytest.raises(RecordShapeError, match=r"indptr\[2:4\] = 3, 2 for row 2"):
        reader.read([2, 5])
    with pytest.raises(RecordShapeError, match="for row 2"):
        reader.read_sparse(cells=[1, 2])
    store.close()


def damage_first_chunk(path: Path) -> None:
    """Overwrite 40 bytes inside the first stored chunk of ``X/data`` (same size)."""
    if path.suffix == ".h5ad":
        import h5py

        with h5py.File(path, "r") as file:
            offset = file["X/data"].id.get_chunk_info(0).byte_offset
    else:
        chunks = sorted(
            found
            for found in (path / "X" / "data").rglob("*")
            if found.is_file() and found.name not in {".zarray", ".zattrs", "zarr.json"}
        )
        path, offset = chunks[0], 0
    with open(path, "r+b") as file:
        file.seek(offset + 20)
        file.write(b"\x07" * 40)


@pytest.mark.parametrize("container", ["zarr-v2", "zarr-v3", "h5ad"])
def test_values_that_do_not_decode_are_refused_naming_the_file(
    tmp_path: Path, container: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Blosc (v2), zstd (v3) and gzip (HDF5) chunks that fail to decode: a
    ``MalformedElementError`` naming the container, the array and the remedy (the
    command line exits 3 with it, "damaged", as a composite over the same source
    does; it exited 2), not a bare ``RuntimeError`` or ``OSError``."""
    rng = np.random.default_rng(3)
    matrix = sp.random(300, 40, density=0.3, format="csr", dtype=np.float32, random_state=rng)
    matrix.data = np.ceil(matrix.data * 9)
    data = ad.AnnData(
        X=matrix,
        obs=pd.DataFrame(index=[f"c{i}" for i in range(300)]),
        var=pd.DataFrame(index=[f"g{i}" for i in range(40)]),
    )
    if container == "h5ad":
        path = tmp_path / "a.h5ad"
        data.write_h5ad(path, compression="gzip")
        where = rf"{path}: element X/data"
        backend = r"HDF5: "
    else:
        path = write_anndata_zarr(data, tmp_path / "a.zarr", int(container[-1]))
        where = rf"{path}: element X/data"
        backend = r"RuntimeError: .*decompression"
    damage_first_chunk(path)
    with pytest.raises(
        MalformedElementError,
        match=rf"^{where}: stored values cannot be decoded \({backend}.*the container is "
        "damaged; restore it from a copy",
    ):
        cv.write_counts(tmp_path / "w.zarr", path)
    assert not (tmp_path / "w.zarr").exists()
    assert main(["write", str(path), str(tmp_path / "w.zarr"), "--json"]) == 3
    answer = json.loads(capsys.readouterr().out)
    assert answer["error"] == "MalformedElementError" and "cannot be decoded" in answer["message"]
    assert not (tmp_path / "w.zarr").exists()


def test_a_damaged_shard_index_is_refused_naming_the_container(tmp_path: Path) -> None:
    """anndata >= 0.12 shards its Zarr v3 arrays: a shard whose index fails its crc32c
    is found by the partial-copy check, before any value is read. ``write_counts``
    refuses it as every undecodable value (``MalformedElementError`` naming the
    container, the shard and the remedy), a composite names its source; both used to
    say only ``shard X/data/c/0: ...``, without saying which file."""
    path = source(tmp_path, "csr")
    shard = path / "X" / "data" / "c" / "0"
    assert "sharding_indexed" in (path / "X" / "data" / "zarr.json").read_text()
    stored = bytearray(shard.read_bytes())
    stored[-1] ^= 0xFF  # the index's checksum, at the shard's end
    shard.write_bytes(bytes(stored))
    with pytest.raises(
        MalformedElementError,
        match=rf"^{path}: element X: stored values cannot be decoded \(shard X/data/c/0: its "
        r"index fails its crc32c checksum.*\): the container is damaged; restore it",
    ):
        cv.write_counts(tmp_path / "w.zarr", path)
    assert not (tmp_path / "w.zarr").exists()
    with pytest.raises(ValueError, match=rf"^source 's' at {path}: .*shard X/data/c/0: its index"):
        cv.create_composite(tmp_path / "c.zarr", {"s": path})
    assert not (tmp_path / "c.zarr").exists()
    # a source whose stored data cannot be decoded: "damaged" (exit 3), as cli.md
    # says of such data; it exited 2, as a refused command line does
    from cytearc_vfs.cli import main

    assert main(["composite", str(tmp_path / "c.zarr"), f"s={path}"]) == 3
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("table", ["obs", "var"])
def test_a_malformed_table_is_refused_naming_the_source(tmp_path: Path, table: str) -> None:
    """The element layer's refusal of ``obs`` or ``var`` names the element only; among many
    sources, the composite's message names which one holds it."""
    path = source(tmp_path, "csr")
    group = zarr.open_group(path / table, mode="a", use_consolidated=False)
    group.attrs["column-order"] = 5
    with pytest.raises(
        UnsupportedSourceError,
        match=(
            rf"^source 's' at .*csr\.zarr: element {table}: 'column-order' must be a list of "
            r"column names, found 5; repair the source's obs and var"
        ),
    ):
        cv.create_composite(tmp_path / "c.zarr", {"s": path})
    assert not (tmp_path / "c.zarr").exists()
