"""``write_counts``: write a CyteArc source store from a count matrix.

The destination is checked first, before the input is read. One pass over
the input then finds the value range (and refuses NaN/inf) before the
destination exists. The write pass streams row bands: each band is cast
through a checked cast, hashed into ``content_fingerprint``, summarised and
written as one ``counts`` shard; its non-zeros are kept, per feature group
that fits the memory budget, to build ``countsT`` without densifying more
than one shard at a time. The assay is pending until one attribute write at
the end declares it, and the root names its writer until one last root
write, so a crash at any instant leaves a store that every open refuses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp
import zarr

from ..format.count_dtype import resolve_count_dtype, summary_dtype
from ..format.count_totals import row_totals
from ..format.fingerprints import ContentHasher, dataset_fingerprint_of
from ..format.flags import check_flag
from ..format.layout import (
    DEFAULT_MEM_BUDGET,
    LayoutPolicy,
)
from ..format.paths import AssayPaths
from ..format.records import (
    COUNT_LAYOUT_ATTR,
    PENDING_ASSAY_ATTR,
    CountLayout,
    dump_assay_types,
    requires_transpose,
    resolve_assay_type,
)
from ..format.sizes import parse_size
from ..format.tables import PreparedTable, prepare_table, write_table
from ..remote.failures import names_backend_failures
from ..remote.locations import Location, canonical_location, describe_location
from .budget import held_bytes, reserve_for_source, row_bytes
from .count_source import (
    CountSource,
    DuplicateSumOverflowError,
    as_count_source,
    check_row_totals,
    iter_bands,
    scan_source,
    stored_band,
)
from .destination_checks import check_destination
from .destinations import (
    create_destination,
    finish_destination,
    settle_destination,
)
from .input_tables import input_table, refuse_a_reader_without_tables
from .layout_fitting import feature_groups, fitted_layout
from .membership import membership_in_place, rename_metrics, split_membership
from .row_framed import current_layout
from .shards import ShardWriter, create_count_array
from .stopping import stops_on_exception
from .writer_name import current_writer

__all__ = ["WriteInfo", "write_counts"]

logger = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class WriteInfo:
    """What :func:`write_counts` wrote."""

    location: str
    """Where the store is (absolute path or URI)."""
    assay: str
    """Assay name."""
    assay_type: str
    """Assay type preset."""
    workspace: str | None
    """Workspace, or ``None`` for the root layout."""
    shape: tuple[int, int]
    """(cells, features)."""
    dtype: np.dtype
    """Storage dtype of the counts."""
    layout: CountLayout
    """The layout record written."""
    content_fingerprint: str
    """Identity of the stored values."""
    counts_fingerprint: str
    """Identity of the counts (equal to the content fingerprint)."""
    dataset_fingerprint: str
    """Identity of the counts with their ordered cell and feature ids."""
    seconds: float
    """Wall time of the write."""
    not_imported: tuple[str, ...] | None = ()
    """Paths of the AnnData's elements not stored (``obsm/X_pca``, ``uns/neighbors``,
    ``layers/spliced``, ``raw``): a store holds one matrix and its obs and var.
    ``()``: nothing was left out. ``None``: not known, because the AnnData's store
    cannot list its elements (a zarr ``Store`` whose ``supports_listing`` is false,
    whose listings are refused, as S3 refuses credentials without ``s3:ListBucket``,
    or whose listing shows nothing); the matrix, obs and var were read by path, and
    whatever else it holds (``obsm``, ``uns``, other layers, ``raw``) was not imported.
    Test ``is None`` before reading it as a list: an empty tuple and ``None`` are
    both false."""


def _table_bytes(table: PreparedTable) -> int:
    return sum(values.nbytes for _, values, _ in table.columns)


@names_backend_failures("destination", "counts")
@stops_on_exception
def write_counts(
    destination: Location,
    counts: Any,
    *,
    assay: str = "RNA",
    assay_type: str | None = None,
    cells: pd.DataFrame | Sequence[str] | None = None,
    features: pd.DataFrame | Sequence[str] | None = None,
    workspace: str | None = None,
    layout: LayoutPolicy | tuple[int | str, int | str] | None = None,
    mem_budget: int | str | None = None,
    overwrite: bool = False,
    layer: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    fill_missing: bool = False,
    source_storage_options: Mapping[str, Any] | None = None,
    make_unique: bool = False,
) -> WriteInfo:
    """Write ``counts`` as a CyteArc store at ``destination``.

    Parameters
    ----------
    destination
        Local path, URL or zarr Store. Must be empty unless ``overwrite``
        (which replaces only a store this layer could have written).
    counts
        ``scipy.sparse`` matrix (CSR, CSC, COO with duplicates), ``numpy``
        array or ``anndata.AnnData`` (its ``X``, ``layer`` or raw counts), cells x features;
        or the location of an AnnData container (an ``.h5ad`` file, an
        AnnData Zarr store's path, URL or Store), read in row bands without
        loading ``X`` (docs/anndata.md).
    assay, assay_type
        Assay name and preset; RNA-like presets also get ``countsT``.
    cells, features
        Tables (index = ids) or sequences of ids; taken from the AnnData
        when not given; generated ids otherwise.
    workspace
        Write the workspace layout (``{workspace}/cellData``,
        ``matrices/{assay}``) instead of the root layout.
    layout
        Layout policy; the default is used exactly unless given. A policy
        whose write does not fit ``mem_budget`` is refused, naming the
        largest halving that fits.
    mem_budget
        Bound of the write's working memory (bytes or ``"2G"``; 2 GiB
        default): every buffer that grows with the data, the destination's
        write-behind included, fits it, within a fixed allowance of
        :data:`~cytearc_vfs.write.budget.BUDGET_ALLOWANCE` (4 MiB)
        for what does not (docs/writing.md, "Memory budget"). A budget no
        layout fits is refused before anything is written, naming the
        smallest that works.
    layer
        AnnData layer holding the counts (default: ``X``), or ``"raw/X"`` for
        the AnnData's raw counts (``adata.raw.X``; the feature table is then
        ``raw/var``, which may list more features than ``var``). A layer
        literally named ``raw`` is ``layer="raw"``.
    storage_options
        Backend options for a URL destination (endpoint, credentials);
        never written into the store.
    progress
        ``progress(phase, done, total)`` callback.
    fill_missing
        Store missing values of the cell and feature tables as a composite
        does (a categorical's as ``""``, added as its last category; missing
        text as ``""``; nullable numbers and booleans as ``float64`` NaN)
        instead of refusing them (:func:`~cytearc_vfs.format.tables.fill_missing`).
    source_storage_options
        Backend options (endpoint, credentials) for ``counts`` given as the
        URL of an AnnData store or ``.h5ad`` file; never written into the store.
    make_unique
        Rename repeated cell or feature ids as anndata's ``*_names_make_unique``
        does (``id-1``, ``id-2``, ...; logged) instead of refusing them.

    Returns
    -------
    WriteInfo
    """
    check_flag(overwrite, "overwrite")
    check_flag(make_unique, "make_unique")
    started = time.perf_counter()
    paths = AssayPaths(assay, workspace)
    resolved_type = resolve_assay_type(assay, assay_type)
    transpose = requires_transpose(resolved_type)
    budget = DEFAULT_MEM_BUDGET if mem_budget is None else parse_size(mem_budget, what="mem_budget")
    policy = current_layout().default_policy if layout is None else LayoutPolicy.parse(layout)
    # The destination first, before the input is read: a refusal costs nothing
    mode = check_destination(destination, overwrite=overwrite, storage_options=storage_options)

    refuse_a_reader_without_tables(counts, cells, features)
    source, found = as_count_source(counts, layer=layer, storage_options=source_storage_options)
    try:
        cell_frame, cell_name = input_table(
            found, cells, source.shape, "cells", make_unique=make_unique
        )
        # the import side of the membership rule: the name <assay>_I is reserved; an
        # AnnData's declared column is restored, any other of that name (in its obs or
        # in a cells= table, which declares nothing) is skipped with a warning
        declared = found.membership if cells is None else None
        frame_columns = [str(column) for column in cell_frame.columns]
        cell_frame, membership = split_membership(cell_frame, declared, assay)
        cell_frame = rename_metrics(cell_frame, assay)  # metrics of other counts: never the assay's
        cell_table = prepare_table(cell_frame, table=cell_name, fill=fill_missing)
        # the frame's Python strings (a megabyte per 20,000 generated ids) are not
        # the write's to keep: the prepared table holds the ids as numpy text
        del cell_frame
        if membership is not None and declared is not None:
            cell_table = cell_table.with_columns([membership], table=cell_name)
            order = membership_in_place(
                cell_table.column_order, frame_columns, declared[assay], membership[0]
            )
            cell_table = replace(cell_table, column_order=order)
        feature_frame, feature_name = input_table(
            found, features, source.shape, "features", make_unique=make_unique
        )
        feature_table = prepare_table(feature_frame, table=feature_name, fill=fill_missing)
        del feature_frame  # as the cell frame: the prepared table holds the ids

        # Everything that can refuse runs before the destination exists.
        reserve_for_source(source, budget)
        try:
            value_range = scan_source(
                source, scan_bytes := max(1 << 20, min(budget // 4, 64 << 20))
            )
        except DuplicateSumOverflowError as exc:
            cell, feature = cell_table.ids[exc.row], feature_table.ids[exc.column]
            raise exc.naming(str(cell), str(feature)) from None
        dtype = resolve_count_dtype(value_range)
        check_row_totals(source, dtype, value_range, cell_table.ids, scan_bytes)
        # held beside the bands for the whole write: the write-behind's values (out of
        # the budget), the tables and the count summaries (docs/writing.md, "Memory budget")
        held = held_bytes(budget)
        tables = _table_bytes(cell_table) + _table_bytes(feature_table)
        # an input not in canonical CSR was copied into it (scanned above), and that copy
        # is held until the write ends
        reserved = row_bytes(*source.shape, tables) + getattr(source, "copied_bytes", 0)
        layout_record = fitted_layout(
            policy,
            source.shape,
            dtype,
            value_range.nnz,
            budget,
            tables=tables,
            reserved=reserved,
            transpose=transpose,
        )
        root = create_destination(
            destination,
            overwrite=overwrite,
            writer=current_writer("write_counts"),
            storage_options=storage_options,
            held_bytes=held,
            checked=mode,
        )
        location = canonical_location(destination)
        logger.info(
            "writing %s x %s %s counts to %s", *source.shape, dtype, describe_location(destination)
        )

        try:
            info = _write_store(
                root,
                paths,
                source,
                cell_table,
                feature_table,
                resolved_type,
                dtype,
                layout_record,
                value_range.nnz,
                budget - held - reserved,
                progress,
            )
        except BaseException:
            logger.warning(
                "write to %s failed; the assay stays pending and will not open", location
            )
            settle_destination(root)  # nothing of this write lands after it returns
            raise
        content, cells_fp, features_fp = info
        return WriteInfo(
            location=location,
            assay=assay,
            assay_type=resolved_type,
            workspace=workspace,
            shape=source.shape,
            dtype=dtype,
            layout=layout_record,
            content_fingerprint=content,
            counts_fingerprint=content,
            dataset_fingerprint=dataset_fingerprint_of(content, cells_fp, features_fp),
            seconds=time.perf_counter() - started,
            not_imported=found.not_imported,
        )
    finally:
        # what the input kept for the passes (an AnnData element's fetched chunks)
        if found.release is not None:
            found.release()


def _write_store(
    root: zarr.Group,
    paths: AssayPaths,
    source: CountSource,
    cell_table: PreparedTable,
    feature_table: PreparedTable,
    assay_type: str,
    dtype: np.dtype,
    layout: CountLayout,
    nnz: int,
    budget: int,
    progress: Progress | None,
) -> tuple[str, str, str]:
    workspace_group = root if paths.workspace is None else root.create_group(paths.workspace)
    cells_fp = write_table(
        workspace_group.create_group("cellData", attributes=cell_table.attributes), cell_table
    )
    assay_group = root.create_group(
        paths.assay_group, attributes={PENDING_ASSAY_ATTR: "write_counts"}
    )
    features_fp = write_table(
        assay_group.create_group("featureData", attributes=feature_table.attributes), feature_table
    )
    matrix_group = assay_group if paths.workspace is None else root.create_group(paths.matrix_group)

    layout_json = layout.to_json()
    counts = create_count_array(
        matrix_group,
        "counts",
        layout.shape,
        dtype,
        layout.counts.chunks,
        layout.counts.shards,
        {COUNT_LAYOUT_ATTR: layout_json},
        blosc_blocks=current_layout().blosc_blocks,
    )
    counts_t = None
    if layout.counts_t is not None:
        counts_t = create_count_array(
            matrix_group,
            "countsT",
            (layout.shape[1], layout.shape[0]),
            dtype,
            layout.counts_t.chunks,
            layout.counts_t.shards,
            {COUNT_LAYOUT_ATTR: layout_json, "complete": False},
            blosc_blocks=current_layout().blosc_blocks,
        )
    groups = feature_groups(layout, dtype.itemsize, nnz, budget) if counts_t is not None else []

    hasher = ContentHasher(layout.shape, dtype)
    n_cells, n_features = layout.shape
    sum_dtype = summary_dtype(dtype)
    row_sums = np.zeros(n_cells, dtype=sum_dtype)
    row_positive = np.zeros(n_cells, dtype=np.int64)
    column_positive = np.zeros(n_features, dtype=np.int64)
    band_rows = layout.counts.shards[0]
    writer = ShardWriter()
    try:
        first_group: list[tuple[int, sp.csc_array]] = []
        for start, stop, band in iter_bands(source, band_rows):
            stored = stored_band(band, dtype, start, stop)
            hasher.update(stored)
            _summarise(stored, start, row_sums, row_positive, column_positive)
            if groups:
                first_group.append((start, _group_piece(stored, *groups[0], n_features)))
            writer.submit(counts, start, stored.toarray())
            if progress:
                progress("counts", stop, n_cells)
        writer.wait()
        content = hasher.hexdigest()
        counts.attrs.update({"content_fingerprint": content, **writer.table_of(counts)})

        if counts_t is not None:
            for index, (g0, g1) in enumerate(groups):
                pieces = (
                    first_group
                    if index == 0
                    else [
                        (s, _group_piece(stored_band(band, dtype, s, e), g0, g1, n_features))
                        for s, e, band in iter_bands(source, band_rows)
                    ]
                )
                _write_transposed_group(
                    counts_t, pieces, g0, g1, n_cells, writer, progress, n_features
                )
                first_group = []
            writer.wait()
            counts_t.attrs.update(writer.table_of(counts_t))
    finally:
        writer.close()

    summaries = matrix_group.create_group(
        "countSummaries", attributes={"source_fingerprint": content}
    )
    for name, values in (
        ("rowSums", row_sums),
        ("rowPositive", row_positive),
        ("columnPositive", column_positive),
    ):
        summaries.create_array(name, data=values, chunks=(max(1, min(len(values), 1 << 20)),))
    if counts_t is not None:
        counts_t.attrs.update({"content_fingerprint": content, "complete": True})
    matrix_group.attrs.update({COUNT_LAYOUT_ATTR: layout_json})

    root_attrs = workspace_group.attrs.asdict()
    recorded = root_attrs.get("assayTypes", {})
    types = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    types[paths.assay] = assay_type
    workspace_group.attrs.update(
        {
            "assayTypes": dump_assay_types(types),
            "defaultAssay": root_attrs.get("defaultAssay", paths.assay),
        }
    )
    # One attribute write publishes the assay (replacing the pending marker).
    attrs = {k: v for k, v in assay_group.attrs.asdict().items() if k != PENDING_ASSAY_ATTR}
    attrs["is_assay"] = True
    assay_group.attrs.put(attrs)
    # The last write of all: the root stops naming its writer, and the store opens.
    finish_destination(root)
    return content, cells_fp, features_fp


def _summarise(
    stored: sp.csr_array,
    start: int,
    row_sums: npt.NDArray[Any],
    row_positive: npt.NDArray[np.int64],
    column_positive: npt.NDArray[np.int64],
) -> None:
    """Add one canonical band to the count summaries."""
    lengths = np.diff(stored.indptr)
    stop = start + len(lengths)
    # exact, or refused (checked before the destination existed: check_row_totals)
    row_sums[start:stop] = row_totals(stored, row_sums.dtype, row_offset=start)
    if stored.dtype.kind == "u":
        # canonical bands hold no explicit zeros: every stored value is positive
        row_positive[start:stop] = lengths
        column_positive += np.bincount(stored.indices, minlength=len(column_positive))
    else:
        positive = stored.data > 0
        row_of = np.repeat(np.arange(len(lengths)), lengths)
        row_positive[start:stop] = np.bincount(row_of[positive], minlength=len(lengths))
        column_positive += np.bincount(stored.indices[positive], minlength=len(column_positive))


def _group_piece(stored: sp.csr_array, g0: int, g1: int, n_features: int) -> sp.csc_array:
    """The band's non-zeros of features ``g0:g1``, by feature (one linear pass)."""
    part = stored if (g0, g1) == (0, n_features) else stored[:, g0:g1]
    return sp.csc_array(part)


