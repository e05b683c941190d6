"""Open-time checks of composites and mounts found missing by an outside audit.

Each group below is one finding: a stored array where a composite serves
virtual counts; a mount assay that opens as RNA without the source's
countsT; the fingerprints of a composite or mount; an unknown workspace on
a composite or mount; a pre-0.7 AnnData Zarr as a composite source; and the
composite record's fields and first write.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from store_copies import copy_stores
from zarr.abc.store import Store
from zarr.storage import LocalStore, WrapperStore

import cytearc_vfs as cv
from cytearc_vfs.cli import main


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a zarr.json document on disk, as an outside tool would."""
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stores of the fixtures below, built once and never opened after."""
    root = tmp_path_factory.mktemp("pristine")
    cv.write_counts(root / "s.zarr", np.arange(1, 7).reshape(3, 2))
    cv.create_composite(root / "c.zarr", {"s": root / "s.zarr"}).close()
    cv.mount_datastore(root / "s.zarr", root / "m.zarr").close()
    cv.write_counts(root / "adt.zarr", np.ones((3, 2)), assay="ADT")
    cv.mount_datastore(root / "adt.zarr", root / "madt.zarr").close()
    return root


@pytest.fixture
def copied(pristine: Path, tmp_path: Path) -> Path:
    """A copy of the stores of ``pristine`` in ``tmp_path``, the records naming the
    copied sources: tests edit and rewrite them (a new build was ~1.5 s a test)."""
    return copy_stores(pristine, tmp_path)


@pytest.fixture
def source(copied: Path) -> Path:
    """An ordinary RNA store of 3 cells x 2 features."""
    return copied / "s.zarr"


@pytest.fixture
def composite(copied: Path) -> Path:
    """A composite of ``source``."""
    return copied / "c.zarr"


@pytest.fixture
def mount(copied: Path) -> Path:
    """A mounted target of ``source``."""
    return copied / "m.zarr"


# --------------------------------- 1. a stored array where a virtual one is served


@pytest.mark.parametrize("name", ["counts", "countsT"])
def test_a_stored_virtual_array_in_a_composite_is_refused(
    composite: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zarr.create_array(composite / "RNA" / name, shape=(3, 2), dtype="uint8", fill_value=0)
    with pytest.raises(cv.RecordShapeError, match=rf"holds \['RNA/{name}'\].*plain zarr"):
        cv.open_store(composite)
    assert main(["verify", str(composite)]) == 3
    assert f"RNA/{name}" in capsys.readouterr().err


def test_a_stored_zarr_v2_array_is_refused_too(composite: Path) -> None:
    # bare zarr.open_array falls back on .zarray: any node at the path is refused
    zarr.create_array(
        composite / "RNA" / "counts", shape=(3, 2), dtype="uint8", fill_value=0, zarr_format=2
    )
    with pytest.raises(cv.RecordShapeError, match=r"holds \['RNA/counts'\]"):
        cv.open_store(composite)


def test_the_virtual_document_itself_is_the_served_view_and_opens(composite: Path) -> None:
    # what `cytearc-vfs serve` and mount-fs present: the record's own document
    # (their chunks are computed); test_serve opens a served composite so
    record = json.loads((composite / "zarr.json").read_text())["attributes"]["composite"]
    (composite / "RNA" / "counts").mkdir()
    (composite / "RNA" / "counts" / "zarr.json").write_text(
        json.dumps(record["arrays"]["RNA/counts"])
    )
    store = cv.open_store(composite)
    np.testing.assert_array_equal(store.reader().read(), np.arange(1, 7).reshape(3, 2))


class _Counting(WrapperStore[Store]):
    """A store that records the prefixes listed and the keys read."""

    def __init__(self, store: Store, log: list[tuple[str, str]]) -> None:
        super().__init__(store)
        self.log = log

    def _with_store(self, store: Store) -> _Counting:
        return type(self)(store, self.log)

    def with_read_only(self, read_only: bool = False) -> _Counting:
        return type(self)(self._store.with_read_only(read_only), self.log)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.log.append(("get", key))
        return await self._store.get(key, prototype, byte_range)

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        self.log.append(("list_dir", prefix))
        return self._store.list_dir(prefix)


def test_the_check_costs_one_listing_of_the_assay_group(composite: Path) -> None:
    log: list[tuple[str, str]] = []
    store = cv.open_store(_Counting(LocalStore(composite, read_only=True), log))
    assert isinstance(store, cv.CompositeStore)
    assert log.count(("list_dir", "RNA")) == 1  # two virtual arrays, one request
    assert not [key for kind, key in log if kind == "get" and key.startswith("RNA/counts")]


# ------------------------------------ 2. a mount assay opening as RNA without countsT


@pytest.fixture
def adt_mount(copied: Path) -> tuple[Path, Path]:
    """A mount of an ADT-only source (no countsT)."""
    return copied / "adt.zarr", copied / "madt.zarr"


def test_an_intact_mount_of_an_adt_source_opens(adt_mount: tuple[Path, Path]) -> None:
    store = cv.open_store(adt_mount[1])
    assert isinstance(store, cv.MountStore)
    np.testing.assert_array_equal(store.reader("ADT").read(), np.ones((3, 2)))


def test_a_mount_assay_declared_rna_without_the_source_counts_t_is_refused(
    adt_mount: tuple[Path, Path],
) -> None:
    _, target = adt_mount
    edit_json(target / "zarr.json", lambda d: d["attributes"]["assayTypes"].update(ADT="RNA"))
    with pytest.raises(
        cv.IncompleteStoreError,
        match=r"assay 'ADT' opens as RNA \(the target's assayTypes.*lacks.*back to 'ADT'",
    ):
        cv.open_store(target)


def test_requires_transpose_edited_to_false_on_an_rna_assay_is_refused(mount: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["attributes"]["matrixSource"]["assays"]["RNA"]["requiresTranspose"] = False

    edit_json(mount / "zarr.json", edit)
    with pytest.raises(cv.RecordShapeError, match=r"requiresTranspose: false for assay 'RNA'"):
        cv.open_store(mount)


def test_requires_transpose_edited_to_true_on_an_adt_assay_is_refused(
    adt_mount: tuple[Path, Path],
) -> None:
    _, target = adt_mount

    def edit(d: dict[str, Any]) -> None:
        d["attributes"]["matrixSource"]["assays"]["ADT"]["requiresTranspose"] = True

    edit_json(target / "zarr.json", edit)
    # the source's own countsT check names the missing array first
    with pytest.raises(cv.IncompleteStoreError, match="countsT"):
        cv.open_store(target)


# ----------------------------------------------- 3. fingerprints of composites and mounts


def test_a_mount_s_fingerprints_are_its_source_s(source: Path, mount: Path) -> None:
    assert cv.dataset_fingerprint(mount) == cv.dataset_fingerprint(source)
    assert cv.counts_fingerprint(mount) == cv.counts_fingerprint(source)
    opened = cv.open_store(mount)
    assert cv.dataset_fingerprint(opened) == cv.dataset_fingerprint(source)
    with pytest.raises(ValueError, match=r"assay 'ADT' does not exist.*its assays: \['RNA'\]"):
        cv.counts_fingerprint(mount, assay="ADT")
    with pytest.raises(ValueError, match="of workspace 'zz' does not exist"):
        cv.dataset_fingerprint(mount, workspace="zz")


def test_a_changed_mount_source_fails_before_its_fingerprints(source: Path, mount: Path) -> None:
    # the fingerprints are returned only by an open that checked the source
    cv.write_counts(source, np.arange(2, 8).reshape(3, 2), overwrite=True)
    with pytest.raises(cv.IdentityMismatchError, match="source changed after it was mounted"):
        cv.dataset_fingerprint(mount)


def test_a_composite_has_no_fingerprint_of_its_own(composite: Path, source: Path) -> None:
    for accessor in (cv.dataset_fingerprint, cv.counts_fingerprint):
        with pytest.raises(cv.UnsupportedSourceError, match=r"is a composite.*\.record\.sources"):
            accessor(composite)
    # where the message points: the sources' fingerprints as recorded
    binding = cv.open_store(composite).record.sources[0]
    assert binding.dataset_fingerprint == cv.dataset_fingerprint(source)
    assert binding.counts_fingerprint == cv.counts_fingerprint(source)


# ------------------------------------------ 4. an unknown workspace on a composite or mount


def _missing(where: Path) -> str:
    return rf"{where.name}: assay 'RNA' of workspace 'zz' does not exist \(no group at 'zz/RNA'\); its assays: \['RNA'\]"


@pytest.mark.parametrize("kind", ["composite", "mount", "ordinary"])
def test_an_unknown_workspace_gives_one_message_for_every_kind(
    kind: str, composite: Path, mount: Path, source: Path, tmp_path: Path
) -> None:
    location = {"composite": composite, "mount": mount, "ordinary": source}[kind]
    for call in (
        lambda: cv.to_anndata(location, workspace="zz"),
        lambda: cv.anndata_view(location, workspace="zz"),
        lambda: cv.VirtualArrayReader(location, workspace="zz"),
    ):
        with pytest.raises(ValueError, match=_missing(location)):
            call()
    assert main(["export", str(location), str(tmp_path / "x.h5ad"), "--workspace", "zz"]) == 2
    assert not (tmp_path / "x.h5ad").exists()


def test_the_assays_named_in_a_refusal_say_how_to_ask_for_them(
    source: Path, tmp_path: Path
) -> None:
    """'its assays: ['ws1/ADT'] (give one of them)': assay='ws1/ADT' is not a valid name;
    and 'RNA' offered under an unknown workspace is asked for with no workspace."""
    store = tmp_path / "ws.zarr"
    cv.write_counts(store, np.arange(6).reshape(3, 2), workspace="ws1", assay="ADT")
    with pytest.raises(ValueError, match=r"\['ws1/ADT'\].*'W/A' is assay 'A' of workspace 'W'"):
        cv.to_anndata(store, assay="ADT")
    cv.to_anndata(store, assay="ADT", workspace="ws1")  # what the hint says
    with pytest.raises(ValueError, match=r"\['RNA'\].*in the root layout: give no workspace"):
        cv.to_anndata(source, workspace="zz")


def test_a_composite_source_in_a_workspace_is_refused_naming_source_workspaces(
    tmp_path: Path,
) -> None:
    """In Python too, the refusal says how to ask for an assay of a workspace: the
    keywords, and for a composite's source the source_workspaces= that reads it."""
    store = tmp_path / "ws.zarr"
    cv.write_counts(store, np.arange(6).reshape(3, 2), workspace="ws1")
    with pytest.raises(ValueError, match=r"source_workspaces=\{NAME: 'W'\}"):
        cv.create_composite(tmp_path / "c.zarr", {"w": store})
    with pytest.raises(ValueError, match=r"assay='A', workspace='W'"):
        cv.to_anndata(store)
    cv.create_composite(tmp_path / "c.zarr", {"w": store}, source_workspaces={"w": "ws1"})


