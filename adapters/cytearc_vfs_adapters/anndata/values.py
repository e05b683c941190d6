"""Reading an element's value: every encoding of the AnnData element table.

:func:`read_element` dispatches on the element's encoding (declared, or
inferred for anndata 0.7.x files, :mod:`.encodings`) and returns what
anndata itself would give for it: numpy arrays, ``pandas.Categorical``,
pandas nullable arrays (their missing values as ``pd.NA``, or ``NaN`` for a
``nullable-string-array`` whose ``na-value`` is ``"NaN"``), Python scalars,
``None``, dicts and DataFrames. Sparse matrices are returned as
:class:`~.matrices.SparseMatrixElement` (read in bands, never whole until
asked); awkward arrays as an :class:`AwkwardArrayInfo` that describes them
without reading them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .dataframes import categorical, read_dataframe
from .encodings import Encoding, classify
from .errors import MalformedElementError
from .matrices import SparseMatrixElement
from .nodes import attribute, child, children, is_group, read_values, text_values

__all__ = ["AwkwardArrayInfo", "ElementReader", "read_element"]


@dataclass(frozen=True, slots=True)
class AwkwardArrayInfo:
    """An awkward array, reported (not read): reading it needs the ``awkward`` package."""

    path: str
    """Where the element is."""
    length: int | None
    """Its logical length (the ``length`` attribute)."""
    form: str | None
    """Its serialized awkward form (the ``form`` attribute)."""
    buffers: tuple[str, ...]
    """Names of the arrays holding its buffers."""


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def _member(node: Any, name: str, path: str, encoding: Encoding, *, group: bool = False) -> Any:
    member = child(node, name)
    if member is None or is_group(member) != group:
        found = "missing" if member is None else ("a group" if is_group(member) else "an array")
        raise MalformedElementError(
            f"element {path}: a {encoding.type} needs {'a group' if group else 'an array'} "
            f"{name!r}, which is {found}"
        )
    return member


class ElementReader:
    """Reads elements of one container; ``root`` resolves legacy absolute paths."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def read(self, node: Any, path: str) -> Any:
        """The value of the element ``node`` at ``path``."""
        encoding = classify(node, path)
        kind = encoding.type
        if kind in ("anndata", "raw", "dict"):
            return {
                name: self.read(child(node, name), _join(path, name)) for name in children(node)
            }
        if kind == "dataframe":
            return read_dataframe(self, node, path, encoding)
        if kind in ("csr_matrix", "csc_matrix"):
            return SparseMatrixElement(node, path, encoding)
        if kind == "categorical":
            return self.categorical(node, path, encoding)
        if kind.startswith("nullable-"):
            return self.nullable(node, path, encoding)
        if kind == "awkward-array":
            length = attribute(node, "length")
            form = attribute(node, "form")
            return AwkwardArrayInfo(
                path,
                int(length) if length is not None else None,
                str(form) if form is not None else None,
                tuple(children(node)),
            )
        return self.array_value(node, path, encoding)

    def array_value(self, node: Any, path: str, encoding: Encoding) -> Any:
        """An array element: dense, string array, record array or scalar."""
        kind = encoding.type
        if kind == "null":
            return None
        values = read_values(node)
        if kind == "string":
            if not isinstance(values, str):
                raise MalformedElementError(
                    f"element {path}: a string scalar must be a 0-d text array, found dtype "
                    f"{node.dtype} and shape {node.shape}"
                )
            return values
        if kind == "numeric-scalar":
            if values is None or np.ndim(values) != 0 or isinstance(values, str):
                raise MalformedElementError(
                    f"element {path}: a numeric-scalar must be a 0-d numeric array, found "
                    f"shape {getattr(node, 'shape', None)}"
                )
            scalar = np.asarray(values)[()]
            # anndata gives a declared scalar as a Python number, a legacy 0-d array as numpy's
            return scalar.item() if encoding.declared else scalar
        if kind == "rec-array":
            return _text_records(values)
        if kind == "string-array" and values is not None and values.dtype != object:
            raise MalformedElementError(
                f"element {path}: a string-array must hold text, found dtype {values.dtype}"
            )
        return values

    def categorical(self, node: Any, path: str, encoding: Encoding) -> pd.Categorical:
        """A categorical: the 0.2.0 group, or a legacy column with a ``categories`` attribute."""
        if is_group(node):
            codes = read_values(_member(node, "codes", path, encoding))
            categories = read_values(_member(node, "categories", path, encoding))
            ordered = bool(attribute(node, "ordered", False))
        else:
            codes = read_values(node)
            categories, ordered = self._legacy_categories(node, path)
        return categorical(codes, categories, ordered, path)

    def _legacy_categories(self, node: Any, path: str) -> tuple[Any, bool]:
        """Labels of a legacy categorical column, from its ``categories`` attribute.

        anndata 0.7 wrote the path of ``__categories/<column>`` (relative to
        the dataframe; the element specification says absolute: both are
        resolved), HDF5 files an object reference, and older files the labels
        themselves.
        """
        reference = attribute(node, "categories")
        if isinstance(reference, str):
            parent = path.rpartition("/")[0]
            candidates = (
                [reference.lstrip("/")]
                if reference.startswith("/")
                else [_join(parent, reference), reference]
            )
            for candidate in candidates:
                target = child(self.root, candidate)
                if target is not None and not is_group(target):
                    return read_values(target), bool(attribute(target, "ordered", False))
            raise MalformedElementError(
                f"element {path}: its 'categories' attribute points to {reference!r}, where "
                "no array of category labels is"
            )
        if isinstance(reference, list):
            return np.asarray(reference, dtype=object), False
        if type(reference).__module__.startswith("h5py"):  # an HDF5 object reference
            target = node.file[reference]
            return read_values(target), bool(attribute(target, "ordered", False))
        raise MalformedElementError(
            f"element {path}: its 'categories' attribute is {reference!r}; expected the path "
            "of the labels' array"
        )

    def nullable(self, node: Any, path: str, encoding: Encoding) -> Any:
        """A nullable integer, boolean or string array (values plus a mask)."""
        values = read_values(_member(node, "values", path, encoding))
        mask = np.asarray(read_values(_member(node, "mask", path, encoding)))
        if mask.dtype != np.bool_ or mask.shape != values.shape:
            raise MalformedElementError(
                f"element {path}: a {encoding.type} needs a boolean mask of the values' shape "
                f"{values.shape}, found {mask.dtype} {mask.shape}"
            )
        if encoding.type == "nullable-integer":
            if values.dtype.kind not in "iu":
                raise MalformedElementError(
                    f"element {path}: nullable-integer values must be integers, found "
                    f"{values.dtype}"
                )
            return pd.arrays.IntegerArray(values, mask=mask)
        if encoding.type == "nullable-boolean":
            if values.dtype != np.bool_:
                raise MalformedElementError(
                    f"element {path}: nullable-boolean values must be booleans, found "
                    f"{values.dtype}"
                )
            return pd.arrays.BooleanArray(values, mask=mask)
        na_value = attribute(node, "na-value", "NA")
        if na_value not in ("NA", "NaN"):
            raise MalformedElementError(
                f"element {path}: na-value must be 'NA' or 'NaN', found {na_value!r}"
            )
        # "NA" propagates missingness through comparisons, "NaN" compares False
        dtype = pd.StringDtype(na_value=np.nan if na_value == "NaN" else pd.NA)
        with_missing = np.asarray(values, dtype=object).copy()
        with_missing[mask] = None
        return pd.array(with_missing, dtype=dtype)


