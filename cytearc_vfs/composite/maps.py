"""Building a composite's mappings and tables from its bound sources.

Pure planning: which output cells come from which source rows, which
source columns feed each output feature (-1 for zeros), the output tables,
and the dtype. Nothing here writes; :mod:`cytearc_vfs.composite.create` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..format.count_dtype import merge_dtype
from ..format.fingerprints import combine
from ..format.option_names import on_command_line, shell_word
from ..format.table_names import CELL_DATA, OBS, TableName
from ..format.tables import StoredColumn
from ..read.selection import aligned_mask
from ..read.sources import BoundSource
from .columns import SourceTables

__all__ = ["CompositePlan", "array_fingerprint", "plan_composite"]

FeatureChoice = str | Sequence[str]


def array_fingerprint(values: npt.NDArray[Any]) -> str:
    """Fingerprint of a mapping array's dtype, shape and values."""
    import hashlib

    digest = hashlib.sha256(np.ascontiguousarray(values).view(np.uint8).tobytes()).hexdigest()
    return combine(
        "cytearc:map", {"dtype": values.dtype.str, "shape": list(values.shape), "values": digest}
    )


@dataclass(frozen=True)
class CompositePlan:
    """Everything a composite records, computed before anything is written."""

    row_sources: npt.NDArray[np.int32]
    """Source index of each output cell."""
    source_rows: npt.NDArray[np.int64]
    """Row in its source of each output cell."""
    feature_columns: npt.NDArray[np.int64]
    """(n_sources, n_features): column of each output feature in each source, -1 = zeros."""
    cell_ids: npt.NDArray[Any]
    """Output cell ids (unique)."""
    cell_sources: npt.NDArray[Any]
    """Source name of each output cell."""
    source_cell_ids: npt.NDArray[Any]
    """Id of each output cell in its source."""
    feature_ids: npt.NDArray[Any]
    """Output feature ids."""
    feature_names: npt.NDArray[Any]
    """Output feature names (from the first source holding each feature)."""
    dtype: np.dtype
    """Storage dtype of the virtual counts."""
    assay_type: str
    """The one assay type every source declares."""


def _text(table: Mapping[str, StoredColumn], name: str, fallback: str = "ids") -> npt.NDArray[Any]:
    column = table.get(name) or table[fallback]
    return np.asarray(column.values).astype(str)


def _cell_rows(
    name: str, selection: Any, n_cells: int, ids: npt.NDArray[Any], table: TableName
) -> npt.NDArray[np.int64]:
    """The rows of source ``name`` that ``selection`` (``cells=``) keeps; ``table`` is its
    cell table as its user knows it (an AnnData's ``obs``)."""
    if selection is None:
        return np.arange(n_cells, dtype=np.int64)
    try:
        selection = aligned_mask(selection, n_cells, axis="cells", ids=lambda: pd.Index(ids))
    except IndexError as exc:
        raise ValueError(f"cells[{name!r}]: {exc}") from None
    values = np.asarray(selection)
    if values.size == 0 and values.dtype != np.bool_:
        return np.zeros(0, dtype=np.int64)  # no rows of this source
    if values.dtype.kind in "UO" and all(isinstance(v, str) for v in values.ravel()):
        # cell ids of the source, in the order given
        positions = pd.Index(ids).get_indexer(pd.Index(values.ravel()))
        missing = values.ravel()[positions < 0]
        if missing.size:
            shown = ", ".join(repr(str(v)) for v in missing[:3])
            # at a shell the ids came from --cells NAME=FILE, which takes nothing else
            given, other = (
                (f"--cells {shell_word(name)}=FILE", "")
                if on_command_line()
                else (f"cells[{name!r}]", ", a boolean mask or integer rows")
            )
            raise ValueError(
                f"{given}: {missing.size} id(s) are not cells of that source "
                f"(first: {shown}); give ids of its {table.ids_path}{other}"
            )
        values = positions
    if values.dtype == np.bool_:
        if values.shape != (n_cells,):
            raise ValueError(
                f"cells[{name!r}] is a boolean mask of length {len(values)}, but the source has "
                f"{n_cells} cells; pass one flag per source cell"
            )
        return np.flatnonzero(values).astype(np.int64)
    if values.dtype.kind not in "iu":
        raise ValueError(
            f"cells[{name!r}] must be a boolean mask, integer rows or cell ids, not {values.dtype}"
        )
    rows = values.astype(np.int64).ravel()
    if rows.size and (rows.min() < 0 or rows.max() >= n_cells):
        raise ValueError(f"cells[{name!r}] holds rows outside 0..{n_cells - 1}")
    if len(np.unique(rows)) != len(rows):
        raise ValueError(
            f"cells[{name!r}] repeats rows; a composite holds each source cell at most once"
        )
    return rows


