"""Artifact groups: publication with one metadata write, listing and reuse.

Implements the spec's "Artifact publication". A producer creates its group at
``{root}/{kind}/{artifact_id}``, where ``artifact_id`` is a random 256-bit
token, so the path belongs to that producer alone and no lock is needed. The
group starts with ``complete=False``; the arrays are written (those that must
hold finite values are checked row band by row band as they are written), and
one metadata write of the whole attribute record sets ``complete=True``. A
failure before that write deletes the group. Once the write is issued the
group stays, complete or not, because a write that reports an error may still
have persisted.

The attribute record of an artifact group holds exactly ``artifact_id``,
``kind``, ``provenance``, ``execution_options``, ``created_at_ns``,
``cytearc_version`` and ``complete``. It is written by :class:`ArtifactWriter`
and parsed strictly, in one place, by :meth:`ArtifactRecord.from_attributes`.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.types import AnyArray

from .errors import IncompleteStoreError, NonFiniteArtifactError, RecordShapeError
from .locations import Location, describe_location, open_location
from .paths import check_name, join
from .records import check_fields

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ArrayWriter",
    "ArtifactRecord",
    "ArtifactWriter",
    "canonical_json",
    "check_provenance",
    "find_artifact",
    "list_artifacts",
    "publish_artifact",
    "read_artifact",
]

logger = logging.getLogger(__name__)

#: An artifact id: 256 random bits as 64 lowercase hexadecimal digits.
ARTIFACT_ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")

#: Where an artifact group can be: a location (path, URL or Store) or an open group,
#: whose path then prefixes every artifact path.
ArtifactStore = Location | zarr.Group

_RECORD = "artifact record"
_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "artifact_id": str,
    "kind": str,
    "provenance": dict,
    "execution_options": dict,
    "created_at_ns": int,
    "cytearc_version": str,
    "complete": bool,
}
_PROVENANCE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "operation": str,
    "parameters": dict,
    "inputs": dict,
}
# A default chunk of a written array holds about this many bytes: whole rows,
# so a row band is one chunk and is written without reading anything back.
_CHUNK_BYTES = 8 * 1024**2


@functools.cache
def _package_version() -> str:
    try:
        return version("cytearc-vfs")
    except PackageNotFoundError:
        # Running from a source tree that was never installed.
        return "0+unknown"


# ---------------------------------------------------------------- JSON values


def _json_value(value: object, where: str) -> Any:
    """``value`` as a canonical JSON value (objects with sorted keys, lists, scalars)."""
    # bool before int: bool is an int subclass, and stays a JSON boolean.
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(
                f"{where} is {number!r}; JSON has no NaN or infinity, so provenance and "
                "execution options must hold finite numbers (use null for a missing value)"
            )
        return number
    if isinstance(value, Mapping):
        bad = [key for key in value if not isinstance(key, str)]
        if bad:
            raise TypeError(
                f"{where} has the non-string key(s) {bad!r}; JSON object keys are strings"
            )
        return {key: _json_value(value[key], f"{where}[{key!r}]") for key in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_json_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise TypeError(
        f"{where} is a {type(value).__name__} ({value!r}), which is not a JSON value; use "
        "None, bool, int, finite float, str, list, tuple or a mapping with string keys"
    )


def canonical_json(value: object) -> str:
    """The canonical JSON text of ``value``: sorted keys, no whitespace, no NaN.

    Two provenance mappings are the same exactly when their canonical texts
    are equal, so ``1`` and ``1.0`` differ while key order never matters.

    Examples
    --------
    >>> canonical_json({"b": [1, 2.0], "a": None})
    '{"a":null,"b":[1,2.0]}'
    """
    return json.dumps(
        _json_value(value, "value"),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def check_provenance(provenance: object) -> dict[str, Any]:
    """Validate a provenance mapping and return it as canonical JSON values.

    Parameters
    ----------
    provenance
        A mapping with exactly ``operation`` (a non-empty string),
        ``parameters`` (a mapping), ``inputs`` (a mapping from an input's
        role to a JSON value, such as an artifact reference) and, only when
        the operation's revision is 2 or more, ``revision`` (an integer).

    Returns
    -------
    dict
        The provenance with sorted keys, tuples as lists and numpy scalars
        as Python numbers: the value that is persisted and compared.

    Raises
    ------
    ValueError
        A missing or unknown field, an empty operation, a ``revision`` that
        is 1, below 1 or not an integer, or a NaN or infinite number.
    TypeError
        ``provenance``, ``parameters`` or ``inputs`` is not a mapping, or a
        value is not JSON (a set, bytes, an object, a non-string key).

    Examples
    --------
    >>> check_provenance({"operation": "normalize", "parameters": {"scale": 1e4},
    ...                   "inputs": {}, "revision": 2})
    {'inputs': {}, 'operation': 'normalize', 'parameters': {'scale': 10000.0}, 'revision': 2}
    """
    if not isinstance(provenance, Mapping):
        raise TypeError(
            f"provenance must be a mapping with operation, parameters and inputs, not "
            f"{type(provenance).__name__}"
        )
    allowed = (*_PROVENANCE_FIELDS, "revision")
    missing = [name for name in _PROVENANCE_FIELDS if name not in provenance]
    unknown = [name for name in provenance if name not in allowed]
    if missing or unknown:
        raise ValueError(
            f"provenance has missing field(s) {missing} and unknown field(s) {unknown}; it "
            "holds exactly operation, parameters and inputs, and revision only when the "
            "operation revision is 2 or more"
        )
    operation = provenance["operation"]
    if not isinstance(operation, str) or not operation:
        raise ValueError(f"provenance operation must be a non-empty string, not {operation!r}")
    for name in ("parameters", "inputs"):
        if not isinstance(provenance[name], Mapping):
            raise TypeError(
                f"provenance {name} must be a mapping, not {type(provenance[name]).__name__}"
            )
    if "revision" in provenance:
        revision = provenance["revision"]
        if isinstance(revision, (bool, np.bool_)) or not isinstance(revision, (int, np.integer)):
            raise ValueError(
                f"provenance revision must be an integer of 2 or more, not {revision!r}; an "
                "artifact whose revision is not an integer is never reused"
            )
        if revision == 1:
            raise ValueError(
                "provenance revision 1 is recorded by omitting revision, so that artifacts "
                "written before operation revisions existed keep their identity; remove it"
            )
        if revision < 2:
            raise ValueError(f"provenance revision must be 2 or more, not {revision}")
    value: dict[str, Any] = _json_value(provenance, "provenance")
    return value


def _is_current(provenance: Mapping[str, Any]) -> bool:
    # No revision means revision 1; a recorded 1 or a non-integer is not current.
    if "revision" not in provenance:
        return True
    revision = provenance["revision"]
    return isinstance(revision, int) and not isinstance(revision, bool) and revision >= 2


# ---------------------------------------------------------------- the record


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """The attribute record of one complete artifact group, as read back.

    Mappings hold the parsed JSON; treat them as read-only.
    """

    artifact_id: str
    """Random 256-bit id, 64 lowercase hex digits; the last segment of ``path``."""
    kind: str
    """Artifact kind; the segment before the id in ``path``."""
    path: str
    """``{root}/{kind}/{artifact_id}``, relative to the store or group it was read from."""
    provenance: Mapping[str, Any]
    """``operation``, ``parameters``, ``inputs`` and, from revision 2, ``revision``."""
    execution_options: Mapping[str, Any]
    """How the producer ran (workers, budgets); never part of the artifact's identity."""
    created_at_ns: int
    """Creation time, nanoseconds since the epoch; for diagnostics only."""
    cytearc_version: str
    """Version of the package that created the artifact; for diagnostics only."""

    @property
    def is_current(self) -> bool:
        """Whether reuse may consider it: no ``revision``, or an integer of 2 or more."""
        return _is_current(self.provenance)

    @classmethod
    def from_attributes(cls, attributes: object, *, path: str, where: str) -> ArtifactRecord:
        """Parse the attributes of the group at ``path`` strictly.

        Raises
        ------
        RecordShapeError
            A missing, unknown or mistyped field, or an id or kind that does
            not match ``path``.
        IncompleteStoreError
            A well-formed record with ``complete`` false.
        """
        fields = check_fields(attributes, _RECORD_FIELDS, record=_RECORD, where=where)
        segments = path.split("/")
        if len(segments) < 3:
            raise ValueError(f"artifact path {path!r} must be '{{root}}/{{kind}}/{{artifact_id}}'")
        artifact_id, kind = fields["artifact_id"], fields["kind"]
        if not ARTIFACT_ID_PATTERN.match(artifact_id) or artifact_id != segments[-1]:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: artifact_id {artifact_id!r} must be 64 lowercase hex "
                f"digits equal to the group name {segments[-1]!r}; the group was not written "
                "by publish_artifact or was moved; delete it"
            )
        if kind != segments[-2]:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: kind {kind!r} does not match its directory "
                f"{segments[-2]!r}; the group was moved; delete it"
            )
        if fields["created_at_ns"] < 0:
            raise RecordShapeError(
                f"{_RECORD} at {where!r}: created_at_ns {fields['created_at_ns']} is negative"
            )
        provenance = fields["provenance"]
        # Revision is parsed leniently: a recorded 1 or a non-integer is a readable
        # artifact that is merely not current (never reused).
        check_fields(
            {name: value for name, value in provenance.items() if name != "revision"},
            _PROVENANCE_FIELDS,
            record=f"{_RECORD} provenance",
            where=where,
        )
        if not fields["complete"]:
            raise IncompleteStoreError(
                f"artifact at {where!r} is not complete (complete=False): its producer is "
                "still writing it, failed, or crashed; it is never read or reused; recompute it"
            )
        return cls(
            artifact_id=artifact_id,
            kind=kind,
            path=path,
            provenance=provenance,
            execution_options=fields["execution_options"],
            created_at_ns=fields["created_at_ns"],
            cytearc_version=fields["cytearc_version"],
        )


