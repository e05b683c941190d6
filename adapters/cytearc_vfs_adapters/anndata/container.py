"""An AnnData container (Zarr v2 or v3 on any store, or an h5ad file), element by element.

:class:`AnnDataContainer` is what the rest of the package uses: the
container's shape, its ``obs`` and ``var`` tables (and ``raw/var``), any
element's value and encoding, the count matrix (``X``, a layer, or the raw
counts ``raw/X``, named :data:`~cytearc_vfs.read.anndata_elements.RAW_COUNTS`)
as a band-readable
:class:`~.matrices.MatrixElement`, a listing of every element, and a cheap
identity (metadata only, no values) to fingerprint a source by.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from cytearc_vfs.errors import VfsError
from cytearc_vfs.read.anndata_elements import (
    RAW_COUNTS,
    MissingElementError,
    features_frame,
    layer_element,
)

from .dataframes import SkippedColumn, index_member, read_dataframe
from .encodings import KNOWN_VERSIONS, Encoding, classify
from .errors import DAMAGED_REMEDY, MalformedElementError, UnsupportedElementError
from .listing import ElementInfo, list_elements
from .matrices import MatrixElement, matrix_element
from .nodes import Container, attribute, child, children, is_group, open_container
from .values import ElementReader

__all__ = ["AnnDataContainer", "NotAnnDataError", "looks_like_anndata"]


class NotAnnDataError(VfsError, ValueError):
    """A location opened as AnnData whose root is not an AnnData group (the wrong
    input, not a damaged one)."""


def looks_like_anndata(root: Any) -> bool:
    """Whether a root group is an AnnData: declared so, or (anndata 0.7.x and older, which
    wrote no root attributes) holding ``obs`` and ``var`` and no other encoding."""
    declared = attribute(root, "encoding-type")
    if declared is not None:
        return bool(declared == "anndata")
    return child(root, "obs") is not None and child(root, "var") is not None


class AnnDataContainer:
    """An opened AnnData container, read element by element (read-only)."""

    def __init__(self, container: Container) -> None:
        self._container = container
        self.root = container.root
        if not looks_like_anndata(self.root):
            declared = attribute(self.root, "encoding-type")
            found = (
                f"its root has encoding-type {declared!r}"
                if declared is not None
                else "its root has no encoding-type and no obs and var"
            )
            cytearc = any(
                attribute(self.root, name) is not None
                for name in ("assayTypes", "composite", "mount")
            )
            hint = (
                " (it is a CyteArc store: cytearc-vfs info describes it, and cytearc-vfs "
                "export, cv.to_anndata or cv.anndata_view give it as an AnnData)"
                if cytearc
                else ""
            )
            raise NotAnnDataError(
                f"{container.where} is not an AnnData container: {found}{hint}; give an "
                "AnnData Zarr store (written by anndata.write_zarr) or an .h5ad file"
            )
        self._reader = ElementReader(self.root)
        self._matrices: dict[str | None, MatrixElement] = {}
        for name in ("obs", "var"):
            if child(self.root, name) is None:
                raise MalformedElementError(
                    f"{container.where}: an AnnData needs the element {name!r}, which is missing"
                )

    @classmethod
    def open(
        cls, location: Any, *, storage_options: Mapping[str, Any] | None = None
    ) -> AnnDataContainer:
        """Open a path or URL (Zarr store or ``.h5ad``), a zarr Store or Group, or an h5py File."""
        return cls(open_container(location, storage_options=storage_options))

    @property
    def where(self) -> str:
        """The location, as printed in messages."""
        return self._container.where

    @property
    def storage(self) -> str:
        """``"zarr"`` or ``"hdf5"``."""
        return self._container.storage

    @property
    def zarr_format(self) -> int | None:
        """2 or 3 for Zarr, ``None`` for HDF5."""
        return self._container.zarr_format

    @property
    def encoding(self) -> Encoding:
        """The root's encoding (``anndata 0.1.0``, or inferred for anndata 0.7.x)."""
        return classify(self.root, "")

    def check_root(self) -> None:
        """Refuse a root this reader does not read: ``anndata`` of an encoding-version
        other than the spec's (:data:`~.encodings.KNOWN_VERSIONS`). Opening does not,
        so ``anndata ls`` can still list such a container; an import must, or it would
        read a layout it does not know as if it were 0.1.0."""
        known = KNOWN_VERSIONS["anndata"]
        version = attribute(self.root, "encoding-version")
        if attribute(self.root, "encoding-type") is None or version in known:
            return  # declared in a known version, or anndata 0.7's attribute-less root
        said = "no encoding-version" if version is None else f"encoding-version {version!r}"
        raise UnsupportedElementError(
            f"{self.where} cannot be imported: its root is an AnnData of {said}, which this "
            f"reader does not know (it reads anndata {', '.join(sorted(known))}); read it with "
            "anndata and write it again with one that writes that version "
            "(anndata.read_zarr(OLD).write_zarr(NEW)), or upgrade cytearc-vfs. Nothing was written"
        )

    def _index_length(self, name: str) -> int:
        node = child(self.root, name)
        if node is None:  # raw/var: obs and var were checked when the container was opened
            raise MalformedElementError(
                f"{self.where}: the AnnData element {name!r} is missing, so the features of "
                f"{name.rpartition('/')[0]}/X are unnamed; write the AnnData again with anndata"
            )
        if not is_group(node):  # anndata < 0.7: a record array
            return int(self._records(node, name).shape[0])
        # only the index member is looked up: on object storage each lookup of a
        # column would be a request, and the shape needs none of them
        index, member = index_member(node, name)
        values = member
        if is_group(member):  # a nullable or categorical index: its values or codes
            values = child(member, "values")
            values = values if values is not None else child(member, "codes")
        if values is None or is_group(values):
            raise MalformedElementError(f"element {name}/{index}: cannot tell its length")
        return int(values.shape[0])

    @staticmethod
    def _records(node: Any, name: str) -> Any:
        """``node``, a table stored as an array, checked to be what anndata < 0.7 wrote:
        a one-dimensional record array (any other array holds no ids)."""
        encoding = classify(node, name)
        if encoding.type != "rec-array" or len(node.shape or ()) != 1:
            raise MalformedElementError(
                f"element {name}: a dataframe must be a group (or, as anndata < 0.7 wrote "
                f"it, a one-dimensional record array), found {encoding.label} of shape "
                f"{node.shape}; write the AnnData again with anndata"
            )
        return node

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_obs, n_var)``, from the lengths of the obs and var indexes (metadata only)."""
        try:
            return (self._index_length("obs"), self._index_length("var"))
        except MalformedElementError as exc:
            said = str(exc)
            if said.startswith(self.where):
                raise
            # the element layer names the element only: asked for the shape (anndata
            # ls, write), the container is named too, with the remedy
            raise MalformedElementError(
                f"{self.where}: {said}: the container is damaged; {DAMAGED_REMEDY}"
            ) from exc

    def encoding_of(self, path: str) -> Encoding:
        """The encoding of the element at ``path``."""
        return classify(self._node(path), path)

    def _node(self, path: str) -> Any:
        path = path.strip("/")
        node = self.root if not path else child(self.root, path)
        if node is None:
            raise KeyError(f"{self.where} has no element {path!r}")
        return node

    def read(self, path: str) -> Any:
        """The value of the element at ``path`` (see :mod:`.values`)."""
        path = path.strip("/")
        return self._reader.read(self._node(path), path)

    def _table(self, name: str, skipped: list[SkippedColumn] | None = None) -> pd.DataFrame:
        node = self._node(name)
        if not is_group(node):  # anndata < 0.7: obs/var as one record array
            records = self._reader.read(self._records(node, name), name)
            frame = pd.DataFrame.from_records(records)
            for column in frame.columns:
                if frame[column].dtype == object:
                    frame[column] = [
                        v.decode() if isinstance(v, bytes) else v for v in frame[column]
                    ]
            # anndata < 0.7 kept the ids in the record field "index"; the index keeps
            # the field's name, as anndata.read_zarr / read_h5ad give it
            key = "index" if "index" in frame.columns else frame.columns[0]
            return frame.set_index(key)
        encoding = classify(node, name)
        if encoding.type == "dataframe":
            return read_dataframe(self._reader, node, name, encoding, skipped=skipped)
        value = self.read(name)
        if not isinstance(value, pd.DataFrame):
            raise MalformedElementError(
                f"element {name}: expected a dataframe, found {self.encoding_of(name).label}"
            )
        return value

    def obs(self, *, skipped: list[SkippedColumn] | None = None) -> pd.DataFrame:
        """The cell table (its index holds the cell ids).

        A column that cannot be read raises (:class:`MalformedElementError`,
        :class:`UnsupportedElementError`); given a ``skipped`` list, it is left
        out and listed there with the reason instead.
        """
        return self._table("obs", skipped)

    def var(self, *, skipped: list[SkippedColumn] | None = None) -> pd.DataFrame:
        """The feature table (its index holds the feature ids); ``skipped`` as for
        :meth:`obs`."""
        return self._table("var", skipped)

    def dataframe(self, path: str, *, skipped: list[SkippedColumn] | None = None) -> pd.DataFrame:
        """The dataframe at ``path`` (``obs``, ``var``, ``raw/var``); ``skipped`` as for
        :meth:`obs`."""
        return self._table(path, skipped)

    def features(
        self, layer: str | None = None, *, skipped: list[SkippedColumn] | None = None
    ) -> pd.DataFrame:
        """The feature table of the matrix ``layer`` names (:meth:`matrix`): ``var``,
        or ``raw/var`` for the raw counts (which may list more features than
        ``var``); ``skipped`` as for :meth:`obs`."""
        return self._table(features_frame(layer_element(layer)), skipped)

    def has_raw_counts(self) -> bool:
        """Whether the container holds raw counts (``raw/X``; ``adata.raw.X``)."""
        return child(self.root, RAW_COUNTS) is not None

    def count_choices(self) -> str:
        """The layers, and ``raw/X`` when held, as messages list what may be named."""
        layers = self.layers()
        text = f"its layers are {layers or 'none'}"
        return text + (f", and its raw counts {RAW_COUNTS!r}" if self.has_raw_counts() else "")

    def _names(self, name: str) -> pd.Index:
        node = self._node(name)
        if not is_group(node):
            ids: pd.Index = self._table(name).index
            return ids
        index, member = index_member(node, name)
        values = self._reader.read(member, f"{name}/{index}")
        ids = pd.Index(values, name=None if index == "_index" else index)
        return ids

    def obs_names(self) -> pd.Index:
        """The cell ids: only the obs index is read, not its columns."""
        return self._names("obs")

    def var_names(self) -> pd.Index:
        """The feature ids: only the var index is read, not its columns."""
        return self._names("var")

    @property
    def can_list(self) -> bool:
        """Whether the elements can be listed: an HDF5 file's always, a Zarr store's
        where its backend lists (``supports_listing``; zarr refuses a listing otherwise,
        and :meth:`elements` and :meth:`layers` need one)."""
        return self.storage == "hdf5" or bool(self.root.store_path.store.supports_listing)

    def has_layer(self, name: str) -> bool:
        """Whether ``layers/<name>`` is held, looked up by its path (no listing)."""
        try:
            path = layer_element(name)
        except ValueError:  # not one member of `layers` ('', 'a/b', '..')
            return False
        return path != RAW_COUNTS and child(self.root, path) is not None

    def layers(self) -> list[str]:
        """Names of the layers (empty when there are none)."""
        node = child(self.root, "layers")
        return children(node) if node is not None and is_group(node) else []

    def matrix(self, layer: str | None = None) -> MatrixElement:
        """``X`` (or ``layers/<layer>``, or the raw counts ``raw/X`` for ``layer="raw/X"``)
        as a band-readable matrix element, checked against the container's shape
        (``raw/X``: the obs length by the length of ``raw/var``). The same element
        is returned each time, so its :attr:`~.matrices.MatrixElement.stats` count
        every read through it."""
        cached = self._matrices.get(layer)
        if cached is None:
            cached = self._matrices[layer] = self._open_matrix(layer)
        return cached

    def _open_matrix(self, layer: str | None) -> MatrixElement:
        try:
            path: str | None = layer_element(layer)
        except ValueError:
            # not one member of `layers`: '' would open the mapping itself, 'a/b' a
            # member of a member, '..' a path zarr refuses without naming the layer
            path = None
        node = child(self.root, path) if path is not None else None
        if node is None or path is None:
            # the package's refusal (a ValueError and a KeyError), naming the
            # container, the element and what it holds instead
            raise MissingElementError(self._missing_matrix(layer), path or str(layer))
        matrix = matrix_element(node, path, classify(node, path), where=self.where)
        expected = (
            (self._index_length("obs"), self._index_length("raw/var"))
            if path == RAW_COUNTS
            else self.shape
        )
        if matrix.shape != expected:
            frame = features_frame(path)
            raise MalformedElementError(
                f"{matrix.label}: shape {matrix.shape} differs from the AnnData's "
                f"{expected} (obs x {frame})"
            )
        return matrix

    def _missing_matrix(self, layer: str | None) -> str:
        """The refusal of a matrix the container lacks, naming what it holds."""
        if layer is None:
            return (
                f"{self.where} has no X; name the layer holding the counts ({self.count_choices()})"
            )
        x = " (or give no layer to use X)" if child(self.root, "X") is not None else ""
        if layer == RAW_COUNTS:
            return (
                f"{self.where} has no raw counts (no {RAW_COUNTS!r}: the AnnData was written "
                f"without adata.raw); {self.count_choices()}{x}"
            )
        return f"{self.where} has no layer {layer!r}; {self.count_choices()}{x}"

    def elements(self) -> list[ElementInfo]:
        """Every element, with encoding, version and shape (metadata only)."""
        return list_elements(self.root)

    def _metadata(self, node: Any, path: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"attributes": _jsonable(dict(node.attrs))}
        if not is_group(node):
            entry["shape"] = list(node.shape) if node.shape is not None else None
            entry["dtype"] = str(node.dtype)
        return entry

    def identity(self, layer: str | None = None) -> dict[str, Any]:
        """The metadata a source's fingerprint can be checked against, cheaply.

        The attributes, shapes and dtypes of the root, the count matrix (and
        its member arrays), ``obs`` and ``var`` and their members: a number of
        documents independent of the matrix's size; no values are read. A
        ``digest`` (sha256 of the canonical JSON) sums them up. Object versions
        (ETags, modification times) are the store's to add.
        """
        matrix_path = layer_element(layer)
        documents: dict[str, Any] = {}
        for path in ("", matrix_path, "obs", features_frame(matrix_path)):
            node = self._node(path)
            documents[path or "/"] = self._metadata(node, path)
            if is_group(node):
                for name in children(node):
                    documents[f"{path}/{name}"] = self._metadata(child(node, name), name)
        digest = hashlib.sha256(
            json.dumps(documents, sort_keys=True, default=str).encode()
        ).hexdigest()
        return {"zarrFormat": self.zarr_format, "documents": documents, "digest": digest}

    def close(self) -> None:
        """Close an HDF5 file (Zarr containers hold nothing open)."""
        if self.storage == "hdf5":
            self.root.file.close()

    def __enter__(self) -> AnnDataContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
