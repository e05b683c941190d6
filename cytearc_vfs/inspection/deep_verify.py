"""Deep verification: re-read the counts and check them against their records.

``open_store`` checks metadata only. This reads every value once, in shard
bands, and checks what the records promise: the content fingerprint, the
summaries, that ``countsT`` holds the transpose, and the ids fingerprints.
It is what ``cytearc-vfs verify`` runs.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr
from zarr.abc.store import Store

from ..errors import IdentityMismatchError, SourceGoneError, SourceUnavailableError
from ..format.count_dtype import summary_dtype
from ..format.count_totals import RowTotalOverflowError, row_totals
from ..format.fingerprints import ContentHasher, ids_fingerprint
from ..format.nodes import array_at, group_at
from ..format.paths import join
from ..format.source_store import AssayInfo, check_assay_shards, read_contents, verify_store
from ..read.remembered_reads import RememberedReads

__all__ = ["AssayReport", "deep_verify"]

#: What to do about values that disagree with their records: the records were
#: written from the original values, so a rewrite of these would bless the damage.
VALUES_REMEDY = "restore the store from a copy or re-import the dataset"
#: The rule that NaN or infinite counts break (spec, "Count dtype").
NON_FINITE = "count matrices hold finite values"

Progress = Callable[[str, int, int], None]


@dataclass(slots=True)
class AssayReport:
    """What deep verification found for one assay."""

    label: str
    """``workspace/assay`` or ``assay``."""
    problems: list[str] = field(default_factory=list)
    """Human-readable findings; empty when the assay is sound."""
    checked_values: int = 0
    """Number of count values read: for a composite, its virtual counts once
    plus every value of its CyteArc sources (``counts`` and ``countsT``)."""

    @property
    def ok(self) -> bool:
        """Whether nothing was found."""
        return not self.problems


def _column_checksums(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Sum and a weighted sum per column: a transposed copy must agree on
    # both, so a moved or changed value is caught without holding either matrix.
    # Integer arithmetic modulo 2**64 is exact (floats would round a +1 away);
    # both orientations wrap identically, so equality still means agreement.
    # Float counts are summed as the bits of their float64 value: cast to an
    # integer, 2.5 and 2.75 (or -1.5 and 0.0) would be the same word.
    as_int = (
        np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
        if values.dtype.kind == "f"
        else values.astype(np.uint64, copy=False)
    )
    return as_int.sum(axis=0, dtype=np.uint64), weights @ as_int


def _random_weights(n: int) -> np.ndarray:
    # Drawn anew for every verification. With fixed weights (the row index)
    # two moves could cancel: v from cell c to c+1 and v from c+2 to c+1 keep
    # every sum and index-weighted sum. A change passes random weights only
    # if its weighted sum is 0 modulo 2**64: about 2**-64 per feature.
    return np.frombuffer(secrets.token_bytes(8 * n), dtype=np.uint64)


def unreachable_data(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to reach the data rather than a fault of it: a
    source or store whose server is unreachable, refuses or times out. Verification
    ends with it (the environment's failure, as an open reports it); it is no finding
    about the stored bytes, which were never read."""
    from ..remote.failures import StoreAccessError, is_backend_error

    if isinstance(exc, (SourceGoneError, FileNotFoundError)):
        return False  # an object deleted: the source lacks it, a finding as before
    reached = (SourceUnavailableError, StoreAccessError, ConnectionError, TimeoutError)
    return isinstance(exc, reached) or is_backend_error(exc)


def _unreadable(what: str, start: int, stop: int, exc: Exception) -> str:
    return (
        f"{what} rows {start}-{stop - 1} could not be read ({type(exc).__name__}: {exc}); "
        "the stored data is damaged: restore the store from a copy or write it again"
    )


def _total_overflow(exc: RowTotalOverflowError) -> str:
    # what was stored for that cell cannot be its total: a writer that did
    # not check wrapped it (writers now refuse such counts)
    return (
        f"counts row {exc.row} totals {exc.total}, which countSummaries/rowSums "
        f"({exc.dtype}) cannot hold, so its stored total is wrong (wrapped by the writer); "
        "check the source for corrupt values and re-import it"
    )