def test_an_unknown_assay_of_a_composite_names_its_assay(composite: Path) -> None:
    with pytest.raises(ValueError, match=r"assay 'ADT' does not exist.*its assays: \['RNA'\]"):
        cv.to_anndata(composite, assay="ADT")


# --------------------------------------------- 5. a pre-0.7 AnnData Zarr as a source


def _pre_07_anndata(location: Path) -> None:
    """An AnnData Zarr as anndata < 0.7 wrote it: v2, no root attributes, obs and var
    as record arrays, dense X."""
    root = zarr.open_group(location, mode="w-", zarr_format=2)
    root.create_array("X", data=np.arange(6, dtype="float32").reshape(3, 2))
    for frame, names in (("obs", [b"c0", b"c1", b"c2"]), ("var", [b"g0", b"g1"])):
        values = np.array([(name,) for name in names], dtype=[("index", "S2")])
        root.create_array(frame, data=values)


def test_a_pre_07_anndata_source_is_refused_naming_the_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = tmp_path / "legacy.zarr"
    _pre_07_anndata(legacy)
    with pytest.raises(cv.UnsupportedSourceError, match=r"anndata before 0\.7.*write_counts"):
        cv.create_composite(tmp_path / "c.zarr", [legacy])
    assert not (tmp_path / "c.zarr").exists()
    assert main(["composite", str(tmp_path / "c2.zarr"), str(legacy)]) == 2
    err = capsys.readouterr().err
    assert "anndata before 0.7" in err and "cytearc-vfs write" in err
    # the remedy works: the import reads the layout, and the import composes
    cv.write_counts(tmp_path / "imported.zarr", legacy)
    comp = cv.create_composite(tmp_path / "c3.zarr", [tmp_path / "imported.zarr"])
    np.testing.assert_array_equal(comp.reader().read(), np.arange(6).reshape(3, 2))


