"""``repack``: rewrite an ordinary store or a mount as a standalone ordinary store.

An ordinary store is copied key by key (values and attributes), leaving out
retired ``{assay}/state`` groups; its counts keep their dtype and, when their
shards fit ``mem_budget``, their layout (otherwise the layout is halved to fit
and replayed, which never changes identity). A mount is read through its
namespace, so the output holds the artifacts of both stores, the target's
runs and label claims, and copied counts, and no longer needs the source.
``data_only=True`` reads the raw counts and tables of a store that does not
open (a missing or stale layout record or summaries, no countsT, Zarr v2) and
writes them anew. The destination is created with mode ``"w-"`` and must not
overlap the source; the dataset identity of the output is verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from .composite import check_no_overlap
from .copying import copy_array, copy_group
from .destinations import create_destination
from .errors import IdentityMismatchError, UnsupportedSourceError
from .layout import DEFAULT_MEM_BUDGET, LayoutPolicy, count_layout, fit_policy
from .locations import Location, describe_location, open_location
from .mount_records import MATRIX_SOURCE_ATTR
from .nodes import array_at, group_at
from .paths import AssayPaths, join
from .records import COUNT_LAYOUT_ATTR, CountLayout
from .sizes import parse_size
from .source_store import AssayInfo, read_contents, verify_assay, verify_store
from .tables import read_table

__all__ = ["repack"]


def _is_state(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == "state"


def _refuse(store: Store, where: str) -> None:
    contents = read_contents(store, where=where)
    if "composite" in contents.root_attrs:
        raise UnsupportedSourceError(
            f"{where} is a composite; repacking composites is unsupported (their counts live in "
            "the sources). Use a writer that reads the composite to copy its counts"
        )
    if contents.pending:
        pending = ", ".join(p.assay_group for p in contents.pending)
        raise UnsupportedSourceError(
            f"{where} holds a pending derived assay ({pending}); finish or discard it first"
        )


def _fitted(info: AssayInfo, budget: int) -> CountLayout:
    layout = info.layout
    itemsize = info.dtype.itemsize
    policy = LayoutPolicy(layout.unit_bytes, layout.chunk_bytes)
    fitted = fit_policy(
        policy,
        layout.shape,
        layout.dtype,
        itemsize,
        0,
        budget,
        transpose=layout.counts_t is not None,
    )
    if fitted is None or fitted == policy:
        return layout
    return count_layout(
        layout.shape, layout.dtype, itemsize, fitted, transpose=layout.counts_t is not None
    )


def _copy_counts(
    source_root: zarr.Group, info: AssayInfo, matrix: zarr.Group, layout: CountLayout
) -> None:
    """Copy counts (and countsT) into ``matrix`` with ``layout``, band by band."""
    for name, geometry in (("counts", layout.counts), ("countsT", layout.counts_t)):
        if geometry is None:
            continue
        source = array_at(source_root, join(info.paths.matrix_group, name))
        if geometry == (info.layout.counts if name == "counts" else info.layout.counts_t):
            copy_array(source, matrix, name)
            continue
        attrs = source.attrs.asdict()
        attrs[COUNT_LAYOUT_ATTR] = layout.to_json()
        target = matrix.create_array(
            name,
            shape=source.shape,
            dtype=source.dtype,
            chunks=geometry.chunks,
            shards=geometry.shards,
            compressors=source.compressors,
            fill_value=0,
            attributes={k: v for k, v in attrs.items() if k != "complete"}
            | ({"complete": False} if name == "countsT" else {}),
        )
        for start in range(0, source.shape[0], geometry.shards[0]):
            target[start : start + geometry.shards[0]] = source[start : start + geometry.shards[0]]
        if name == "countsT":
            target.attrs["complete"] = True


def _repack_ordinary(source: Store, root: zarr.Group, budget: int, where: str) -> list[AssayInfo]:
    _, infos = verify_store(source, where=where)
    source_root = zarr.open_group(source, mode="r")
    matrix_paths = {info.paths.matrix_group: info for info in infos}
    root.attrs.put(source_root.attrs.asdict())
    for member, node in sorted(source_root.members(), key=lambda item: item[0]):
        _copy_member(source_root, root, member, node, matrix_paths, budget)
    return infos


def _copy_member(
    source_root: zarr.Group,
    parent: zarr.Group,
    path: str,
    node: zarr.Array[Any] | zarr.Group,
    matrix_paths: Mapping[str, AssayInfo],
    budget: int,
) -> None:
    name = path.rsplit("/", 1)[-1]
    if isinstance(node, zarr.Array):
        copy_array(node, parent, name)
        return
    if _is_state(path) and path.rsplit("/", 1)[0] in {
        p.assay_group for p in (i.paths for i in matrix_paths.values())
    }:
        return  # retired {assay}/state groups are never carried over
    info = matrix_paths.get(path)
    if info is not None:
        layout = _fitted(info, budget)
        attrs = node.attrs.asdict()
        attrs[COUNT_LAYOUT_ATTR] = layout.to_json()
        group = parent.create_group(name, attributes=attrs)
        _copy_counts(source_root, info, group, layout)
        for member, child in sorted(node.members(), key=lambda item: item[0]):
            if member in ("counts", "countsT"):
                continue
            _copy_member(source_root, group, f"{path}/{member}", child, matrix_paths, budget)
        return
    group = parent.create_group(name, attributes=node.attrs.asdict())
    for member, child in sorted(node.members(), key=lambda item: item[0]):
        _copy_member(source_root, group, f"{path}/{member}", child, matrix_paths, budget)


def _repack_mount(mount: Any, root: zarr.Group, budget: int) -> list[AssayInfo]:
    namespace = zarr.open_group(mount, mode="r")
    attrs = namespace.attrs.asdict()
    attrs.pop(MATRIX_SOURCE_ATTR, None)
    root.attrs.put(attrs)
    infos = [mount._infos[name] for name in sorted(mount.record.assays)]
    matrix_paths = {info.paths.matrix_group: info for info in infos}
    for member, node in sorted(namespace.members(), key=lambda item: item[0]):
        if member in matrix_paths:
            continue  # the root layout's assay groups are rebuilt below
        _copy_member(namespace, root, member, node, {}, budget)
    source_root = zarr.open_group(mount.source, mode="r")
    for info in infos:
        matrix_source = group_at(source_root, info.paths.matrix_group)
        layout = _fitted(info, budget)
        if info.paths.workspace is None:
            target_assay = group_at(namespace, info.paths.assay_group)
            group = root.create_group(
                info.paths.assay_group,
                attributes=target_assay.attrs.asdict() | {COUNT_LAYOUT_ATTR: layout.to_json()},
            )
            for member, child in sorted(target_assay.members(), key=lambda item: item[0]):
                _copy_member(
                    namespace, group, f"{info.paths.assay_group}/{member}", child, {}, budget
                )
        else:
            group = root.require_group(info.paths.matrix_group)
            group.attrs.put(matrix_source.attrs.asdict() | {COUNT_LAYOUT_ATTR: layout.to_json()})
        _copy_counts(source_root, info, group, layout)
        copy_group(group_at(matrix_source, "countSummaries"), group, "countSummaries")
    return infos


def _repack_data_only(source: Store, destination: Location, budget: int, where: str) -> None:
    from .writer import write_counts

    contents = read_contents(source, where=where)
    raw = zarr.open_group(source, mode="r")
    if not contents.assays and contents.zarr_format == 2:
        candidates = [
            AssayPaths(name) for name, node in raw.groups() if node.attrs.get("is_assay") is True
        ]
    else:
        candidates = list(contents.assays)
    if len(candidates) != 1:
        raise ValueError(
            f"{where}: data-only repack rewrites one assay and found {[p.assay_group for p in candidates]}; "
            "repack the assays one at a time"
        )
    paths = candidates[0]
    counts = array_at(raw, paths.counts)
    # I is the live selection, rewritten as all-true like any new store
    cells = read_table(group_at(raw, paths.cell_data)).drop(columns=["I"], errors="ignore")
    features = read_table(group_at(raw, paths.feature_data)).drop(columns=["I"], errors="ignore")
    container = raw if paths.workspace is None else group_at(raw, paths.workspace)
    declared = container.attrs.get("assayTypes", {})
    assay_type = declared.get(paths.assay) if isinstance(declared, dict) else None
    write_counts(
        destination,
        _ZarrRows(counts),
        assay=paths.assay,
        assay_type=assay_type if isinstance(assay_type, str) else None,
        cells=cells,
        features=features,
        workspace=paths.workspace,
        mem_budget=budget,
    )


class _ZarrRows:
    """A zarr counts array read in row bands by the writer."""

    def __init__(self, array: zarr.Array[Any]) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.nnz = None

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self._array[rows])


def repack(
    location: Location,
    destination: Location,
    data_only: bool = False,
    *,
    mem_budget: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
) -> Store:
    """Rewrite ``location`` (an ordinary store or a mount) as a standalone store at ``destination``.

    Returns the opened, verified destination store.
    """
    from .mount_store import MountStore
    from .opening import open_store

    where = describe_location(location)
    budget = DEFAULT_MEM_BUDGET if mem_budget is None else parse_size(mem_budget, what="mem_budget")
    check_no_overlap(destination, {"source": location})
    source = open_location(location, read_only=True, storage_options=storage_options)
    _refuse(source, where)
    is_mount = MATRIX_SOURCE_ATTR in read_contents(source, where=where).root_attrs
    if data_only:
        if is_mount:
            raise ValueError(
                f"{where} is a mount; data-only repack reads raw stores, repack the mount without it"
            )
        _repack_data_only(source, destination, budget, where)
        return open_store(destination)
    if is_mount:
        mount = MountStore._verified(source, where, source_storage_options)
        root = create_destination(destination, overwrite=False)
        infos = _repack_mount(mount, root, budget)
    else:
        root = create_destination(destination, overwrite=False)
        infos = _repack_ordinary(source, root, budget, where)
    written = open_location(destination, read_only=True)
    for info in infos:
        again = verify_assay(written, info.paths, where=describe_location(destination))
        if again.dataset_fingerprint != info.dataset_fingerprint:
            raise IdentityMismatchError(
                f"repack of {where} to {describe_location(destination)}: assay {info.paths.assay!r} "
                f"has dataset fingerprint {again.dataset_fingerprint}, not {info.dataset_fingerprint}; "
                "the destination is not a faithful copy. Delete it and repack again"
            )
    return open_store(destination)