def _verify_one(store: Store, info: AssayInfo, progress: Progress | None) -> AssayReport:
    paths = info.paths
    report = AssayReport(f"{paths.workspace}/{paths.assay}" if paths.workspace else paths.assay)
    try:
        check_assay_shards(store, info, where=report.label)
    except IdentityMismatchError as exc:  # a finding; the values are still compared
        report.problems.append(str(exc))
    root = zarr.open_group(store, mode="r")
    counts = array_at(root, paths.counts)
    n_cells, n_features = info.shape
    hasher = ContentHasher(info.shape, info.dtype)
    sum_dtype = summary_dtype(info.dtype)
    row_sums = np.zeros(n_cells, dtype=sum_dtype)
    row_positive = np.zeros(n_cells, dtype=np.int64)
    column_positive = np.zeros(n_features, dtype=np.int64)
    col_sum = np.zeros(n_features, dtype=np.uint64)
    col_weighted = np.zeros(n_features, dtype=np.uint64)
    weights = _random_weights(n_cells)
    band = info.layout.counts.shards[0]
    for start in range(0, n_cells, band):
        stop = min(n_cells, start + band)
        try:
            dense = np.asarray(counts[start:stop])
        except Exception as exc:  # any decoding failure is a finding, not a crash
            if unreachable_data(exc):
                raise
            report.problems.append(_unreadable("counts", start, stop, exc))
            return report
        hasher.update(sp.csr_array(dense))
        finite = dense.dtype.kind != "f" or bool(np.isfinite(dense).all())
        if not finite:
            # named as what it is: a total of NaN is no overflow of rowSums
            row, column = (int(i) for i in np.argwhere(~np.isfinite(dense))[0])
            if not any(NON_FINITE in problem for problem in report.problems):
                report.problems.append(
                    f"counts hold {dense[row, column]} at cell {start + row}, feature {column}: "
                    f"{NON_FINITE} (every writer refuses NaN and infinity); re-import the "
                    "dataset from a source without them"
                )
            row_sums[start:stop] = dense.sum(axis=1, dtype=sum_dtype)
        try:
            if finite:
                row_sums[start:stop] = row_totals(dense, sum_dtype, row_offset=start)
        except RowTotalOverflowError as exc:
            report.problems.append(_total_overflow(exc))
            # compared as wrapped below, so the finding is reported once
            row_sums[start:stop] = dense.sum(axis=1, dtype=sum_dtype)
        row_positive[start:stop] = (dense > 0).sum(axis=1)
        column_positive += (dense > 0).sum(axis=0)
        s, w = _column_checksums(dense, weights[start:stop])
        col_sum += s
        col_weighted += w
        report.checked_values += dense.size
        if progress:
            progress(f"verify {report.label} counts", stop, n_cells)
    if hasher.hexdigest() != info.content_fingerprint:
        report.problems.append(
            f"counts hold content {hasher.hexdigest()}, but the record says "
            f"{info.content_fingerprint}: the values changed after writing; {VALUES_REMEDY}"
        )
    summaries = group_at(root, paths.summaries)
    for name, expected in (
        ("rowSums", row_sums),
        ("rowPositive", row_positive),
        ("columnPositive", column_positive),
    ):
        stored = np.asarray(array_at(summaries, name)[:])
        # a NaN total (reported above as non-finite counts) matches a stored NaN
        if not np.array_equal(stored, expected, equal_nan=expected.dtype.kind == "f"):
            report.problems.append(
                f"countSummaries/{name} does not match the counts; {VALUES_REMEDY}"
            )
    if info.has_counts_t:
        counts_t = array_at(root, paths.counts_t)
        band_t = info.layout.counts_t.shards[0] if info.layout.counts_t else 1
        for start in range(0, n_features, band_t):
            stop = min(n_features, start + band_t)
            try:
                dense_t = np.asarray(counts_t[start:stop]).T  # cells x features slice
            except Exception as exc:  # any decoding failure is a finding, not a crash
                if unreachable_data(exc):
                    raise
                report.problems.append(_unreadable("countsT", start, stop, exc))
                break
            s, w = _column_checksums(dense_t, weights)
            differs = (s != col_sum[start:stop]) | (w != col_weighted[start:stop])
            if differs.any():
                bad = start + int(np.flatnonzero(differs)[0])
                report.problems.append(
                    f"countsT is not the transpose of counts (first at feature {bad}); "
                    f"{VALUES_REMEDY}"
                )
                break
            report.checked_values += dense_t.size
            if progress:
                progress(f"verify {report.label} countsT", stop, n_features)
    for table, fingerprint in (
        (paths.cell_data, info.cells_fingerprint),
        (paths.feature_data, info.features_fingerprint),
    ):
        ids = np.asarray(array_at(root, join(table, "ids"))[:])
        if ids_fingerprint(ids) != fingerprint:
            report.problems.append(
                f"{table}/ids changed after writing (fingerprint differs); {VALUES_REMEDY}"
            )
    return report


