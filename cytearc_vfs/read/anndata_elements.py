"""The few AnnData Zarr elements a composite source needs, parsed from their documents.

A composite reads an AnnData store's counts without converting it: the root
(``encoding-type: anndata``), one matrix element (``X``, ``layers/{name}`` or
the raw counts ``raw/X``, encoded ``csr_matrix``, ``csc_matrix`` or a dense
``array``) and the indexes of ``obs`` and of the dataframe naming the
element's features (``var``; ``raw/var`` for ``raw/X``: the dataframe's
``_index`` attribute names the index column, a ``string-array`` or a
``nullable-string-array``). Zarr v2 and v3.

This is the one module that knows AnnData's element encodings. It reads
documents through a :data:`Documents` callable (key -> parsed JSON or
``None``), so the binding decides where they come from (the store, or a
composite's record of them) and this module does no I/O of its own but the
index values. The full element layer (``cytearc_vfs_adapters.anndata``) reads
every element; these functions overlap with its root, sparse, dense array and
dataframe-index readers and can be swapped for them (see
``docs/composite.md``, "AnnData sources").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from zarr.abc.store import Store
from zarr.api.asynchronous import open_array

from ..errors import RecordShapeError, UnsupportedSourceError
from ..format.option_names import Placeholder, callers_form, shell_word, source_option_given
from ..format.paths import join
from ..format.store_keys import METADATA_DOCUMENTS

__all__ = [
    "ANNDATA_ROOT_VERSIONS",
    "DAMAGED_ANNDATA_REMEDY",
    "Documents",
    "IndexElement",
    "MatrixElement",
    "MissingElementError",
    "RAW_COUNTS",
    "anndata_format",
    "damaged_metadata",
    "document_keys",
    "features_frame",
    "holds_node",
    "layer_element",
    "layer_names",
    "matrix_element",
    "node_attributes",
    "obs_var_index",
    "open_element_array",
    "pre_07_message",
    "read_index",
]

#: key -> parsed JSON document, or ``None`` when the store has no such key.
Documents = Callable[[str], Awaitable[Any]]
Encoding = Literal["csr_matrix", "csc_matrix", "array"]

#: What a user does about an AnnData whose stored bytes are damaged.
DAMAGED_ANNDATA_REMEDY = (
    "restore it from a copy or download it again, or write it again with anndata"
)


def damaged_metadata[Damaged: RecordShapeError](
    error: type[Damaged], where: str, what: str, exc: BaseException, *, remedy: str
) -> Damaged:
    """The refusal of an AnnData whose metadata ``what`` (a document, an array's, a
    node's) a JSON parser or zarr cannot read (cut short, garbled): it is damaged.

    One builder for the element layer (``cytearc_vfs_adapters.anndata``, which
    raises its :class:`RecordShapeError` subclass) and for a composite's AnnData
    sources. The parser's words alone name nothing ("Unterminated string starting
    at: line 2 column 3"): the message names ``where`` and ``what``, keeps the
    parser's first line and ends with ``remedy``.

    >>> str(damaged_metadata(RecordShapeError, "a.zarr", "the metadata document 'X/zarr.json'",
    ...                      ValueError("Expecting value: line 1"), remedy="restore it"))
    "a.zarr: the metadata document 'X/zarr.json' cannot be read (ValueError: Expecting value: line 1): restore it"
    """
    said = str(exc).splitlines()[0] if str(exc) else repr(exc)
    return error(f"{where}: {what} cannot be read ({type(exc).__name__}: {said}): {remedy}")


#: The name that selects an AnnData's raw counts (``adata.raw.X``, whose features
#: are ``raw/var``) wherever a layer can be named. No layer is called so: a layer
#: name holds no ``/``.
RAW_COUNTS = "raw/X"


def layer_element(layer: str | None) -> str:
    """The element a layer name reads: ``X`` for none, ``raw/X`` for
    :data:`RAW_COUNTS`, else ``layers/{layer}``; a name that cannot be one layer
    is refused.

    >>> layer_element(None), layer_element("counts"), layer_element("raw/X"), layer_element("raw")
    ('X', 'layers/counts', 'raw/X', 'layers/raw')
    """
    if layer is None:
        return "X"
    if layer == RAW_COUNTS:
        return RAW_COUNTS
    if not isinstance(layer, str) or layer in ("", ".", "..") or "/" in layer:
        raise ValueError(
            f"{layer!r} is not the name of one layer (e.g. 'counts'), nor {RAW_COUNTS!r} "
            "(the raw counts, adata.raw.X)"
        )
    return f"layers/{layer}"


def features_frame(element: str) -> str:
    """The dataframe naming the features of the matrix ``element``: ``raw/var``
    for the raw counts (which may list more features than ``var``), else ``var``.

    >>> features_frame("X"), features_frame("layers/counts"), features_frame("raw/X")
    ('var', 'var', 'raw/var')
    """
    return "raw/var" if element == RAW_COUNTS else "var"


async def holds_node(documents: Documents, path: str) -> bool:
    """Whether the store holds a node (an array or a group) at ``path`` (``X``,
    ``raw/X``), in either format."""
    for name in ("zarr.json", ".zarray", ".zgroup"):
        if isinstance(await documents(join(path, name)), dict):
            return True
    return False


async def layer_names(backend: Store) -> list[str]:
    """The names under the store's ``layers`` group (for a message naming them)."""
    names = backend.list_dir("layers")
    return sorted([name async for name in names if name not in METADATA_DOCUMENTS])


def document_keys(path: str, zarr_format: int, *, array: bool = False) -> list[str]:
    """The metadata document keys of the node at ``path`` in ``zarr_format``.

    >>> document_keys("obs", 2), document_keys("X", 3)
    (['obs/.zgroup', 'obs/.zattrs'], ['X/zarr.json'])
    """
    if zarr_format == 3:
        return [join(path, "zarr.json")]
    return [join(path, ".zarray" if array else ".zgroup"), join(path, ".zattrs")]


#: The versions of the ``anndata`` root encoding a composite reads (the spec's).
ANNDATA_ROOT_VERSIONS = ("0.1.0",)


async def anndata_format(documents: Documents, *, where: str = "the store") -> int | None:
    """The Zarr format of an AnnData store's root, or ``None`` when the root is not one.

    An AnnData root is a group whose attributes say ``encoding-type: anndata``
    (anndata 0.7 wrote none: a group without attributes holding an ``obs`` group
    counts too, in v2 as anndata 0.7 wrote it and in v3 as the element layer reads it).

    Raises
    ------
    UnsupportedSourceError
        The pre-0.7 layout (Zarr v2, no root attributes, ``obs`` and ``var``
        stored as record arrays), which a composite does not read where it is;
        the message names the import that does. A root that declares another
        AnnData ``encoding-type`` (a ``dict``, an ``array``), or ``anndata`` in a
        version other than :data:`ANNDATA_ROOT_VERSIONS`: the message names what
        the root is, what a source must be, and the remedy.
    """
    root = await documents("zarr.json")
    if isinstance(root, dict):
        attrs = root.get("attributes", {})
        if isinstance(attrs, dict) and "encoding-type" in attrs:
            _check_declared_root(str(root.get("node_type")), attrs, where)
            return 3
        if attrs:
            return None
        # the legacy layout in Zarr v3 (no root attributes), as the element layer reads it
        legacy = await documents("obs/zarr.json")
        return 3 if isinstance(legacy, dict) and legacy.get("node_type") == "group" else None
    group = await documents(".zgroup")
    attrs = await documents(".zattrs")
    if isinstance(attrs, dict) and "encoding-type" in attrs:
        # a root array (.zarray) declares its encoding too: named, not taken for a store
        node = "group" if isinstance(group, dict) else "array"
        if node == "array" and not isinstance(await documents(".zarray"), dict):
            return None  # attributes without a node: no Zarr v2 root at all
        _check_declared_root(node, attrs, where)
        return 2
    if not isinstance(group, dict):
        return None
    legacy = await documents("obs/.zgroup")  # anndata 0.7: no root attributes
    if isinstance(legacy, dict) and not attrs:
        return 2
    if not attrs and all(
        [isinstance(await documents(f"{frame}/.zarray"), dict) for frame in ("obs", "var")]
    ):
        raise UnsupportedSourceError(pre_07_message(where))
    return None


def _check_declared_root(node: str, attrs: dict[str, Any], where: str) -> None:
    """Refuse a root that declares an AnnData encoding other than a readable
    ``anndata`` group, naming what it is: such a store is no CyteArc store either,
    and reading it as one would only say that its assay is missing."""
    declared, version = attrs.get("encoding-type"), attrs.get("encoding-version")
    if node == "group" and declared == "anndata" and version in ANNDATA_ROOT_VERSIONS:
        return
    found = f"its root is a Zarr {node} with encoding-type {declared!r} and " + (
        f"encoding-version {version!r}" if version is not None else "no encoding-version"
    )
    if node == "group" and declared == "anndata":
        remedy = (
            "it was written by an anndata whose layout this package does not read: read it with "
            "anndata and write it again with one that writes anndata "
            f"{', '.join(ANNDATA_ROOT_VERSIONS)} (anndata.read_zarr(OLD).write_zarr(NEW)), and "
            "give the new store"
        )
    else:
        remedy = (
            "give the location of the AnnData's root (the group anndata.write_zarr wrote; "
            "cytearc-vfs anndata ls LOCATION tells whether a location is one), or a CyteArc store"
        )
    raise UnsupportedSourceError(
        f"{where} is not an AnnData store that can be a source: {found}. Only an AnnData "
        "container is read as an AnnData source: a Zarr group with encoding-type 'anndata' "
        f"and encoding-version {' or '.join(repr(v) for v in ANNDATA_ROOT_VERSIONS)} (anndata "
        f">= 0.8), or the attribute-less root holding obs and var of anndata 0.7; {remedy}"
    )


def pre_07_message(where: str) -> str:
    """The refusal of an AnnData store written by anndata before 0.7 (obs and var as
    record arrays), with the import that reads it."""
    return (
        f"{where} is an AnnData Zarr store in the layout of anndata before 0.7 (obs and var "
        "stored as record arrays), which a composite does not read where it is; import it "
        f"with {callers_form(f'cv.write_counts(DEST, {where!r})', f'cytearc-vfs write {shell_word(where)} DEST')}, which reads "
        "that layout, and use the imported store as the source"
    )


async def node_attributes(
    documents: Documents, path: str, zarr_format: int
) -> tuple[str, dict[str, Any]] | None:
    """``(node type, attributes)`` of the node at ``path``, or ``None`` when absent."""
    if zarr_format == 3:
        document = await documents(join(path, "zarr.json"))
        if not isinstance(document, dict):
            return None
        attrs = document.get("attributes", {})
        return str(document.get("node_type")), attrs if isinstance(attrs, dict) else {}
    array = await documents(join(path, ".zarray"))
    group = None if isinstance(array, dict) else await documents(join(path, ".zgroup"))
    if not isinstance(array, dict) and not isinstance(group, dict):
        return None
    attrs = await documents(join(path, ".zattrs"))
    return ("array" if isinstance(array, dict) else "group"), attrs if isinstance(
        attrs, dict
    ) else {}


class MissingElementError(UnsupportedSourceError, KeyError):
    """The count matrix element asked for (``X``, a layer or ``raw/X``) is not in the
    store or container; the message names it and what is held instead.

    A ``KeyError`` too (an element looked up by name that is not there), as the
    element layer's refusals were before they named the container; its text is the
    message as given, not ``KeyError``'s quoted form.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path
        """The element asked for."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, slots=True)
class MatrixElement:
    """One count matrix element of an AnnData store."""

    path: str
    """``X``, ``layers/{name}`` or ``raw/X``."""
    encoding: Encoding
    """``csr_matrix`` (cell-major), ``csc_matrix`` (feature-major) or a dense ``array``."""
    shape: tuple[int, int]
    """(cells, features)."""
    zarr_format: int
    """2 or 3."""

    @property
    def arrays(self) -> list[str]:
        """The Zarr arrays holding the matrix."""
        if self.encoding == "array":
            return [self.path]
        return [join(self.path, name) for name in ("indptr", "indices", "data")]


async def matrix_element(
    documents: Documents, path: str, zarr_format: int, *, where: str
) -> MatrixElement:
    """Parse the matrix element at ``path`` (``X``, ``layers/{name}`` or ``raw/X``).

    Raises :class:`UnsupportedSourceError` naming the element and the remedy
    when it is absent or encoded otherwise.
    """
    node = await node_attributes(documents, path, zarr_format)
    if node is None:
        raise MissingElementError(
            f"AnnData store at {where} has no {path!r}; give an existing layer with "
            f"{source_option_given('source_layers', Placeholder('NAME'), Placeholder('LAYER'))}"
            f", the raw counts with {RAW_COUNTS!r}, or X (cytearc-vfs anndata ls lists the "
            "elements)",
            path,
        )
    kind, attrs = node
    encoding = attrs.get("encoding-type")
    if encoding is None and "h5sparse_format" in attrs:  # anndata 0.7's sparse groups
        encoding = f"{attrs['h5sparse_format']}_matrix"
        attrs = {**attrs, "shape": attrs.get("h5sparse_shape")}
    if kind == "array" and encoding in (None, "array"):
        document = await documents(join(path, "zarr.json" if zarr_format == 3 else ".zarray"))
        shape = tuple(int(n) for n in document["shape"])
        if len(shape) != 2:
            raise UnsupportedSourceError(
                f"{path!r} of the AnnData store at {where} is {len(shape)}-D, not a matrix"
            )
        return MatrixElement(path, "array", (shape[0], shape[1]), zarr_format)
    if kind == "group" and encoding in ("csr_matrix", "csc_matrix"):
        shape_attr = attrs.get("shape")
        if (
            not isinstance(shape_attr, list)
            or len(shape_attr) != 2
            or not all(type(n) is int and n >= 0 for n in shape_attr)
        ):
            # a float (3.5) or text ("3") was taken as int() made it: a damaged
            # record, refused as the element layer and `anndata ls` refuse it
            raise RecordShapeError(
                f"{path!r} of the AnnData store at {where} is a {encoding} whose 'shape' "
                f"attribute is {shape_attr!r}, not two non-negative integers: the store is "
                f"damaged; {DAMAGED_ANNDATA_REMEDY}"
            )
        return MatrixElement(path, encoding, (shape_attr[0], shape_attr[1]), zarr_format)
    layer = source_option_given("source_layers", Placeholder("NAME"), Placeholder("LAYER"))
    convert = callers_form("cv.write_counts", "cytearc-vfs write")
    raise UnsupportedSourceError(
        f"{path!r} of the AnnData store at {where} is encoded {encoding!r} ({kind}); a composite reads "
        f"csr_matrix, csc_matrix or dense array counts. Pick another layer with {layer}, or "
        f"convert the source with {convert}"
    )


@dataclass(frozen=True, slots=True)
class IndexElement:
    """The index column of ``obs``, ``var`` or ``raw/var``."""

    path: str
    """The column's node (``obs/_index``)."""
    values_path: str
    """The array holding the strings (the node itself, or its ``values``)."""
    nullable: bool
    """A ``nullable-string-array`` (a ``mask`` beside ``values``)."""


async def obs_var_index(
    documents: Documents, frame: str, zarr_format: int, *, where: str
) -> IndexElement:
    """The index column of the dataframe ``frame`` (``obs``, ``var`` or ``raw/var``)."""
    node = await node_attributes(documents, frame, zarr_format)
    if node is None or node[0] != "group":
        raise UnsupportedSourceError(f"AnnData store at {where} has no {frame!r} dataframe")
    name = node[1].get("_index", "_index")
    path = join(frame, str(name))
    column = await node_attributes(documents, path, zarr_format)
    if column is None:
        raise UnsupportedSourceError(
            f"AnnData store at {where}: {frame} index column {path!r} is missing"
        )
    kind, attrs = column
    if kind == "group" and attrs.get("encoding-type") == "nullable-string-array":
        return IndexElement(path, join(path, "values"), True)
    if kind == "array":
        return IndexElement(path, path, False)
    # anndata writes a CategoricalIndex as a categorical column and reads it
    # back; a composite looks ids up in one array of strings per row
    names = f"{frame.replace('/', '.')}_names"  # adata.raw.var_names for raw/var
    raise UnsupportedSourceError(
        f"AnnData store at {where}: {frame} index {path!r} is encoded "
        f"{attrs.get('encoding-type')!r}; a composite source's index must be a string array. "
        f"Write the AnnData again with adata.{names} = adata.{names}.astype(str), or import "
        f"it with {callers_form('cv.write_counts', 'cytearc-vfs write')}, which reads any index"
    )


async def open_element_array(store: Store, path: str, zarr_format: int) -> Any:
    """The Zarr array at ``path`` (async), opened in ``zarr_format``."""
    return await open_array(
        store=store, path=path, mode="r", zarr_format=3 if zarr_format == 3 else 2
    )


async def read_index(
    store: Store, index: IndexElement, zarr_format: int, *, where: str
) -> npt.NDArray[Any]:
    """The index values as ``str``; a missing value is refused (an index names every row)."""
    values = np.asarray(
        await (await open_element_array(store, index.values_path, zarr_format)).getitem(...)
    )
    if index.nullable:
        mask = np.asarray(
            await (await open_element_array(store, join(index.path, "mask"), zarr_format)).getitem(
                ...
            )
        )
        if bool(mask.any()):
            raise UnsupportedSourceError(
                f"AnnData store at {where}: index {index.path!r} has {int(mask.sum())} missing value(s); "
                "give every cell and feature a name first"
            )
    # numpy's variable-width StringDType (zarr v3 strings) casts to str via objects
    return np.asarray(values.astype(object).tolist(), dtype=str)
