"""What an element is: its declared encoding, or the one its structure implies.

anndata >= 0.8 stamps every element with ``encoding-type`` and
``encoding-version``; files of anndata 0.7.x carry them only on some
elements (sparse matrices, dataframes) or none. A declared encoding always
wins; a node without one is classified structurally, as the AnnData element
specification describes: a group with ``codes`` and ``categories`` is a
categorical, one with ``values`` and ``mask`` a nullable array, one with
``_index`` in its attributes a dataframe, any other group a mapping; an array
with a ``categories`` attribute is a legacy categorical column, a 0-d array a
scalar, a text array a string array, any other array a dense array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import UnsupportedElementError
from .nodes import attribute, child, children, is_group

__all__ = [
    "KNOWN_VERSIONS",
    "LEGACY_CATEGORIES",
    "MATRIX_TYPES",
    "Encoding",
    "classify",
    "column_order",
    "shape_of",
]

#: The reserved subgroup of a legacy (0.1.0) dataframe holding its categorical
#: columns' labels; not a column.
LEGACY_CATEGORIES = "__categories"

#: The versions of each encoding this layer reads (the spec's table, plus
#: ``rec-array``, which anndata < 0.7 wrote for obs and var).
KNOWN_VERSIONS: dict[str, frozenset[str]] = {
    "anndata": frozenset({"0.1.0"}),
    "raw": frozenset({"0.1.0"}),
    "dict": frozenset({"0.1.0"}),
    "dataframe": frozenset({"0.2.0", "0.1.0"}),
    "array": frozenset({"0.2.0"}),
    "csr_matrix": frozenset({"0.1.0"}),
    "csc_matrix": frozenset({"0.1.0"}),
    "categorical": frozenset({"0.2.0"}),  # 0.1.0: legacy columns, never declared
    "string-array": frozenset({"0.2.0"}),
    "nullable-integer": frozenset({"0.1.0"}),
    "nullable-boolean": frozenset({"0.1.0"}),
    "nullable-string-array": frozenset({"0.1.0"}),
    "numeric-scalar": frozenset({"0.2.0"}),
    "string": frozenset({"0.2.0"}),
    "null": frozenset({"0.1.0"}),
    "awkward-array": frozenset({"0.1.0"}),
    "rec-array": frozenset({"0.2.0"}),
}

#: Encodings of a two-dimensional matrix (X, layers, obsp, ...).
MATRIX_TYPES = frozenset({"array", "csr_matrix", "csc_matrix"})

_GROUP_TYPES = frozenset(
    {
        "anndata",
        "raw",
        "dict",
        "dataframe",
        "csr_matrix",
        "csc_matrix",
        "categorical",
        "nullable-integer",
        "nullable-boolean",
        "nullable-string-array",
        "awkward-array",
    }
)


@dataclass(frozen=True, slots=True)
class Encoding:
    """How an element is encoded."""

    type: str
    """The encoding type (``csr_matrix``, ``dataframe``, ...)."""
    version: str
    """The encoding version; for an inferred encoding, the legacy version it stands for
    (``0.1.0`` for mappings, dataframes and a dataframe 0.1.0's categorical columns)
    or the current one."""
    declared: bool
    """Whether the node carries ``encoding-type`` (``False``: inferred from its structure)."""
    legacy: bool
    """Whether the element uses a layout of anndata 0.7.x or older (no encoding
    attributes, dataframe 0.1.0, a categorical column with a ``categories`` attribute)."""

    @property
    def label(self) -> str:
        """``type version``, with ``(legacy)`` or ``(inferred)`` where it applies."""
        text = f"{self.type} {self.version}"
        if not self.declared:
            return f"{text} (legacy, inferred)"
        return f"{text} (legacy)" if self.legacy else text


def _nullable_kind(values: Any) -> str:
    kind = np.dtype(values.dtype).kind
    if kind == "b":
        return "nullable-boolean"
    if kind in "iu":
        return "nullable-integer"
    return "nullable-string-array"


def classify(node: Any, path: str) -> Encoding:
    """The encoding of ``node`` at ``path`` (declared, else inferred from its structure).

    Raises :class:`UnsupportedElementError` for an unknown encoding type or
    version, and for a declared type whose node kind (group or array) is wrong.
    """
    group = is_group(node)
    declared = attribute(node, "encoding-type")
    if declared is not None:
        version = str(attribute(node, "encoding-version", ""))
        known = KNOWN_VERSIONS.get(str(declared))
        if known is None:
            raise UnsupportedElementError(
                f"element {path or '/'}: unknown encoding-type {declared!r}; this reader knows "
                f"{', '.join(sorted(KNOWN_VERSIONS))}"
            )
        if version not in known:
            raise UnsupportedElementError(
                f"element {path or '/'}: {declared} encoding-version {version!r} is not one this "
                f"reader knows ({', '.join(sorted(known))}); upgrade cytearc-vfs or rewrite the "
                "element with a current anndata"
            )
        if group != (declared in _GROUP_TYPES):
            raise UnsupportedElementError(
                f"element {path or '/'}: encoding-type {declared!r} is stored as "
                f"{'a group' if group else 'an array'}, which that encoding never is"
            )
        legacy = declared == "dataframe" and version == "0.1.0"
        return Encoding(str(declared), version, True, legacy)
    if group:
        # anndata 0.7 stamped neither the root nor raw
        if path == "" and child(node, "obs") is not None and child(node, "var") is not None:
            return Encoding("anndata", "0.1.0", False, True)
        if path == "raw" and child(node, "X") is not None:
            return Encoding("raw", "0.1.0", False, True)
        if child(node, "codes") is not None and child(node, "categories") is not None:
            return Encoding("categorical", "0.2.0", False, True)
        values = child(node, "values")
        if values is not None and child(node, "mask") is not None and not is_group(values):
            return Encoding(_nullable_kind(values), "0.1.0", False, True)
        if attribute(node, "_index") is not None:
            return Encoding("dataframe", "0.1.0", False, True)
        sparse = attribute(node, "h5sparse_format")
        if sparse in ("csr", "csc"):  # anndata < 0.7 (h5sparse)
            return Encoding(f"{sparse}_matrix", "0.1.0", False, True)
        return Encoding("dict", "0.1.0", False, True)
    if attribute(node, "categories") is not None:
        # a dataframe 0.1.0 column: codes here, labels where the attribute says
        return Encoding("categorical", "0.1.0", False, True)
    dtype = np.dtype(node.dtype)
    shape = node.shape
    if shape is None:  # HDF5 null dataspace
        return Encoding("null", "0.1.0", False, True)
    text = dtype.kind in "OSTU" or _h5_text(dtype)
    if len(shape) == 0:
        return Encoding("string" if text else "numeric-scalar", "0.2.0", False, True)
    if dtype.names is not None:
        return Encoding("rec-array", "0.2.0", False, True)
    return Encoding("string-array" if text else "array", "0.2.0", False, True)


def _h5_text(dtype: np.dtype) -> bool:
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py comes with anndata
        return False
    return h5py.check_string_dtype(dtype) is not None


def shape_of(node: Any, encoding: Encoding) -> tuple[int, ...] | None:
    """The shape an element presents (``None`` for mappings and awkward arrays of unknown length).

    Read from metadata only (``shape`` attributes, array shapes), never from values.
    """
    kind = encoding.type
    if kind in ("csr_matrix", "csc_matrix"):
        shape = attribute(node, "shape", attribute(node, "h5sparse_shape"))
        return tuple(int(n) for n in shape) if isinstance(shape, list) else None
    if kind == "categorical":
        codes = node if not is_group(node) else child(node, "codes")
        return tuple(codes.shape) if codes is not None and not is_group(codes) else None
    if kind.startswith("nullable-"):
        values = child(node, "values")
        return tuple(values.shape) if values is not None else None
    if kind == "dataframe":
        index = attribute(node, "_index")
        member = child(node, str(index)) if index is not None else None
        if member is None:
            return None
        rows = shape_of(member, classify(member, ""))
        columns = column_order(node, str(index))
        return (rows[0] if rows else 0, len(columns) if isinstance(columns, list) else 0)
    if kind == "awkward-array":
        length = attribute(node, "length")
        return (int(length),) if length is not None else None
    if kind == "null":
        return ()
    if is_group(node):
        return None
    return tuple(int(n) for n in node.shape) if node.shape is not None else ()


def column_order(node: Any, index: str) -> Any:
    """A dataframe group's columns in order, as stated: its ``column-order`` attribute
    (a plain string where h5py gives one column so; checked by the reader).

    A group without the attribute (anndata 0.7's attribute-less dataframes,
    classified by their ``_index``) has as columns its members other than the
    index and the legacy ``__categories`` labels, by name: reading none of them
    would drop them silently.
    """
    if "column-order" in node.attrs:
        return attribute(node, "column-order")
    return [name for name in children(node) if name not in (index, LEGACY_CATEGORIES)]
