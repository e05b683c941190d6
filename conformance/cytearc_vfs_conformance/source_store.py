"""Conformance checks for an ordinary CyteArc source store.

Point :func:`check_source_store` at any location (written by this package
or by another writer) to learn whether it keeps the on-disk contract that
cytearc_vfs and the DataStore above it rely on. Each check is independent
and reports a :class:`Finding`; nothing is written to the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import cytearc_vfs as cv
from cytearc_vfs.format.nodes import array_at, group_at
from cytearc_vfs.format.paths import join
from cytearc_vfs.format.source_store import AssayInfo, verify_store
from cytearc_vfs.inspection.deep_verify import deep_verify
from cytearc_vfs.remote.locations import Location, describe_location, open_location

__all__ = ["Finding", "check_source_store"]


@dataclass(frozen=True, slots=True)
class Finding:
    """The outcome of one conformance check."""

    check: str
    """Short name of the check."""
    ok: bool
    """Whether the store passed it."""
    detail: str = ""
    """What was wrong, when it failed."""


def _snapshot(store: Store) -> dict[str, bytes]:
    async def collect() -> dict[str, bytes]:
        values: dict[str, bytes] = {}
        async for key in store.list():
            buffer = await store.get(key, prototype=default_buffer_prototype())
            if buffer is not None:
                values[key] = buffer.to_bytes()
        return values

    return sync(collect())


def _table_conventions(root: zarr.Group, path: str, length: int) -> list[str]:
    problems = []
    table = group_at(root, path)
    for column in ("ids", "names", "I"):
        if column not in table:
            problems.append(f"{path} lacks {column}")
    for name, array in table.arrays():
        if array.shape != (length,):
            problems.append(f"{path}/{name} has shape {array.shape}, expected ({length},)")
    if "I" in table and array_at(table, "I").dtype != np.bool_:
        problems.append(f"{path}/I is not boolean")
    for column in ("ids", "names"):
        if column in table and array_at(table, column).dtype.kind != "U":
            problems.append(f"{path}/{column} is not fixed-width text (the DataStore needs <U)")
    if "ids" in table:
        ids = np.asarray(array_at(table, "ids")[:])
        if len(np.unique(ids)) != len(ids):
            problems.append(f"{path}/ids are not unique")
    return problems


def _assay_conventions(root: zarr.Group, info: AssayInfo) -> list[str]:
    paths = info.paths
    problems = _table_conventions(root, paths.cell_data, info.shape[0])
    problems += _table_conventions(root, paths.feature_data, info.shape[1])
    container = group_at(root, paths.root) if paths.root else root
    if paths.assay not in container.attrs.get("assayTypes", {}):  # type: ignore[operator]
        problems.append(f"assayTypes of {paths.root or '/'} does not name {paths.assay}")
    if "defaultAssay" not in container.attrs:
        problems.append(f"{paths.root or '/'} has no defaultAssay")
    if info.has_counts_t:
        counts_t = array_at(root, paths.counts_t)
        if counts_t.attrs.get("complete") is not True:
            problems.append("countsT lacks complete=true")
        if counts_t.shape != (info.shape[1], info.shape[0]) or counts_t.dtype != info.dtype:
            problems.append("countsT is not the transposed shape in the same dtype")
    counts = array_at(root, paths.counts)
    edge = tuple(slice(max(0, n - 1), n) for n in counts.shape)
    if counts.size and np.asarray(counts[edge]).shape != tuple(min(1, n) for n in counts.shape):
        problems.append("the edge chunk of counts does not read at its true size")
    if join(paths.assay_group, "state") in root:
        problems.append(f"retired {paths.assay}/state group present")
    return problems


def check_source_store(
    location: Location,
    *,
    storage_options: Mapping[str, Any] | None = None,
    deep: bool = True,
) -> list[Finding]:
    """Run every conformance check on the store at ``location``.

    A location that is no store (absent, a directory without ``zarr.json``,
    a root array) is reported as failed checks, not raised.
    """
    where = describe_location(location)
    findings: list[Finding] = []

    def run(name: str, check: Callable[[], list[str]]) -> None:
        try:
            problems = check()
        except Exception as exc:  # a check that crashes is a failed check, reported
            findings.append(Finding(name, False, f"{type(exc).__name__}: {exc}"))
            return
        findings.append(Finding(name, not problems, "; ".join(problems)))

    store = open_location(location, read_only=True, storage_options=storage_options)
    before = _snapshot(store)
    infos: list[AssayInfo] = []

    def verified_open() -> list[str]:
        cv.open_store(location, storage_options=storage_options)
        infos.extend(verify_store(store, where=where)[1])
        return [] if infos else ["no published assay"]

    run("open_store verifies", verified_open)
    roots: list[zarr.Group] = []

    def open_root() -> list[str]:
        # a directory without zarr.json, or a root array, raises: a failed check
        roots.append(zarr.open_group(store, mode="r"))
        return []

    def conventions() -> list[str]:
        if not roots or not infos:
            # nothing to check them on is no pass
            return [
                "not checked: " + ("the root is no group" if not roots else "no verified assay")
            ]
        return [problem for info in infos for problem in _assay_conventions(roots[0], info)]

    run("plain zarr opens the root read-only", open_root)
    run("conventions the DataStore relies on", conventions)
    if deep:
        run(
            "values agree with their records",
            lambda: [
                f"{report.label}: {problem}"
                for report in deep_verify(store, where=where)
                for problem in report.problems
            ],
        )
    run(
        "reading changed nothing",
        lambda: [] if _snapshot(store) == before else ["the store changed during read-only checks"],
    )
    return findings
