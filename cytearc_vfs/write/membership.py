"""The import side of the membership rule: restore a declared ``<assay>_I`` column.

Spec ("Export and import keep membership explicit"): an export writes the
exported assay's membership column as an ordinary ``obs`` column and
declares it in ``uns["cytearc"]["assayMembership"]`` (assay -> column). An
import reserves the name ``<assay>_I`` of the assay it writes:

- the declared column of that assay, which must be boolean without missing
  values, is stored as ``<assay>_I`` with the membership attributes
  (``role: assay_membership``, ``assay``), so the unmeasured cells stay
  unmeasured through an export and an import;
- any other column of that name is skipped with a warning (it would read as
  an undeclared membership);
- columns named for other assays stay ordinary metadata.

Without this, an exported partial assay imported again would count every
cell as measured.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..format.column_names import free_column_name

__all__ = [
    "MEMBERSHIP_ROLE",
    "declared_membership",
    "membership_in_place",
    "rename_metrics",
    "split_membership",
]

logger = logging.getLogger(__name__)

#: ``role`` attribute of a membership column.
MEMBERSHIP_ROLE = "assay_membership"


def declared_membership(uns: Any) -> Mapping[str, Any] | None:
    """``uns["cytearc"]["assayMembership"]`` of an AnnData's ``uns``, or ``None``.

    >>> declared_membership({"cytearc": {"assayMembership": {"RNA": "RNA_I"}}})
    {'RNA': 'RNA_I'}
    >>> declared_membership({}) is None
    True
    """
    if not isinstance(uns, Mapping):
        return None
    cytearc = uns.get("cytearc")
    declared = cytearc.get("assayMembership") if isinstance(cytearc, Mapping) else None
    if declared is None:
        return None
    if not isinstance(declared, Mapping):
        raise ValueError(
            "uns['cytearc']['assayMembership'] must map each assay to its membership column "
            f"(e.g. {{'RNA': 'RNA_I'}}), found {type(declared).__name__}; fix or remove it. "
            "Nothing was written"
        )
    return declared


def _measured(column: pd.Series, name: str, assay: str) -> npt.NDArray[np.bool_]:
    """The declared column as a numpy bool array; refuses other types and missing values."""
    dtype = column.dtype
    if isinstance(dtype, pd.BooleanDtype):
        if column.isna().any():
            raise ValueError(
                f"cell column {name!r}, declared as the membership of assay {assay!r} in "
                "uns['cytearc']['assayMembership'], has missing values; a membership column "
                "says True or False for every cell. Fill them, or remove the declaration to "
                "import every cell as measured. Nothing was written"
            )
        return column.to_numpy(dtype=bool)
    if dtype != np.bool_:
        raise ValueError(
            f"cell column {name!r}, declared as the membership of assay {assay!r} in "
            f"uns['cytearc']['assayMembership'], is {dtype}, not boolean; a membership column "
            "is True for the measured cells. Convert it to bool, or remove the declaration to "
            "import every cell as measured. Nothing was written"
        )
    return column.to_numpy()


def split_membership(
    cells: pd.DataFrame, declared: Mapping[str, Any] | None, assay: str
) -> tuple[pd.DataFrame, tuple[str, npt.NDArray[np.bool_], dict[str, Any]] | None]:
    """``cells`` without the columns the rule takes, and the membership column to store.

    Returns the table to write as ordinary columns and ``(name, values,
    attributes)`` of the restored membership column, or ``None`` when
    ``declared`` names no column for ``assay``.
    """
    reserved = f"{assay}_I"
    column = None if declared is None else declared.get(assay)
    if column is not None and (not isinstance(column, str) or column not in cells.columns):
        raise ValueError(
            f"uns['cytearc']['assayMembership'] declares {column!r} as the membership column "
            f"of assay {assay!r}, but the cell table has no such column; restore the column, "
            "or remove the declaration to import every cell as measured. Nothing was written"
        )
    restored = None
    dropped = []
    if column is not None:
        restored = (
            reserved,
            _measured(cells[column], column, assay),
            {"role": MEMBERSHIP_ROLE, "assay": assay},
        )
        dropped.append(column)
    if reserved in cells.columns and reserved != column:
        logger.warning(
            "cell column %r is reserved for the membership of assay %r and is not declared "
            "in uns['cytearc']['assayMembership']; it is not imported",
            reserved,
            assay,
        )
        dropped.append(reserved)
    return (cells.drop(columns=dropped) if dropped else cells), restored


def membership_in_place(
    order: Sequence[str], frame: Sequence[str], declared: str, name: str
) -> tuple[str, ...]:
    """The recorded column ``order`` with the restored membership column ``name`` moved
    to where the frame held the ``declared`` column: before the first column that
    followed it in the frame and is recorded, or last (the outputs give the frame's
    columns back in its order).

    >>> membership_in_place(["depth", "ADT_I", "RNA_I"], ["depth", "m", "ADT_I"], "m", "RNA_I")
    ('depth', 'RNA_I', 'ADT_I')
    """
    rest = [column for column in order if column != name]
    after = frame[list(frame).index(declared) + 1 :]
    place = next((rest.index(column) for column in after if column in rest), len(rest))
    return (*rest[:place], name, *rest[place:])


def rename_metrics(cells: pd.DataFrame, assay: str) -> pd.DataFrame:
    """``cells`` with ``<assay>_nCounts`` and ``<assay>_nFeatures`` carried as ``orig_<name>``.

    Those names are the preparation metrics of the assay: a DataStore takes a
    cell table that holds them as prepared and reads them as the totals of
    the store's own counts, and the writers refuse to replace a store that
    holds them. A column of that name in the input describes other counts
    (an export of a prepared store, an AnnData whose features were
    filtered since), so it is kept under the name a composite and a
    DataStore merge give it, with a warning, never as the metric.

    >>> rename_metrics(pd.DataFrame({"RNA_nCounts": [0.0], "ADT_nCounts": [1.0]}), "RNA").columns.tolist()
    ['orig_RNA_nCounts', 'ADT_nCounts']
    """
    metrics = [name for name in (f"{assay}_nCounts", f"{assay}_nFeatures") if name in cells.columns]
    if not metrics:
        return cells
    taken = {str(name) for name in cells.columns}
    renamed = {}
    for name in metrics:
        renamed[name] = free_column_name(name, taken)
        taken.add(renamed[name])
    logger.warning(
        "cell column(s) %s name preparation metrics of assay %r, which a DataStore computes "
        "from the stored counts; they are imported as %s",
        ", ".join(map(repr, metrics)),
        assay,
        ", ".join(repr(renamed[name]) for name in metrics),
    )
    return cells.rename(columns=renamed)
