"""``repack``: rewrite an ordinary store or a mount as a standalone ordinary store.

An ordinary store is copied key by key (values and attributes), leaving out
retired ``{assay}/state`` groups; its counts keep their dtype and, when their
shards fit ``mem_budget``, their layout policy (otherwise the policy is
halved to fit), and are written in the portable geometry of that policy
(``format/layout.py``): counts already in it are copied as they are, and
row-framed counts of older stores are rewritten, which never changes
identity. A mount is read through its
namespace, so the output holds the artifacts of both stores, the target's
runs and label claims, and copied counts, and no longer needs the source.
``data_only=True`` reads the raw counts and tables of a store that does not
open (a missing or stale layout record or summaries, no countsT, Zarr v2) and
writes them anew. The destination is created with mode ``"w-"`` and must not
overlap the source; the dataset identity of the output is verified.

Crash safety: the destination's root names the writer
(``cytearc:pending_store``) from its first document on. Values are copied
before documents (through the destination's write-behind store, which holds
the documents and sends them together once the values are out), the copy's
identity is verified, and only then is the root document written, which
clears the marker: a repack that dies at any instant leaves a destination
every open refuses, and ``overwrite=True`` replaces it. The source's
documents are fetched in one concurrent round, and the copy's documents are
verified from what was written (its values are read back from the store).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from ..errors import IdentityMismatchError, UnsupportedSourceError
from ..format.flags import check_flag
from ..format.layout import DEFAULT_MEM_BUDGET
from ..format.nodes import array_at, group_at
from ..format.option_names import switched_on
from ..format.paths import AssayPaths, join
from ..format.records import COUNT_LAYOUT_ATTR, CountLayout
from ..format.shard_tables import (
    SHARD_TABLE_ATTR,
    check_stored_shards,
    read_shard_table,
)
from ..format.sizes import parse_size
from ..format.source_store import (
    AssayInfo,
    check_assay_shards,
    read_contents,
    verify_assay,
    verify_store,
)
from ..format.store_contents import raise_damaged_document
from ..format.store_keys import METADATA_DOCUMENTS
from ..format.tables import read_table
from ..read.prefetch import assay_documents, prefetched
from ..remote.failures import names_backend_failures
from ..remote.locations import Location, describe_location, open_location
from ..write.budget import held_bytes
from ..write.destinations import (
    create_destination,
    flush_destination,
    settled_on_failure,
)
from ..write.overlaps import check_no_overlap
from ..write.shards import ShardWriter, blosc_block_bytes, create_count_array
from ..write.stopping import stops_on_exception
from ..write.writable import require_writable_destination
from .records import MATRIX_SOURCE_ATTR
from .repack_layout import MIN_REPACK_SHARD_ROWS, repack_layout

__all__ = ["MIN_REPACK_SHARD_ROWS", "repack"]

Progress = Callable[[str, int, int], None]


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


def _copy_counts(
    source_root: zarr.Group,
    info: AssayInfo,
    matrix: zarr.Group,
    layout: CountLayout,
    progress: Progress | None = None,
) -> None:
    """Rewrite counts (and countsT) into ``matrix`` with a new ``layout``, band by band."""
    for name, geometry in (("counts", layout.counts), ("countsT", layout.counts_t)):
        if geometry is None:
            continue
        source = array_at(source_root, join(info.paths.matrix_group, name))
        # the new shards get their own table, recorded once they are written
        attrs = {
            k: v
            for k, v in source.attrs.asdict().items()
            if k not in ("complete", SHARD_TABLE_ATTR)
        }
        attrs[COUNT_LAYOUT_ATTR] = layout.to_json()
        if name == "countsT":
            attrs["complete"] = False
        target = create_count_array(
            matrix,
            name,
            (int(source.shape[0]), int(source.shape[1])),
            source.dtype,
            geometry.chunks,
            geometry.shards,
            attrs,
        )
        # the writer's shard encoder: zarr's pipeline costs a few hundred
        # microseconds of Python per inner chunk, thousands per portable shard
        writer = ShardWriter()
        try:
            for start in range(0, source.shape[0], geometry.shards[0]):
                writer.submit(target, start, np.asarray(source[start : start + geometry.shards[0]]))
                if progress:
                    phase = f"rewrite {info.paths.assay} {name}"
                    stop = min(source.shape[0], start + geometry.shards[0])
                    progress(phase, stop, source.shape[0])
            writer.wait()
        finally:
            writer.close()
        target.attrs.update(writer.table_of(target))
        if name == "countsT":
            target.attrs["complete"] = True


class _KeyCopier:
    """Copies keys between stores as bytes, a bounded number at a time."""

    def __init__(
        self, target: Store, budget: int, unit_bytes: int, progress: Progress | None = None
    ) -> None:
        self._target = target
        self._progress = progress
        # each copy in flight holds one value: at most a shard of unitBytes; the
        # destination's write-behind holds its own share of the budget beside them
        self._limit = max(1, min(32, (budget - held_bytes(budget)) // max(1, 2 * unit_bytes)))

    @property
    def progress(self) -> Progress | None:
        """The progress callback copies report to."""
        return self._progress

    def copy(
        self, source: Store, keys: list[str], rename: Callable[[str, bytes], bytes] | None = None
    ) -> int:
        done = 0

        async def one(key: str, gate: asyncio.Semaphore) -> None:
            nonlocal done
            async with gate:
                value = await source.get(key, prototype=default_buffer_prototype())
                if value is not None:
                    data = value.to_bytes()
                    if rename is not None:
                        data = rename(key, data)
                    await self._target.set(key, default_buffer_prototype().buffer.from_bytes(data))
                done += 1
                if self._progress and len(keys) > 1:
                    self._progress("copy keys", done, len(keys))

        async def run() -> None:
            gate = asyncio.Semaphore(self._limit)
            copies = [asyncio.ensure_future(one(key, gate)) for key in keys]
            try:
                await asyncio.gather(*copies)
            finally:
                # after a failure the other copies would go on writing into the
                # destination once repack raised (and into a rerun's): stop them
                for copy in copies:
                    copy.cancel()
                await asyncio.gather(*copies, return_exceptions=True)

        sync(run())
        return len(keys)


def _list(store: Store) -> list[str]:
    async def collect() -> list[str]:
        return [key async for key in store.list()]

    return sorted(sync(collect()))


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + "/")


def _with_layout(layout: CountLayout) -> Callable[[str, bytes], bytes]:
    def rename(key: str, data: bytes) -> bytes:
        document = json.loads(data)
        document.setdefault("attributes", {})[COUNT_LAYOUT_ATTR] = layout.to_json()
        return json.dumps(document).encode()

    return rename


def _copy_assays(
    source: Store,
    root: zarr.Group,
    infos: list[AssayInfo],
    keys: list[str],
    copier: _KeyCopier,
    budget: int,
    documents: Store | None = None,
) -> tuple[list[str], set[str]]:
    """Re-lay-out each assay whose layout does not fit.

    Returns the keys of ``keys`` left for a plain copy, and the matrix group
    documents written with the new layout record: a plain copy of the same
    document from elsewhere (a mount's namespace) would put the old one back.
    ``documents`` is where the matrix group's own document is read (a mount's
    namespace holds the target's copy of a root-layout assay group).
    """
    remaining = keys
    relaid: set[str] = set()
    source_root = zarr.open_group(source, mode="r")
    for info in infos:
        layout = repack_layout(info, budget)
        if layout == info.layout and _blosc_blocks(source_root, info):
            continue  # already what writers write: copied as it is
        counts_keys = [
            join(info.paths.matrix_group, "counts"),
            join(info.paths.matrix_group, "countsT"),
        ]
        remaining = [k for k in remaining if not any(_under(k, p) for p in counts_keys)]
        document = join(info.paths.matrix_group, "zarr.json")
        holder = documents if documents is not None and info.paths.workspace is None else source
        copier.copy(holder, [document], _with_layout(layout))
        relaid.add(document)
        remaining = [k for k in remaining if k != document]
        _copy_counts(
            source_root,
            info,
            zarr.open_group(root.store, path=info.paths.matrix_group, mode="r+"),
            layout,
            copier.progress,
        )
    return remaining, relaid


def _blosc_blocks(source_root: zarr.Group, info: AssayInfo) -> bool:
    """Whether the assay's count arrays are stored as writers store them today (Blosc
    blocks); row-framed and single-frame stores of the same geometry are rewritten."""
    names = ("counts", "countsT") if info.layout.counts_t is not None else ("counts",)
    return all(
        blosc_block_bytes(array_at(source_root, join(info.paths.matrix_group, name))) is not None
        for name in names
    )


#: A copy in flight: the store read, its keys, and how a value is rewritten.
CopyPart = tuple[Store, list[str], Callable[[str, bytes], bytes] | None]


def _phases(keys: list[str]) -> list[list[str]]:
    """``keys`` in an order in which no document is written before what it describes.

    Values (chunks) first, then documents deepest first, so an array's
    ``zarr.json`` follows its chunks and an assay group's ``is_assay`` its
    arrays. Root documents are left out: the caller writes the root last.

    Examples
    --------
    >>> _phases(["zarr.json", "A/zarr.json", "A/x/zarr.json", "A/x/c/0"])
    [['A/x/c/0'], ['A/x/zarr.json'], ['A/zarr.json']]
    """
    values = [k for k in keys if k.rsplit("/", 1)[-1] not in METADATA_DOCUMENTS]
    by_depth: dict[int, list[str]] = {}
    for key in keys:
        if "/" in key and key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS:
            by_depth.setdefault(key.count("/"), []).append(key)
    return [values, *(by_depth[depth] for depth in sorted(by_depth, reverse=True))]


def _copy_in_phases(copier: _KeyCopier, parts: list[CopyPart]) -> None:
    """Copy every part's keys, phase by phase (see :func:`_phases`)."""
    every = sorted({key for _, keys, _ in parts for key in keys})
    for phase in _phases(every):
        wanted = set(phase)
        for store, keys, rename in parts:
            chosen = [key for key in keys if key in wanted]
            if chosen:
                copier.copy(store, chosen, rename)


