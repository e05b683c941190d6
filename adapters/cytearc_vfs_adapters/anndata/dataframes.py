"""DataFrame elements: ``dataframe`` 0.2.0 and the legacy 0.1.0 of anndata 0.7.x.

Both store one member per column and name the index member in ``_index``
and the column order in ``column-order``. In 0.2.0 every column is an
element of its own (array, categorical, nullable...). In 0.1.0 columns are
plain arrays; a categorical column holds integer codes and points, with its
``categories`` attribute, to its labels in the reserved ``__categories``
subgroup, which is not a column. A legacy group with ``_index`` but no
encoding attributes at all is read as 0.1.0.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np
import pandas as pd

from cytearc_vfs.format.store_keys import key_problem

from .encodings import LEGACY_CATEGORIES, Encoding, column_order
from .errors import MalformedElementError, UnsupportedElementError
from .matrices import SparseMatrixElement
from .nodes import attribute, child, is_group, read_values

__all__ = [
    "LEGACY_CATEGORIES",
    "ElementReading",
    "categorical",
    "SkippedColumn",
    "column_names",
    "index_member",
    "index_name",
    "read_dataframe",
]


class SkippedColumn(NamedTuple):
    """A dataframe column left out of a tolerant read, and why."""

    path: str
    """The column's element path (``obs/cell_type``)."""
    reason: str
    """The error that reading it raised: what the element holds and what is wrong."""


def index_name(node: Any, path: str) -> str:
    """The name of a dataframe group's index member (its ``_index`` attribute), checked;
    the columns are not looked at (reading the ids needs no other member)."""
    index = attribute(node, "_index")
    if not isinstance(index, str):
        raise MalformedElementError(
            f"element {path}: a dataframe needs an '_index' attribute naming its index "
            f"member, found {index!r}"
        )
    return index


def index_member(node: Any, path: str) -> tuple[str, Any]:
    """``(name, node)`` of a dataframe group's index member; a missing one is refused."""
    index = index_name(node, path)
    member = child(node, index)
    if member is None:
        raise MalformedElementError(
            f"element {path}: the index {index!r} named in its attributes is missing"
        )
    return index, member


def column_names(
    node: Any,
    path: str,
    members: dict[str, Any] | None = None,
    unnamable: dict[str, str] | None = None,
) -> tuple[str, list[str]]:
    """``(index member, columns in order)`` of a dataframe group, checked; the member
    nodes found are put in ``members`` when given (each is looked up once: on
    object storage every lookup is a request).

    A member whose name no store of the package takes as a key segment (a URL
    escape of '/', a control character: :func:`~cytearc_vfs.format.store_keys.key_problem`)
    is refused, or, for a column and given ``unnamable``, put there with the
    reason and not looked up.
    """
    index = index_name(node, path)
    order = column_order(node, index)
    if isinstance(order, str):  # h5py returns a single-column order as a plain string
        order = [order]
    if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        raise MalformedElementError(
            f"element {path}: 'column-order' must be a list of column names, found {order!r}"
        )
    for name in [index, *order]:
        problem = key_problem(f"member/{name}")
        if problem is not None:
            what = "the index" if name == index else "column"
            reason = (
                f"element {path}: {what} {name!r} has a name no store of this package "
                f"takes as a key (it {problem}); rename it in the source"
            )
            if unnamable is None or name == index:
                raise MalformedElementError(reason)
            unnamable[name] = reason
            continue
        member = child(node, name)
        if members is not None:
            members[name] = member
        if member is None:
            raise MalformedElementError(
                f"element {path}: {'the index' if name == index else 'column'} {name!r} "
                "named in its attributes is missing"
            )
    return index, order


class ElementReading(Protocol):
    """What a dataframe's columns are read with (:class:`~.values.ElementReader`)."""

    def read(self, node: Any, path: str) -> Any:
        """The value of the element ``node`` at ``path``."""
        ...