def _check_unique(source: BoundSource, ids: npt.NDArray[Any], what: str) -> None:
    """Refuse a source whose ``what`` ids repeat: a composite maps each id to one row or column.

    A CyteArc store cannot hold repeats (its writers refuse them); an AnnData
    store can, and a repeated feature would otherwise silently lose all but
    one of its columns.
    """
    index = pd.Index(ids)
    if index.is_unique:
        return
    repeated = index[index.duplicated()].unique()
    shown = ", ".join(repr(str(v)) for v in repeated[:3])
    axis = "var_names" if what == "feature" else "obs_names"
    option = "features" if what == "feature" else "cells"
    imported = (
        "cytearc-vfs write PATH DEST --make-unique"
        if on_command_line()
        else f"cv.write_counts(DEST, PATH, make_unique=True) (or {option}=TABLE, its index "
        "holding unique ids)"
    )
    remedy = (
        f"make them unique in the AnnData (e.g. adata.{axis}_make_unique()) and write it again, "
        f"or import it, renaming repeats as anndata does, with {imported}"
        if source.anndata is not None
        else "the source is not a valid store; rebuild it"
    )
    raise ValueError(
        f"source {source.name!r}: {len(repeated)} {what} id(s) repeat (first: {shown}); a "
        f"composite needs unique {what} ids within each source: {remedy}. Nothing was written"
    )


def check_feature_choice(features: object) -> None:
    """Refuse a ``features=`` that is neither a choice's name nor an ordered list of ids.

    Called before any source is read. A set is refused: Python does not keep
    its order (string hashes differ between runs), and the list's order is the
    composite's feature order, which its identity depends on.
    """
    if isinstance(features, str):
        if features not in ("union", "intersection"):
            raise ValueError(
                f"features must be 'union', 'intersection' or a list of feature ids, not {features!r}"
            )
        return
    if isinstance(features, (set, frozenset, Mapping)) or not isinstance(features, Iterable):
        raise TypeError(
            f"features= is of type {type(features).__name__}; give 'union', 'intersection' or an "
            "ordered sequence of feature ids (a list; sorted(ids) if no order matters), whose "
            "order is the composite's feature order"
        )
    if isinstance(features, Sized) and len(features) == 0:
        raise ValueError(_NO_FEATURES)


_NO_FEATURES = (
    "features= is an empty list: a composite of no features reads nothing; give the feature "
    "ids to keep, or 'union' / 'intersection'"
)


def _no_common_features(names: Sequence[str], per_source: Sequence[npt.NDArray[Any]]) -> str:
    """The refusal of an empty intersection: a few ids of each source, side by side."""
    shown = "; ".join(
        f"{name!r}: {ids[:3].tolist()}" for name, ids in zip(names, per_source, strict=True)
    )
    return (
        f"the sources share no feature id, so features='intersection' would make a composite "
        f"of no features (first ids: {shown}). Features are matched by id: write the sources "
        "with ids of one kind (Ensembl ids or symbols, not both), or give features='union'"
    )


def _choose_features(
    per_source: Sequence[npt.NDArray[Any]], features: FeatureChoice, names: Sequence[str]
) -> npt.NDArray[Any]:
    check_feature_choice(features)
    if isinstance(features, str):
        if features == "union":
            seen: dict[str, None] = {}
            for ids in per_source:
                seen.update(dict.fromkeys(ids.tolist()))
            return np.asarray(list(seen), dtype=str)
        if features == "intersection":
            common = set(per_source[0].tolist())
            for ids in per_source[1:]:
                common &= set(ids.tolist())
            if not common and len(per_source) > 1 and all(ids.size for ids in per_source):
                # sources of Ensembl ids and of symbols: a 0-feature composite, no error
                raise ValueError(_no_common_features(names, per_source))
            return np.asarray([i for i in per_source[0].tolist() if i in common], dtype=str)
        raise ValueError(
            f"features must be 'union', 'intersection' or a list of feature ids, not {features!r}"
        )
    chosen = [str(f) for f in features]
    if not chosen:
        raise ValueError(_NO_FEATURES)
    if len(set(chosen)) != len(chosen):
        counted = pd.Index(chosen)
        repeated = str(counted[counted.duplicated()][0])
        raise ValueError(
            f"the explicit feature list repeats ids (first: {repeated!r}); give each feature once"
        )
    known: set[str] = set()
    for ids in per_source:
        known.update(ids.tolist())
    missing = [f for f in chosen if f not in known]
    if missing:
        raise ValueError(
            f"{len(missing)} requested feature(s) are in no source, e.g. {missing[:5]}; check the ids "
            "(features are matched by feature id, not by name)"
        )
    return np.asarray(chosen, dtype=str)


