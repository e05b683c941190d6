"""``info`` and ``hierarchy``: what an array is, and what a group holds.

The R package prints an array's data type, shape, chunking, chunk key
separator and codecs (``print``), and a group's tree (``hierarchy_nodes``).
Here both return values (``to_dict`` for JSON) whose ``str`` is that text.
:func:`hierarchy` reads the nodes' documents directly rather than opening
them with zarr, so an array left marked by an unfinished operation shows
as such instead of stopping the listing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store

from ..errors import RecordShapeError
from ..format.store_io import get_json, list_dir
from .documents import JOURNAL_NAME, MARKER_FIELD, array_location

__all__ = ["ArrayInfo", "HierarchyNode", "codec_text", "hierarchy", "info", "unfinished_below"]


def _dims(shape: Sequence[int] | None) -> str:
    if shape is None:
        return "-"
    return " x ".join(str(n) for n in shape) if len(shape) else "scalar"


def codec_text(codec: object) -> str:
    """A codec (chain member) in one short phrase.

    >>> codec_text({"name": "sharding_indexed", "configuration": {"codecs": [{"name": "bytes"},
    ...     {"name": "zstd"}], "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}})
    'sharding_indexed(bytes, zstd; index: bytes, crc32c)'
    >>> codec_text({"name": "transpose", "configuration": {"order": [1, 0]}})
    'transpose(order=[1, 0])'
    """
    if isinstance(codec, str):
        return codec
    if not isinstance(codec, Mapping):
        return repr(codec)
    name = str(codec.get("name", codec.get("id", "?")))
    configuration = codec.get("configuration") or {}
    if name == "sharding_indexed":
        inner = ", ".join(codec_text(c) for c in configuration.get("codecs", []))
        index = ", ".join(codec_text(c) for c in configuration.get("index_codecs", []))
        return f"{name}({inner}; index: {index})"
    if name == "transpose":
        return f"{name}(order={list(configuration.get('order', []))})"
    return name


@dataclass(frozen=True, slots=True)
class ArrayInfo:
    """A summary of one array, as the R package's ``print`` shows it."""

    path: str
    """Path of the array in its store (``""`` at the root)."""
    zarr_format: int
    """2 or 3."""
    shape: tuple[int, ...]
    """Shape."""
    dtype: str
    """Data type as the metadata names it (``uint16``)."""
    chunks: tuple[int, ...]
    """Chunk shape: what is read and encoded as one piece (the inner chunk when sharded)."""
    shards: tuple[int, ...] | None
    """Shard shape (one store key each), or ``None``."""
    chunk_key_encoding: str
    """``default`` (``c/0/0``) or ``v2`` (``0.0``)."""
    separator: str
    """Separator between the grid indices of a chunk key."""
    codecs: tuple[str, ...]
    """The codec chain, one phrase per codec (:func:`codec_text`)."""
    fill_value: Any
    """Fill value as the metadata stores it (cells holding it read as missing)."""
    dimension_names: tuple[str | None, ...] | None
    """Names of the dimensions, if any."""
    codec_configurations: tuple[Any, ...] = field(default=(), repr=False)
    """The codec chain as stored (JSON)."""

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-able values."""
        return {
            "path": self.path,
            "zarrFormat": self.zarr_format,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "chunks": list(self.chunks),
            "shards": None if self.shards is None else list(self.shards),
            "chunkKeyEncoding": self.chunk_key_encoding,
            "separator": self.separator,
            "codecs": list(self.codecs),
            "codecConfigurations": list(self.codec_configurations),
            "fillValue": self.fill_value,
            "dimensionNames": None if self.dimension_names is None else list(self.dimension_names),
        }

    def _missing(self) -> str:
        """What :func:`~.reading.read` makes of the fill value (as it decides)."""
        if self.dtype == "bool":
            return "booleans are never missing"
        if self.fill_value is None:
            return "none: no cell reads as missing"
        return "cells holding it read as missing"

    def __str__(self) -> str:
        keys = "c" + self.separator + self.separator.join(["0"] * len(self.shape))
        if self.chunk_key_encoding == "v2":
            keys = self.separator.join(["0"] * len(self.shape)) or "0"
        elif not self.shape:
            keys = "c"
        lines = [
            f"Zarr array {self.path or '/'!r} (Zarr v{self.zarr_format})",
            f"  data type  : {self.dtype}",
            f"  shape      : {_dims(self.shape)}",
            f"  chunks     : {_dims(self.chunks)}",
        ]
        if self.shards is not None:
            lines.append(f"  shards     : {_dims(self.shards)} (one store key each)")
        lines += [
            f"  chunk keys : {self.chunk_key_encoding}, separator {self.separator!r} ({keys})",
            f"  codecs     : {' -> '.join(self.codecs) or 'none'}",
            f"  fill value : {json.dumps(self.fill_value)} ({self._missing()})",
        ]
        if self.dimension_names is not None:
            names = ", ".join("-" if n is None else n for n in self.dimension_names)
            lines.append(f"  dimensions : {names}")
        return "\n".join(lines)


def info(array: zarr.Array[Any]) -> ArrayInfo:
    """Summarize ``array`` from its metadata (no store request).

    Examples
    --------
    >>> a = zarr.create_array({}, shape=(4, 3), chunks=(2, 3), dtype="u2", fill_value=0,
    ...                       compressors=None, dimension_names=["cell", "gene"])
    >>> print(info(a))
    Zarr array '/' (Zarr v3)
      data type  : uint16
      shape      : 4 x 3
      chunks     : 2 x 3
      chunk keys : default, separator '/' (c/0/0)
      codecs     : bytes
      fill value : 0 (cells holding it read as missing)
      dimensions : cell, gene
    """
    _, path = array_location(array)
    document = json.loads(json.dumps(array.metadata.to_dict(), default=_jsonable))
    if document.get("zarr_format") == 2:
        filters = document.get("filters") or []
        compressor = document.get("compressor")
        chain = [*filters, *([compressor] if compressor else [])]
        return ArrayInfo(
            path=path,
            zarr_format=2,
            shape=tuple(array.shape),
            dtype=str(array.dtype),
            chunks=tuple(array.chunks),
            shards=None,
            chunk_key_encoding="v2",
            separator=str(document.get("dimension_separator") or "."),
            codecs=tuple(codec_text(c) for c in chain),
            fill_value=document.get("fill_value"),
            dimension_names=None,
            codec_configurations=tuple(chain),
        )
    encoding = document.get("chunk_key_encoding") or {"name": "default"}
    configuration = encoding.get("configuration") or {}
    names = document.get("dimension_names")
    return ArrayInfo(
        path=path,
        zarr_format=3,
        shape=tuple(array.shape),
        dtype=_dtype_name(document.get("data_type")),
        chunks=tuple(array.chunks),
        shards=None if array.shards is None else tuple(array.shards),
        chunk_key_encoding=str(encoding.get("name")),
        separator=str(
            configuration.get("separator", "/" if encoding.get("name") == "default" else ".")
        ),
        codecs=tuple(codec_text(c) for c in document.get("codecs", [])),
        fill_value=document.get("fill_value"),
        dimension_names=None if names is None else tuple(names),
        codec_configurations=tuple(document.get("codecs", [])),
    )


def _dtype_name(data_type: object) -> str:
    """A Zarr v3 ``data_type`` in words: its name, and its configuration if it has one.

    >>> _dtype_name("uint16")
    'uint16'
    >>> _dtype_name({"name": "fixed_length_utf32", "configuration": {"length_bytes": 20}})
    'fixed_length_utf32 (length_bytes 20)'
    """
    if isinstance(data_type, str):
        return data_type
    if isinstance(data_type, dict) and isinstance(data_type.get("name"), str):
        configuration = data_type.get("configuration")
        if isinstance(configuration, dict) and configuration:
            details = ", ".join(f"{key} {value}" for key, value in configuration.items())
            return f"{data_type['name']} ({details})"
        return str(data_type["name"])
    return json.dumps(data_type)


def _jsonable(value: object) -> object:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


@dataclass(frozen=True, slots=True)
class HierarchyNode:
    """One node of a hierarchy listing, with its children (groups first, then by name)."""

    name: str
    """Name in its parent (``/`` for the node listed)."""
    path: str
    """Path in the store."""
    kind: str
    """``group``, ``array``, or ``unfinished array`` (an operation to recover)."""
    shape: tuple[int, ...] | None = None
    """Shape of an array."""
    dtype: str | None = None
    """Data type of an array."""
    chunks: tuple[int, ...] | None = None
    """Chunk shape of an array: the inner chunk when sharded."""
    shards: tuple[int, ...] | None = None
    """Shard shape (the chunk grid, one store key each) of a sharded array, else ``None``."""
    children: tuple[HierarchyNode, ...] = ()
    """Members of a group."""

    def to_dict(self) -> dict[str, Any]:
        """The tree as JSON-able values."""
        out: dict[str, Any] = {"name": self.name, "path": self.path, "kind": self.kind}
        if self.kind != "group":
            out.update(
                shape=None if self.shape is None else list(self.shape),
                dtype=self.dtype,
                chunks=None if self.chunks is None else list(self.chunks),
                shards=None if self.shards is None else list(self.shards),
            )
        else:
            out["children"] = [child.to_dict() for child in self.children]
        return out

    def _label(self) -> str:
        if self.kind == "group":
            return f"{self.name} (group)"
        text = f"{self.name} ({self.kind}) {self.dtype} {_dims(self.shape)}"
        if self.chunks is not None:
            text += f", chunks {_dims(self.chunks)}"
        return text + (f", shards {_dims(self.shards)}" if self.shards is not None else "")

    def lines(self) -> list[str]:
        """The tree drawn with box characters, one line per node."""
        return [self._label(), *self._branches("")]

    def _branches(self, indent: str) -> list[str]:
        out: list[str] = []
        for position, child in enumerate(self.children):
            last = position == len(self.children) - 1
            out.append(indent + ("└── " if last else "├── ") + child._label())
            out += child._branches(indent + ("    " if last else "│   "))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _node(store: Store, path: str, name: str, depth: int) -> HierarchyNode | None:
    prefix = f"{path}/" if path else ""
    document = get_json(store, prefix + "zarr.json")
    if document is None:
        legacy = get_json(store, prefix + ".zarray")
        if isinstance(legacy, dict):
            return HierarchyNode(
                name,
                path,
                "array",
                tuple(legacy.get("shape", ())),
                str(legacy.get("dtype")),
                tuple(legacy.get("chunks", ())),
            )
        if get_json(store, prefix + ".zgroup") is None:
            return None
        document = {"node_type": "group"}
    if not isinstance(document, dict):
        return None
    if document.get("node_type") == "array":
        grid = (document.get("chunk_grid") or {}).get("configuration") or {}
        dtype = document.get("data_type")
        outer = tuple(grid["chunk_shape"]) if "chunk_shape" in grid else None
        inner = _inner_chunks(document.get("codecs"))
        return HierarchyNode(
            name,
            path,
            "unfinished array" if MARKER_FIELD in document else "array",
            tuple(document.get("shape", ())),
            _dtype_name(dtype),
            outer if inner is None else inner,
            None if inner is None else outer,
        )
    children: list[HierarchyNode] = []
    if depth < 64 and store.supports_listing:
        for child_name in list_dir(store, path):
            if child_name in ("zarr.json", ".zgroup", ".zattrs", ".zmetadata"):
                continue
            child = _node(store, prefix + child_name, child_name, depth + 1)
            if child is not None:
                children.append(child)
    children.sort(key=lambda node: (node.kind != "group", node.name))
    return HierarchyNode(name, path, "group", children=tuple(children))


def unfinished_below(store: Store, path: str) -> list[str]:
    """Paths of the arrays at or below ``path`` with a resize or promote to finish.

    An array counts when its ``zarr.json`` carries the marker or its journal
    is there (a crash right after writing the journal leaves no marker yet).
    Walks the groups as :func:`hierarchy` does (a listing per group, never the
    chunk keys), then one ``get`` per array for its journal.
    """
    found: list[str] = []
    root = _node(store, path, "/", 0)
    pending = [] if root is None else [root]
    while pending:
        node = pending.pop()
        pending.extend(node.children)
        if node.kind == "group":
            continue
        prefix = f"{node.path}/" if node.path else ""
        try:
            journal = get_json(store, prefix + JOURNAL_NAME)
        except RecordShapeError:  # torn: an operation had begun
            journal = True
        if node.kind == "unfinished array" or journal is not None:
            found.append(node.path)
    return sorted(found)


def _inner_chunks(codecs: object) -> tuple[int, ...] | None:
    """The inner chunk shape of a sharded array's codec chain, or ``None`` (not sharded)."""
    for codec in codecs if isinstance(codecs, list) else []:
        if isinstance(codec, Mapping) and codec.get("name") == "sharding_indexed":
            configuration = codec.get("configuration") or {}
            if "chunk_shape" in configuration:
                return tuple(configuration["chunk_shape"])
    return None


def hierarchy(node: zarr.Group | zarr.Array[Any]) -> HierarchyNode:
    """The tree of groups and arrays below ``node``, as the R package's ``hierarchy_nodes``.

    Examples
    --------
    >>> root = zarr.open_group({}, mode="w")
    >>> _ = root.create_array("RNA/counts", shape=(4, 3), chunks=(2, 3), dtype="u2")
    >>> _ = root.create_group("obs")
    >>> print(hierarchy(root))
    / (group)
    ├── RNA (group)
    │   └── counts (array) uint16 4 x 3, chunks 2 x 3
    └── obs (group)
    """
    if not isinstance(node, (zarr.Group, zarr.Array)):
        raise TypeError(
            f"hierarchy takes a zarr.Group or zarr.Array, not {type(node).__name__}; open one "
            "with zarr.open_group(store, mode='r')"
        )
    store_path = node.store_path
    # the tree starts where it was asked for: a group below the root is named by its
    # path (it was shown as "/", the store's root, whatever its path)
    found = _node(store_path.store, store_path.path, store_path.path or "/", 0)
    if found is None:
        raise FileNotFoundError(f"no Zarr node at {store_path.path or '/'!r} in {store_path.store}")
    return found
