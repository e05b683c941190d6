"""An AnnData Zarr container's objects, fetched a level of its tree at a time.

The element layer reads a container through zarr's synchronous API, one
request after another; on object storage each is a round trip. Read breadth
first instead, every request of a level at once (at most
:data:`~.prefetch.MAX_IN_FLIGHT` in flight), a container costs as many
round trips as its tree is deep (about eight for an AnnData), not as many as
it has objects.

A level's groups give the next level's nodes. A group whose encoding names
its members (a sparse matrix, a categorical, a nullable array) is not
listed: they are fetched by name. Any other group is listed
(:func:`walk_tree` with ``listed=True``: what ``cytearc-vfs anndata ls``
does), or, where a listing is refused (credentials that may read but not
list: S3 without ``s3:ListBucket``), read by the names its attributes give:
a dataframe's ``_index`` and ``column-order`` name every member (a legacy
0.1.0 dataframe's labels are in ``__categories``, named as its columns); a
group named by nothing (a mapping, or a dataframe without ``column-order``)
is not descended: the element layer reads it as before, object by object. With ``chunks=True``
each array's chunk keys, as its grid names them
(:func:`~..format.chunk_keys.grid_keys`), are fetched with the next level:
what a table's reader reads besides the documents.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from ..errors import RecordShapeError
from ..format.chunk_keys import grid_keys
from ..format.store_keys import METADATA_DOCUMENTS, key_problem

__all__ = [
    "MAX_DEPTH",
    "ROOT_DOCUMENTS",
    "V2_NODE",
    "node_documents",
    "fetched",
    "walk_tree",
]

#: The documents a Zarr v2 node may have: zarr asks for all three to open one.
V2_NODE = (".zarray", ".zgroup", ".zattrs")
#: The documents a container's root may have, in either format (and v2's consolidated
#: metadata, which the element layer reads no more but asks for).
ROOT_DOCUMENTS = ("zarr.json", *V2_NODE, ".zmetadata")
#: Levels walked at most: a deeper tree (not an AnnData's) is read below that level as
#: before, object by object.
MAX_DEPTH = 12
#: Groups whose members the spec names: fetched by name, without a listing (the
#: element layer opens them by name too).
_NAMED_MEMBERS = {
    "csr_matrix": ("indptr", "indices", "data"),
    "csc_matrix": ("indptr", "indices", "data"),
    "categorical": ("codes", "categories"),
    "nullable-integer": ("values", "mask"),
    "nullable-boolean": ("values", "mask"),
    "nullable-string-array": ("values", "mask"),
}
#: The reserved subgroup of a legacy (0.1.0) dataframe holding its categorical
#: columns' labels, each array named as its column.
_LEGACY_CATEGORIES = "__categories"


def node_documents(documents: Mapping[str, bytes | None]) -> tuple[str, ...] | None:
    """The documents of a node of the container whose :data:`ROOT_DOCUMENTS` are
    ``documents`` (``("zarr.json",)`` for Zarr v3, :data:`V2_NODE` for v2), or ``None``
    when there is no group at its root.

    >>> node_documents({"zarr.json": None, ".zgroup": b"{}"})
    ('.zarray', '.zgroup', '.zattrs')
    """
    if documents.get("zarr.json") is not None:
        return ("zarr.json",)
    if documents.get(".zgroup") is not None:
        return V2_NODE
    return None


async def fetched(
    store: Store, keys: Iterable[str], limit: asyncio.Semaphore
) -> dict[str, bytes | None]:
    """``keys`` of ``store`` (``None`` where absent), fetched at once (at most ``limit``
    in flight)."""
    wanted = list(dict.fromkeys(keys))
    found = await asyncio.gather(*(_fetched(store, key, limit) for key in wanted))
    return dict(zip(wanted, found, strict=True))


async def _fetched(store: Store, key: str, limit: asyncio.Semaphore) -> bytes | None:
    async with limit:
        buffer = await store.get(key, default_buffer_prototype())
    return None if buffer is None else buffer.to_bytes()


async def walk_tree(
    store: Store,
    documents: dict[str, bytes | None],
    groups: Mapping[str, Sequence[str] | None],
    *,
    listed: bool,
    chunks: bool = False,
    depth: int = MAX_DEPTH,
    limit: asyncio.Semaphore,
) -> dict[str, list[str]]:
    """Fetch the tree below ``groups`` into ``documents`` (key: bytes, ``None`` where
    absent), a level at a time; returns the listing of each group listed.

    ``documents`` holds the root's documents (its ``zarr.json`` or ``.zgroup`` tell
    the format: :func:`node_documents`) and the
    documents of each of ``groups`` (one that is no group is not walked), which
    maps a group to its members (``None``: the ones its documents name, or a
    listing shows; a member may be a path below it). ``listed``: list a group whose encoding names no members (else
    only a dataframe's named members are walked); ``chunks``: fetch each array's
    chunks too. At most ``depth`` levels are walked (a deeper tree, not an
    AnnData's, is read below as before, object by object); ``limit`` bounds the
    requests in flight. A member whose name no store of the package takes (a
    column named ``CD4%2fCD8``) is left to the element layer, which reports it.
    """
    documented = node_documents(documents)
    if documented is None:
        return {}
    directories: dict[str, list[str]] = {}

    async def list_group(group: str) -> None:
        async with limit:
            directories[group] = [name async for name in store.list_dir(group)]

    expanding = {group: names for group, names in groups.items() if _is_group(documents, group)}
    arrays: list[str] = []
    for _ in range(depth):
        if not expanding and not arrays:
            break
        named = {
            group: members if members is not None else _named_members(documents, group, listed)
            for group, members in expanding.items()
        }
        if listed:
            await asyncio.gather(*(list_group(g) for g, names in named.items() if names is None))
        members = [
            f"{group}/{name}" if group else name
            for group, names in named.items()
            for name in (names if names is not None else directories.get(group, ()))
            if name not in METADATA_DOCUMENTS
        ]
        members = [m for m in members if key_problem(f"{m}/zarr.json") is None]
        keys = [f"{member}/{name}" for member in members for name in documented]
        keys += _chunk_keys(documents, arrays) if chunks else []
        documents.update(await fetched(store, keys, limit))
        if documented == V2_NODE:
            for member in members:
                documents[f"{member}/zarr.json"] = None  # a v2 container's node has none
        expanding = {m: None for m in members if _is_group(documents, m)}
        arrays = [m for m in members if _array_document(documents, m) is not None]
    return directories


def _is_group(documents: Mapping[str, bytes | None], node: str) -> bool:
    """Whether the documents fetched for ``node`` make it a group (v3 ``node_type``, or a
    v2 ``.zgroup``)."""
    prefix = f"{node}/" if node else ""
    if documents.get(f"{prefix}.zgroup") is not None:
        return True
    return _parsed(documents.get(f"{prefix}zarr.json")).get("node_type") == "group"


def _array_document(documents: Mapping[str, bytes | None], node: str) -> dict[str, Any] | None:
    """The array document fetched for ``node`` (v3 ``zarr.json`` or v2 ``.zarray``)."""
    v3 = _parsed(documents.get(f"{node}/zarr.json"))
    if v3.get("node_type") == "array":
        return v3
    return _parsed(documents.get(f"{node}/.zarray")) or None


def _chunk_keys(documents: Mapping[str, bytes | None], arrays: Iterable[str]) -> list[str]:
    """Every chunk key the grids of ``arrays`` name (stored or not); an array that names
    no regular grid is left to the element layer, which reads it as before."""
    keys: list[str] = []
    for path in arrays:
        document = _array_document(documents, path)
        if document is None:
            continue
        try:
            keys += grid_keys(path, document, where=path)
        except RecordShapeError:
            continue
    return keys


def _attributes(documents: Mapping[str, bytes | None], group: str) -> dict[str, Any]:
    prefix = f"{group}/" if group else ""
    if documents.get(f"{prefix}.zgroup") is not None:
        return _parsed(documents.get(f"{prefix}.zattrs"))
    attributes = _parsed(documents.get(f"{prefix}zarr.json")).get("attributes")
    return attributes if isinstance(attributes, dict) else {}


def _named_members(
    documents: Mapping[str, bytes | None], group: str, listed: bool
) -> tuple[str, ...] | None:
    """The members of ``group`` that its attributes name (``None``: only a listing tells).

    Where the tree is listed, only the members an encoding names are taken
    without a listing (``anndata ls`` shows a dataframe's stray members too).
    """
    attributes = _attributes(documents, group)
    kind = attributes.get("encoding-type")
    if kind in _NAMED_MEMBERS:
        return _NAMED_MEMBERS[str(kind)]
    if listed:
        return None
    columns = _dataframe_columns(attributes)
    if columns is None or not (kind is None or attributes.get("encoding-version") == "0.1.0"):
        return columns
    # legacy: the element layer looks for the labels of each array column (the
    # index's too) in __categories, by path, whether or not the column points there
    return (*columns, *(f"{_LEGACY_CATEGORIES}/{name}" for name in columns))


def _dataframe_columns(attributes: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``(index, *columns)`` of a dataframe group's attributes (``None``: not a dataframe,
    or one whose members its attributes do not name; the element layer says what is
    wrong with it)."""
    index, order = attributes.get("_index"), attributes.get("column-order")
    if attributes.get("encoding-type") not in ("dataframe", None) or not isinstance(index, str):
        return None
    if isinstance(order, str):  # h5py writes a single column so; a Zarr writer may too
        order = [order]
    if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        return None
    return (index, *order)


def _parsed(document: bytes | None) -> dict[str, Any]:
    """A JSON object document's value (``{}``: absent, or not one; a damaged document is
    read again by the element layer, which says so)."""
    if document is None:
        return {}
    try:
        parsed: Any = json.loads(document)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
