"""A published artifact read back: its record, and its arrays opened lazily.

:func:`cytearc_vfs.artifacts.catalog.read_artifact`, :func:`~cytearc_vfs.artifacts.catalog.list_artifacts`
and :func:`~cytearc_vfs.artifacts.catalog.find_artifact` return :class:`Artifact`. Reading one
costs a single ``zarr.json`` read (the group's record). An array is opened
when it is first asked for, which reads its ``zarr.json`` and never a chunk;
chunks are read only when the array is sliced or loaded. The record stays a
pure, frozen :class:`~cytearc_vfs.artifacts.records.ArtifactRecord`; the
store handle lives here, beside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.errors import NodeTypeValidationError
from zarr.types import AnyArray

from ..format.paths import join
from ..remote.failures import named_backend_failures
from .artifact_reads import ArtifactReads
from .holders import HeldBy
from .records import ArtifactRecord

__all__ = ["Artifact", "ArtifactArrays"]


def _named_failures(where: str) -> Any:
    """A backend's own failure (obstore's 403 dump) as a StoreAccessError naming the store."""
    return named_backend_failures(where, options="storage_options")


class ArtifactArrays(Mapping[str, AnyArray]):
    """The arrays of one artifact by name, read-only, each opened on first access.

    Opening an array reads its metadata document only. Listing the names
    (iterating, ``len``) opens every array of the group at once, which zarr
    does concurrently; asking for one name opens that array alone.
    """

    def __init__(
        self, store: Store, group_key: str, path: str, where: str, held_by: str | None = None
    ) -> None:
        # a chunk the store lacks reads as the fill value only while the artifact is there
        self._store = ArtifactReads(store, group_key, path, where, held_by)
        self._group_key = group_key
        self._path = path
        self._where = where
        self._opened: dict[str, AnyArray] = {}
        self._names: tuple[str, ...] | None = None

    def __getitem__(self, name: str) -> AnyArray:
        opened = self._opened.get(name)
        if opened is not None:
            return opened
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise KeyError(self._missing(name))
        try:
            with _named_failures(self._where):
                array = zarr.open_array(
                    self._store, path=join(self._group_key, name), mode="r", zarr_format=3
                )
        except (FileNotFoundError, NodeTypeValidationError):
            # Absent, or a subgroup: either way not an array of this artifact, unless
            # the artifact itself is gone (removed, or a mount's source moved away)
            if self._store.group_is_gone():
                raise self._store.removed(join(self._group_key, name, "zarr.json")) from None
            raise KeyError(self._missing(name)) from None
        self._opened[name] = array
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __len__(self) -> int:
        return len(self._list())

    def __repr__(self) -> str:
        shown = ", ".join(self._names) if self._names is not None else "not listed yet"
        return f"<ArtifactArrays of {self._path!r}: {shown}>"

    def _list(self) -> tuple[str, ...]:
        if self._names is None:
            if not self._store.supports_listing:
                raise ValueError(
                    f"the arrays of artifact {self._path!r} cannot be listed: {self._where} "
                    "cannot list its keys; open an array by its name instead (artifact['data'])"
                )
            try:
                with _named_failures(self._where):
                    group = zarr.open_group(
                        self._store, path=self._group_key, mode="r", zarr_format=3
                    )
                    found = dict(group.arrays())
            except FileNotFoundError:
                # its record was read when it was found: the artifact was removed since
                if self._store.group_is_gone():
                    raise self._store.removed(join(self._group_key, "zarr.json")) from None
                raise
            for name, array in found.items():
                # Keep an array handed out earlier, so one name is one object.
                self._opened.setdefault(name, array)
            self._names = tuple(sorted(found))
        return self._names

    def _missing(self, name: object) -> str:
        try:
            names = self._list()
        except ValueError:
            have = "its arrays cannot be listed in this store"
        else:
            have = f"it has {', '.join(repr(n) for n in names)}" if names else "it has none"
        return f"artifact {self._path!r} in {self._where} has no array {name!r}; {have}"


class Artifact:
    """A complete artifact: its record, and its arrays opened lazily.

    Returned by :func:`~cytearc_vfs.artifacts.catalog.read_artifact`,
    :func:`~cytearc_vfs.artifacts.catalog.list_artifacts` and
    :func:`~cytearc_vfs.artifacts.catalog.find_artifact`. The record's fields are
    available directly (``artifact.path``, ``artifact.provenance``...); the
    arrays by name (``artifact["data"]``, ``artifact.load("data")``). Nothing
    but the record has been read when it is returned.

    Attributes
    ----------
    record : ArtifactRecord
        The parsed attribute record, a frozen value.
    arrays : ArtifactArrays
        Read-only mapping from array name to ``zarr.Array``, opened on first
        access.
    held_by : {"target", "source"} or None
        Read through a mount: which of its stores serves the artifact, found
        by the mount's resolution when it was read (no record says it).
        ``None`` through any other store, whose artifacts are its own.

    Examples
    --------
    >>> art = read_artifact("data.zarr", "RNA/artifacts/pca/4f0c...")  # doctest: +SKIP
    >>> art.names  # doctest: +SKIP
    ('data', 'variance')
    >>> art["data"].shape  # a zarr.Array: metadata only, no chunk read  # doctest: +SKIP
    (60, 2)
    >>> art.load("variance")  # numpy  # doctest: +SKIP
    array([3.2, 1.1])
    """

    __slots__ = ("_group_key", "_where", "arrays", "held_by", "record")

    def __init__(
        self,
        record: ArtifactRecord,
        store: Store,
        group_key: str,
        where: str,
        *,
        held_by: HeldBy | None = None,
    ) -> None:
        self.record = record
        self.held_by = held_by
        self.arrays = ArtifactArrays(store, group_key, record.path, where, held_by)
        self._where = where
        self._group_key = group_key

    # The record's fields, forwarded one by one so the type checker sees each.

    @property
    def artifact_id(self) -> str:
        """Random 256-bit id, 64 lowercase hex digits; the last segment of ``path``."""
        return self.record.artifact_id

    @property
    def kind(self) -> str:
        """Artifact kind; the segment before the id in ``path``."""
        return self.record.kind

    @property
    def path(self) -> str:
        """``{root}/{kind}/{artifact_id}``, relative to the store or group it was read from."""
        return self.record.path

    @property
    def provenance(self) -> Mapping[str, Any]:
        """``operation``, ``parameters``, ``inputs`` and, from revision 2, ``revision``."""
        return self.record.provenance

    @property
    def execution_options(self) -> Mapping[str, Any]:
        """How the producer ran; never part of the artifact's identity."""
        return self.record.execution_options

    @property
    def created_at_ns(self) -> int:
        """Creation time, nanoseconds since the epoch; for diagnostics only."""
        return self.record.created_at_ns

    @property
    def cytearc_version(self) -> str:
        """Version of the package that created the artifact; for diagnostics only."""
        return self.record.cytearc_version

    @property
    def is_current(self) -> bool:
        """Whether reuse may consider it: no ``revision``, or an integer of 2 or more."""
        return self.record.is_current

    # The arrays.

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the artifact's arrays, sorted (opens each array's metadata)."""
        return tuple(self.arrays)

    def array(self, name: str) -> AnyArray:
        """Array ``name``, opened read-only without reading a chunk.

        Raises
        ------
        KeyError
            The artifact has no array ``name``; the message names the
            artifact and the arrays it has.
        """
        return self.arrays[name]

    def load(self, name: str) -> np.ndarray[Any, Any]:
        """Array ``name`` read whole into memory.

        Raises
        ------
        KeyError
            The artifact has no array ``name``.
        """
        array = self.arrays[name]
        with _named_failures(self._where):
            return np.asarray(array[...])

    def __getitem__(self, name: str) -> AnyArray:
        return self.arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Artifact):
            return NotImplemented
        return self.record == other.record and self._place == other._place

    def __hash__(self) -> int:
        return hash(self._place)

    @property
    def _place(self) -> tuple[str, str]:
        # Stores compare by what they describe, so two opens of one location agree.
        return (self._where, self._group_key)

    def __repr__(self) -> str:
        held = f", held by the {self.held_by}" if self.held_by is not None else ""
        return f"<Artifact {self.kind} {self.path!r} in {self._where}{held}>"
