"""``create_composite``: one virtual count matrix over many source stores.

Nothing of the sources' counts is copied. The composite's own store holds
the root ``composite`` record (sources, virtual array documents, mapping
manifest, ``complete``), the ``_composite`` mapping arrays, ordinary cell
and feature tables, and preparation summaries. The root's first document
names the writer (``cytearc:pending_store``) and holds the record with
``complete=False``; one attribute write at the end sets ``complete`` and
removes the marker, so a creation that dies at any instant never opens.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.storage import MemoryStore

from ..errors import warn_at_caller
from ..format.fingerprints import combine
from ..format.flags import check_flag
from ..format.layout import DEFAULT_MEM_BUDGET
from ..format.missing_assay import MissingAssayError
from ..format.option_names import Placeholder, option_given, source_option_given
from ..format.paths import check_name, join
from ..format.records import dump_assay_types, requires_transpose
from ..format.sizes import parse_size
from ..format.store_io import get_json
from ..format.table_names import CELL_DATA, FEATURE_DATA
from ..format.tables import prepare_table, write_table
from ..read.anndata_elements import layer_element
from ..read.anndata_sources import AnnDataSpec
from ..read.read_stats import ReadCounters
from ..read.sources import SourceSpec, bind_sources
from ..remote.failures import names_backend_failures
from ..remote.locations import (
    Location,
    describe_location,
    location_text,
    reopenable_location,
)
from ..remote.source_cache import SourceCache
from ..write.budget import held_bytes
from ..write.destinations import (
    create_destination,
    finish_destination,
    settled_on_failure,
)
from ..write.overlaps import check_no_overlap
from ..write.stopping import stops_on_exception
from ..write.writable import require_writable_destination
from .anndata_records import write_anndata_sources
from .budget import creation_cost, read_bytes, require_budget, usable_bytes
from .columns import merge_cell_columns, merge_feature_columns, read_source_tables
from .maps import FeatureChoice, array_fingerprint, check_feature_choice, plan_composite
from .records import (
    COMPOSITE_ATTR,
    IDS_ATTR,
    MAPS_GROUP,
    AxisIds,
    CompositeRecord,
    MapRecord,
    SourceBinding,
)
from .source_seals import write_seals
from .summaries import composite_summaries

__all__ = [
    "Sources",
    "create_composite",
    "source_name_of",
    "source_names_from_locations",
    "virtual_array_document",
]

logger = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]
#: A mapping of source name -> location, a sequence of locations, or one location.
Sources = Mapping[str, Location] | Sequence[Location] | Location

# A computed chunk spans whole rows of the virtual array and holds about this
# many bytes: large enough that misaligned source chunk bands at its edges
# (decoded by both neighbours) cost little, small enough to compute quickly.
VIRTUAL_CHUNK_BYTES = 8 * 1024**2
# Entries per chunk of a mapping array (64 Ki int64 = 512 KiB).
MAP_CHUNK_ENTRIES = 1 << 16


def virtual_array_document(
    shape: tuple[int, int], dtype: np.dtype, attributes: dict[str, Any]
) -> dict[str, Any]:
    """The ``zarr.json`` of a computed count array: unsharded, ``bytes`` codec only.

    Only the ``bytes`` codec, so a computed chunk is the little-endian values
    and costs no compression. Chunks span every column.
    """
    rows = max(1, min(max(shape[0], 1), VIRTUAL_CHUNK_BYTES // max(1, shape[1] * dtype.itemsize)))
    scratch = MemoryStore()
    zarr.create_array(
        scratch,
        shape=shape,
        dtype=dtype,
        chunks=(rows, max(shape[1], 1)),
        compressors=None,
        fill_value=0,
        attributes=attributes,
    )
    document = get_json(scratch, "zarr.json")
    assert isinstance(document, dict)
    return document


def source_name_of(location: str | os.PathLike[str]) -> str:
    """The source name a location gives: its final path component without suffixes.

    The command line and :func:`create_composite` name unnamed sources this
    way. An empty result (a bare ``/``) gives ``"source"``.

    Examples
    --------
    >>> source_name_of("data/wu2020.zarr")
    'wu2020'
    >>> source_name_of("s3://bucket/atlas/pbmc.v2.zarr/")
    'pbmc'
    """
    text = location_text(location)
    # a URL's query or fragment is not part of its last path component
    path = urlsplit(text).path if "://" in text else text
    return Path(path.rstrip("/")).name.split(".")[0] or "source"


def source_names_from_locations(locations: Sequence[Location]) -> dict[str, Location]:
    """Name each of ``locations`` as :func:`source_name_of` does, in order.

    A Store object has no path to name it by, so it is named by its position:
    ``source0``, ``source1``, ...

    Raises
    ------
    ValueError
        Two locations give the same name; the message suggests a mapping.

    Examples
    --------
    >>> source_names_from_locations(["a/wu.zarr", "b/ct.zarr"])
    {'wu': 'a/wu.zarr', 'ct': 'b/ct.zarr'}
    """
    named: dict[str, Location] = {}
    for index, location in enumerate(locations):
        name = f"source{index}" if isinstance(location, Store) else source_name_of(location)
        if name in named:
            first = describe_location(named[name])
            if first == describe_location(location):
                raise ValueError(
                    f"source {first!r} is listed twice; list each source once (to have its "
                    f"cells twice, as two sources, name each: "
                    f"{{{name + '_1'!r}: {first!r}, {name + '_2'!r}: {first!r}}})"
                )
            raise ValueError(
                f"sources {first!r} and {describe_location(location)!r} are both named "
                f"{name!r} (a source is named by its last path component without suffixes); "
                f"pass a mapping {{name: location}} instead, e.g. "
                f"{{{name + '_1'!r}: {first!r}, {name + '_2'!r}: {describe_location(location)!r}}}"
            )
        named[name] = location
    return named


def _warn_repeated(named: Mapping[str, Location]) -> None:
    """Warn of one store named twice: each of its cells is then in the composite twice."""
    seen: dict[str, str] = {}
    for name, location in named.items():
        if isinstance(location, Store):
            continue  # an open store has no location to compare
        where = describe_location(location)
        if where in seen:
            warn_at_caller(
                f"sources {seen[where]!r} and {name!r} are the same store {where}: each of its "
                f"cells is in the composite twice (ids prefixed '{seen[where]}-' and '{name}-'); "
                "list it once unless that is what you mean",
            )
        seen.setdefault(where, name)


def _named_sources(sources: Sources) -> Mapping[str, Location]:
    if isinstance(sources, Mapping):
        _warn_repeated(sources)
        return sources
    if isinstance(sources, str | os.PathLike | Store):
        return source_names_from_locations([sources])  # one source
    return source_names_from_locations(list(sources))


@names_backend_failures("destination")
@stops_on_exception
def create_composite(
    destination: Location,
    sources: Sources,
    *,
    assay: str = "RNA",
    features: FeatureChoice = "union",
    cells: Mapping[str, Any] | None = None,
    source_workspaces: Mapping[str, str] | None = None,
    source_storage_options: Mapping[str, Mapping[str, Any]] | None = None,
    source_layers: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    mem_budget: int | str | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> Any:
    """Create a composite of ``sources`` at ``destination`` and return it opened.

    Parameters
    ----------
    destination
        Where the composite's own (small) store goes: path, URL or Store; must be empty.
    sources
        Source name -> location (or Store), in output cell order. A sequence of
        locations is named by :func:`source_names_from_locations` (the last
        path component without suffixes, ``source0``, ``source1``, ... for
        Store objects); one location is a composite of one source.
    assay
        The assay composed; every source must hold it, with one assay type.
    features
        ``"union"``, ``"intersection"`` or an explicit sequence of feature ids.
        A feature a source lacks reads as zeros.
    cells
        Per source, a boolean mask, integer rows or cell ids (strings of the
        source's ``cellData/ids``) to keep, in that order (all cells by default).
    source_workspaces
        Per source, the workspace holding the assay (root layout by default).
    source_storage_options
        Per source, backend options (credentials); used, never written.
    source_layers
        Per AnnData source, the layer read instead of ``X`` (``{name: layer}``),
        or ``"raw/X"`` for its raw counts (``adata.raw.X``; its features are
        then ``raw/var``, which may list more than ``var``; a layer literally
        named ``raw`` stays ``{name: "raw"}``). A source may be an AnnData Zarr
        store (v2 or v3; the element encoded ``csr_matrix``, ``csc_matrix`` or
        dense): its counts are read where they are, its obs index and the
        index of its var (or raw/var) are its cell and feature ids
        (``docs/composite.md``, "AnnData sources").
    mem_budget
        Bound of the creation's memory (default 2 GiB, as for ``write_counts``;
        about 4 million output cells with short ids): the sources' tables
        as read, the cell maps, the output tables, the summaries and the
        bands read from partial sources, beside a fixed 4 MiB allowance
        (docs/writing.md, "Memory budget"). A budget too small is refused
        before anything is written, naming the smallest that works.
    overwrite
        Replace a destination that a writer left unfinished, or a store the
        writers may replace (spec, "Writer destinations"); a complete
        composite is not replaced (the command line's ``--overwrite`` removes
        it first).

    Returns
    -------
    CompositeStore
        Its cell table holds ``ids``, ``names``, ``I``, ``source`` (the source
        name of each cell), ``sourceId`` and every cell column of the sources;
        its feature table ``ids``, ``names``, ``I`` and the sources' feature
        columns, merged as ``docs/composite.md`` ("Cell and feature columns")
        describes.
    """
    from .store import CompositeStore

    sources = _named_sources(sources)
    if not sources:
        raise ValueError("a composite needs at least one source")
    for name in sources:
        check_name(name, what="source name")
    for option, given in (
        ("source_workspaces", source_workspaces),
        ("source_storage_options", source_storage_options),
        ("source_layers", source_layers),
        ("cells", cells),
    ):
        if given is not None and not isinstance(given, Mapping):
            raise TypeError(
                f"{option}= maps source names to values, such as {{{next(iter(sources))!r}: ...}}; "
                f"got a {type(given).__name__}. Nothing was written"
            )
        unknown = sorted(set(given or {}) - set(sources))
        if unknown:
            raise ValueError(
                f"{option} names unknown source(s) {unknown}; sources are {list(sources)}: "
                "key it by the names the sources mapping gives"
            )
    check_name(assay, what="assay")
    check_flag(overwrite, "overwrite")
    check_feature_choice(features)
    budget = DEFAULT_MEM_BUDGET if mem_budget is None else parse_size(mem_budget, what="mem_budget")
    check_no_overlap(
        destination,
        sources,
        storage_options=storage_options,
        source_storage_options=source_storage_options,
    )
    # a local destination that cannot be written (/proc, a read-only file system)
    # is refused before any source is read
    require_writable_destination(destination)
    locations = {
        name: reopenable_location(location, what=f"source {name!r}")
        for name, location in sources.items()
    }

    # every source verified from one concurrent batch of requests, read
    # through the cache the returned store keeps
    cache = SourceCache()
    try:
        bound = bind_sources(
            [
                SourceSpec(
                    name,
                    location,
                    assay,
                    workspace=(source_workspaces or {}).get(name),
                    storage_options=(source_storage_options or {}).get(name),
                    # any source may be an AnnData store (bound as one when its root says so)
                    anndata=AnnDataSpec(
                        _layer_element(name, (source_layers or {}).get(name)),
                        # float counts are scanned at binding, every source's at once,
                        # before anything else is held
                        scan_bytes=usable_bytes(budget) // (2 * len(sources)),
                    ),
                    tables=True,  # read next, through the documents held from binding
                )
                for name, location in sources.items()
            ],
            counters=ReadCounters(),
            cache=cache,
        )
    except MissingAssayError as exc:
        named = [n for n, loc in sources.items() if describe_location(loc) == exc.where]
        # a workspace's assays ('w1/RNA') keep the remedy that names --workspace
        workspaced = (source_workspaces or {}).get(named[0]) if named else None
        if not named or workspaced or not exc.held or any("/" in h for h in exc.held):
            raise
        raise exc.for_every_source(named[0], assay) from None
    for source in bound:
        if source.anndata is None and source.name in (source_layers or {}):
            layer = source_option_given(
                "source_layers", source.name, (source_layers or {})[source.name]
            )
            raise ValueError(
                f"{layer} names source {source.name!r}, which is a CyteArc store, not an "
                f"AnnData store; layers apply to AnnData sources only (pick its assay with "
                f"{option_given('assay', Placeholder('NAME'))})"
            )
    tables = read_source_tables(bound)
    plan = plan_composite(bound, tables, features=features, cells=cells)
    # refused here, before anything is written, if the budget cannot hold
    cost = creation_cost(tables, plan, bound)
    require_budget(cost, budget)
    bindings = tuple(
        SourceBinding(
            name=source.name,
            location=locations[source.name],
            workspace=source.info.paths.workspace,
            dataset_fingerprint=source.info.dataset_fingerprint,
            counts_fingerprint=source.info.counts_fingerprint,
        )
        for source in bound
    )
    maps: dict[str, npt.NDArray[Any]] = {
        "rowSources": plan.row_sources,
        "sourceRows": plan.source_rows,
        "featureColumns": plan.feature_columns,
    }
    map_records = {
        name: MapRecord(
            join(MAPS_GROUP, name),
            tuple(values.shape),
            values.dtype.name,
            array_fingerprint(values),
        )
        for name, values in maps.items()
    }
    shape = (len(plan.row_sources), len(plan.feature_ids))
    content = combine(
        "cytearc:composite-counts",
        {
            "dtype": plan.dtype.name,
            "shape": list(shape),
            "sources": [[b.name, b.counts_fingerprint] for b in bindings],
            "maps": {name: record.fingerprint for name, record in map_records.items()},
        },
    )
    arrays = {
        join(assay, "counts"): virtual_array_document(
            shape, plan.dtype, {"content_fingerprint": content}
        )
    }
    if requires_transpose(plan.assay_type):
        arrays[join(assay, "countsT")] = virtual_array_document(
            (shape[1], shape[0]), plan.dtype, {"content_fingerprint": content, "complete": True}
        )
    # source: categorical, its categories the sources in order, as anndata.concat's
    # label column (stored as text with the categorical record; plain zarr reads names)
    source = _categorical(plan.row_sources, [binding.name for binding in bindings])
    cell_table = prepare_table(
        _frame(plan.cell_ids, {"source": source, "sourceId": plan.source_cell_ids}),
        table=CELL_DATA,
    ).with_columns(
        merge_cell_columns(tables, plan.row_sources, plan.source_rows, assay=assay),
        table=CELL_DATA,
    )
    feature_table = prepare_table(
        _frame(plan.feature_ids, {}), table=FEATURE_DATA, names=plan.feature_names
    ).with_columns(
        merge_feature_columns(tables, plan.feature_columns, feature_ids=plan.feature_ids),
        table=FEATURE_DATA,
    )
    summaries = composite_summaries(plan, bound, read_bytes(cost, budget), progress)
    record = CompositeRecord(
        assay=assay, sources=bindings, arrays=arrays, maps=map_records, complete=False
    )
    # the ids are fingerprinted as the tables are prepared; every open checks
    # them (kept beside the record, whose fields the spec fixes)
    ids = AxisIds(cell_table.ids_fingerprint, feature_table.ids_fingerprint)

    # the root's first document holds the record with complete=false beside
    # the writer's marker: a creation that dies at any instant is refused as
    # incomplete by any reader of the record, not only by this package
    root = create_destination(
        destination,
        overwrite=overwrite,
        writer="create_composite",
        storage_options=storage_options,
        held_bytes=held_bytes(budget),
        attributes={
            COMPOSITE_ATTR: record.to_json(),
            "assayTypes": dump_assay_types({assay: plan.assay_type}),
            "defaultAssay": assay,
        },
    )
    with settled_on_failure(root):
        where = describe_location(destination)
        logger.info("creating composite of %d sources (%d x %d) at %s", len(bound), *shape, where)
        maps_group = root.create_group(MAPS_GROUP, attributes={IDS_ATTR: ids.to_json()})
        for name, values in maps.items():
            # Small chunks: a read loads only the mapping windows it selects.
            chunk = (
                (max(1, min(values.shape[0], MAP_CHUNK_ENTRIES)),)
                if values.ndim == 1
                else (
                    values.shape[0],
                    max(1, min(values.shape[1], MAP_CHUNK_ENTRIES // max(1, values.shape[0]))),
                )
            )
            maps_group.create_array(name, data=values, chunks=chunk)
        # the documents each source was verified from, with their versions: a
        # later open fetches only those that changed (source_seals.py)
        write_seals(
            maps_group,
            record,
            {source.name: source.view.seal() for source in bound if source.view is not None},
        )
        write_anndata_sources(
            maps_group,
            record,
            {source.name: source.anndata.entry for source in bound if source.anndata is not None},
        )
        write_table(root.create_group("cellData", attributes=cell_table.attributes), cell_table)
        assay_group = root.create_group(assay, attributes={"is_assay": True})
        write_table(
            assay_group.create_group("featureData", attributes=feature_table.attributes),
            feature_table,
        )
        summary_group = assay_group.create_group(
            "countSummaries", attributes={"source_fingerprint": content}
        )
        for name, values in summaries.items():
            summary_group.create_array(
                name, data=values, chunks=(max(1, min(len(values), 1 << 20)),)
            )
        final = record.to_json()
        final["complete"] = True
        # one metadata write publishes the composite and removes the marker
        finish_destination(root, {COMPOSITE_ATTR: final})
    # opened as any open does, except that the sources verified above are
    # not fetched and verified a second time
    return CompositeStore._created(
        destination,
        bound,
        cache,
        storage_options=storage_options,
        source_storage_options=source_storage_options,
    )


def _layer_element(name: str, layer: str | None) -> str:
    """The element an AnnData source is read from: ``X``, ``layers/{layer}``, or
    ``raw/X`` for the raw counts."""
    try:
        return layer_element(layer)
    except ValueError as exc:
        raise ValueError(f"source_layers[{name!r}]: {exc}") from None


def _categorical(codes: npt.NDArray[Any], categories: list[str]) -> Any:
    import pandas as pd

    # from the sources' indexes: no Python string per cell
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))


def _frame(ids: npt.NDArray[Any], columns: dict[str, Any]) -> Any:
    import pandas as pd

    return pd.DataFrame(
        {k: v for k, v in columns.items()}, index=pd.Index(ids.tolist(), dtype=object)
    )