def plan_composite(
    sources: Sequence[BoundSource],
    tables: Sequence[SourceTables],
    *,
    features: FeatureChoice,
    cells: Mapping[str, Any] | None,
) -> CompositePlan:
    """Plan a composite of ``sources`` (in output order) from their ``tables``."""
    # AnnData sources declare no assay type: CyteArc sources decide it when
    # there are any
    declared = [source for source in sources if source.anndata is None] or list(sources)
    types = {source.name: source.info.assay_type for source in declared}
    if len(set(types.values())) > 1:
        raise ValueError(
            f"sources declare different assay types {types}; a composite has one assay type. "
            "Re-declare the sources' assayTypes or compose only sources of one type"
        )
    unknown = sorted(set(cells or {}) - {source.name for source in sources})
    if unknown:
        raise ValueError(f"cells= names unknown source(s) {unknown}")
    dtype = merge_dtype([source.info.dtype for source in sources])
    feature_ids_per_source = [_text(table.features, "ids") for table in tables]
    for source, ids in zip(sources, feature_ids_per_source, strict=True):
        _check_unique(source, ids, "feature")
    output_features = _choose_features(
        feature_ids_per_source, features, [source.name for source in sources]
    )
    lookup = pd.Index(output_features)
    feature_columns = np.full((len(sources), len(output_features)), -1, dtype=np.int64)
    names = np.asarray(output_features, dtype=object)
    named = np.zeros(len(output_features), dtype=bool)
    for index, (table, ids) in enumerate(zip(tables, feature_ids_per_source, strict=True)):
        positions = lookup.get_indexer(ids)
        present = positions >= 0
        feature_columns[index, positions[present]] = np.flatnonzero(present)
        source_names = _text(table.features, "names")
        fresh = present.copy()
        fresh[present] = ~named[positions[present]]
        names[positions[fresh]] = source_names[fresh]
        named[positions[present]] = True

    row_sources: list[npt.NDArray[np.int32]] = []
    source_rows: list[npt.NDArray[np.int64]] = []
    source_ids: list[npt.NDArray[Any]] = []
    for index, (source, table) in enumerate(zip(sources, tables, strict=True)):
        ids = _text(table.cells, "ids")
        _check_unique(source, ids, "cell")
        given = (cells or {}).get(source.name)
        own = CELL_DATA if source.anndata is None else OBS
        rows = _cell_rows(source.name, given, source.info.shape[0], ids, own)
        row_sources.append(np.full(len(rows), index, dtype=np.int32))
        source_rows.append(rows)
        source_ids.append(ids[rows])
    all_ids = np.concatenate(source_ids) if source_ids else np.array([], dtype=str)
    cell_sources = np.concatenate(
        [
            np.full(len(ids), source.name, dtype=object)
            for source, ids in zip(sources, source_ids, strict=True)
        ]
    ).astype(str)
    # Keep source ids when they are unique across sources; otherwise prefix
    # every id with its source name, as anndata's index_unique does.
    unique_ids = (
        all_ids
        if len(np.unique(all_ids)) == len(all_ids)
        else np.char.add(np.char.add(cell_sources, "-"), all_ids)
    )
    _check_prefixed_unique(unique_ids, cell_sources, all_ids)
    return CompositePlan(
        row_sources=np.concatenate(row_sources),
        source_rows=np.concatenate(source_rows),
        feature_columns=feature_columns,
        cell_ids=unique_ids,
        cell_sources=cell_sources,
        source_cell_ids=all_ids,
        feature_ids=output_features,
        feature_names=names.astype(str),
        dtype=dtype,
        assay_type=next(iter(types.values())),
    )


def _check_prefixed_unique(
    cell_ids: npt.NDArray[Any], cell_sources: npt.NDArray[Any], source_ids: npt.NDArray[Any]
) -> None:
    """Refuse output cell ids that repeat after prefixing, naming one and its two cells.

    Ids are unique within each source (checked before), so a repeat can only
    come from the ``"{source}-"`` prefix: source ``a``'s cell ``b-x`` and
    source ``a-b``'s cell ``x`` both become ``a-b-x``.
    """
    values, counts = np.unique(cell_ids, return_counts=True)
    if (counts == 1).all():
        return
    repeated = int(np.flatnonzero(counts > 1)[0])
    value = str(values[repeated])
    at = np.flatnonzero(cell_ids == value)[:2]
    (one, other) = (f"source {str(cell_sources[i])!r} cell {str(source_ids[i])!r}" for i in at)
    raise ValueError(
        f"cell ids repeat across sources, so every id is prefixed with its source name, "
        f"but the prefixed ids still collide: {one} and {other} both become {value!r} "
        f"({int((counts > 1).sum())} such id(s)); name the sources so that no source name "
        "followed by '-' begins another source's name, or select cells (cells=) so that "
        "the sources' ids are unique"
    )
