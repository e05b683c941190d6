"""Which table columns an AnnData output holds, and how each is presented.

The rule (``docs/anndata-out.md``), shared by :func:`to_anndata`, the view
and the export so all three give the same ``obs`` and ``var``:

- ``ids`` is the index. Every other column of the table is a column of the
  frame, in the order the table records (``cytearc:columnOrder``; in name
  order for columns it does not list, and where it records none), except:
- ``names`` when it equals the ids and ``I`` when it selects every row:
  these are the defaults ``write_counts`` creates from the index, so leaving
  them out gives back the frame that was written (and an export that
  ``write_counts`` imports again, which refuses a column named ``I``). A
  ``names`` of other values (gene symbols) or a narrowed ``I`` is kept.
- Membership columns (``role`` = ``assay_membership``) of other assays: they
  describe assays the output does not hold (spec, "Export and import keep
  membership explicit"). The exported assay's own membership column is kept
  as an ordinary boolean column and declared in
  ``uns["cytearc"]["assayMembership"]``.

A column stored with a ``cytearc:categorical`` record is presented as a
categorical (codes and categories); text columns as variable-length UTF-8
strings; one marked ``cytearc:nullable`` (a pandas nullable integer or boolean
without missing values) as that nullable type (no value masked); other numbers
and booleans as they are stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from cytearc_vfs.format.table_attributes import ordered_names
from cytearc_vfs.format.tables import CATEGORICAL_ATTR, NULLABLE_ATTR
from cytearc_vfs.write.membership import MEMBERSHIP_ROLE

__all__ = [
    "INDEX_KEY",
    "MEMBERSHIP_ROLE",
    "ColumnKind",
    "ExportedColumn",
    "categorical_codes",
    "check_encodable",
    "check_hdf5_text",
    "check_hdf5_times",
    "column_kind",
    "exported_columns",
    "index_name",
    "membership_column",
    "membership_uns",
    "nullable_values",
    "plain_text",
    "with_source_categories",
]

#: Where AnnData's dataframe encoding keeps the index (the ``_index`` attribute).
INDEX_KEY = "_index"
ColumnKind = Literal["text", "categorical", "nullable", "plain"]


@dataclass(frozen=True, slots=True)
class ExportedColumn:
    """One table column as the output presents it."""

    name: str
    """Column name (the stored array's name)."""
    kind: ColumnKind
    """``text`` (vlen strings), ``categorical`` (codes + categories), ``nullable`` (an
    integer or boolean written from pandas' nullable type: given back as one) or
    ``plain``."""
    categories: tuple[Any, ...] = ()
    """The categories of a categorical column, in order."""
    ordered: bool = False
    """Whether a categorical column's categories are ordered."""


def column_kind(name: str, dtype: np.dtype, attrs: Mapping[str, Any]) -> ExportedColumn:
    """How the stored column ``name`` of ``dtype`` with ``attrs`` is presented."""
    spec = attrs.get(CATEGORICAL_ATTR)
    if isinstance(spec, dict):
        return ExportedColumn(name, "categorical", tuple(spec["categories"]), bool(spec["ordered"]))
    if dtype.kind in "UOT":
        return ExportedColumn(name, "text")
    if attrs.get(NULLABLE_ATTR) is True and dtype.kind in "biu":
        return ExportedColumn(name, "nullable")
    return ExportedColumn(name, "plain")


def membership_column(attrs_by_name: Mapping[str, Mapping[str, Any]], assay: str) -> str | None:
    """The name of ``assay``'s membership column in a cell table, or ``None``."""
    name = f"{assay}_I"
    attrs = attrs_by_name.get(name)
    if attrs is not None and attrs.get("role") == MEMBERSHIP_ROLE and attrs.get("assay") == assay:
        return name
    return None


def membership_uns(column: str | None, assay: str) -> dict[str, Any]:
    """``uns`` of an output: the membership declaration when the assay has a column."""
    if column is None:
        return {}
    return {"cytearc": {"assayMembership": {assay: column}}}


def with_source_categories(
    attrs_by_name: Mapping[str, Mapping[str, Any]], sources: Sequence[str] | None
) -> dict[str, Mapping[str, Any]]:
    """A cell table's attributes with a composite's ``source`` column categorical.

    ``sources`` are the composite's source names in order (``None`` for any
    other store). A composite records them as the categories of its
    ``source`` column, as ``anndata.concat(..., label="source")`` makes it; one
    created before that recorded none, and its column is presented the same.

    >>> with_source_categories({"source": {}}, ["b", "a"])["source"]
    {'cytearc:categorical': {'categories': ['b', 'a'], 'ordered': False}}
    """
    found = dict(attrs_by_name)
    if sources is not None and "source" in found and CATEGORICAL_ATTR not in found["source"]:
        record = {"categories": list(sources), "ordered": False}
        found["source"] = {**found["source"], CATEGORICAL_ATTR: record}
    return found


def exported_columns(
    dtypes: Mapping[str, np.dtype],
    attrs_by_name: Mapping[str, Mapping[str, Any]],
    assay: str,
    values: Callable[[str], npt.NDArray[Any]],
    order: Sequence[str] = (),
) -> list[ExportedColumn]:
    """The columns an output holds, in order (the module's rule).

    Parameters
    ----------
    dtypes, attrs_by_name
        Each stored column's dtype and attributes, by name.
    assay
        The exported assay.
    values
        Reads a column's values; called only for ``ids``, ``names`` and ``I``.
    order
        The column order the table records (``cytearc:columnOrder``); columns it
        does not list follow in name order.
    """
    kept: list[ExportedColumn] = []
    for name in ordered_names(list(dtypes), order):
        attrs = attrs_by_name.get(name, {})
        if name == "ids":
            continue
        if attrs.get("role") == MEMBERSHIP_ROLE and attrs.get("assay") != assay:
            continue
        if name == "names" and _equal_text(values("names"), values("ids")):
            continue
        if name == "I" and dtypes[name] == np.bool_ and bool(np.all(values("I"))):
            continue
        kept.append(column_kind(name, dtypes[name], attrs))
    return kept


def index_name(recorded: str | None, kept: Iterable[str]) -> str | None:
    """The name an output gives its index: the one ``write_counts`` recorded
    (``cytearc:indexName``), unless AnnData's dataframe encoding cannot hold it.

    The encoding keeps the index as a member of the frame's group named by the
    ``_index`` attribute, beside the columns: a name that is also a kept
    column's (anndata refuses to write that frame) or is ``_index`` itself
    leaves the index unnamed, in every output alike.

    >>> index_name("cell_id", ["cell_type"]), index_name("cell_type", ["cell_type"])
    ('cell_id', None)
    """
    if recorded is None or recorded == INDEX_KEY or recorded in set(kept):
        return None
    return recorded


def check_encodable(names: Iterable[str], *, table: str) -> None:
    """Refuse a column that AnnData's dataframe encoding cannot hold (``_index``)."""
    if INDEX_KEY in names:
        # the encoding stores the index under this name
        raise ValueError(
            f"{table} column {INDEX_KEY!r} is the name AnnData's dataframe encoding keeps "
            "the index under, so it cannot be written or viewed as AnnData; rename the "
            "column in the store (to_anndata keeps it, in memory only)"
        )


def check_hdf5_text(frame: pd.DataFrame, *, table: str, destination: str) -> None:
    """Refuse text with a NUL character for an ``.h5ad``, naming where it is.

    The store keeps a NUL inside a value (fixed-width text drops only trailing
    ones), and a ``.zarr`` keeps it too, but HDF5's variable-length strings
    cannot: h5py stopped the export midway with only "VLEN strings do not
    support embedded NULLs", naming no column.

    >>> frame = pd.DataFrame({"t": ["a", "b\\x00c"]}, index=["c1", "c2"])
    >>> check_hdf5_text(frame, table="cellData", destination="x.h5ad")
    Traceback (most recent call last):
    ...
    ValueError: cellData column 't' row 1 (id 'c2') holds a NUL character...
    """
    texts: list[tuple[str, Any]] = [("index", frame.index)]
    for name, values in frame.items():
        if isinstance(values.dtype, pd.CategoricalDtype):
            texts.append((f"column {name!r} (a category)", values.cat.categories))
        else:
            texts.append((f"column {name!r}", values))
    for what, values in texts:
        if values.dtype.kind not in "OUS" and not isinstance(values.dtype, pd.StringDtype):
            continue
        series: Any = pd.Series(np.asarray(values, dtype=object), copy=False)
        found = np.flatnonzero(series.str.contains("\x00", regex=False, na=False).to_numpy())
        if found.size:
            row = int(found[0])
            where = (
                f"row {row} (id {frame.index[row]!r})"
                if not what.endswith("(a category)")
                else f"value {values[row]!r}"
            )
            raise ValueError(
                f"{table} {what} {where} holds a NUL character, which an .h5ad's text "
                f"cannot keep ({destination}); export to a .zarr, which keeps it, or remove "
                "the NUL from the store's column. Nothing was written"
            )


def check_hdf5_times(frame: pd.DataFrame, *, table: str, destination: str) -> None:
    """Refuse a datetime column for an ``.h5ad``, naming it.

    anndata has no encoding for datetimes: its writer stopped the export midway
    naming only pandas' ``DatetimeArray``. A ``.zarr`` keeps such a column as a
    ``datetime64`` array (:func:`~.export.export_anndata`, as the view presents
    it), which anndata reads back; HDF5 has no such type.

    >>> frame = pd.DataFrame({"t": pd.to_datetime(["2020-01-01"])}, index=["c1"])
    >>> check_hdf5_times(frame, table="cellData", destination="x.h5ad")
    Traceback (most recent call last):
    ...
    ValueError: cellData column 't' holds datetimes (datetime64[...]), which an .h5ad ...
    """
    for name, dtype in frame.dtypes.items():
        if dtype.kind == "M":
            raise ValueError(
                f"{table} column {name!r} holds datetimes ({dtype}), which an .h5ad cannot "
                f"keep ({destination}): anndata writes no datetime to HDF5. Export to a "
                ".zarr, which keeps them as a datetime64 array that anndata reads back, or "
                "read them with cv.to_anndata or cv.anndata_view. Nothing was written"
            )


def plain_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its text columns and index as object arrays of ``str``.

    anndata writes a pandas string column (what pandas 3 infers for text) as
    ``nullable-string-array`` 0.1.0, which anndata < 0.12 and other readers
    (anndataR < 1.4) do not know; an object column of ``str`` is written as
    ``string-array`` 0.2.0, the encoding every reader has and the one
    :func:`~.view.anndata_view` presents. Stored text has no missing values,
    so nothing is lost; a column with missing values keeps its type.

    >>> frame = pd.DataFrame({"t": pd.array(["a"], dtype="string")}, index=["c1"])
    >>> [str(d) for d in plain_text(frame).dtypes], str(plain_text(frame).index.dtype)
    (['object'], 'object')
    """
    text = [
        name
        for name, dtype in frame.dtypes.items()
        if isinstance(dtype, pd.StringDtype) and not frame[name].isna().any()
    ]
    plain = frame.astype(dict.fromkeys(text, object)) if text else frame.copy()
    if isinstance(frame.index.dtype, pd.StringDtype) and not frame.index.isna().any():
        plain.index = frame.index.astype(object)
    return plain


def _equal_text(left: npt.NDArray[Any], right: npt.NDArray[Any]) -> bool:
    return left.shape == right.shape and bool(np.all(left.astype(str) == right.astype(str)))


def nullable_values(values: npt.NDArray[Any]) -> Any:
    """Stored integers or booleans as pandas' nullable array of their type, none missing.

    >>> nullable_values(np.array([1, 2], dtype=np.int8)).dtype, nullable_values(np.array([True])).dtype
    (Int8Dtype(), BooleanDtype)
    """
    mask = np.zeros(values.shape, dtype=bool)
    if values.dtype == np.bool_:
        return pd.arrays.BooleanArray(values, mask)
    return pd.arrays.IntegerArray(values, mask)


def categorical_codes(values: npt.NDArray[Any], column: ExportedColumn) -> npt.NDArray[Any]:
    """The codes of stored categorical ``values`` (which hold the category values).

    >>> column = ExportedColumn("ct", "categorical", ("T", "B"))
    >>> categorical_codes(np.array(["B", "T", "B"]), column).tolist()
    [1, 0, 1]
    """
    categories = pd.Index(list(column.categories))
    codes: npt.NDArray[np.intp] = categories.get_indexer(
        pd.Index(values.tolist() if values.dtype.kind == "U" else values)
    )
    if len(codes) and codes.min() < 0:
        missing = pd.Index(values)[codes < 0][:3].tolist()
        raise ValueError(
            f"column {column.name!r} holds values {missing} outside its recorded categories; "
            "the table is damaged: rewrite the store"
        )
    return codes.astype(_codes_dtype(len(categories)))


def _codes_dtype(n_categories: int) -> np.dtype:
    """The narrowest signed type pandas would give the codes of ``n_categories``."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)
