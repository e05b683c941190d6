"""Conformance checks for an ordinary CyteArc source store.

Point :func:`check_source_store` at any location (written by this package
or by another writer) to learn whether it keeps the on-disk contract that
cytearc_vfs and the DataStore above it rely on. Each check is independent
and reports a :class:`Finding`; nothing is written to the store.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, ObjectStore

import cytearc_vfs as cv
from cytearc_vfs.composite.store import CompositeStore
from cytearc_vfs.format.layout import LayoutPolicy, array_geometry, single_frame_geometry
from cytearc_vfs.format.nodes import array_at, group_at
from cytearc_vfs.format.object_keys import store_key
from cytearc_vfs.format.object_listing import list_recursive
from cytearc_vfs.format.paths import AssayPaths, join
from cytearc_vfs.format.records import CountLayout
from cytearc_vfs.format.shard_tables import REWRITE_REMEDY
from cytearc_vfs.format.source_store import AssayInfo, read_contents, verify_store
from cytearc_vfs.format.tables import CATEGORICAL_ATTR
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.mount.store import MountStore
from cytearc_vfs.remote.locations import Location, describe_location, open_location
from cytearc_vfs.write.membership import MEMBERSHIP_ROLE

__all__ = ["Finding", "check_source_store"]


@dataclass(frozen=True, slots=True)
class Finding:
    """The outcome of one conformance check."""

    check: str
    """Short name of the check."""
    ok: bool
    """Whether the store passed it."""
    detail: str = ""
    """What was wrong, when it failed; warnings the check raised, when it passed."""


#: The remedy of a table that breaks the conventions: this layer's writers write them so.
_TABLE_REMEDY = "re-import the dataset (its writer broke the table conventions)"

#: Documents whose bytes the snapshot compares: every record lives in one.
_DOCUMENTS = frozenset({"zarr.json", ".zattrs", ".zgroup", ".zarray", ".zmetadata"})
#: Size requests of a snapshot in flight at once (stores that list no sizes).
_SIZE_REQUESTS = 16


def _snapshot(store: Store) -> dict[str, object]:
    """What would show a write: every key, its size (and version where the store
    lists one), and the bytes of every metadata document.

    Reading every chunk's bytes, before and after, read the whole store twice
    beyond what the checks need (three times its size with ``deep=False``). A
    read-only check that wrote a chunk would have to keep its size and, on a
    local disk, its modification time, and on an object store its ETag.
    """

    async def collect() -> dict[str, object]:
        found: dict[str, object] = {}
        listed: dict[str, object]
        if isinstance(store, ObjectStore):
            listed = {
                store_key(store, item["path"]): (
                    item["size"],
                    item.get("e_tag"),
                    str(item.get("last_modified")),
                )
                for item in await list_recursive(store, "")
            }
        else:
            listed = {key: None async for key in store.list()}
        limit = asyncio.Semaphore(_SIZE_REQUESTS)

        async def one(key: str) -> None:
            async with limit:
                if key.rsplit("/", 1)[-1] in _DOCUMENTS:
                    buffer = await store.get(key, prototype=default_buffer_prototype())
                    found[key] = None if buffer is None else buffer.to_bytes()
                elif listed[key] is not None:
                    found[key] = listed[key]
                elif isinstance(store, LocalStore):
                    stat = (Path(store.root) / key).stat()
                    found[key] = (stat.st_size, stat.st_mtime_ns)
                else:
                    found[key] = await store.getsize(key)

        await asyncio.gather(*(one(key) for key in listed))
        return found

    return sync(collect())


def _membership_conventions(table: zarr.Group, path: str, assays: set[str]) -> list[str]:
    """A column with the membership role is the boolean ``<assay>_I`` of an assay of the store.

    The spec gives the column its attributes in its first write ("a reader
    never finds the column without them"), and composites and merges refuse a
    source whose role-carrying column breaks this; a column of that name
    without the role is ordinary metadata.
    """
    problems = []
    for name, array in table.arrays():
        if array.attrs.get("role") != MEMBERSHIP_ROLE:
            continue
        assay = array.attrs.get("assay")
        where = f"{path}/{name} (role {MEMBERSHIP_ROLE!r}, assay {assay!r})"
        if assay not in assays or name != f"{assay}_I":
            problems.append(
                f"{where} is no membership column of this store: its assay must be one of "
                f"{sorted(assays)} and its name <assay>_I; drop the column or rebuild the store"
            )
        if array.dtype != np.bool_:
            problems.append(
                f"{where} has dtype {array.dtype}, but a membership column is boolean; "
                "rebuild the store from its source"
            )
    return problems


def _replayable(paths: AssayPaths, layout: CountLayout) -> list[str]:
    """The recorded geometry is what the recorded policy gives (readers and countsT writers replay it).

    Writers use :func:`array_geometry` (row-framed stores have the same shapes),
    stores of early issue 14 :func:`single_frame_geometry`; one rule gives both arrays.
    """
    try:
        policy = LayoutPolicy(layout.unit_bytes, layout.chunk_bytes)
    except ValueError as exc:
        return [f"{paths.counts}: the recorded layout policy is not a policy ({exc})"]
    itemsize = np.dtype(layout.dtype).itemsize
    n_cells, n_features = layout.shape
    for rule in (array_geometry, single_frame_geometry):
        counts_t = None if layout.counts_t is None else rule(n_features, n_cells, itemsize, policy)
        if (
            layout.counts == rule(n_cells, n_features, itemsize, policy)
            and layout.counts_t == counts_t
        ):
            return []
    return [
        f"the geometry of {paths.counts} recorded in cytearc:countMatrixLayout is not what "
        f"its policy (unitBytes {layout.unit_bytes}, chunkBytes {layout.chunk_bytes}) gives, so a "
        "reader or countsT writer that replays the policy lays the arrays out otherwise; "
        "rewrite the store with `cytearc-vfs repack --data-only SOURCE DEST`"
    ]


def _categorical_conventions(table: zarr.Group, path: str) -> list[str]:
    """A categorical column's record parses and every stored value is one of its categories.

    Readers restore the column with ``pd.Categorical(values, categories)``,
    which turns a value outside the categories into a missing value, silently.
    """
    problems = []
    for name, array in table.arrays():
        spec = array.attrs.get(CATEGORICAL_ATTR)
        if spec is None:
            continue
        where = f"{path}/{name}"
        if (
            not isinstance(spec, dict)
            or set(spec) != {"categories", "ordered"}
            or not isinstance(spec["categories"], list)
            or not isinstance(spec["ordered"], bool)
        ):
            problems.append(
                f"{where}: {CATEGORICAL_ATTR} must be {{'categories': [...], 'ordered': bool}}, "
                f"found {spec!r}; {_TABLE_REMEDY}"
            )
            continue
        values = np.asarray(array[:])
        try:
            unknown = pd.Index(spec["categories"]).get_indexer(pd.Index(values)) == -1
        except Exception as exc:  # categories that do not index (repeated ones): a finding
            problems.append(
                f"{where}: its categories do not index its values ({exc}); {_TABLE_REMEDY}"
            )
            continue
        outside = values[unknown]
        outside = outside[~pd.isna(outside)]
        if outside.size:
            problems.append(
                f"{where} holds {outside.size} value(s) outside its categories (first "
                f"{outside[0]!r}), which a reader restores as missing; {_TABLE_REMEDY}"
            )
    return problems


def _table_conventions(root: zarr.Group, path: str, length: int) -> list[str]:
    problems = []
    table = group_at(root, path)
    problems += _categorical_conventions(table, path)
    for column in ("ids", "names", "I"):
        if column not in table:
            problems.append(f"{path} lacks {column}; {_TABLE_REMEDY}")
    for name, array in table.arrays():
        if array.shape != (length,):
            problems.append(
                f"{path}/{name} has shape {array.shape}, expected ({length},); {_TABLE_REMEDY}"
            )
    if "I" in table and array_at(table, "I").dtype != np.bool_:
        problems.append(f"{path}/I is not boolean; {_TABLE_REMEDY}")
    for column in ("ids", "names"):
        if column in table and array_at(table, column).dtype.kind != "U":
            problems.append(
                f"{path}/{column} is not fixed-width text (the DataStore needs <U); {_TABLE_REMEDY}"
            )
    if "ids" in table:
        ids = np.asarray(array_at(table, "ids")[:])
        if len(np.unique(ids)) != len(ids):
            problems.append(f"{path}/ids are not unique; {_TABLE_REMEDY}")
    return problems


@dataclass(frozen=True, slots=True)
class _Assay:
    """What the conventions check of one assay: where it is, its shape, its dtype."""

    paths: AssayPaths
    shape: tuple[int, int]
    dtype: np.dtype
    has_counts_t: bool
    layout: CountLayout | None
    """The verified layout record (a composite's virtual counts have none)."""


def _described(info: AssayInfo) -> _Assay:
    return _Assay(info.paths, info.shape, info.dtype, info.has_counts_t, info.layout)


def _virtual_assays(store: Store, root: zarr.Group, *, where: str) -> list[_Assay]:
    """The assays of an open composite, read through its (virtual) count arrays."""
    found = []
    for paths in read_contents(store, where=where).assays:
        counts = array_at(root, paths.counts)
        found.append(
            _Assay(
                paths,
                (int(counts.shape[0]), int(counts.shape[1])),
                counts.dtype,
                paths.counts_t in root,
                None,
            )
        )
    return found


def _assay_conventions(root: zarr.Group, info: _Assay, assays: set[str]) -> list[str]:
    paths = info.paths
    problems = _table_conventions(root, paths.cell_data, info.shape[0])
    problems += _membership_conventions(group_at(root, paths.cell_data), paths.cell_data, assays)
    problems += _table_conventions(root, paths.feature_data, info.shape[1])
    container = group_at(root, paths.root) if paths.root else root
    if paths.assay not in container.attrs.get("assayTypes", {}):  # type: ignore[operator]
        problems.append(
            f"assayTypes of {paths.root or '/'} does not name {paths.assay}; open the store "
            "writable with assay_types naming a preset for it, or re-import the dataset"
        )
    if "defaultAssay" not in container.attrs:
        problems.append(
            f"{paths.root or '/'} has no defaultAssay; re-import the dataset, or set it to one "
            "of its assays"
        )
    if join(paths.assay_group, "state") in root:
        problems.append(
            f"retired {paths.assay}/state group present; {REWRITE_REMEDY} (the rewrite omits it)"
        )
    return problems


def _counts_conventions(root: zarr.Group, info: _Assay) -> list[str]:
    paths = info.paths
    problems = []
    if info.has_counts_t:
        counts_t = array_at(root, paths.counts_t)
        if counts_t.attrs.get("complete") is not True:
            problems.append(f"countsT lacks complete=true; {REWRITE_REMEDY}")
        if counts_t.shape != (info.shape[1], info.shape[0]) or counts_t.dtype != info.dtype:
            problems.append(
                f"countsT is not the transposed shape in the same dtype; {REWRITE_REMEDY}"
            )
    counts = array_at(root, paths.counts)
    edge = tuple(slice(max(0, n - 1), n) for n in counts.shape)
    if counts.size and np.asarray(counts[edge]).shape != tuple(min(1, n) for n in counts.shape):
        problems.append(
            f"the edge chunk of counts does not read at its true size; {REWRITE_REMEDY}"
        )
    return problems + (_replayable(paths, info.layout) if info.layout is not None else [])


def check_source_store(
    location: Location,
    *,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
    deep: bool = True,
) -> list[Finding]:
    """Run every conformance check on the store at ``location``.

    A location that is no store (absent, a directory without ``zarr.json``,
    a root array) is reported as failed checks, not raised. A composite or a
    mount is checked through the store :func:`cytearc_vfs.open_store` gives
    (``source_storage_options`` as it takes them): its tables against its
    counts, a mount's source counts where they are, and every value.
    """
    where = describe_location(location)
    findings: list[Finding] = []

    def run(name: str, check: Callable[[], list[str]]) -> None:
        # a warning (an assay opened as the generic type...) is reported with
        # the check, not raised by a caller's warning filter
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                problems = check()
            except Exception as exc:  # a check that crashes is a failed check, reported
                findings.append(Finding(name, False, f"{type(exc).__name__}: {exc}"))
                return
        notes = [f"warned: {w.message}" for w in warned]
        findings.append(Finding(name, not problems, "; ".join([*problems, *notes])))

    store = open_location(location, read_only=True, storage_options=storage_options)
    before = _snapshot(store)
    infos: list[_Assay] = []
    # the store the conventions and values are read through: the plain store
    # of an ordinary store, the open composite or mount otherwise (a
    # composite's counts and a mount's artifacts exist only through it)
    views: list[Store] = []

    def verified_open() -> list[str]:
        opened = cv.open_store(
            location,
            storage_options=storage_options,
            source_storage_options=source_storage_options,
        )
        if isinstance(opened, CompositeStore):
            views.append(opened)
            infos.extend(_virtual_assays(opened, zarr.open_group(opened, mode="r"), where=where))
        elif isinstance(opened, MountStore):
            # the counts are the source's; the target's tables must fit them
            views.append(opened)
            source_infos = verify_store(opened.source, where=opened.record.location)[1]
            target = {p.assay: p for p in read_contents(opened, where=where).assays}
            infos.extend(
                _Assay(target[i.paths.assay], i.shape, i.dtype, i.has_counts_t, None)
                for i in source_infos
                if i.paths.assay in target
            )
            counts_roots.extend(
                (opened.source, _described(i)) for i in source_infos if i.paths.assay in target
            )
        else:
            views.append(store)
            infos.extend(_described(i) for i in verify_store(store, where=where)[1])
        return [] if infos else ["no published assay"]

    counts_roots: list[tuple[Store, _Assay]] = []
    run("open_store verifies", verified_open)
    roots: list[zarr.Group] = []

    def open_root() -> list[str]:
        # a directory without zarr.json, or a root array, raises: a failed check
        roots.append(zarr.open_group(views[0] if views else store, mode="r"))
        return []

    def conventions() -> list[str]:
        if not roots or not infos:
            # nothing to check them on is no pass
            return [
                "not checked: " + ("the root is no group" if not roots else "no verified assay")
            ]
        assays = {
            root: {info.paths.assay for info in infos if info.paths.root == root}
            for root in {info.paths.root for info in infos}
        }
        problems = [
            problem
            for info in infos
            for problem in _assay_conventions(roots[0], info, assays[info.paths.root])
        ]
        if not counts_roots:
            problems += [
                problem for info in infos for problem in _counts_conventions(roots[0], info)
            ]
        # a mount's target holds no counts: its source's are checked where they are
        problems += [
            problem
            for source, info in counts_roots
            for problem in _counts_conventions(zarr.open_group(source, mode="r"), info)
        ]
        return list(dict.fromkeys(problems))

    run("plain zarr opens the root read-only", open_root)
    run("conventions the DataStore relies on", conventions)
    if deep:
        run(
            "values agree with their records",
            lambda: [
                f"{report.label}: {problem}"
                for report in deep_verify(
                    views[0] if views else store,
                    where=where,
                    source_storage_options=source_storage_options,
                )
                for problem in report.problems
            ],
        )
    run(
        "reading changed nothing",
        lambda: [] if _snapshot(store) == before else ["the store changed during read-only checks"],
    )
    return findings