# ---------------------------------------------------------------- store access


def _resolve(store: ArtifactStore, *, read_only: bool) -> tuple[Store, str, str]:
    """(backend store, key prefix, description) of ``store``."""
    if isinstance(store, zarr.Group):
        return store.store, store.path, join(str(store.store), store.path)
    return open_location(store, read_only=read_only), "", describe_location(store)


def _check_root(root: str) -> str:
    if not isinstance(root, str) or not root.strip("/"):
        raise ValueError(
            f"artifact root must be a non-empty path such as 'artifacts', not {root!r}"
        )
    normalized = root.strip("/")
    for segment in normalized.split("/"):
        check_name(segment, what=f"segment of artifact root {root!r}")
    return normalized


def _get_json(store: Store, key: str, where: str) -> object:
    buffer = sync(store.get(key, prototype=default_buffer_prototype()))
    if buffer is None:
        return None
    try:
        return json.loads(buffer.to_bytes())
    except ValueError as exc:
        raise RecordShapeError(f"{where}: {key!r} is not valid JSON ({exc})") from exc


def _list_dir(store: Store, prefix: str, where: str) -> list[str]:
    if not store.supports_listing:
        raise ValueError(f"{where} cannot list its keys, so its artifacts cannot be listed")

    async def collect() -> list[str]:
        return [name async for name in store.list_dir(prefix)]

    return sorted(sync(collect()))


