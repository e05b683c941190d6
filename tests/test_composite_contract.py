"""Composite refusals, fail-closed opens, immutability, credentials and pickling."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import realistic_counts
from s3_server import S3Server

import cytearc_vfs as cv

SMALL = cv.LayoutPolicy(64 * 1024, 4096)


@pytest.fixture(scope="module")
def written_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    a = realistic_counts(120, 30, density=0.1, seed=1)
    b = realistic_counts(80, 25, density=0.1, seed=2)
    cv.write_counts(root / "a.zarr", a, features=[f"g{i}" for i in range(30)], layout=SMALL)
    cv.write_counts(root / "b.zarr", b, features=[f"g{i}" for i in range(10, 35)], layout=SMALL)
    return root


@pytest.fixture
def two_sources(written_sources: Path, tmp_path: Path) -> dict[str, Path]:
    """Two sources of the test's own (tests edit them), copied from ones written once."""
    for name in ("a.zarr", "b.zarr"):
        shutil.copytree(written_sources / name, tmp_path / name)
    return {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}


def edit_root_attrs(path: Path, change) -> None:
    document_path = path / "zarr.json"
    document = json.loads(document_path.read_text())
    change(document["attributes"])
    document_path.write_text(json.dumps(document))


# ------------------------------------------------------------------ refusals


def test_composite_as_source_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    with pytest.raises(cv.UnsupportedSourceError, match="composites do not nest"):
        cv.create_composite(tmp_path / "d.zarr", {"c": tmp_path / "c.zarr"})
    assert not (tmp_path / "d.zarr").exists()


def test_mount_as_source_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    edit_root_attrs(
        two_sources["b"],
        lambda a: a.update(matrixSource={"location": "/x", "workspace": None, "assays": {}}),
    )
    with pytest.raises(cv.UnsupportedSourceError, match="mounted target"):
        cv.create_composite(tmp_path / "d.zarr", two_sources)
    assert not (tmp_path / "d.zarr").exists()


def test_pending_assay_source_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    zarr.open_group(two_sources["a"], mode="a").create_group(
        "GS", attributes={"cytearc:pending_assay": "add_grouped_assay"}
    )
    with pytest.raises(cv.UnsupportedSourceError, match="pending derived assay"):
        cv.create_composite(tmp_path / "d.zarr", two_sources)
    assert not (tmp_path / "d.zarr").exists()


def test_missing_assay_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    with pytest.raises(
        ValueError, match=r"source 'a' at .* has no assay 'ADT' \(its assays: \['RNA'\]\)"
    ):
        cv.create_composite(tmp_path / "d.zarr", two_sources, assay="ADT")
    assert not (tmp_path / "d.zarr").exists()


def test_different_assay_types_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.write_counts(
        tmp_path / "ga.zarr",
        realistic_counts(10, 30, seed=3),
        assay="RNA",
        assay_type="GeneActivity",
    )
    with pytest.raises(ValueError, match="different assay types"):
        cv.create_composite(tmp_path / "d.zarr", {"a": two_sources["a"], "g": tmp_path / "ga.zarr"})
    assert not (tmp_path / "d.zarr").exists()


@pytest.mark.parametrize("where", ["inside", "same", "around"])
def test_destination_overlapping_a_source_refused(
    tmp_path: Path, two_sources: dict[str, Path], where: str
) -> None:
    destination = {
        "inside": two_sources["a"] / "composite",
        "same": two_sources["a"],
        "around": tmp_path,
    }[where]
    before = sorted(p.name for p in two_sources["a"].rglob("*"))
    with pytest.raises(ValueError, match="overlaps source"):
        cv.create_composite(destination, two_sources)
    assert sorted(p.name for p in two_sources["a"].rglob("*")) == before


def test_integer_sources_without_common_integer_dtype_refused(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "u64.zarr", np.array([[2**63 + 5, 0]], dtype=np.uint64))
    cv.write_counts(tmp_path / "neg.zarr", np.array([[-1, 3]], dtype=np.int32))
    with pytest.raises(ValueError, match="no common integer dtype"):
        cv.create_composite(
            tmp_path / "d.zarr", {"u": tmp_path / "u64.zarr", "n": tmp_path / "neg.zarr"}
        )
    assert not (tmp_path / "d.zarr").exists()


def test_mixed_integer_and_float_sources_take_float(tmp_path: Path) -> None:
    cv.write_counts(tmp_path / "i.zarr", np.array([[1, 2]], dtype=np.int64))
    cv.write_counts(tmp_path / "f.zarr", np.array([[0.5, 2]], dtype=np.float32))
    comp = cv.create_composite(
        tmp_path / "d.zarr", {"i": tmp_path / "i.zarr", "f": tmp_path / "f.zarr"}
    )
    assert comp.reader().dtype == np.float32