def _verify_composite(
    store: Store,
    *,
    where: str,
    progress: Progress | None,
    source_storage_options: Mapping[str, Any] | None,
) -> list[AssayReport]:
    # Opening verified the record, every mapping and every source identity;
    # what is left is that the preparation summaries describe the counts.
    from ..composite.store import CompositeStore

    # An open composite already holds its sources, opened with their
    # credentials; reopening its backing store would drop them.
    composite = (
        store
        if isinstance(store, CompositeStore)
        else CompositeStore._verified(store, where, source_storage_options)
    )
    reader = composite.reader()
    report = AssayReport(composite.record.assay)
    n_cells, n_features = reader.shape
    sum_dtype = summary_dtype(reader.dtype)
    row_sums = np.zeros(n_cells, dtype=sum_dtype)
    row_positive = np.zeros(n_cells, dtype=np.int64)
    column_positive = np.zeros(n_features, dtype=np.int64)
    try:
        for rows, block in reader.iter_cells(mem_budget="256M"):
            row_sums[rows] = row_totals(block, sum_dtype, row_offset=rows.start)
            row_positive[rows] = (block > 0).sum(axis=1)
            column_positive += (block > 0).sum(axis=0)
            report.checked_values += block.size
            if progress:
                progress(f"verify {report.label}", rows.stop, n_cells)
    except RowTotalOverflowError as exc:
        report.problems.append(_total_overflow(exc))
    except Exception as exc:  # a damaged source is a finding, not a crash
        if unreachable_data(exc):
            raise
        report.problems.append(
            f"the virtual counts could not be read ({type(exc).__name__}: {exc}); a source is "
            "damaged (the source findings below name it)"
        )
    else:
        summaries = group_at(zarr.open_group(store, mode="r"), join(report.label, "countSummaries"))
        for name, expected in (
            ("rowSums", row_sums),
            ("rowPositive", row_positive),
            ("columnPositive", column_positive),
        ):
            if not np.array_equal(np.asarray(array_at(summaries, name)[:]), expected):
                report.problems.append(
                    f"countSummaries/{name} does not match the virtual counts; recreate the "
                    "composite from its sources"
                )
    # The pass above reads each source in one orientation only (the reader
    # picks counts or countsT by cost), while zarr, serve and mount-fs compute
    # RNA/counts from counts and RNA/countsT from countsT: a damaged chunk of
    # the other orientation passed unseen. Each source is verified as
    # `cytearc-vfs verify SOURCE` does (AnnData sources have one matrix, read above).
    for source in composite.sources:
        if source.anndata is not None:
            continue
        found = _verify_one(source.store, source.info, _of_source(progress, source.name))
        report.checked_values += found.checked_values
        report.problems.extend(
            f"source {source.name!r} at {source.location}: {problem}" for problem in found.problems
        )
    return [report]


def _of_source(progress: Progress | None, name: str) -> Progress | None:
    """``progress`` with each phase naming the composite's source: its sources' bars
    were all "verify RNA counts", one after another, naming none."""
    if progress is None:
        return None
    report = progress

    def named(phase: str, done: int, total: int) -> None:
        report(f"{phase} (source {name})", done, total)

    return named


def deep_verify(
    store: Store,
    *,
    where: str,
    progress: Progress | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
) -> list[AssayReport]:
    """Verify metadata (as ``open_store`` does), then every value of every assay.

    Parameters
    ----------
    store
        An ordinary store, or a composite or mount: either open (a
        :class:`~cytearc_vfs.CompositeStore` or :class:`~cytearc_vfs.MountStore`,
        whose sources are read with the credentials it was opened with) or
        its plain backing store.
    where
        How to name the store in findings.
    progress
        ``progress(phase, done, total)`` callback.
    source_storage_options
        For a plain backing store of a composite or mount: the options of its
        sources, as ``open_store`` takes them (unused for an open one).

    Returns
    -------
    list of AssayReport
        One per assay.
    """
    from ..composite.store import CompositeStore
    from ..mount.store import MountStore

    if isinstance(store, CompositeStore):
        return _verify_composite(store, where=where, progress=progress, source_storage_options=None)
    if isinstance(store, MountStore):
        # opened by the caller, maybe long ago: its source read as it is now
        return deep_verify(store.source, where=store.record.location, progress=progress)
    if not isinstance(store, RememberedReads):
        # each document and listing read once for the whole verification (its
        # checks, then the arrays its reads open), not once by each
        store = RememberedReads(store)
    root_attrs = read_contents(store, where=where).root_attrs
    if "composite" in root_attrs:
        return _verify_composite(
            store, where=where, progress=progress, source_storage_options=source_storage_options
        )
    if "matrixSource" in root_attrs:
        # A mount's counts are its source's: verify the binding, then the source.
        mount = MountStore._verified(store, where, source_storage_options, remembered=store)
        # the source's documents as the open just verified them: not read again
        return deep_verify(mount.verified_source, where=mount.record.location, progress=progress)
    _, infos = verify_store(store, where=where)
    return [_verify_one(store, info, progress) for info in infos]