def _text_records(records: Any) -> Any:
    """A record array with its text fields as ``str``, as anndata gives them.

    HDF5 stores a text field as variable-length strings, which h5py reads as
    ``bytes`` in an object field; Zarr v2 and older files as fixed-width
    ``|S`` bytes. Both are decoded (UTF-8): an object field keeps its dtype
    with ``str`` items, a ``|S`` field becomes ``<U`` of its width.
    """
    fields = records.dtype.names
    if fields is None:
        return records
    text = [name for name in fields if records.dtype[name].kind in "OS"]
    if not text:
        return records
    decoded = {
        name: np.char.decode(records[name], "utf-8")
        if records.dtype[name].kind == "S"
        else text_values(records[name])
        for name in text
    }
    dtype = np.dtype(
        [(name, decoded[name].dtype if name in decoded else records.dtype[name]) for name in fields]
    )
    out = np.empty(records.shape, dtype=dtype)
    for name in fields:
        out[name] = decoded.get(name, records[name])
    return out


def read_element(root: Any, path: str) -> Any:
    """The value of the element at ``path`` of a container's ``root`` group ("" for the root)."""
    node = root if not path else child(root, path)
    if node is None:
        raise KeyError(f"no element at {path!r}")
    return ElementReader(root).read(node, path)