def test_prefixed_cell_ids_that_collide_are_refused_naming_both_cells(tmp_path: Path) -> None:
    # 'dup' repeats across sources, so ids are prefixed: a's 'b-x' and a-b's 'x'
    # both become 'a-b-x'; the sources themselves are valid
    counts = np.array([[1, 2], [3, 4]], dtype=np.uint16)
    cv.write_counts(tmp_path / "a.zarr", counts, cells=["b-x", "dup"], features=["g1", "g2"])
    cv.write_counts(tmp_path / "a-b.zarr", counts, cells=["x", "dup"], features=["g1", "g2"])
    sources = {"a": tmp_path / "a.zarr", "a-b": tmp_path / "a-b.zarr"}
    with pytest.raises(ValueError) as caught:
        cv.create_composite(tmp_path / "d.zarr", sources)
    message = str(caught.value)
    assert "source 'a' cell 'b-x' and source 'a-b' cell 'x' both become 'a-b-x'" in message
    assert "not valid stores" not in message
    assert "name the sources" in message
    assert not (tmp_path / "d.zarr").exists()
    # renaming a source resolves it
    comp = cv.create_composite(tmp_path / "d.zarr", {"a": sources["a"], "b": sources["a-b"]})
    assert list(comp.reader().cell_ids) == ["a-b-x", "a-dup", "b-x", "b-dup"]


def test_non_empty_destination_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    with pytest.raises(FileExistsError):
        cv.create_composite(tmp_path / "c.zarr", two_sources)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"features": "outer"}, "'union', 'intersection'"),
        ({"features": ["g0", "g0"]}, "repeats ids"),
        ({"features": ["nope"]}, "in no source"),
        ({"cells": {"z": [0]}}, "unknown source"),
        ({"cells": {"a": np.ones(3, dtype=bool)}}, "mask of length 3"),
        ({"cells": {"a": [0, 0]}}, "repeats rows"),
        ({"cells": {"a": [500]}}, "outside"),
        ({"source_storage_options": {"zz": {}}}, r"^source_storage_options names unknown source"),
        ({"source_layers": {"zz": "counts"}}, r"^source_layers names unknown source"),
        ({"source_workspaces": {"zz": "ws"}}, r"^source_workspaces names unknown source"),
    ],
)
def test_bad_arguments_refused(
    tmp_path: Path, two_sources: dict[str, Path], kwargs, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cv.create_composite(tmp_path / "d.zarr", two_sources, **kwargs)
    assert not (tmp_path / "d.zarr").exists()


def test_a_boolean_series_of_cells_selects_by_its_index(
    tmp_path: Path, two_sources: dict[str, Path]
) -> None:
    """cells={"a": obs["keep"]} of a sorted obs kept the cells at the mask's
    positions, not the ones it labels."""
    ids = cv.VirtualArrayReader(two_sources["a"]).cell_ids
    keep = pd.Series(np.arange(len(ids)) % 3 == 0, index=ids)
    shuffled = keep.iloc[np.random.default_rng(2).permutation(len(ids))]
    comp = cv.create_composite(tmp_path / "d.zarr", two_sources, cells={"a": shuffled})
    kept = [i for i in comp.reader().cell_ids if i.startswith("a-")]
    assert kept == [f"a-{i}" for i in ids[keep.to_numpy()]]
    foreign = pd.Series(keep.to_numpy(), index=[f"x{i}" for i in range(len(ids))])
    with pytest.raises(ValueError, match=r"^cells\['a'\]: a boolean Series selects cells by"):
        cv.create_composite(tmp_path / "e.zarr", two_sources, cells={"a": foreign})
    assert not (tmp_path / "e.zarr").exists()


# ------------------------------------------------------------ fail-closed opens


def test_options_for_an_unknown_source_name_the_sources(
    tmp_path: Path, two_sources: dict[str, Path]
) -> None:
    """A reopen (``serve --source-storage-options``, ``info``, ...) keyed by a name the
    composite has not: the refusal names the sources it has, so the options can be fixed."""
    cv.create_composite(tmp_path / "c.zarr", two_sources).close()
    with pytest.raises(ValueError, match=r"unknown source\(s\) \['zz'\]") as raised:
        cv.open_store(tmp_path / "c.zarr", source_storage_options={"zz": {}})
    assert f"its sources are {list(two_sources)}" in str(raised.value)


def test_incomplete_composite_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    edit_root_attrs(tmp_path / "c.zarr", lambda a: a["composite"].update(complete=False))
    with pytest.raises(cv.IncompleteStoreError, match="not complete"):
        cv.open_store(tmp_path / "c.zarr")


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.pop("maps"),
        lambda c: c.update(extra=1),
        lambda c: c["sources"][0].update(credentials="x"),
        lambda c: c["sources"][0].pop("countsFingerprint"),
        lambda c: c["maps"]["rowSources"].update(compression="zstd"),
        lambda c: c["maps"].pop("featureColumns"),
        lambda c: c.update(complete="yes"),
        # zarr would ask for keys no computed chunk answers to (found at open, not at a read)
        lambda c: c["arrays"]["RNA/counts"].update(chunk_key_encoding={"name": "v9"}),
        lambda c: c["arrays"]["RNA/countsT"]["chunk_grid"].update(name="rectilinear"),
    ],
)
def test_record_shape_is_strict(tmp_path: Path, two_sources: dict[str, Path], change) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    edit_root_attrs(tmp_path / "c.zarr", lambda a: change(a["composite"]))
    with pytest.raises(cv.RecordShapeError):
        cv.open_store(tmp_path / "c.zarr")


