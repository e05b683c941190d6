"""Opening an AnnData container, Zarr (v2 or v3, any store) or HDF5, as a tree of nodes.

The element layer reads groups and arrays through the few operations zarr
and h5py share (``attrs``, ``keys()``, ``group[name]``, ``array[selection]``,
``shape``, ``dtype``); the differences (h5py gives text as bytes and
attribute lists as numpy arrays, zarr 3 gives text as ``StringDType``) are
smoothed here, once, so the readers above never ask which format they read.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store

from cytearc_vfs.format.store_keys import METADATA_DOCUMENTS
from cytearc_vfs.read.anndata_elements import damaged_metadata

from .errors import DAMAGED_REMEDY, MalformedElementError

__all__ = [
    "HDF5_MAGIC",
    "Container",
    "ContainerArray",
    "ContainerGroup",
    "attribute",
    "attributes",
    "child",
    "children",
    "damaged_element",
    "is_group",
    "is_h5ad_path",
    "listed_names",
    "location_of",
    "open_container",
    "own_metadata",
    "read_values",
    "text_values",
]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class Container:
    """An opened AnnData container: its root group and what it is stored in."""

    root: Any
    """The root group (``zarr.Group`` or ``h5py.File``)."""
    where: str
    """The location as printed in messages."""
    storage: str
    """``"zarr"`` or ``"hdf5"``."""
    zarr_format: int | None
    """2 or 3 for a Zarr container, ``None`` for HDF5."""


@dataclass(frozen=True)
class ContainerGroup(zarr.Group):
    """A zarr group of an opened container that knows the container's location as the
    user gave it (the store names itself otherwise: ``file:///...`` for a local path).

    The store itself is not wrapped: the local fast paths ask for a ``LocalStore``.
    """

    where: str = ""
    """The container's location as printed in messages (:attr:`Container.where`)."""


@dataclass
class ContainerArray(zarr.Array[Any]):
    """A zarr array of an opened container that knows the container's location as the
    user gave it (see :class:`ContainerGroup`)."""

    where: str = ""
    """The container's location as printed in messages (:attr:`Container.where`)."""


def _located(node: Any, where: str) -> Any:
    """``node`` (a zarr group or array; an h5py node is returned as it is) carrying
    ``where``, the location its messages name; no I/O."""
    if isinstance(node, zarr.Group):
        return ContainerGroup(
            zarr.AsyncGroup(metadata=node.metadata, store_path=node.store_path), where
        )
    if isinstance(node, zarr.Array):
        return ContainerArray(node.async_array, where)
    return node


def location_of(node: Any) -> str:
    """The location a zarr node's messages name: its container's as the user gave it
    (:class:`ContainerGroup`), else the store's own name, its password masked."""
    if isinstance(node, (ContainerGroup, ContainerArray)) and node.where:
        return node.where
    from cytearc_vfs.remote.locations import describe_location

    return describe_location(node.store_path.store)


def is_h5ad_path(location: Any) -> bool:
    """Whether ``location`` is a local HDF5 file (by its first bytes)."""
    if not isinstance(location, (str, os.PathLike)):
        return False
    from cytearc_vfs.remote.locations import local_path

    path = local_path(location)
    if path is None:
        return False
    if not path.is_file():
        return False
    with path.open("rb") as handle:
        return handle.read(len(HDF5_MAGIC)) == HDF5_MAGIC


def open_container(
    location: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    prefetch_metadata: bool = False,
    prefetch_tables: str | None = None,
) -> Container:
    """Open ``location`` read-only: a path or URL of a Zarr store, an ``.h5ad`` file, a
    zarr ``Store`` or ``Group``, or an ``h5py.File``/``Group``.

    Nothing is checked beyond that a root group opens; :mod:`.encodings` says
    what the root is. With ``prefetch_metadata``, the metadata of a container on
    object storage is fetched a level of the tree at a time first
    (:mod:`.remote_metadata`): for a caller that reads every element's metadata.
    With ``prefetch_tables`` (the features' dataframe, ``var`` or ``raw/var``), every
    object of ``obs``, that dataframe and ``uns/cytearc`` on object storage is fetched
    at once first, as a composite's creation fetches them: for an import, which reads
    them all.
    """
    if isinstance(location, zarr.Group):
        where = str(location.store_path)
        root = _located(own_metadata(location), where)
        return Container(root, where, "zarr", location.metadata.zarr_format)
    if type(location).__module__.startswith("h5py"):
        return Container(location, f"{location.file.filename}:{location.name}", "hdf5", None)
    if is_h5ad_path(location):
        from cytearc_vfs.remote.locations import absolute_path, local_path

        found = local_path(location)
        assert found is not None  # is_h5ad_path said it is a local file
        path = absolute_path(found)
        if storage_options:
            # dropped silently, where a local Zarr store refuses them (open_location)
            raise ValueError(
                f"backend options were given for the local path {str(path)!r}, which takes "
                "none: they are for remote URLs (s3://, gs://, az://, http://); leave them "
                "out for a local file"
            )
        return Container(_open_h5(path), str(path), "hdf5", None)
    from cytearc_vfs.remote.failures import named_backend_failures
    from cytearc_vfs.remote.locations import describe_location, local_path, open_location

    from .remote_metadata import metadata_prefetched, tables_prefetched

    where = describe_location(location)
    local = local_path(location)
    if local is not None and not local.exists():
        raise FileNotFoundError(f"{where} does not exist; check the path")
    if local is not None and local.is_file():
        # is_h5ad_path said no: a file, but not HDF5 (a Zarr store is a directory)
        raise FileNotFoundError(
            f"{where} is a file but not an HDF5 file (an .h5ad file starts with the HDF5 "
            "signature); it may be truncated or of another format. Give an .h5ad file written "
            "by anndata, or an AnnData Zarr store (a directory)"
        )
    if local is None and str(location).rstrip("/").endswith(".h5ad"):
        raise FileNotFoundError(
            f"{where}: .h5ad files are read from local paths only; download it first, or "
            "give an AnnData Zarr store, which is read where it is"
        )
    store: Store = open_location(location, read_only=True, storage_options=storage_options)
    # an unreachable server, refused credentials or a missing bucket name the container
    # and the remedy (as cv.open_store does), not only the backend's own words
    with named_backend_failures(where, options="storage_options"):
        if prefetch_metadata:
            # an object store's documents a level of the tree at a time, not one by one
            store = metadata_prefetched(store)
        if prefetch_tables is not None:
            # the element layer reads a dataframe column by column, one request after
            # another: Wu 2020's 45 obs columns took 271 round trips to import
            store = tables_prefetched(store, prefetch_tables)
        root = _open_root(store, where)
    return Container(_located(root, where), where, "zarr", root.metadata.zarr_format)


def _open_root(store: Store, where: str) -> zarr.Group:
    """The root group of the Zarr container in ``store`` at ``where``, or the reason
    there is none."""
    from cytearc_vfs.format.store_contents import list_root_once

    try:
        # the nodes' own documents, not a consolidated copy that an edit may have left stale
        root = zarr.open_group(store, mode="r", use_consolidated=False)
    except zarr.errors.ContainsArrayError as exc:
        raise FileNotFoundError(
            f"{where} is a Zarr array, not a group; give the root of an AnnData Zarr store "
            "(the directory that holds X, obs and var)"
        ) from exc
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
        # S3 answers 404 for any key of a missing bucket: one listing tells a missing
        # bucket (raised, and named by the backend errors' translation) and a path
        # that holds nothing (a mistyped store name) from a directory without metadata
        if list_root_once(store) is False:
            raise FileNotFoundError(
                f"{where} does not exist (nothing is stored there); check the path"
            ) from exc
        raise FileNotFoundError(
            f"{where} holds no Zarr group at its root; give an AnnData Zarr store (a directory "
            "with .zgroup or zarr.json) or an .h5ad file"
        ) from exc
    except (ValueError, TypeError, zarr.errors.BaseZarrError) as exc:
        raise damaged_element(where, "", exc) from exc
    return root


def own_metadata(node: Any) -> Any:
    """``node`` without the consolidated metadata its own document may carry inline.

    zarr 3 writes a copy of a subtree's metadata into a group's ``zarr.json``
    (``consolidated_metadata``), also below the root: ``del group[name]`` on a
    group opened through a consolidated root leaves one there, and a later
    ``consolidate_metadata`` of the root does not refresh it. A group that keeps
    it answers ``group[name]`` and lists its members from that copy, so a
    member added since is missing and one deleted since is still there. Each
    member is read from its own document instead (one request per lookup, as
    for a group without the copy); no I/O here.
    """
    if isinstance(node, zarr.Group) and node.metadata.consolidated_metadata is not None:
        metadata = replace(node.metadata, consolidated_metadata=None)
        group = zarr.AsyncGroup(metadata=metadata, store_path=node.store_path)
        if isinstance(node, ContainerGroup):
            return ContainerGroup(group, node.where)
        return zarr.Group(group)
    return node


def is_group(node: Any) -> bool:
    """Whether ``node`` is a group (zarr or h5py), as opposed to an array."""
    return not hasattr(node, "dtype")


def children(group: Any) -> list[str]:
    """Names of a group's members, sorted (zarr lists v3 members in no fixed order).

    zarr lists a group's members by parsing each one's metadata document, and a
    document it cannot parse fails the listing with the parser's words alone: that
    member is found and named instead (:func:`damaged_element`).
    """
    try:
        return sorted(str(name) for name in group)
    except (ValueError, TypeError, zarr.errors.BaseZarrError):
        if not isinstance(group, zarr.Group):
            raise
        for name in listed_names(group):
            child(group, name)  # raises for the member whose document is damaged
        raise  # not a member's document after all: zarr's own error stands


def listed_names(group: Any) -> list[str]:
    """The names the store lists under a zarr group, sorted, whether or not each is a
    readable node (what :func:`children` cannot give when a member is damaged)."""
    from zarr.core.sync import sync

    async def names() -> list[str]:
        listed = group.store_path.store.list_dir(group.path)
        return [name async for name in listed if name not in METADATA_DOCUMENTS]

    return sorted(sync(names()))


def child(group: Any, name: str) -> Any | None:
    """Member ``name`` of ``group`` (a path with ``/`` is followed), or ``None``.

    Every lookup of the element layer goes through here, so a group is never
    read through a consolidated copy (:func:`own_metadata`).
    """
    if isinstance(group, zarr.Group) and any(part in (".", "..") for part in name.split("/")):
        return None  # no member is called so (zarr refuses such a path outright)
    try:
        found = own_metadata(group[name])
    except KeyError:
        return None
    except (ValueError, TypeError, zarr.errors.BaseZarrError) as exc:
        # a document of the member that zarr cannot parse: said so, naming it
        if not isinstance(group, zarr.Group):
            raise
        path = f"{group.path}/{name}" if group.path else name
        raise damaged_element(location_of(group), path, exc) from exc
    if isinstance(group, ContainerGroup):
        return _located(found, group.where)
    return found


def damaged_element(where: str, path: str, exc: BaseException) -> MalformedElementError:
    """The error for a node (``path``; ``""``: the root) whose metadata document zarr
    cannot parse (cut short, garbled, not the JSON object of a node): the container is
    damaged. Built by the core's one builder of that refusal
    (:func:`~cytearc_vfs.read.anndata_elements.damaged_metadata`), as the element
    layer's own class, which ``anndata ls`` marks elements by."""
    node = f"element {path}" if path else "its root"
    return damaged_metadata(
        MalformedElementError,
        where,
        f"the metadata document of {node}",
        exc,
        remedy=f"the container is damaged; {DAMAGED_REMEDY}",
    )


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_plain(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as plain Python values (lists, str, int, bool; HDF5
    object references are kept as they are)."""
    return {str(key): _plain(value) for key, value in node.attrs.items()}


def attribute(node: Any, name: str, default: Any = None) -> Any:
    """One attribute as a plain Python value, or ``default``."""
    if name not in node.attrs:
        return default
    return _plain(node.attrs[name])


def _open_h5(path: Path) -> Any:
    """The HDF5 file at ``path``, opened read-only.

    A file that starts with the HDF5 signature but that HDF5 cannot open (cut
    short by an interrupted copy, or damaged) is refused as the damaged input
    it is, naming the file; a failure of the system (the operating system's
    errno in HDF5's message, such as permission denied) stays an ``OSError``.
    """
    h5py = _h5py()
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        detail = str(exc)
        if exc.errno is not None or "errno =" in detail:
            raise
        cause = "truncated" if "truncated file" in detail else "damaged"
        raise MalformedElementError(
            f"{path} is an HDF5 file that cannot be opened: it is {cause} (HDF5: {detail}); "
            f"{DAMAGED_REMEDY}"
        ) from exc


#: zarr's codecs (numcodecs' blosc and zstd, zlib) name a failed decoding so
_DECODE_FAILURE = re.compile(r"decompress|corrupt|codec|checksum|crc32c", re.IGNORECASE)


def _damaged_values(array: Any, exc: BaseException) -> MalformedElementError | None:
    """The error for values of ``array`` whose stored bytes do not decode, or ``None``
    where ``exc`` is not that (a failing system keeps its own error).

    HDF5 fails such a read with an ``OSError`` that carries no errno ("filter
    returned failure during read"); zarr's codecs with a ``RuntimeError`` or
    ``zlib.error`` naming the decompression.
    """
    detail = str(exc)
    if type(array).__module__.startswith("h5py"):
        if not isinstance(exc, OSError) or exc.errno is not None or "errno =" in detail:
            return None
        where = f"{array.file.filename}: element {array.name.lstrip('/')}"
        backend = f"HDF5: {detail}"
    else:
        if isinstance(exc, OSError) or not _DECODE_FAILURE.search(detail):
            return None
        where = f"{location_of(array)}: element {array.path}"
        backend = f"{type(exc).__name__}: {detail}"
    return MalformedElementError(
        f"{where}: stored values cannot be decoded ({backend}): the container is damaged; "
        f"{DAMAGED_REMEDY}"
    )


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(
            "reading .h5ad files needs h5py, which comes with anndata: pip install "
            "'cytearc-vfs[anndata]'"
        ) from exc
    return h5py


def _is_text(dtype: np.dtype) -> bool:
    if dtype.kind in "UST":
        return True
    if dtype.kind != "O":
        return False
    # an object array is text in zarr (VLenUTF8); in h5py only with string metadata
    try:
        import h5py
    except ImportError:  # no h5py, no HDF5 arrays: an object array here is zarr's text
        return True
    return h5py.check_string_dtype(dtype) is not None or dtype.metadata is None


def text_values(values: npt.NDArray[Any]) -> npt.NDArray[np.object_]:
    """Text of any storage form (bytes, fixed-width, ``StringDType``) as an object array of str."""
    out = np.empty(values.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(values.reshape(-1).tolist()):
        flat[i] = item.decode("utf-8") if isinstance(item, bytes) else item
    return out


def read_values(array: Any, selection: Any = ...) -> Any:
    """``array[selection]`` with text as an object array of str (or str for a 0-d array),
    numbers in native byte order."""
    dtype = np.dtype(array.dtype)
    text = _is_text(dtype)
    if type(array).__module__.startswith("h5py"):
        if array.shape is None:  # HDF5's null dataspace (h5py.Empty)
            return None
        if text and dtype.kind == "O":
            array = array.asstr()
    elif selection is ...:
        selection = () if array.ndim == 0 else slice(None)
    try:
        values = array[selection]
    except (RuntimeError, ValueError, OSError, zlib.error) as exc:
        damaged = _damaged_values(array, exc)
        if damaged is None:
            raise
        raise damaged from exc
    if not isinstance(values, np.ndarray):
        values = np.asarray(values)
    if not values.dtype.isnative:
        # HDF5 and Zarr v2 keep the byte order written ('>i4'); pandas' nullable and
        # scipy.sparse arrays take native order only
        values = values.astype(values.dtype.newbyteorder("="))
    if text and values.dtype.kind in "OSTU":
        if values.ndim == 0:
            item = values.item()
            return item.decode("utf-8") if isinstance(item, bytes) else str(item)
        return text_values(values)
    return values
