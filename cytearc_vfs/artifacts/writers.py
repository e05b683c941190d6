"""Writing one artifact group: arrays checked as written, published by one metadata write.

:class:`ArtifactWriter` is what :func:`cytearc_vfs.artifacts.catalog.publish_artifact`
returns; :class:`ArrayWriter` streams one array of it row band by row band.
See :mod:`cytearc_vfs.artifacts.catalog` for the protocol.
"""

from __future__ import annotations

import functools
import logging
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.types import AnyArray

from ..arrays.consolidated import reconsolidate
from ..errors import REFUSED_WRITE_ERRNOS, IncompleteStoreError, NonFiniteArtifactError
from ..format.paths import check_name, join
from ..remote.failures import first_line, named_backend_failures
from ..write.stopping import FinishingStore, Work, owned_work, stop_work
from .values import Unrepresentable, first_unrepresentable, given_dimensions, refuse_masked

__all__ = ["ArrayWriter", "ArtifactWriter"]

logger = logging.getLogger(__name__)

# The words of a backend failure's remedy: publish_artifact takes a URL's options there.
_OPTIONS = "storage_options (of cv.open_store, for the store given to publish_artifact)"

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


class ArrayWriter:
    """Writes one artifact array row band by row band, checking its values.

    Obtained from :meth:`ArtifactWriter.create_array`. Bands are appended in
    row order. An integer or boolean array refuses, before the cast, any
    value its dtype cannot hold exactly (see
    :func:`~cytearc_vfs.artifacts.values.first_unrepresentable`). A floating
    or complex array that must be finite is checked after the cast, so a
    value that overflows the dtype (``1e300`` into ``float32``) is caught as
    infinity.
    """

    def __init__(self, owner: ArtifactWriter, array: AnyArray, name: str, finite: bool) -> None:
        self._owner = owner
        self.array = array
        """The zarr array being written."""
        self.name = name
        """Array name inside the artifact group."""
        self._check_finite = finite and array.dtype.kind in "fc"
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
            must hold finite values; or the array is integer or boolean and
            ``band`` holds NaN, infinity or a value outside the dtype's range
            (whatever ``finite`` says: such an array cannot hold them). The
            band is not written, and the artifact will not be published.
        ValueError
            ``band`` does not fit the array's remaining rows or its shape; or
            the array is integer or boolean and ``band`` holds a value it
            cannot hold exactly (``1.5`` into an integer dtype, ``2`` into
            ``bool``, a complex value with an imaginary part). Nothing is
            published.
        """
        # A published artifact is immutable; a discarded one is gone.
        self._owner._open_group()
        array = self.array
        refuse_masked(self.name, band)
        given = np.asarray(band)
        if given.ndim != array.ndim or given.shape[1:] != array.shape[1:]:
            raise ValueError(
                f"array {self.name!r}: a band of shape {given.shape} does not fit an array "
                f"of shape {array.shape}; give rows of shape {array.shape[1:]}"
            )
        start = self.rows_written
        stop = start + given.shape[0]
        if stop > self.rows:
            raise ValueError(
                f"array {self.name!r} has {self.rows} rows; rows {start}:{stop} do not fit"
            )
        # Before the cast: numpy would turn these into other values without a word.
        refused = first_unrepresentable(given, array.dtype)
        if refused is not None:
            error = self._owner._unrepresentable(self.name, array.dtype, start, refused)
            self._owner._poison(error)
            raise error
        if given.dtype.kind == "c" and array.dtype.kind != "c":
            given = given.real  # every imaginary part is zero: checked above
        # Overflow in the cast is the point of the finite check below, not a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            values = given.astype(array.dtype, copy=False)
        if self._check_finite:
            # One flag per row; axis=() keeps a 1-D array as it is.
            finite = np.isfinite(values).all(axis=tuple(range(1, values.ndim)))
            if not finite.all():
                row = start + int(np.argmin(finite))
                error = self._owner._non_finite(self.name, row)
                self._owner._poison(error)
                raise error
        if stop > start:
            with self._owner._named_failures():
                try:
                    array[start:stop] = values
                except BaseException as exc:
                    # The array may now hold part of the band: never publish it. zarr's
                    # writes of the band still running stop before the error leaves.
                    self._owner._stop()
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
        # the with-block's zarr work, stopped before a failure leaves it
        self._owned: Any = None
        self._work: Work | None = None

    @property
    def _state_text(self) -> str:
        return {
            "new": "its with-block has not started",
            "open": "it is being written",
            "published": "it is published and immutable",
            "publish-failed": "its publishing write failed",
            "discarded": "it was deleted after a failure",
        }[self._state]

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
            raise RuntimeError(f"artifact {self.path!r} has no group: {self._state_text}")
        return self._group

    def __enter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError(
                f"artifact {self.path!r} was already entered ({self._state_text}); call "
                "publish_artifact again for a new artifact"
            )
        self._record["created_at_ns"] = time.time_ns()
        self._state = "open"
        self._owned = owned_work()
        self._work = self._owned.__enter__()
        with self._named_failures():
            self._create()
        logger.debug("created artifact %s in %s", self.path, self._where)
        return self

    def _named_failures(self) -> Any:
        """A backend's own failure (obstore's 403 dump) as a StoreAccessError naming the store."""
        return named_backend_failures(self._where, options=_OPTIONS)

    def _create(self) -> None:
        try:
            self._group = zarr.create_group(
                # writes already sent when the block fails end before its cleanup
                FinishingStore(self._store),
                path=join(self._key_prefix, self.path),
                zarr_format=3,
                attributes=dict(self._record),
            )
        except BaseException as exc:
            # The path is ours alone, so a half-created group can be removed.
            self._end_work()
            self._discard(exc)
            if isinstance(exc, OSError) and exc.errno in REFUSED_WRITE_ERRNOS:
                # zarr's own error names a temporary file of its atomic write
                raise PermissionError(
                    exc.errno,
                    f"cannot publish an artifact of kind {self._record['kind']!r} in "
                    f"{self._where}: its folder refuses writes ({exc.strerror}); publish into a "
                    "writable copy of the store, or make the folder writable. Nothing was written",
                ) from exc
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                self._discard(exc)
                return
            try:
                self._validate()
            except BaseException as error:
                self._discard(error)
                raise
            with self._named_failures():
                self._publish()
        finally:
            self._end_work()

    def _stop(self) -> None:
        """Stop the zarr work of the block (tasks cancelled, sent writes ended)."""
        if self._work is not None:
            stop_work(self._work)

    def _end_work(self) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.__exit__(None, None, None)

    def _validate(self) -> None:
        if self._failure is not None:
            raise IncompleteStoreError(
                f"artifact {self.path!r} of {self.operation} was not published: a write failed "
                f"inside the block ({type(self._failure).__name__}: {self._failure}) even "
                "though the producer caught it, so nothing is published; fix the values and "
                "publish again"
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
            self._stop()
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
        # a group above that holds consolidated metadata lists the artifacts of its copy:
        # consolidated again, zarr.open_group lists this one too (one get per level)
        reconsolidate(self._store, (), array=self.path, operation="publication")
        logger.debug("published artifact %s in %s", self.path, self._where)

    def _discard(self, error: BaseException) -> None:
        self._stop()  # nothing of the block lands after the group is deleted
        self._state = "discarded"
        store = self._store
        written = self._anything_written()
        if written is False:
            # The failure came before the first write: there is nothing to delete, and
            # claiming that an incomplete group stays would send the reader looking for it.
            logger.debug(
                "artifact %s in %s failed before any of its keys was written; nothing to delete",
                self.path,
                self._where,
            )
            return
        stays = "stays" if written else "may stay"
        if not store.supports_deletes:
            note = (
                f"{self._where} cannot delete keys, so the incomplete artifact {self.path!r} "
                f"{stays} with complete=False; it is never listed or reused"
            )
            logger.warning("%s", note)
            error.add_note(note)
            return
        try:
            sync(store.delete_dir(join(self._key_prefix, self.path)))
        except Exception as cleanup:
            note = (
                f"deleting the incomplete artifact {self.path!r} in {self._where} failed "
                f"({type(cleanup).__name__}: {first_line(cleanup)}); it {stays} with "
                "complete=False and is never listed or reused"
            )
            logger.warning("%s", note)
            error.add_note(note)
        else:
            logger.debug("deleted incomplete artifact %s in %s", self.path, self._where)

    def _anything_written(self) -> bool | None:
        """Whether any key of the group exists; ``None`` when the store cannot tell."""
        store = self._store
        prefix = join(self._key_prefix, self.path)

        async def any_key() -> bool:
            async for _ in store.list_prefix(f"{prefix}/"):
                return True
            return False

        try:
            if store.supports_listing:
                return sync(any_key())
            return sync(store.exists(join(prefix, "zarr.json")))
        except Exception as exc:
            logger.debug("cannot tell whether artifact %s was written: %s", self.path, exc)
            return None

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

    def _unrepresentable(
        self, name: str, dtype: np.dtype[Any], start: int, refused: Unrepresentable
    ) -> ValueError:
        row = start + refused.row
        told = (
            f"{self.operation} wrote {refused.value!r} to the {dtype.name} array {name!r} at row "
            f"{row} of artifact {self.path!r}: it {refused.reason}, so {dtype.name} cannot "
            "hold it and nothing is published"
        )
        remedy = (
            f"fix the values {self.operation} computes for that row, or store the array as a "
            "dtype that holds them"
        )
        if refused.non_finite:
            return NonFiniteArtifactError(
                f"{told}; {remedy} (a float dtype with finite=False keeps NaN and infinity)",
                operation=self.operation,
                array=name,
                row=row,
            )
        return ValueError(f"{told}; {remedy} (convert them explicitly if that is intended)")

    def _open_group(self) -> zarr.Group:
        if self._state != "open":
            raise RuntimeError(
                f"artifact {self.path!r} is not being written ({self._state_text}); write "
                "arrays inside the with-block of publish_artifact"
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
            Stored dtype. An integer or boolean dtype refuses values it
            cannot hold exactly (NaN, infinity, out of range, fractional;
            for ``bool`` anything but 0 and 1) before the cast; other bands
            are cast to it before they are checked.
        finite
            Refuse NaN and infinity in a floating or complex array (integer
            and boolean arrays refuse them whatever this says).
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
        dims = given_dimensions(name, shape)
        if len(dims) == 0:
            raise ValueError(
                f"array {name!r} has no rows (shape ()); artifact arrays have at least one axis"
            )
        stored = np.dtype(dtype)
        if stored.hasobject:
            raise TypeError(
                f"array {name!r} would have dtype object, which no artifact array stores; "
                "convert the values to numbers, booleans or strings first (values.astype(float), "
                "values.astype(str))"
            )
        # the writers know every array of this artifact: no store request to ask
        if any(writer.name == name for writer in self._writers):
            raise ValueError(
                f"artifact {self.path!r} already holds an array {name!r}; give each array of an "
                "artifact its own name"
            )
        if chunks is None:
            row_bytes = max(1, stored.itemsize * math.prod(dims[1:]))
            rows = min(max(1, dims[0]), max(1, _CHUNK_BYTES // row_bytes))
            chunks = (rows, *(max(1, d) for d in dims[1:]))
        with self._named_failures():
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
            Refuse NaN and infinity in a floating or complex array, naming
            the first offending row (integer and boolean arrays refuse them,
            and any value they cannot hold exactly, whatever this says).
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
            A NaN or infinite value, or one outside an integer dtype's range,
            with ``operation``, ``array`` and the first offending ``row``;
            earlier bands may be written, but the artifact is deleted and
            nothing is published.
        ValueError
            A value an integer or boolean ``dtype`` cannot hold exactly
            (``1.5``, ``2`` into ``bool``); nothing is published.
        TypeError
            ``values`` is a scipy.sparse matrix or a numpy masked array (its
            mask would be dropped); nothing is written.
        """
        if hasattr(values, "toarray") and type(values).__module__.startswith("scipy.sparse"):
            raise TypeError(
                f"values of array {name!r} are a scipy.sparse {type(values).__name__}; artifact "
                "arrays are dense: pass values.toarray(), or write its data, indices and indptr "
                "as three arrays"
            )
        refuse_masked(name, values)
        data = np.asarray(values)
        writer = self.create_array(
            name, data.shape, data.dtype if dtype is None else dtype, finite=finite, chunks=chunks
        )
        band = writer.array.chunks[0]
        for start in range(0, data.shape[0], band):
            writer.write(data[start : start + band])
        return writer.array