def _repack_ordinary(
    source: Store, root: zarr.Group, budget: int, where: str, progress: Progress | None
) -> tuple[list[AssayInfo], CopyPart]:
    """Copy everything but the root document; returns the assays and the root's copy."""
    _, infos = verify_store(source, where=where)
    copier = _KeyCopier(
        root.store, budget, max((i.layout.unit_bytes for i in infos), default=1), progress
    )
    retired = [join(info.paths.assay_group, "state") for info in infos]
    keys = [k for k in _list(source) if not any(_under(k, r) for r in retired)]
    keys, _ = _copy_assays(source, root, infos, keys, copier, budget)
    _copy_in_phases(copier, [(source, keys, None)])
    return infos, (source, ["zarr.json"], None)


def _repack_mount(
    mount: Any, root: zarr.Group, budget: int, progress: Progress | None
) -> tuple[list[AssayInfo], CopyPart]:
    """Copy everything but the root document; returns the assays and the root's copy."""
    infos: list[AssayInfo] = [mount._infos[name] for name in sorted(mount.record.assays)]
    copier = _KeyCopier(root.store, budget, max(i.layout.unit_bytes for i in infos), progress)

    def without_record(key: str, data: bytes) -> bytes:
        document = json.loads(data)
        document.get("attributes", {}).pop(MATRIX_SOURCE_ATTR, None)
        return json.dumps(document).encode()

    # the mount's namespace: the target's keys and the source artifacts it shows;
    # a retired {assay}/state group is omitted, as from an ordinary store: the
    # mount's open does not inspect its target for one, and a client (scarf)
    # writes it there, while the output would not open with it
    retired = [join(info.paths.assay_group, "state") for info in infos]
    namespace = [
        k for k in _list(mount) if k != "zarr.json" and not any(_under(k, r) for r in retired)
    ]
    # the counts, which only the source holds
    source_keys = _list(mount.source)
    counts_keys = [
        k
        for k in source_keys
        for info in infos
        if any(
            _under(k, join(info.paths.matrix_group, part))
            for part in ("counts", "countsT", "countSummaries")
        )
        or (info.paths.workspace is not None and k == join(info.paths.matrix_group, "zarr.json"))
        or (info.paths.workspace is not None and k == "matrices/zarr.json")
    ]
    counts_keys, relaid = _copy_assays(
        mount.source, root, infos, sorted(set(counts_keys)), copier, budget, documents=mount
    )
    namespace = [k for k in namespace if k not in relaid]
    _copy_in_phases(copier, [(mount, namespace, None), (mount.source, counts_keys, None)])
    return infos, (mount, ["zarr.json"], without_record)