def _read_group_record(store: Store, key_prefix: str, path: str, where: str) -> ArtifactRecord:
    full = join(key_prefix, path)
    location = f"{where.rstrip('/')}/{path}"
    document = _get_json(store, join(full, "zarr.json"), location)
    if document is None:
        raise FileNotFoundError(
            f"no artifact group at {location!r} (no zarr.json); it was never published or was "
            "removed; recompute it"
        )
    if (
        not isinstance(document, dict)
        or document.get("node_type") != "group"
        or document.get("zarr_format") != 3
    ):
        raise RecordShapeError(
            f"{_RECORD} at {location!r}: zarr.json is not a Zarr v3 group document; artifact "
            "groups are Zarr v3 groups written by publish_artifact"
        )
    return ArtifactRecord.from_attributes(document.get("attributes", {}), path=path, where=location)


# ---------------------------------------------------------------- writing


class ArrayWriter:
    """Writes one artifact array row band by row band, checking finite values.

    Obtained from :meth:`ArtifactWriter.create_array`. Bands are appended in
    row order; each is cast to the array's dtype first, so a value that
    overflows the dtype (``1e300`` into ``float32``) is caught as infinity.
    """

    def __init__(self, owner: ArtifactWriter, array: AnyArray, name: str, finite: bool) -> None:
        self._owner = owner
        self.array = array
        """The zarr array being written."""
        self.name = name
        """Array name inside the artifact group."""
        self._check = finite and array.dtype.kind in "fc"
        self.rows_written = 0
        """Rows written so far."""

    @property
    def rows(self) -> int:
        """Rows the array holds when complete."""
        return int(self.array.shape[0])

    @property
    def complete(self) -> bool:
        """Whether every row has been written."""
        return self.rows_written == self.rows

    def write(self, band: npt.ArrayLike) -> None:
        """Check ``band`` and write it as the next rows of the array.

        Raises
        ------
        NonFiniteArtifactError
            ``band`` holds NaN or infinity (after the cast) and the array
            must hold finite values; the band is not written, and the
            artifact will not be published.
        ValueError
            ``band`` does not fit the array's remaining rows or its shape.
        """
        # A published artifact is immutable; a discarded one is gone.
        self._owner._open_group()
        array = self.array
        # Overflow in the cast is the point of the check below, not a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.asarray(band).astype(array.dtype, copy=False)
        if values.ndim != array.ndim or values.shape[1:] != array.shape[1:]:
            raise ValueError(
                f"array {self.name!r}: a band of shape {values.shape} does not fit an array "
                f"of shape {array.shape}; give rows of shape {array.shape[1:]}"
            )
        start = self.rows_written
        stop = start + values.shape[0]
        if stop > self.rows:
            raise ValueError(
                f"array {self.name!r} has {self.rows} rows; rows {start}:{stop} do not fit"
            )
        if self._check:
            # One flag per row; axis=() keeps a 1-D array as it is.
            finite = np.isfinite(values).all(axis=tuple(range(1, values.ndim)))
            if not finite.all():
                row = start + int(np.argmin(finite))
                error = self._owner._non_finite(self.name, row)
                self._owner._poison(error)
                raise error
        if stop > start:
            try:
                array[start:stop] = values
            except BaseException as exc:
                # The array may now hold part of the band: never publish it.
                self._owner._poison(exc)
                raise
        self.rows_written = stop