def _write_transposed_group(
    counts_t: zarr.Array[Any],
    pieces: list[tuple[int, sp.csc_array]],
    g0: int,
    g1: int,
    n_cells: int,
    writer: ShardWriter,
    progress: Progress | None,
    n_features: int,
) -> None:
    """Write countsT shards of features ``g0:g1`` from per-band CSC pieces.

    Each shard is filled straight from the pieces into one of two reused
    dense buffers (the other may still be in flight), with no stacked or
    transposed copy of the group.
    """
    band_rows = counts_t.shards[0] if counts_t.shards else counts_t.chunks[0]
    buffers = [np.zeros(min(band_rows, g1 - g0) * n_cells, dtype=counts_t.dtype) for _ in range(2)]
    for number, start in enumerate(range(0, g1 - g0, band_rows)):
        stop = min(g1 - g0, start + band_rows)
        flat = buffers[number % 2][: (stop - start) * n_cells]
        flat[:] = 0
        for offset, piece in pieces:
            lo, hi = piece.indptr[start], piece.indptr[stop]
            if hi == lo:
                continue
            feature_of = np.repeat(
                np.arange(stop - start, dtype=np.int64) * n_cells,
                np.diff(piece.indptr[start : stop + 1]),
            )
            flat[feature_of + piece.indices[lo:hi] + offset] = piece.data[lo:hi]
        writer.submit(counts_t, g0 + start, flat.reshape(stop - start, n_cells))
        if progress:
            progress("countsT", g0 + stop, n_features)
    pieces.clear()