def test_changed_source_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    cv.write_counts(
        two_sources["b"],
        realistic_counts(80, 25, seed=9),
        features=[f"g{i}" for i in range(10, 35)],
        overwrite=True,
    )
    with pytest.raises(cv.IdentityMismatchError) as info:
        cv.open_store(tmp_path / "c.zarr")
    message = str(info.value)
    assert "source 'b'" in message and str(two_sources["b"].resolve()) in message
    assert "does not match the composite record" in message and "recreate the composite" in message


def test_changed_mapping_refused(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    rows = zarr.open_array(tmp_path / "c.zarr", path="_composite/sourceRows", mode="r+")
    rows[0] = rows[1]
    with pytest.raises(cv.IdentityMismatchError, match="mapping sourceRows"):
        cv.open_store(tmp_path / "c.zarr")


def test_missing_source_names_its_location(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    shutil.rmtree(two_sources["a"])
    with pytest.raises(
        cv.SourceGoneError, match=r"source .a. at .* cannot be read.*restored at that path"
    ) as info:
        cv.open_store(tmp_path / "c.zarr")
    assert str(two_sources["a"].resolve()) in str(info.value)


def test_a_source_emptied_is_gone(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    # no Zarr group is there any more: as a deleted source on an object store shows
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    shutil.rmtree(two_sources["a"])
    two_sources["a"].mkdir()
    with pytest.raises(
        cv.SourceGoneError,
        match=r"source 'a' at .* is gone: no Zarr group is there any more .*restored at that "
        r"location, or the composite recreated",
    ):
        cv.open_store(tmp_path / "c.zarr")


@pytest.mark.parametrize("replacement", ["file", "anndata"])
def test_a_source_replaced_by_something_else_names_the_source(
    tmp_path: Path, two_sources: dict[str, Path], replacement: str
) -> None:
    # was the source's own "holds no Zarr group ... write a store there" or
    # "assay 'RNA' does not exist", naming neither the source nor the composite
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    shutil.rmtree(two_sources["a"])
    if replacement == "file":
        two_sources["a"].write_text("not a store")
    else:
        import anndata

        anndata.AnnData(np.ones((3, 2), dtype=np.float32)).write_zarr(two_sources["a"])
    with pytest.raises(
        ValueError,
        match=r"source 'a' at .* is not the store the composite recorded .*replaced or moved "
        r"after the composite was created. Restore the source at that path, or recreate",
    ):
        cv.open_store(tmp_path / "c.zarr")


# -------------------------------------------------------------- immutability


@pytest.mark.parametrize(
    "key",
    [
        "RNA/counts/zarr.json",
        "RNA/counts/c/0/0",
        "RNA/countsT/zarr.json",
        "_composite/rowSources/zarr.json",
        "_composite/sourceRows/c/0",
        "RNA/countSummaries/rowSums/c/0",
    ],
)
async def test_count_metadata_and_mappings_are_immutable(
    tmp_path: Path, two_sources: dict[str, Path], key: str
) -> None:
    from zarr.core.buffer import default_buffer_prototype

    cv.create_composite(tmp_path / "c.zarr", two_sources)
    store = cv.open_store(tmp_path / "c.zarr", mode="r+")
    before = sorted(str(p) for p in (tmp_path / "c.zarr").rglob("*"))
    with pytest.raises(PermissionError, match="cannot write"):
        await store.set(key, default_buffer_prototype().buffer.from_bytes(b"{}"))
    with pytest.raises(PermissionError, match="cannot delete"):
        await store.delete(key)
    assert sorted(str(p) for p in (tmp_path / "c.zarr").rglob("*")) == before


def test_composite_record_is_immutable_but_other_root_attrs_are_not(
    tmp_path: Path, two_sources: dict[str, Path]
) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    store = cv.open_store(tmp_path / "c.zarr", mode="r+")
    group = zarr.open_group(store, mode="r+")
    group.attrs["note"] = "analysis ran"
    with pytest.raises(PermissionError, match="composite record"):
        group.attrs["composite"] = {"assay": "RNA"}
    assert zarr.open_group(tmp_path / "c.zarr", mode="r").attrs["note"] == "analysis ran"
    cv.open_store(tmp_path / "c.zarr")


def test_analyses_stay_writable(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    store = cv.open_store(tmp_path / "c.zarr", mode="r+")
    provenance = {"operation": "test.hvg", "parameters": {}, "inputs": {}}
    with cv.publish_artifact(store, "RNA/artifacts", "hvg", provenance=provenance) as art:
        art.write_array("scores", np.arange(35, dtype=np.float64))
    assert [a.artifact_id for a in cv.list_artifacts(store, "RNA/artifacts")] == [art.artifact_id]
    cells = zarr.open_group(store, path="cellData", mode="r+")
    cells.create_array("RNA_nCounts", data=np.zeros(200))
    assert (tmp_path / "c.zarr" / "cellData" / "RNA_nCounts" / "zarr.json").is_file()


def test_bare_zarr_finds_no_counts(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    cv.create_composite(tmp_path / "c.zarr", two_sources)
    group = zarr.open_group(tmp_path / "c.zarr", mode="r")
    assert "counts" not in group["RNA"]
    assert "countsT" not in group["RNA"]
    assert not (tmp_path / "c.zarr" / "RNA" / "counts").exists()
    via_store = zarr.open_group(cv.open_store(tmp_path / "c.zarr"), mode="r")
    assert set(via_store["RNA"].keys()) >= {"counts", "countsT", "featureData", "countSummaries"}


def test_pickles_and_reads_the_same(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    comp = cv.create_composite(tmp_path / "c.zarr", two_sources)
    clone = pickle.loads(pickle.dumps(comp))
    assert clone == comp
    expected = comp.reader().read()
    np.testing.assert_array_equal(clone.reader().read(), expected)
    np.testing.assert_array_equal(zarr.open_array(clone, path="RNA/counts", mode="r")[:], expected)


def test_list_dir_shows_virtual_children(tmp_path: Path, two_sources: dict[str, Path]) -> None:
    from zarr.core.sync import sync

    comp = cv.create_composite(tmp_path / "c.zarr", two_sources)

    async def children(prefix: str) -> list[str]:
        return sorted([name async for name in comp.list_dir(prefix)])

    assert {"counts", "countsT", "featureData"} <= set(sync(children("RNA")))
    assert sync(children("RNA/counts")) == ["c", "zarr.json"]


# ------------------------------------------------------------- credentials


@pytest.mark.remote
def test_credentials_are_never_written(tmp_path: Path, s3_server: S3Server) -> None:
    options = s3_server.storage_options()
    options["secret_access_key"] = "planted-secret-9f3e1c"
    bucket = s3_server.new_bucket()
    matrix = realistic_counts(60, 20, density=0.2, seed=4)
    for name in ("a", "b"):
        cv.write_counts(f"s3://{bucket}/{name}.zarr", matrix, storage_options=options)
    sources = {name: f"s3://{bucket}/{name}.zarr" for name in ("a", "b")}
    per_source = {name: options for name in sources}
    comp = cv.create_composite(tmp_path / "c.zarr", sources, source_storage_options=per_source)
    np.testing.assert_array_equal(comp.reader().read()[:60], matrix.toarray())
    reopened = cv.open_store(tmp_path / "c.zarr", mode="r+", source_storage_options=per_source)
    zarr.open_group(reopened, mode="r+").attrs["touched"] = True
    for path in (tmp_path / "c.zarr").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"planted-secret-9f3e1c" not in data, path
            assert b"testing-key" not in data, path


def test_plain_zarr_read_only_open_of_a_writable_composite(
    tmp_path: Path, two_sources: dict[str, Path]
) -> None:
    # zarr calls with_read_only() from inside its event loop here
    expected = cv.create_composite(tmp_path / "c.zarr", two_sources).reader().read()
    writable = cv.open_store(tmp_path / "c.zarr", mode="r+")
    np.testing.assert_array_equal(
        zarr.open_array(writable, path="RNA/counts", mode="r")[:], expected
    )
    group = zarr.open_group(writable, mode="r")
    np.testing.assert_array_equal(group["RNA/countsT"][:], expected.T)
    import copy

    assert copy.copy(writable) == writable


def test_reader_accepts_a_composite_or_mount_location(
    tmp_path: Path, two_sources: dict[str, Path]
) -> None:
    expected = cv.create_composite(tmp_path / "c.zarr", two_sources).reader().read()
    np.testing.assert_array_equal(cv.VirtualArrayReader(tmp_path / "c.zarr").read(), expected)
    cv.mount_datastore(two_sources["a"], tmp_path / "m.zarr")
    np.testing.assert_array_equal(
        cv.VirtualArrayReader(tmp_path / "m.zarr").read(),
        cv.VirtualArrayReader(two_sources["a"]).read(),
    )