def _repack_data_only(
    source: Store,
    destination: Location,
    budget: int,
    where: str,
    progress: Progress | None,
    overwrite: bool,
    destination_options: Mapping[str, Any] | None,
) -> None:
    from ..write.layout_fitting import fitting_layout
    from ..write.writer import write_counts
    from ..write.writer_name import writing_for

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
            f"{where}: data-only repack rewrites one assay and found "
            f"{len(candidates)} ({', '.join(p.assay_group for p in candidates) or 'none'}); "
            "repack a store with exactly one assay"
        )
    paths = candidates[0]
    counts = array_at(raw, paths.counts)
    if counts.shards is not None:
        # the records may be broken (that is what data-only repairs), but
        # shards that differ from their table would be copied as values
        table = read_shard_table(
            counts.attrs, shards=-(-counts.shape[0] // counts.shards[0]), where=paths.counts
        )
        if table is not None:
            check_stored_shards(source, paths.counts, table, where=where)
    # I is the live selection, rewritten as all-true like any new store
    cells = read_table(group_at(raw, paths.cell_data)).drop(columns=["I"], errors="ignore")
    features = read_table(group_at(raw, paths.feature_data)).drop(columns=["I"], errors="ignore")
    container = raw if paths.workspace is None else group_at(raw, paths.workspace)
    declared = container.attrs.get("assayTypes", {})
    assay_type = declared.get(paths.assay) if isinstance(declared, dict) else None
    # the layout is fitted to the budget, as every repack fits it (spec, "Count
    # layout"): a data-only repack never refuses naming a layout= it does not take
    # an unfinished destination names repack, the command to run again, not write_counts
    with fitting_layout(MIN_REPACK_SHARD_ROWS), writing_for("repack"):
        write_counts(
            destination,
            _ZarrRows(counts),
            assay=paths.assay,
            assay_type=assay_type if isinstance(assay_type, str) else None,
            cells=cells,
            features=features,
            workspace=paths.workspace,
            mem_budget=budget,
            progress=progress,
            overwrite=overwrite,
            storage_options=destination_options,
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


@names_backend_failures("location", "destination")
@stops_on_exception
def repack(
    location: Location,
    destination: Location,
    data_only: bool = False,
    *,
    mem_budget: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
    destination_storage_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> Store:
    """Rewrite ``location`` (an ordinary store or a mount) as a standalone store at ``destination``.

    ``mem_budget`` bounds the working memory; a budget that no layout fits,
    or that would halve count shards below :data:`MIN_REPACK_SHARD_ROWS`
    rows, is refused before anything is written. ``progress(phase, done,
    total)`` is called as keys and count bands are copied. ``overwrite``
    replaces a destination a writer left unfinished or a store the writers
    may replace (spec, "Writer destinations"). ``storage_options`` are the
    backend options of ``location``, ``source_storage_options`` those of a
    mount's source, and ``destination_storage_options`` those of
    ``destination`` (a URL). Returns the opened, verified destination store.
    """
    from ..read.opening import open_store
    from .store import MountStore

    where = describe_location(location)
    check_flag(data_only, "data_only")
    check_flag(overwrite, "overwrite")
    budget = DEFAULT_MEM_BUDGET if mem_budget is None else parse_size(mem_budget, what="mem_budget")
    check_no_overlap(
        destination,
        {"source": location},
        storage_options=destination_storage_options,
        source_storage_options={"source": storage_options},
    )
    # a local destination that cannot be written (/proc, a read-only file system)
    # is refused before any source is read
    require_writable_destination(destination)
    source = open_location(location, read_only=True, storage_options=storage_options)
    contents = read_contents(source, where=where)
    is_mount = MATRIX_SOURCE_ATTR in contents.root_attrs
    if not is_mount and not data_only:
        # the documents every check below reads (and reads again), fetched in
        # one concurrent round instead of one by one
        source = prefetched(source, [key for p in contents.assays for key in assay_documents(p)])
    _refuse(source, where)
    if data_only:
        if is_mount:
            raise ValueError(
                f"{where} is a mount; data-only repack reads raw stores, repack the mount without it"
            )
        try:
            _repack_data_only(
                source, destination, budget, where, progress, overwrite, destination_storage_options
            )
        except json.JSONDecodeError:
            # zarr's own words for a damaged document name neither it nor the store
            raise_damaged_document(source, where=where)
            raise
        return open_store(destination, storage_options=destination_storage_options)
    if is_mount:
        mount = MountStore._verified(source, where, source_storage_options)
        # the mount's source is read too: writing inside it would change it
        check_no_overlap(
            destination,
            {"the mount's source": mount.record.location},
            storage_options=destination_storage_options,
            source_storage_options={"the mount's source": source_storage_options},
        )
        for name in mount.record.assays:
            repack_layout(mount._infos[name], budget)  # refuses a budget before anything is written
            # copying a shard that is not the written one would bake it in
            check_assay_shards(mount.source, mount._infos[name], where=where)
        root = create_destination(
            destination,
            overwrite=overwrite,
            writer="repack",
            storage_options=destination_storage_options,
            held_bytes=held_bytes(budget),
        )
        with settled_on_failure(root):
            infos, root_copy = _repack_mount(mount, root, budget, progress)
    else:
        for info in verify_store(source, where=where)[1]:
            repack_layout(info, budget)  # refuses a budget before anything is written
            check_assay_shards(source, info, where=where)
        root = create_destination(
            destination,
            overwrite=overwrite,
            writer="repack",
            storage_options=destination_storage_options,
            held_bytes=held_bytes(budget),
        )
        with settled_on_failure(root):
            infos, root_copy = _repack_ordinary(source, root, budget, where, progress)
    with settled_on_failure(root):
        _verify_and_commit(destination, root, infos, root_copy, where, budget)
    return open_store(destination, storage_options=destination_storage_options)


def _verify_and_commit(
    destination: Location,
    root: zarr.Group,
    infos: list[AssayInfo],
    root_copy: CopyPart,
    where: str,
    budget: int,
) -> None:
    """Verify the copy's identity, then write the root document: the last write."""
    flush_destination(root)  # the values verified are read back from the store
    # the documents from what was written (no round trip each), the values from the store
    written = root.store.with_read_only(True)
    for info in infos:
        # the root (with assayTypes) is not copied yet: give each assay its type
        again = verify_assay(
            written,
            info.paths,
            where=describe_location(destination),
            assay_types={info.paths.assay: info.assay_type},
        )
        if again.dataset_fingerprint != info.dataset_fingerprint:
            raise IdentityMismatchError(
                f"repack of {where} to {describe_location(destination)}: assay {info.paths.assay!r} "
                f"has dataset fingerprint {again.dataset_fingerprint}, not {info.dataset_fingerprint}; "
                "the destination is not a faithful copy and does not open; repack again with "
                f"{switched_on('overwrite')}"
            )
    # The last write: the source's root document, which carries no in-progress marker.
    store, keys, rename = root_copy
    _KeyCopier(root.store, budget, 1).copy(store, keys, rename)