class ArtifactWriter:
    """A context manager that creates, fills and publishes one artifact group.

    Returned by :func:`publish_artifact`; see there. ``artifact_id`` and
    ``path`` are known before the block starts and stay available after it.
    """

    def __init__(
        self,
        store: Store,
        key_prefix: str,
        where: str,
        root: str,
        kind: str,
        provenance: dict[str, Any],
        execution_options: dict[str, Any],
    ) -> None:
        self._store = store
        self._key_prefix = key_prefix
        self._where = where
        self.artifact_id: str = secrets.token_hex(32)
        """Random 256-bit id, 64 lowercase hex digits."""
        self.kind = kind
        """Artifact kind."""
        self.path: str = join(root, kind, self.artifact_id)
        """``{root}/{kind}/{artifact_id}``, relative to the store or group given."""
        self._record: dict[str, Any] = {
            "artifact_id": self.artifact_id,
            "kind": kind,
            "provenance": provenance,
            "execution_options": execution_options,
            "created_at_ns": 0,
            "cytearc_version": _package_version(),
            "complete": False,
        }
        self._group: zarr.Group | None = None
        self._writers: list[ArrayWriter] = []
        self._failure: BaseException | None = None
        self._state = "new"

    @property
    def operation(self) -> str:
        """The provenance operation, named by errors."""
        operation: str = self._record["provenance"]["operation"]
        return operation

    @property
    def provenance(self) -> Mapping[str, Any]:
        """The canonical provenance that is persisted."""
        provenance: Mapping[str, Any] = self._record["provenance"]
        return provenance

    @property
    def published(self) -> bool:
        """Whether the publishing write returned without error."""
        return self._state == "published"

    @property
    def group(self) -> zarr.Group:
        """The artifact group, while the block runs and after publication."""
        if self._group is None or self._state in ("new", "discarded"):
            raise RuntimeError(f"artifact {self.path!r} has no group ({self._state})")
        return self._group

    def __enter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError(f"artifact {self.path!r} was already entered; publish a new one")
        self._record["created_at_ns"] = time.time_ns()
        self._state = "open"
        try:
            self._group = zarr.create_group(
                self._store,
                path=join(self._key_prefix, self.path),
                zarr_format=3,
                attributes=dict(self._record),
            )
        except BaseException as exc:
            # The path is ours alone, so a half-created group can be removed.
            self._discard(exc)
            raise
        logger.debug("created artifact %s in %s", self.path, self._where)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            self._discard(exc)
            return
        try:
            self._validate()
        except BaseException as error:
            self._discard(error)
            raise
        self._publish()

    def _validate(self) -> None:
        if self._failure is not None:
            raise IncompleteStoreError(
                f"artifact {self.path!r} of {self.operation} was not published: a write failed "
                f"inside the block ({self._failure}); the group was deleted; fix the values "
                "and publish again"
            ) from self._failure
        partial = [
            f"{w.name!r} ({w.rows_written} of {w.rows} rows)"
            for w in self._writers
            if not w.complete
        ]
        if partial:
            raise IncompleteStoreError(
                f"artifact {self.path!r} of {self.operation} was not published: array(s) "
                f"{', '.join(partial)} were not fully written; write every row before the "
                "block ends"
            )

    def _publish(self) -> None:
        record = {**self._record, "complete": True}
        try:
            # One document write: the whole record, complete=True included.
            self.group.attrs.put(record)
        except BaseException:
            self._state = "publish-failed"
            logger.warning(
                "publishing artifact %s in %s failed; the group stays because the write may "
                "have persisted (complete or not)",
                self.path,
                self._where,
            )
            raise
        self._record = record
        self._state = "published"
        logger.debug("published artifact %s in %s", self.path, self._where)

    def _discard(self, error: BaseException) -> None:
        self._state = "discarded"
        store = self._store
        full = join(self._key_prefix, self.path)
        if not store.supports_deletes:
            note = (
                f"{self._where} cannot delete keys, so the incomplete artifact {self.path!r} "
                "stays with complete=False; it is never listed or reused"
            )
            logger.warning("%s", note)
            error.add_note(note)
            return
        try:
            sync(store.delete_dir(full))
        except Exception as cleanup:
            note = (
                f"deleting the incomplete artifact {self.path!r} in {self._where} failed "
                f"({cleanup!r}); it stays with complete=False and is never listed or reused"
            )
            logger.warning("%s", note)
            error.add_note(note)
        else:
            logger.debug("deleted incomplete artifact %s in %s", self.path, self._where)

    def _poison(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error

    def _non_finite(self, name: str, row: int) -> NonFiniteArtifactError:
        return NonFiniteArtifactError(
            f"{self.operation} wrote a non-finite value (NaN or infinity) to array {name!r} at "
            f"row {row} of artifact {self.path!r}; the array must hold only finite values, so "
            f"nothing is published; fix the values {self.operation} computes for that row",
            operation=self.operation,
            array=name,
            row=row,
        )

    def _open_group(self) -> zarr.Group:
        if self._state != "open":
            raise RuntimeError(
                f"artifact {self.path!r} is not being written ({self._state}); write arrays "
                "inside the with-block of publish_artifact"
            )
        return self.group

    def create_array(
        self,
        name: str,
        shape: int | Sequence[int],
        dtype: npt.DTypeLike,
        *,
        finite: bool = True,
        chunks: int | Sequence[int] | None = None,
    ) -> ArrayWriter:
        """Create array ``name`` and return a writer that appends its row bands.

        Parameters
        ----------
        name
            Array name, one path segment.
        shape
            Full shape; the first axis is the rows.
        dtype
            Stored dtype; bands are cast to it before they are checked.
        finite
            Refuse NaN and infinity (floating and complex dtypes only; other
            dtypes are finite by construction).
        chunks
            Chunk shape; by default whole rows of about 8 MiB per chunk.

        Returns
        -------
        ArrayWriter
            Every row must be written before the block ends, or nothing is
            published.
        """
        group = self._open_group()
        check_name(name, what="artifact array name")
        dims = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
        if len(dims) == 0:
            raise ValueError(
                f"array {name!r} has no rows (shape ()); artifact arrays have at least one axis"
            )
        stored = np.dtype(dtype)
        if chunks is None:
            row_bytes = max(1, stored.itemsize * math.prod(dims[1:]))
            rows = min(max(1, dims[0]), max(1, _CHUNK_BYTES // row_bytes))
            chunks = (rows, *(max(1, d) for d in dims[1:]))
        array = group.create_array(name, shape=dims, dtype=stored, chunks=chunks)
        writer = ArrayWriter(self, array, name, finite)
        self._writers.append(writer)
        return writer

    def write_array(
        self,
        name: str,
        values: npt.ArrayLike,
        *,
        finite: bool = True,
        chunks: int | Sequence[int] | None = None,
        dtype: npt.DTypeLike | None = None,
    ) -> AnyArray:
        """Write ``values`` as array ``name``, one chunk row band at a time.

        Parameters
        ----------
        name
            Array name, one path segment.
        values
            At least one-dimensional; the first axis is the rows.
        finite
            Refuse NaN and infinity in floating values, naming the first
            offending row.
        chunks
            Chunk shape; by default whole rows of about 8 MiB per chunk.
        dtype
            Stored dtype, by default that of ``values``.

        Returns
        -------
        zarr.Array

        Raises
        ------
        NonFiniteArtifactError
            A NaN or infinite value, with ``operation``, ``array`` and the
            first offending ``row``; earlier bands may be written, but the
            artifact is deleted and nothing is published.
        """
        data = np.asarray(values)
        writer = self.create_array(
            name, data.shape, data.dtype if dtype is None else dtype, finite=finite, chunks=chunks
        )
        band = writer.array.chunks[0]
        for start in range(0, data.shape[0], band):
            writer.write(data[start : start + band])
        return writer.array


def publish_artifact(
    store: ArtifactStore,
    root: str,
    kind: str,
    *,
    provenance: Mapping[str, Any],
    execution_options: Mapping[str, Any] | None = None,
) -> ArtifactWriter:
    """Create an artifact group and publish it when the ``with`` block ends.

    Parameters
    ----------
    store
        Path, URL or zarr Store (opened writable), or a zarr Group whose
        path prefixes the artifact's.
    root
        Artifact root inside ``store``: ``artifacts``, ``{assay}/artifacts``,
        ``{workspace}/artifacts`` or ``{workspace}/{assay}/artifacts``.
    kind
        Artifact kind, one path segment (``normalized``, ``reduction``...).
    provenance
        ``operation``, ``parameters``, ``inputs`` and, from revision 2,
        ``revision``; see :func:`check_provenance`. It is the artifact's
        identity for reuse.
    execution_options
        How the producer runs (workers, budgets): recorded for diagnostics,
        never part of the identity. JSON values.

    Returns
    -------
    ArtifactWriter
        A context manager. Entering creates ``{root}/{kind}/{artifact_id}``
        with ``complete=False``; arrays are written with
        :meth:`ArtifactWriter.write_array` or
        :meth:`ArtifactWriter.create_array`. A normal exit writes the whole
        attribute record once, with ``complete=True``. An exception (or a
        failed or unfinished array write) before that deletes the group and
        propagates; if the publishing write itself fails, the group stays.

    Raises
    ------
    ValueError, TypeError
        Invalid provenance, execution options, root or kind, before anything
        is written.

    Examples
    --------
    >>> with publish_artifact(
    ...     store, "RNA/artifacts", "normalized",
    ...     provenance={"operation": "normalize", "parameters": {}, "inputs": {}},
    ... ) as art:  # doctest: +SKIP
    ...     art.write_array("data", values)
    >>> art.path  # doctest: +SKIP
    'RNA/artifacts/normalized/4f0c...'
    """
    normalized_root = _check_root(root)
    check_name(kind, what="artifact kind")
    canonical = check_provenance(provenance)
    if execution_options is not None and not isinstance(execution_options, Mapping):
        raise TypeError(
            f"execution_options must be a mapping or None, not {type(execution_options).__name__}"
        )
    options: dict[str, Any] = _json_value(execution_options or {}, "execution_options")
    backend, key_prefix, where = _resolve(store, read_only=False)
    return ArtifactWriter(backend, key_prefix, where, normalized_root, kind, canonical, options)


# ---------------------------------------------------------------- reading


def read_artifact(store: ArtifactStore, path: str) -> ArtifactRecord:
    """Read the record of the complete artifact at ``path``.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    path
        ``{root}/{kind}/{artifact_id}``, as in :attr:`ArtifactRecord.path`.

    Raises
    ------
    FileNotFoundError
        No group at ``path``.
    RecordShapeError
        The attribute record has a missing, unknown or mistyped field.
    IncompleteStoreError
        The artifact is not complete.
    """
    segments = path.strip("/").split("/") if isinstance(path, str) else []
    if len(segments) < 3:
        raise ValueError(f"artifact path {path!r} must be '{{root}}/{{kind}}/{{artifact_id}}'")
    normalized = "/".join(segments)
    backend, key_prefix, where = _resolve(store, read_only=True)
    return _read_group_record(backend, key_prefix, normalized, where)


def list_artifacts(
    store: ArtifactStore, root: str, kind: str | None = None
) -> list[ArtifactRecord]:
    """The complete artifacts under ``root``, optionally of one ``kind``.

    Incomplete groups are skipped. A group whose record cannot be read is
    skipped with a logged warning naming it, so one broken child never hides
    the others; :func:`read_artifact` on its path raises the error.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    root
        Artifact root inside ``store``.
    kind
        Only this kind; every kind by default.

    Returns
    -------
    list of ArtifactRecord
        Sorted by kind, then creation time, then id.
    """
    normalized_root = _check_root(root)
    if kind is not None:
        check_name(kind, what="artifact kind")
    backend, key_prefix, where = _resolve(store, read_only=True)
    base = join(key_prefix, normalized_root)
    kinds = [kind] if kind is not None else _list_dir(backend, base, where)
    found: list[ArtifactRecord] = []
    for kind_name in kinds:
        if kind_name == "zarr.json":
            continue
        for child in _list_dir(backend, join(base, kind_name), where):
            if child == "zarr.json":
                continue
            path = join(normalized_root, kind_name, child)
            try:
                found.append(_read_group_record(backend, key_prefix, path, where))
            except (IncompleteStoreError, FileNotFoundError) as exc:
                # Being written, failed, or being deleted: not an artifact yet.
                logger.debug("skipping artifact %s in %s: %s", path, where, exc)
            except (ValueError, OSError) as exc:
                # RecordShapeError is a ValueError; OSError covers a stray file child.
                logger.warning("skipping unreadable artifact %s in %s: %s", path, where, exc)
    found.sort(key=lambda record: (record.kind, record.created_at_ns, record.artifact_id))
    return found


def find_artifact(
    store: ArtifactStore, root: str, kind: str, provenance: Mapping[str, Any]
) -> ArtifactRecord | None:
    """The complete, current artifact of ``kind`` whose provenance equals ``provenance``.

    Provenance is compared whole and exactly, as canonical JSON (see
    :func:`canonical_json`); ``execution_options``, ``created_at_ns`` and
    ``cytearc_version`` never matter. Artifacts that record revision 1 or a
    non-integer revision are never returned.

    Parameters
    ----------
    store
        Path, URL, zarr Store or Group (opened read-only).
    root
        Artifact root inside ``store``.
    kind
        Artifact kind.
    provenance
        Validated as by :func:`publish_artifact` (so ``revision=1`` raises).

    Returns
    -------
    ArtifactRecord or None
        The earliest created match, or ``None``.
    """
    wanted = canonical_json(check_provenance(provenance))
    for record in list_artifacts(store, root, kind):
        if record.is_current and canonical_json(record.provenance) == wanted:
            return record
    return None