def categorical(codes: Any, categories: Any, ordered: bool, path: str) -> pd.Categorical:
    """``pandas.Categorical`` of ``codes`` (``-1``: missing) into ``categories``, checked."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise MalformedElementError(
            f"element {path}: categorical codes must be integers, found {codes.dtype}"
        )
    if len(codes) and (int(codes.max()) >= len(categories) or int(codes.min()) < -1):
        raise MalformedElementError(
            f"element {path}: categorical codes run from {int(codes.min())} to "
            f"{int(codes.max())}, outside -1 (missing) to {len(categories) - 1}"
        )
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories), ordered=ordered)


#: How the values that are no column are named in messages.
_NOT_COLUMNS = {
    "AwkwardArrayInfo": "an awkward array (listed by 'cytearc-vfs anndata ls', never read)",
    "DataFrame": "a dataframe nested in the dataframe",
    "dict": "a mapping",
    "SparseMatrixElement": "a sparse matrix",
}


def _column(
    reader: ElementReading, node: Any, member: Any, name: str, path: str, legacy: bool
) -> Any:
    where = f"{path}/{name}"
    if legacy and not is_group(member) and attribute(member, "categories") is None:
        labels = child(node, f"{LEGACY_CATEGORIES}/{name}")
        if labels is not None and not is_group(labels):
            # a column whose labels sit in __categories but lost its pointer
            return categorical(
                read_values(member),
                read_values(labels),
                bool(attribute(labels, "ordered", False)),
                where,
            )
    value = reader.read(member, where)
    if isinstance(value, (SparseMatrixElement, dict, pd.DataFrame)) or not hasattr(
        value, "__len__"
    ):
        # an awkward array, a nested dataframe or a mapping holds no value per row
        # (anndata cannot read such a column either)
        found = _NOT_COLUMNS.get(type(value).__name__, type(value).__name__)
        raise MalformedElementError(
            f"element {where}: a dataframe column must be a one-dimensional array, "
            f"categorical or nullable array, found {found}"
        )
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise MalformedElementError(
            f"element {where}: a dataframe column must be one-dimensional, found shape "
            f"{value.shape}"
        )
    return value


def read_dataframe(
    reader: ElementReading,
    node: Any,
    path: str,
    encoding: Encoding,
    *,
    skipped: list[SkippedColumn] | None = None,
) -> pd.DataFrame:
    """The DataFrame of a ``dataframe`` group (0.2.0 or legacy 0.1.0).

    A column that cannot be read (a malformed element, an unknown encoding, a
    value that is not one per row) raises; given a ``skipped`` list, it is left
    out and appended there instead. The index is always required.
    """
    members: dict[str, Any] = {}
    unnamable: dict[str, str] = {}
    index_name, order = column_names(node, path, members, None if skipped is None else unnamable)
    for name, reason in unnamable.items():
        assert skipped is not None
        skipped.append(SkippedColumn(f"{path}/{name}", reason))
    order = [name for name in order if name not in unnamable]
    legacy = encoding.version == "0.1.0"
    index = _column(reader, node, members[index_name], index_name, path, legacy)
    columns: dict[str, Any] = {}
    for name in order:
        try:
            values = _column(reader, node, members[name], name, path, legacy)
            if len(values) != len(index):
                raise MalformedElementError(
                    f"element {path}: column {name!r} has {len(values)} rows but the index "
                    f"{index_name!r} has {len(index)}; every column must have the index's length"
                )
        except (MalformedElementError, UnsupportedElementError) as exc:
            # only faults of the element itself: a failed read of storage propagates
            if skipped is None:
                raise
            skipped.append(SkippedColumn(f"{path}/{name}", str(exc)))
            continue
        columns[name] = values
    order = [name for name in order if name in columns]
    labels = pd.Index(index)
    # text arrays stay object columns, as anndata gives them (pandas would infer "str")
    data = {
        name: pd.Series(values, index=labels, dtype=object, copy=False)
        if isinstance(values, np.ndarray) and values.dtype == object
        else values
        for name, values in columns.items()
    }
    frame = pd.DataFrame(data, index=labels, columns=order) if data else pd.DataFrame(index=labels)
    if index_name != "_index":
        frame.index.name = index_name
    return frame