# --------------------------------------------------- 6. the composite record


def test_the_record_holds_exactly_the_spec_s_five_fields(composite: Path) -> None:
    root = json.loads((composite / "zarr.json").read_text())["attributes"]
    assert sorted(root["composite"]) == ["arrays", "assay", "complete", "maps", "sources"]
    maps = json.loads((composite / "_composite" / "zarr.json").read_text())["attributes"]
    assert sorted(maps["cytearc:ids"]) == ["cells", "features"]


def _as_written_before(composite: Path) -> None:
    """Move the ids fingerprints back into the record, as releases before wrote them."""
    ids = json.loads((composite / "_composite" / "zarr.json").read_text())["attributes"][
        "cytearc:ids"
    ]
    edit_json(composite / "_composite" / "zarr.json", lambda d: d["attributes"].clear())
    edit_json(composite / "zarr.json", lambda d: d["attributes"]["composite"].update(ids=ids))


def test_a_composite_with_ids_in_its_record_still_opens_and_is_checked(
    composite: Path,
) -> None:
    _as_written_before(composite)
    store = cv.open_store(composite)
    assert isinstance(store, cv.CompositeStore) and store.record.ids is not None
    np.testing.assert_array_equal(store.reader().read(), np.arange(1, 7).reshape(3, 2))
    ids = zarr.open_array(cv.open_store(composite, mode="r+"), path="cellData/ids", mode="r+")
    ids[:] = np.asarray(ids[:])[::-1]
    with pytest.raises(cv.IdentityMismatchError, match="composite's ids record"):
        cv.open_store(composite)


def test_ids_in_the_record_and_beside_it_must_agree(composite: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["attributes"]["composite"]["ids"] = {
            "cells": "sha256:" + "0" * 64,
            "features": "sha256:" + "0" * 64,
        }

    edit_json(composite / "zarr.json", edit)
    with pytest.raises(cv.RecordShapeError, match="record's ids and _composite cytearc:ids"):
        cv.open_store(composite)


def test_a_failed_creation_leaves_the_record_with_complete_false(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cytearc_vfs.composite.create as create

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(create, "write_table", fail)
    destination = tmp_path / "failed.zarr"
    with pytest.raises(RuntimeError, match="disk gone"):
        cv.create_composite(destination, {"s": source})
    attrs = json.loads((destination / "zarr.json").read_text())["attributes"]
    # a reader of the record alone (the spec's) refuses it, as this package does
    assert attrs["composite"]["complete"] is False
    assert attrs["cytearc:pending_store"] == "create_composite"
    with pytest.raises(cv.IncompleteStoreError):
        cv.open_store(destination)
    monkeypatch.undo()
    cv.create_composite(destination, {"s": source}, overwrite=True).close()
    assert isinstance(cv.open_store(destination), cv.CompositeStore)
